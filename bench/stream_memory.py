"""Peak memory of streaming an archive stays flat while the archive grows 10× (issue 1).

Builds two synthetic archives (N and 10·N requests, same shard size) and, in a fresh process each,
streams them through the validating reader and the MEASURED accumulator (what `specreplay validate`
does), reporting the peak resident set (VmHWM). The baseline is the small archive in the same run;
for contrast it also reports reading each archive whole with polars, which grows with the archive.

    python bench/stream_memory.py [--requests 200] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD_STREAM = """
import sys
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.measured import MeasuredAccumulator
r = ArchiveReader(sys.argv[1], batch_rows=int(sys.argv[2]), chunk_rows=int(sys.argv[2]))
acc = MeasuredAccumulator(len(r.buckets.names))
n = 0
for b in r:
    acc.add(b); n += b.n_positions
print(n)
print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])
"""

CHILD_WHOLE = """
import sys, polars as pl
df = pl.read_parquet(sys.argv[1] + '/*.parquet')
print(df.height)
print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])
"""


def peak_kib(code: str, path: Path, batch_rows: int) -> tuple[int, int, float]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(batch_rows)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return int(out[0]), int(out[1]), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=200, help="requests of the small archive")
    ap.add_argument("--keep", action="store_true", help="keep the archives")
    ap.add_argument(
        "--batch-rows", type=int, default=16384, help="reader batch (the 1x archive must span many)"
    )
    args = ap.parse_args()
    free = shutil.disk_usage(tempfile.gettempdir()).free
    need = args.requests * 11 * 64 * 5 * 600  # ~600 bytes per position row
    if free < 2 * need:
        sys.exit(f"not enough free disk: {free / 2**30:.1f} GiB free, need {2 * need / 2**30:.1f}")
    root = Path(tempfile.mkdtemp(prefix="specreplay-bench-"))
    try:
        sizes = {"1x": args.requests, "10x": 10 * args.requests}
        for name, n in sizes.items():
            subprocess.run(
                [sys.executable, "-m", "specreplay.cli", "synth", str(root / name), "--requests",
                 str(n), "--shard-requests", "50", "--depth", "5", "-q"],
                check=True, capture_output=True,
            )  # fmt: skip
        print(f"{'archive':>8} {'positions':>10} {'MiB':>7} | {'stream peak MiB':>15} "
              f"{'s':>6} | {'read-whole peak MiB':>19}")  # fmt: skip
        res = {}
        for name in sizes:
            mib = sum(f.stat().st_size for f in (root / name).glob("*.parquet")) / 2**20
            n, peak, secs = peak_kib(CHILD_STREAM, root / name, args.batch_rows)
            _, whole, _ = peak_kib(CHILD_WHOLE, root / name, 0)
            res[name] = (peak, whole)
            print(f"{name:>8} {n:>10,} {mib:>7.1f} | {peak / 1024:>15.1f} {secs:>6.1f} | "
                  f"{whole / 1024:>19.1f}")  # fmt: skip
        batches = sizes["1x"] * 64 * 5 / args.batch_rows
        print(f"(the 1x archive already spans {batches:.0f} batches of {args.batch_rows:,} rows)")
        ratio = res["10x"][0] / res["1x"][0]
        print(f"\nstreamed peak memory ratio 10x/1x archive: {ratio:.2f}  (target: flat, <= 1.3)")
        print(f"read-whole peak memory ratio 10x/1x:      {res['10x'][1] / res['1x'][1]:.2f}")
    finally:
        if args.keep:
            print(f"archives kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
