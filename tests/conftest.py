"""Shared fixtures: a small synthetic archive built once per test session (2 cores in CI)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from specreplay.replay.archive.writer import TraceWriter

# the input-hash cache of every run in the tests (in-process and CLI subprocesses) stays out of
# the user's cache folder
os.environ.setdefault("SPECREPLAY_CACHE_DIR", tempfile.mkdtemp(prefix="specreplay-test-cache-"))


@pytest.fixture(scope="session")
def small_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-shard Parquet archive from the toy model pair: 48 requests × 8 rounds × 5 positions."""
    from specreplay.replay.archive.synthetic import synth_frames
    from specreplay.sim.synth import SynthConfig

    out = tmp_path_factory.mktemp("archive") / "small"
    cfg = SynthConfig(n_requests=48, rounds=8, requests_per_shard=16)
    with TraceWriter(out, format="parquet-dir") as w:
        for frame in synth_frames(cfg, seed=7):
            w.append_frame(frame)
            w.end_shard()
    return out
