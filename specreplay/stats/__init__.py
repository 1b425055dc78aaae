"""Statistics on per-request sums: cells, pairing, bootstrap, intervals, verdicts, law tests.

Depends on :mod:`specreplay.sim` (never on replay, results, commands or the CLI).
"""
