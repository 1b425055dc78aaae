"""Repository hygiene (issue 9, item 12): nothing big or generated is tracked.

- No tracked file is over 1 MB, apart from the named real-data files under ``tests/data/``
  (:data:`LARGE_ALLOWED`, each with its provenance in ``tests/data``; empty today: the largest
  tracked file is a 199 kB Medusa run). A built wheel or a tour's archive committed by accident
  fails here.
- What the tour (docs/tour.md) writes when a user follows it from the repository root (its
  top-level folders, found by running it: ``test_tour.test_the_tour_writes_only_ignored_folders``
  with :func:`ignored`) is listed in ``.gitignore``: following the tour leaves the clone clean.

Both read ``git ls-files`` / ``.gitignore`` of the checkout; outside a git checkout (an unpacked
source archive) the first is skipped.
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 1_000_000
LARGE_ALLOWED: frozenset[str] = frozenset()
"""Tracked files allowed over :data:`MAX_BYTES` (paths under ``tests/data/`` only)."""


def tracked_files() -> list[str]:
    """Paths of ``git ls-files`` at the repository root (skips outside a git checkout)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout
    return [p for p in out.decode().split("\0") if p]


def ignored(name: str, gitignore: str) -> bool:
    """Whether a top-level folder ``name`` matches a pattern of ``gitignore`` (simple patterns)."""
    for line in gitignore.splitlines():
        pat = line.strip()
        if not pat or pat.startswith(("#", "!")):
            continue
        pat = pat.removeprefix("/").removesuffix("/")
        if "/" not in pat and fnmatch.fnmatchcase(name, pat):
            return True
    return False


def test_no_large_tracked_file() -> None:
    assert all(p.startswith("tests/data/") for p in LARGE_ALLOWED)
    large = {
        p: (ROOT / p).stat().st_size
        for p in tracked_files()
        if (ROOT / p).is_file() and (ROOT / p).stat().st_size > MAX_BYTES
    }
    assert set(large) <= LARGE_ALLOWED, large


def test_ignored_matches_gitignore_rules() -> None:
    text = "/tour/\nspecreplay-out/\n# comment\n*.egg-info/\n"
    assert ignored("tour", text) and ignored("specreplay-out", text) and ignored("x.egg-info", text)
    assert not ignored("my-archive", text) and not ignored("tests", text)


def test_the_package_is_marked_typed() -> None:
    """PEP 561: ``specreplay/py.typed`` is tracked (so the wheel, which takes the package folder
    whole, carries it), and nothing else under ``specreplay/`` is a stray marker."""
    files = tracked_files()
    assert "specreplay/py.typed" in files
    assert (ROOT / "specreplay" / "py.typed").read_bytes() == b""
    assert [p for p in files if p.endswith("py.typed")] == ["specreplay/py.typed"]


def test_constraints_pin_every_declared_dependency() -> None:
    """constraints.txt (``make constraints``) pins with ``==`` every package pyproject names, in
    the dependencies and every extra, so ``make venv`` installs no unpinned one."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared += extra
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, line
            pins[canonicalize_name(name)] = version
    for text in declared:
        req = Requirement(text)
        assert canonicalize_name(req.name) in pins, req.name
        assert req.specifier.contains(pins[canonicalize_name(req.name)]), (text, pins)
    assert "specreplay" not in pins
