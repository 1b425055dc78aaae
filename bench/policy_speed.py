"""A sweep with 20 policies against the same sweep of fixed depths alone (issue 14: ≤ 2×).

On ``specreplay synth`` of ``--requests`` requests (the built-in archive's world, 64 rounds each),
the logging arm ``top32:t0.7@D`` (D the positions the archive records) is swept over depths 1..D
with a linear cost model, once alone and once with 20 policies (9 ``stop-below`` thresholds, 9
``stop-cum`` thresholds, 2 ``depth-by-bucket`` tables), each in one replay pass and one resample
pass, default options (auto estimator, n_boot 2,000). Both in this process, alternated, best of
``--repeats`` after a warm-up of each (kernels compiled or loaded, pages cached). Prints both
times and their ratio; with ``SPECREPLAY_TIMINGS`` set, the stage times go there too.

    python bench/policy_speed.py [--requests 400] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specreplay.commands.sweep import run_sweep
from specreplay.pipelines.builders import write_synth_archive
from specreplay.pipelines.options import SweepOptions
from specreplay.replay.scan import no_progress

TAUS = "0.02,0.05,0.1,0.15,0.2,0.3,0.4,0.5,0.7"
CUM_TAUS = "0.005,0.01,0.02,0.05,0.1,0.15,0.2,0.3,0.5"


def policies(depth: int) -> list[str]:
    """The 20 policies of the bench at maximum depth ``depth``."""
    short = max(depth - 2, 1)
    return [
        f"stop-below:{{{TAUS}}}@{depth}",
        f"stop-cum:{{{CUM_TAUS}}}@{depth}",
        f"depth-by-bucket:<4K={depth}/>=4K={short}",
        f"depth-by-bucket:<16K={depth}/16K-64K={max(depth - 1, 1)}/>=64K={short}",
    ]


def alternated(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Best wall time of each, runs alternated so that a busy spell hits both alike."""
    for fn in fns.values():
        fn()  # warm-up
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="policy-bench-"))
    try:
        archive = tmp / "archive"
        cfg, _ = write_synth_archive(archive, args.requests, 64, 250, 0, no_progress)
        d = cfg.depth
        common = {"arms": f"top32:t0.7@{d}", "depths": range(1, d + 1), "cost": "linear:1:0.05"}
        alone = SweepOptions.build(**common)
        with_pol = SweepOptions.build(**common, policies=policies(d))
        assert len(with_pol.policies) == 20
        times = alternated(
            {
                "depths": lambda: run_sweep(archive, alone, out=tmp / "a", force=True),
                "policies": lambda: run_sweep(archive, with_pol, out=tmp / "b", force=True),
            },
            args.repeats,
        )
        print(
            f"archive: {args.requests:,} requests × 64 rounds × {d} positions; best of "
            f"{args.repeats}, alternated"
        )
        print(f"  sweep, depths 1..{d}               : {times['depths']:6.2f} s")
        print(f"  sweep, depths 1..{d} + 20 policies : {times['policies']:6.2f} s")
        print(f"  ratio: {times['policies'] / times['depths']:.2f} (target ≤ 2)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
