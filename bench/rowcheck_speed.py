"""The row kernel's speed (``rowcheck.check_rows``): nanoseconds per row, 1 and 2 threads.

Writes a ``specreplay synth`` archive of ``--requests`` requests (64 rounds × 5 positions, 32
candidates per row, with ``emitted_q`` and ``drafted_id``) to a temporary folder, flattens its
list columns as the reader does, and times ``check_rows`` on them: best of ``--repeats`` calls
after one untimed call, with 1 and with 2 Numba threads. Every row is valid, so the figure is the
cost of the rules on the common path (docs/scale.md "The 10 M run").

    python bench/rowcheck_speed.py [--requests 1250] [--repeats 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import polars as pl

from specreplay.replay.archive import rowcheck
from specreplay.replay.archive.reader import _flat_float, _flat_int


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=1250)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="specreplay-rowcheck-") as tmp:
        out = Path(tmp) / "a"
        n_req = str(args.requests)
        cmd = [sys.executable, "-m", "specreplay.cli", "synth", str(out), "-q",
               "--requests", n_req, "--shard-requests", n_req, "--depth", "5"]  # fmt: skip
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        frame = pl.read_parquet(sorted(out.glob("*.parquet")))
    n = frame.height
    lens = frame["cand_ids"].list.len().to_numpy().astype(np.int64)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    cand = _flat_int(frame["cand_ids"])
    lp = _flat_float(frame["draft_logprobs"])
    tp = _flat_float(frame["target_probs"])
    eq = _flat_float(frame["emitted_q"])
    drafted = frame["drafted_id"].to_numpy().astype(np.int64)
    code = np.empty(n, np.int8)
    detail = np.empty(n)
    idx = np.empty(n, np.int32)
    print(f"{n:,} rows, {cand.shape[0] / n:.0f} candidates per row")
    for threads in (1, 2):
        numba.set_num_threads(threads)
        best = float("inf")
        for i in range(args.repeats + 1):
            t0 = time.perf_counter()
            rowcheck.check_rows(offsets, cand, lp, tp, eq, drafted, True, True, code, detail, idx)
            if i:
                best = min(best, time.perf_counter() - t0)
        assert not code.any(), "a synthetic row failed a rule"
        print(f"MEASURED {threads} thread(s): {1e3 * best:.1f} ms, {1e9 * best / n:.0f} ns per row")


if __name__ == "__main__":
    main()
