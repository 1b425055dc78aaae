"""What ``--by COLUMN`` costs: a requalify run with and without ``--by``, per archive size.

Until issue 11 a ``--by`` run replayed the archive three times (the main pass, then one pass per
grouping level); it now replays it once and builds the ``by`` and ``family×bucket×by`` cells
from the same sums (:mod:`specreplay.pipelines.grouping`). The script times, on synthetic
archives carrying a ``worker`` column (``specreplay synth`` + a worker per request, as
``/work/briefs/i11/baseline.py`` makes ``archive_w``):

- per checkout given with ``--repo NAME=PATH`` (its own ``.venv``; default this one), the same
  ``requalify`` with ``--by worker`` and without it, alternately, ``--repeats`` times each after
  one untimed warm-up (kernels compiled into a Numba cache under ``--work``);
- the median wall time of each, and the ratio **by / plain** measured in the same run (the
  baseline: the run without ``--by`` on the same checkout and archive);
- with two checkouts, the ratio of their ``--by`` medians (second / first), the runs of both
  alternating too, so drift on a shared machine falls on both.

    python bench/by_passes.py --repo before=/work/wt/before --repo after=. \\
        --sizes 400,4000 --repeats 3 --work /tmp/by-bench

Sizes are grouped: each size's archive is made once (by the first checkout) and read by all.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARMS = ["--baseline", "top32:t0.7@5", "--candidate", "top32:t0.7:dyadic24@5"]
OPTIONS = ["--estimator", "analytic", "--n-boot", "1000", "--seed", "5", "-q", "--force"]
WORKER = (
    "import polars as pl, sys\n"
    "from pathlib import Path\n"
    "src, dst = Path(sys.argv[1]), Path(sys.argv[2])\n"
    "dst.mkdir(parents=True, exist_ok=True)\n"
    "for f in sorted(src.glob('*.parquet')):\n"
    "    d = pl.read_parquet(f)\n"
    "    d = d.with_columns(worker=pl.col('request_id').hash(seed=1).mod(3).cast(pl.String)"
    ".str.replace('^', 'w'))\n"
    "    d.write_parquet(dst / f.name)\n"
)


def _env(repo: Path, work: Path) -> dict[str, str]:
    """The environment of a checkout's runs: its own Numba cache under ``work``."""
    tag = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:12]
    env = dict(os.environ)
    env["NUMBA_CACHE_DIR"] = str(work / "numba" / tag)
    return env


def _run(repo: Path, work: Path, args: list[str]) -> float:
    """Run ``specreplay ARGS`` from the checkout's venv; return its wall time in seconds."""
    t0 = time.perf_counter()
    r = subprocess.run(
        [str(repo / ".venv/bin/specreplay"), *args],
        env=_env(repo, work),
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        sys.exit(f"{repo}: specreplay {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return took


def _archive(repo: Path, work: Path, size: int) -> Path:
    """Make (once) the archive of ``size`` requests with a worker column."""
    out = work / f"archive_w_{size}"
    if out.exists():
        return out
    plain = work / f"archive_{size}"
    _run(repo, work, ["synth", str(plain), "--requests", str(size), "--seed", "7", "--force", "-q"])
    py = repo / ".venv/bin/python"
    subprocess.run([str(py), "-c", WORKER, str(plain), str(out)], check=True)
    return out


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    """Time the runs and print the medians and ratios (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", action="append", default=[], help="NAME=PATH of a checkout")
    ap.add_argument("--sizes", default="400,4000", help="archive sizes (requests), comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/specreplay-by-bench"))
    a = ap.parse_args()
    repos = [(n, Path(p).resolve()) for n, _, p in (r.partition("=") for r in a.repo)]
    repos = repos or [("this", ROOT)]
    a.work.mkdir(parents=True, exist_ok=True)
    for size in (int(s) for s in a.sizes.split(",")):
        archive = _archive(repos[0][1], a.work, size)
        times: dict[tuple[str, bool], list[float]] = {}
        for name, repo in repos:  # warm-up: kernels compiled, archive in the page cache
            for by in (False, True):
                _run(repo, a.work, _args(archive, a.work / f"out-{name}", by))
        for _ in range(a.repeats):
            for name, repo in repos:
                for by in (True, False):
                    took = _run(repo, a.work, _args(archive, a.work / f"out-{name}", by))
                    times.setdefault((name, by), []).append(took)
        print(f"## {size} requests ({archive}), {a.repeats} runs each, medians")
        print("| checkout | plain s | --by worker s | by / plain |")
        print("|---|---|---|---|")
        for name, _ in repos:
            plain, by = _median(times[(name, False)]), _median(times[(name, True)])
            print(f"| {name} | {plain:.2f} | {by:.2f} | {by / plain:.2f} |")
        if len(repos) == 2:
            (n0, _), (n1, _) = repos
            r = _median(times[(n1, True)]) / _median(times[(n0, True)])
            print(f"\n--by run, {n1} / {n0}: {r:.2f}")
        print(
            "\nall runs (s): "
            + "; ".join(
                f"{n} {'by' if b else 'plain'}: {', '.join(f'{x:.2f}' for x in v)}"
                for (n, b), v in times.items()
            )
        )
        print()


def _args(archive: Path, out: Path, by: bool) -> list[str]:
    extra = ["--by", "worker"] if by else []
    return ["requalify", str(archive), *ARMS, *OPTIONS, *extra, "--out", str(out)]


if __name__ == "__main__":
    main()
