"""Replaying archives: reading/validating/writing (``archive/``), estimators, accumulation, engine.

Depends on :mod:`specreplay.stats` and :mod:`specreplay.sim` (never on results, commands, CLI).
:func:`specreplay.use_numba_cache` runs here, before any of its kernels is defined.
"""

from specreplay import use_numba_cache

use_numba_cache()
