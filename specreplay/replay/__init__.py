"""Replaying archives: reading/validating/writing (``archive/``), estimators, accumulation, engine.

Depends on :mod:`specreplay.stats` and :mod:`specreplay.sim` (never on results, commands, CLI).
"""
