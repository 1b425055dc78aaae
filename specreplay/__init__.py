"""specreplay: statistical replay and bootstrap simulator for speculative decoding.

Importing the package sets one default Numba cache directory for every way of running it (the
command line, a notebook, the tests): ``$XDG_CACHE_HOME/specreplay/numba/VERSION`` (else
``~/.cache/…``), unless ``NUMBA_CACHE_DIR`` is already set (the Makefile sets its own, keyed by
the sources). Numba reads the variable when it is first imported, so import specreplay before
numba for the default to apply.
"""

import os as _os

__version__ = "0.1.0"


def numba_cache_dir() -> str:
    """Return the Numba cache directory in effect (``NUMBA_CACHE_DIR``, else the default)."""
    env = _os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return env
    base = _os.environ.get("XDG_CACHE_HOME") or _os.path.join(_os.path.expanduser("~"), ".cache")
    return _os.path.join(base, "specreplay", "numba", __version__)


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


_os.environ.setdefault("NUMBA_CACHE_DIR", numba_cache_dir())
