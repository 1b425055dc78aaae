"""Seeded inputs of the statistics layer whose results.json cells are pinned in tests/data.

Each builder returns the inputs of one stats call (a paired comparison, MEASURED cells, law
tests); ``tests/data/from_stats/cells.json`` holds what the results layer made of them before the
statistics became typed (see its PROVENANCE.md), and ``test_from_stats`` checks the typed mapping
gives the same JSON. The cases reach every branch of a delta: null for too few requests, an
unsupported arm, no rounds in a cell, a forced INCONCLUSIVE, identical inputs, the large absolute
margin warning, unknown depths, small-sample coverage and HDI/ETI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specreplay.stats.bootstrap import PairedSums
from specreplay.stats.buckets import Buckets
from specreplay.stats.measured import MeasuredArchive, RequestSums

__all__ = ["COMPARISONS", "law_cases", "measured_inputs", "paired_sums"]


def paired_sums(
    seed: int, n: int, families: int, *, depths: tuple[int, int] | None = (4, 4), same: bool = False
) -> PairedSums:
    """Skewed paired sums: ``n`` requests over ``families`` families, each split over 2 buckets.

    Family ``families - 1`` holds only 4 requests (too few for ``min_requests=5``); with
    ``same`` arm b equals arm a (identical inputs).
    """
    rng = np.random.default_rng(seed)
    na = np.ceil(rng.lognormal(np.log(30.0), 0.8, n))
    ta = na + rng.binomial((4 * na).astype(np.int64), 0.6)
    tb = ta.copy() if same else np.minimum(ta + rng.poisson(na * 0.05), 5 * na)
    fam = np.arange(n) % (families - 1)
    fam[-4:] = families - 1
    share = rng.uniform(0.2, 0.8, n)
    req = np.concatenate([np.arange(n), np.arange(n)])
    bucket = np.concatenate([np.zeros(n, np.int32), np.ones(n, np.int32)])

    def halves(v: np.ndarray) -> np.ndarray:
        return np.concatenate([np.round(v * share), v - np.round(v * share)])

    nb = na.copy()
    return PairedSums(
        tuple(f"r{i}" for i in range(n)),
        np.arange(n, dtype=np.uint64) * 7 + 3,
        fam.astype(np.int32),
        req.astype(np.int64),
        bucket,
        halves(na),
        halves(ta),
        halves(nb),
        halves(tb),
        tuple(f"f{f}" for f in range(families)),
        ("short", "long"),
        depths=depths,
    )


def _unsupported_f1(cell: Any) -> tuple[str | None, str | None]:
    """Arm b unsupported in family f1's cells (a short round, as a replay would say)."""
    return (None, "3 rounds record fewer than 4 positions") if cell.family == "f1" else (None, None)


COMPARISONS: dict[str, Callable[[], tuple[PairedSums, dict[str, Any]]]] = {
    "relative": lambda: (paired_sums(1, 80, 3), {"n_boot": 300, "seed": 4, "min_requests": 5}),
    "absolute_warning": lambda: (
        paired_sums(2, 60, 3),
        {
            "n_boot": 200,
            "seed": 5,
            "min_requests": 5,
            "margin": "5",
            "label": "SIMULATED",
            "role": "candidate-vs-baseline",
        },
    ),
    "unknown_depths": lambda: (
        paired_sums(3, 40, 2, depths=None),
        {"n_boot": 200, "seed": 6, "min_requests": 3, "stratify": "none", "level": 0.9},
    ),
    "identical": lambda: (  # one computation by construction: identical inputs (issue 16)
        paired_sums(4, 50, 3, same=True),
        {"n_boot": 200, "seed": 7, "same": True},
    ),
    "unsupported": lambda: (
        paired_sums(5, 70, 3),
        {"n_boot": 200, "seed": 8, "min_requests": 5, "support": _unsupported_f1},
    ),
}
"""Named comparisons: (paired sums, keyword arguments of ``compare``; ``margin`` as text)."""


def measured_inputs() -> tuple[MeasuredArchive, list[str], Buckets]:
    """A hand-made MEASURED archive: 3 families, rounds in 2 of 3 buckets and in unbucketed.

    Family 2's rounds recorded only 2 of 3 positions in part (a null survival at position 3).
    """
    rng = np.random.default_rng(11)
    buckets = Buckets.parse("short:<1000,mid:1000-4000,long:>=4000")
    k = 30
    request = np.arange(k, dtype=np.int64) // 2
    bucket = np.where(np.arange(k) % 2 == 0, 0, 2).astype(np.int32)
    bucket[-2:] = buckets.unbucketed_code
    family = (request % 3).astype(np.int32)
    n = rng.integers(1, 20, k).astype(np.int64)
    t = n + rng.integers(0, 3, k) * n / 2.0
    n_buckets = len(buckets.names)
    hits = rng.integers(0, 50, (3, n_buckets, 4)).astype(np.int64)
    rounds = np.full((3, n_buckets, 4), 60, np.int64)
    rounds[2, :, 3] = 40
    hits[:, :, 1] = 50
    return (
        MeasuredArchive(
            RequestSums(request, bucket, family, n, t),
            survival_hits=hits,
            survival_rounds=rounds,
            positions=int(n.sum()) * 3,
            min_depth=np.full((3, n_buckets), 2, np.int64),
            max_depth=np.full((3, n_buckets), 3, np.int64),
        ),
        ["fa", "fb", "fc"],
        buckets,
    )


def law_cases() -> tuple[list[Any], list[Any], dict[str, Any]]:
    """The toy suite plus one arm on the toy positions (top-32 skips the smaller ones)."""
    from specreplay.replay.lawcases import toy_arm_cases
    from specreplay.sim.arms import parse_arm
    from specreplay.stats.lawtest import toy_cases

    cases, skipped = toy_arm_cases([parse_arm("top32:t0.7@5")])
    return [*toy_cases(), *cases], list(skipped), {"seed": 3, "max_draws": 20_000}
