"""specreplay: statistical replay and bootstrap simulator for speculative decoding.

Importing the package changes nothing in the caller's process: no environment variable, no
Numba setting. Numba's cache directory for specreplay's kernels is set on ``numba.config`` by
:func:`use_numba_cache`, which the subpackages holding compiled kernels (``sim``, ``replay``,
``stats.tfast``) call before they define any: ``$NUMBA_CACHE_DIR`` when the caller set it, else
``$XDG_CACHE_HOME/specreplay/numba/VERSION-HASH`` (else ``~/.cache/…``), HASH the first 16 hex
digits of :func:`kernel_sources_hash`. One folder for every way of running (the command line, the
Makefile's targets, a notebook, the tests, Dask workers), without ``os.environ``; keyed by the
kernel sources because Numba does not track a cached kernel's calls into other modules, so a
kernel whose helper changed must not load its old compiled code.
"""

import functools as _functools
import hashlib as _hashlib
import os as _os
import sys as _sys
import time as _time
from pathlib import Path as _Path

IMPORTED_AT = _time.perf_counter()
"""When the package was first imported: start-up's origin where /proc fails (timing.py)."""

__version__ = "0.8.0"

__all__ = [
    "IMPORTED_AT",
    "__version__",
    "cache_root",
    "kernel_sources_hash",
    "numba_cache_dir",
    "use_numba_cache",
]

_KERNEL_DIRS = ("sim", "stats", "replay")
"""The subpackages that hold every ``@njit`` kernel (``tests/test_small_things.py`` checks it)."""


@_functools.cache
def kernel_sources_hash() -> str:
    """Return the SHA-256 of the kernel sources: every .py under specreplay/sim, stats and replay.

    Read from the installed package (its path and bytes, in sorted order) once per process:
    about 100 files, a few milliseconds. Keys Numba's cache folder
    (:func:`numba_cache_dir`) and the shard cache's entries
    (:mod:`specreplay.replay.shardcache`).
    """
    root = _Path(__file__).resolve().parent
    h = _hashlib.sha256()
    for sub in _KERNEL_DIRS:
        for p in sorted((root / sub).rglob("*.py")):
            h.update(p.relative_to(root).as_posix().encode() + b"\0")
            h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def _default_numba_cache_dir() -> str:
    base = _os.environ.get("XDG_CACHE_HOME") or _os.path.join(_os.path.expanduser("~"), ".cache")
    key = f"{__version__}-{kernel_sources_hash()[:16]}"
    return _os.path.join(base, "specreplay", "numba", key)


def numba_cache_dir() -> str:
    """Return the Numba cache directory in effect for specreplay's kernels.

    ``$NUMBA_CACHE_DIR`` when set; else ``numba.config.CACHE_DIR`` when Numba is imported and it
    is set (by :func:`use_numba_cache`, or by the caller before it); else the default under the
    user cache folder. Never imports Numba.
    """
    env = _os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return env
    numba_config = _sys.modules.get("numba.core.config")
    configured = getattr(numba_config, "CACHE_DIR", "") if numba_config is not None else ""
    return str(configured) if configured else _default_numba_cache_dir()


def use_numba_cache() -> None:
    """Point Numba's cache at :func:`numba_cache_dir` through ``numba.config``, not the environment.

    Numba picks a cached function's directory when the function is decorated
    (``numba.core.caching._CacheImpl`` asks its locators, the first being ``config.CACHE_DIR``
    when set), so this runs before any ``@njit(cache=True)``: the ``sim`` and ``replay`` packages
    and :mod:`specreplay.stats.tfast` call it at import (``tests/test_small_things.py`` checks
    that every kernel module is covered). ``$NUMBA_CACHE_DIR``, when set, is Numba's own setting
    and is left alone, as is a ``CACHE_DIR`` the caller set. Idempotent. One limit: when the
    caller changes a ``NUMBA_*`` variable after Numba is imported, Numba re-reads them all before
    its next compilation and ``CACHE_DIR`` falls back to the environment's (none), so a kernel
    module first imported after that caches beside its source, as Numba does by default. A
    cache write that fails (a full disk) is noted, not raised
    (:func:`specreplay.diskfull.guard_numba_cache`).
    """
    from specreplay.diskfull import guard_numba_cache

    guard_numba_cache()  # a cache write that fails is a note, not an error (diskfull.py)
    if _os.environ.get("NUMBA_CACHE_DIR"):
        return
    from numba.core import config

    # config's settings are module globals that Numba injects at run time, unknown to mypy
    if not config.CACHE_DIR:  # type: ignore[attr-defined]
        config.CACHE_DIR = _default_numba_cache_dir()  # type: ignore[attr-defined]


def cache_root() -> str:
    """Return specreplay's user cache folder: ``$SPECREPLAY_CACHE_DIR``, else under XDG's.

    It holds the input-hash cache (:mod:`specreplay.replay.archive.filehash`); never a folder
    beside an archive (inputs are read-only).
    """
    env = _os.environ.get("SPECREPLAY_CACHE_DIR")
    if env:
        return env
    base = _os.environ.get("XDG_CACHE_HOME") or _os.path.join(_os.path.expanduser("~"), ".cache")
    return _os.path.join(base, "specreplay")
