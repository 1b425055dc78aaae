"""Replaying archives: reading/validating/writing (``archive/``), estimators, accumulation, engine.

Depends on :mod:`specreplay.stats` and :mod:`specreplay.sim` (never on results, commands, CLI).
Importing the package imports nothing: each module holding compiled kernels calls
:func:`specreplay.use_numba_cache` before it defines them, so the archive writer imports without
Numba (the capture path, docs/record-vllm.md).
"""
