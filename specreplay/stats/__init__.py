"""Statistics on per-request sums: cells, pairing, bootstrap, intervals, verdicts, law tests.

Depends on :mod:`specreplay.sim` (never on replay, results, commands or the CLI). Comparisons,
MEASURED cells and law tests are frozen dataclasses, never results.json-shaped dicts:
:mod:`specreplay.results.from_stats` maps each type onto the results model.
"""
