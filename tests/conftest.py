"""Shared fixtures: a small synthetic archive built once per test session (2 cores in CI).

Tests write under pytest's ``tmp_path`` only, never into the clone (two ``pytest`` runs at once
in one clone, or two clones on one host, must not collide): :func:`_clone_untouched` fails the
session when a new entry appears in the top folder of the repository, ``tests/`` or
``specreplay/`` (a command run without ``--out`` in the clone writes ``specreplay-out/``). No test
uses a fixed port either (servers bind port 0; Dask's dashboard ``":0"``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from specreplay.replay.archive.writer import TraceWriter

# every results.json a test's run writes is read back as report reads it (results/io.py)
os.environ.setdefault("SPECREPLAY_CHECK_WRITTEN", "1")
# the input-hash cache of every run in the tests (in-process and CLI subprocesses) stays out of
# the user's cache folder
os.environ.setdefault("SPECREPLAY_CACHE_DIR", tempfile.mkdtemp(prefix="specreplay-test-cache-"))
# hypothesis keeps a cache of constants in ./.hypothesis (with or without an example database):
# in a temporary folder instead, so two runs at once in one clone share nothing
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY", tempfile.mkdtemp(prefix="specreplay-test-hypothesis-")
)


@pytest.fixture(scope="session", autouse=True)
def _marks_not_honoured() -> Iterator[None]:
    """Honour no "validated" mark in-process, from the session's first fixture on (a test's
    second run of a shared archive checks every row, as before marks existed; a module fixture's
    run too); tests/test_validated.py opts back in, test by test."""
    from specreplay.replay.archive import validated

    validated.HONOURED = False
    yield
    validated.HONOURED = True


@pytest.fixture(scope="session")
def small_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-shard Parquet archive from the toy model pair: 64 requests × 8 rounds × 5 positions."""
    from specreplay.replay.archive.synthetic import synth_frames
    from specreplay.sim.synth import SynthConfig

    out = tmp_path_factory.mktemp("archive") / "small"
    cfg = SynthConfig(n_requests=64, rounds=8, requests_per_shard=16)
    with TraceWriter(out, format="parquet-dir") as w:
        for frame in synth_frames(cfg, seed=7):
            w.append_frame(frame)
            w.end_shard()
    return out


REPO = Path(__file__).resolve().parents[1]


def _entries() -> set[Path]:
    """Entries of the clone's folders, less hidden ones and ``__pycache__``: the tools' caches
    (.numba-cache, .pytest_cache, .import_linter_cache of a ``make lint`` running beside)."""
    folders = {REPO, REPO / "tests", REPO / "specreplay"}
    return {p for f in folders for p in f.iterdir()
            if not p.name.startswith(".") and p.name != "__pycache__"}  # fmt: skip


@pytest.fixture(scope="session", autouse=True)
def _clone_untouched() -> Iterator[None]:
    """Fail the session if a test left a new file or folder in the clone (module docstring)."""
    before = _entries()
    yield
    new = sorted(str(p) for p in _entries() - before)
    assert not new, f"tests wrote into the clone or the working directory: {new}"
