"""Render: pure renderers of a typed result (TABLES.md, REPORT.md, plots, the demo story).

Each renderer reads a :class:`~specreplay.results.model.Result` (from memory or from a saved
results.json) and writes text or figures; none replays or recomputes a statistic.
"""
