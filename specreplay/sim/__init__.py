"""The simulated world and its laws: counter-based RNG, arms, policies, quantizers, toy model pair.

Bottom layer: depends on NumPy, Numba and :mod:`specreplay.errors` only (import-linter holds it).
"""
