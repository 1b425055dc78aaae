"""One Numba cache folder for every way of running, keyed by the kernel sources (issue 13).

``make demo`` and a plain ``specreplay …`` use the same folder (the Makefile sets no
``NUMBA_CACHE_DIR``), so the first command after ``make demo`` finds the kernels compiled; the
folder's name holds a hash of specreplay/sim, stats and replay, so a kernel whose helper in
another module changed never loads its stale compiled code (Numba does not track that).

Each probe runs a fresh interpreter on a copy of the package in ``tmp_path`` (its own HOME, no
``NUMBA_CACHE_DIR``/``XDG_CACHE_HOME``) and prints ``specreplay.numba_cache_dir()``, which never
imports Numba.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import specreplay
from specreplay import __version__

PACKAGE = Path(specreplay.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[1]
PROBE = "import specreplay; print(specreplay.numba_cache_dir())"


def _env(home: Path, path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    return {**env, "HOME": str(home), "PYTHONPATH": str(path)}


def _cache_dir(copy: Path, home: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=_env(home, copy),
        cwd=home,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _reference_key(package: Path) -> str:
    """VERSION-HASH as docs/scale.md states it: SHA-256 over (relative path, NUL, bytes, NUL) of
    every .py under sim/, stats/ and replay/, each folder in turn, files in sorted order."""
    h = hashlib.sha256()
    for sub in ("sim", "stats", "replay"):
        for p in sorted((package / sub).rglob("*.py")):
            h.update(p.relative_to(package).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return f"{__version__}-{h.hexdigest()[:16]}"


def test_the_cache_folder_follows_the_kernel_sources(tmp_path: Path) -> None:
    """Editing a helper kernel (sim/rng.py) moves the folder; editing a module without kernels
    (cli.py) does not; restoring the helper brings the first folder back."""
    copy = tmp_path / "copy"
    shutil.copytree(PACKAGE, copy / "specreplay", ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "home"
    home.mkdir()
    base = home / ".cache" / "specreplay" / "numba"
    first = _cache_dir(copy, home)
    assert first == str(base / _reference_key(copy / "specreplay"))
    helper = copy / "specreplay" / "sim" / "rng.py"
    original = helper.read_bytes()
    helper.write_bytes(original + b"\n# a helper kernel edited\n")
    edited = _cache_dir(copy, home)
    assert edited != first and edited == str(base / _reference_key(copy / "specreplay"))
    cli = copy / "specreplay" / "cli.py"
    cli.write_bytes(cli.read_bytes() + b"\n# not a kernel\n")
    assert _cache_dir(copy, home) == edited
    helper.write_bytes(original)
    assert _cache_dir(copy, home) == first


def test_make_and_a_plain_run_use_the_same_folder(tmp_path: Path) -> None:
    """A recipe run by ``make`` (with the repository's Makefile) sees the same cache folder as
    the same command run outside make: the Makefile exports no NUMBA_CACHE_DIR."""
    make = shutil.which("make")
    if make is None:  # make test needs make: this only guards a bare pytest run
        pytest.skip("no make on PATH")
    home = tmp_path / "home"
    home.mkdir()
    env = _env(home, PACKAGE.parent)
    probe = f"probe-numba-cache:\n\t@{sys.executable} -c '{PROBE}'\n"
    makefiles = ["-f", str(REPO / "Makefile"), "-f", "-"]
    made = subprocess.run(
        [make, "-s", *makefiles, "probe-numba-cache"],
        input=probe,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    plain = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert made == plain == str(home / ".cache" / "specreplay" / "numba" / _reference_key(PACKAGE))


def test_every_cached_kernel_is_under_the_hashed_folders() -> None:
    """Every module defining an ``@njit(cache=True)`` kernel lives in sim/, stats/ or replay/,
    the folders the hash reads (a kernel elsewhere could load a stale compiled caller)."""
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        cached = any(
            isinstance(kw.value, ast.Constant) and kw.arg == "cache" and kw.value.value is True
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)
            for dec in node.decorator_list
            if isinstance(dec, ast.Call)
            for kw in dec.keywords
        )
        if cached and path.relative_to(PACKAGE).parts[0] not in ("sim", "stats", "replay"):
            outside.append(str(path.relative_to(PACKAGE)))
    assert outside == []
