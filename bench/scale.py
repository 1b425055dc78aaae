"""Scale: requalify of a 10 M-position archive from zstd Parquet, lz4 Parquet and Arrow IPC.

For each form of the same archive (written by ``specreplay synth`` as zstd Parquet, then
``specreplay convert`` to the other two), in fresh processes, with the page cache, the Numba
cache and the input-hash cache warm (one untimed run first):

- **requalify**: ``specreplay requalify ARCHIVE --baseline top32:t0.7@5 --candidate
  top32:t0.7:dyadic24@5 --reference greedy@5 --estimator analytic`` (every other option at its
  default), wall time and **peak private memory**: the largest resident anonymous memory
  (``RssAnon`` of /proc/PID/status, sampled every 20 ms: resident memory less file-backed pages,
  so a memory-mapped archive is not counted) of the process;
- **polars alone**: the time polars takes to read the columns that run needs into memory
  (``scan_parquet(files).select(cols).collect()``, ``scan_ipc`` for IPC), in a fresh process;
- **mapped floor**: the time to touch every page of the form's files through ``mmap`` (one byte
  per 4 KiB page): no reader of these bytes can be faster.

The three forms of a 10 M archive need about 8–11 GB each; the bench estimates the need from a
small sample of each form first and stops with a message when the temporary folder has less
free space (``--keep DIR`` reuses archives written by an earlier run). Best of ``--repeats``
(default 2). Prints a table and the ratios the acceptance of issue 8 names: IPC ≤ 12 s, zstd
Parquet ≤ 25 s and ≤ 1.4× polars alone, peak private memory ≤ 1.5 GiB.

Run: ``python bench/scale.py`` (``--positions 2000000`` for a quicker look).
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ARMS = ["--baseline", "top32:t0.7@5", "--candidate", "top32:t0.7:dyadic24@5",
        "--reference", "greedy@5", "--estimator", "analytic"]  # fmt: skip
POSITIONS_PER_REQUEST = 64 * 5
FORMS = {  # name: (synth/convert options, file suffix)
    "zstd Parquet": (["--format", "parquet", "--compression", "zstd"], ".parquet"),
    "lz4 Parquet": (["--format", "parquet", "--compression", "lz4"], ".parquet"),
    "Arrow IPC": (["--format", "ipc"], ".arrow"),
}
NEEDED = ["request_id", "family", "context_tokens", "round", "position", "cand_ids",
          "draft_logprobs", "target_probs", "drafted_id", "accepted", "logging_arm",
          "emitted_q"]  # fmt: skip
CLI = [sys.executable, "-m", "specreplay.cli"]


def run(cmd: list[str]) -> tuple[float, int]:
    """Run ``cmd``; return (wall seconds, peak RssAnon in bytes)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        status = Path(f"/proc/{proc.pid}/status")
        while not done.is_set():
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("RssAnon:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
            except OSError:
                return
            time.sleep(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.decode()[-2000:]}")
    return wall, peak


def files_of(folder: Path, suffix: str) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix == suffix)


