"""The simulated world and its laws: counter-based RNG, arms, policies, quantizers, toy model pair.

Bottom layer: depends on NumPy, Numba and :mod:`specreplay.errors` only (import-linter holds it),
and on the root package's :func:`specreplay.use_numba_cache`, called here before any of its
kernels is defined (Numba picks a cached kernel's directory when it is decorated).
"""

from specreplay import use_numba_cache

use_numba_cache()
