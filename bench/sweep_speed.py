"""Sweep cost against requalify on the same archive (issue 6 acceptance: ≤ 1.5×).

A sweep of 5 arms (``top32:t0.7:dyadic{8,10,12,16,24}@5``) over depths 1..8 (the archive records
5: depths 6..8 are UNSUPPORTED and cost nothing but the check), default options (auto estimator,
n_boot 2,000), against a requalify of 3 arms (baseline ``top32:t0.7@5``, candidate dyadic24,
reference ``greedy@5``, default n_boot 10,000), both in this process, best of ``--repeats`` after a
warm-up, on ``specreplay synth`` of ``--requests`` requests (64 rounds × 5 positions each).

    python bench/sweep_speed.py [--requests 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from importance_speed import best_of  # the same warm-up-then-best-of timing

from specreplay.commands.requalify import run_requalify
from specreplay.commands.sweep import run_sweep
from specreplay.pipelines.builders import write_synth_archive
from specreplay.pipelines.options import RequalifyOptions, SweepOptions
from specreplay.replay.scan import no_progress


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    try:
        archive = tmp / "archive"
        write_synth_archive(archive, args.requests, 64, 250, 0, no_progress, depth=5)
        sweep = SweepOptions.build(arms="top32:t0.7:dyadic{8,10,12,16,24}@5", depths=range(1, 9))
        rq = RequalifyOptions.build(
            baseline="top32:t0.7@5", candidate="top32:t0.7:dyadic24@5", reference="greedy@5"
        )
        t_sweep = best_of(lambda: run_sweep(archive, sweep, out=tmp / "s", force=True),
                          args.repeats)  # fmt: skip
        t_rq = best_of(lambda: run_requalify(archive, rq, out=tmp / "r", force=True),
                       args.repeats)  # fmt: skip
        print(f"archive: {args.requests:,} requests × 64 rounds × 5 positions; best of "
              f"{args.repeats}")  # fmt: skip
        print(f"  sweep, 5 arms × depths 1..8 : {t_sweep:6.2f} s")
        print(f"  requalify, 3 arms           : {t_rq:6.2f} s")
        print(f"  ratio sweep / requalify: {t_sweep / t_rq:.2f} (target ≤ 1.5)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