def polars_alone(folder: Path, suffix: str) -> float:
    """Seconds for polars to read the needed columns into memory, in a fresh process."""
    scan = "scan_ipc" if suffix == ".arrow" else "scan_parquet"
    code = (
        "import sys, time, polars as pl\n"
        f"files = sorted(str(p) for p in __import__('pathlib').Path({str(folder)!r}).iterdir()"
        f" if p.suffix == {suffix!r})\n"
        "t = time.perf_counter()\n"
        f"df = pl.{scan}(files).select({NEEDED!r}).collect()\n"
        "print(time.perf_counter() - t, df.height)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


def mapped_floor(folder: Path, suffix: str) -> float:
    """Seconds to touch every 4 KiB page of the form's files through mmap."""
    import numpy as np

    t0 = time.perf_counter()
    total = 0
    for p in files_of(folder, suffix):
        with p.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            total += int(np.frombuffer(mm, np.uint8)[::4096].sum())
    return time.perf_counter() - t0


def warm_pages(folder: Path) -> None:
    for p in folder.iterdir():
        with p.open("rb") as fh:
            while fh.read(1 << 24):
                pass


def write_forms(root: Path, requests: int) -> dict[str, Path]:
    """The archive in every form under ``root`` (reused when already there)."""
    out = {}
    first = None
    for name, (opts, _) in FORMS.items():
        folder = root / name.replace(" ", "-").lower()
        out[name] = folder
        if (folder / "SYNTH.json").exists() or (folder / "CONVERT.json").exists():
            first = first or folder
            continue
        t0 = time.perf_counter()
        if first is None:
            cmd = [*CLI, "synth", str(folder), "--requests", str(requests), "-q", *opts]
            first = folder
        else:
            cmd = [*CLI, "convert", str(first), str(folder), "-q", *opts]
        subprocess.run(cmd, check=True)
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"wrote {name}: {size / 2**30:.2f} GiB in {time.perf_counter() - t0:.1f} s",
              flush=True)  # fmt: skip
    return out


def bytes_per_position(root: Path) -> float:
    """The largest bytes per position of the forms, from a 20-request sample."""
    sample = root / "sample"
    forms = write_forms(sample, 20)
    worst = max(sum(p.stat().st_size for p in f.iterdir()) for f in forms.values())
    shutil.rmtree(sample)
    return worst / (20 * POSITIONS_PER_REQUEST)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=10_240_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="folder for the archives, kept (reused if there)")
    args = ap.parse_args()
    requests = max(1, args.positions // POSITIONS_PER_REQUEST)
    positions = requests * POSITIONS_PER_REQUEST
    root = args.keep or Path(tempfile.mkdtemp(prefix="specreplay-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        per = bytes_per_position(root)
        need = per * positions * len(FORMS)
        have = shutil.disk_usage(root).free
        print(
            f"{positions:,} positions: about {per * positions / 1e9:.1f} GB per form, "
            f"{need / 1e9:.1f} GB for {len(FORMS)}; {have / 1e9:.1f} GB free in {root}"
        )
        already = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        if need - already > have:
            raise SystemExit("not enough free disk: use --positions or --keep on a larger disk")
        forms = write_forms(root, requests)
        tiny = root / "tiny"
        if not tiny.exists():
            subprocess.run([*CLI, "synth", str(tiny), "--requests", "20", "-q"], check=True)
        run([*CLI, "requalify", str(tiny), *ARMS, "--out", str(root / "out"), "--force", "-q"])
        rows = []
        for name, folder in forms.items():
            suffix = FORMS[name][1]
            warm_pages(folder)
            cmd = [*CLI, "requalify", str(folder), *ARMS, "--out", str(root / "out"), "--force",
                   "-q"]  # fmt: skip
            run(cmd)  # untimed: fills the hash cache
            timed = [run(cmd) for _ in range(args.repeats)]
            wall = min(t for t, _ in timed)
            peak = max(m for _, m in timed)
            alone = min(polars_alone(folder, suffix) for _ in range(args.repeats))
            floor = min(mapped_floor(folder, suffix) for _ in range(args.repeats))
            rows.append((name, wall, peak, alone, floor))
            print(
                f"{name}: requalify {wall:.1f} s, peak private {peak / 2**30:.2f} GiB, "
                f"polars alone {alone:.1f} s, mapped floor {floor:.2f} s",
                flush=True,
            )
        print(f"\n{positions:,} positions, 3 arms, analytic, {os.cpu_count()} cores "
              f"(best of {args.repeats}):\n")  # fmt: skip
        print("| form | requalify | ÷ polars alone | ÷ mapped floor | peak private |")
        print("|---|---|---|---|---|")
        for name, wall, peak, alone, floor in rows:
            print(
                f"| {name} | {wall:.1f} s | {wall / alone:.2f}× ({alone:.1f} s) | "
                f"{wall / floor:.0f}× ({floor:.2f} s) | {peak / 2**30:.2f} GiB |"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
