"""The live vLLM tests (``make test-vllm``): the helpers here run in vLLM's environment."""

collect_ignore = ["site", "engine_run.py", "tinymodels.py"]
