"""Pipelines: per-verb assembly of a typed result from the replay and the statistics.

Each module turns a verb's inputs into a :class:`~specreplay.results.model.Result` (calling
:mod:`specreplay.replay` and :mod:`specreplay.stats`); commands call them, render and write.
"""
