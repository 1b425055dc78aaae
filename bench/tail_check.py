"""``--estimator auto``'s tail check inside a default requalify, against an older specreplay.

The tail check is every Pareto k̂ fit a default ``requalify`` makes (per arm × depth × cell:
:func:`specreplay.replay.choice.cell_checks` → ``diagnose``, for the estimator choice, the
cells' importance diagnostics and auto's per-comparison rule) plus the import those fits need
(ArviZ before issue 13, which the first fit imported). Each run is a fresh process that wraps
``specreplay.replay.choice.diagnose`` with a timer (and ``cell_checks``, which also gathers
each cell's tail and sums), runs ``api.requalify(ARCHIVE,
baseline=top32:t0.7@5, candidate=top32:t0.7:dyadic24@5, reference=greedy@5)`` with every other
option at its default (``out=None``: no files) and prints the summed time in those calls, the
number of calls, the thread CPU time in them (what a loaded machine inflates least), the run's
wall time and whether ``arviz_stats`` ended up imported.

``--old DIR`` names a folder holding an older ``specreplay`` package (e.g. ``git archive
COMMIT specreplay | tar -x -C DIR``); the two are then run alternately, each once untimed first
(Numba cache warm), best of ``--repeats``, and their ratio printed. The archive is ``--archive``
or ``specreplay synth --requests N --format ipc`` (64 rounds × 5 positions per request; 6,250
requests are 2,000,000 positions) written to a temporary folder and deleted afterwards.

    python bench/tail_check.py [--archive DIR | --requests 6250] [--old DIR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ARMS = {"baseline": "top32:t0.7@5", "candidate": "top32:t0.7:dyadic24@5", "reference": "greedy@5"}
HERE = Path(__file__).resolve().parents[1]


def child(archive: str) -> None:
    """Run one default requalify with ``diagnose`` timed; print the figures as JSON."""
    t_start = time.perf_counter()
    from specreplay import api
    from specreplay.pipelines import importance
    from specreplay.replay import choice

    spent = {"diagnose": [0.0, 0, 0.0], "cell_checks": [0.0, 0, 0.0]}

    def timer(name: str, inner: Callable[..., object]) -> Callable[..., object]:
        def timed(*args: object, **kw: object) -> object:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return inner(*args, **kw)
            finally:
                spent[name][0] += time.perf_counter() - t0
                spent[name][1] += 1
                spent[name][2] += time.thread_time() - c0

        return timed

    choice.diagnose = timer("diagnose", choice.diagnose)  # type: ignore[assignment]
    checks = timer("cell_checks", choice.cell_checks)
    choice.cell_checks = importance.cell_checks = checks  # type: ignore[assignment]
    api.requalify(archive, **ARMS)
    print(json.dumps({
        "tail_check_s": spent["diagnose"][0], "fits": spent["diagnose"][1],
        "tail_check_cpu_s": spent["diagnose"][2], "cell_checks_s": spent["cell_checks"][0],
        "cell_checks_cpu_s": spent["cell_checks"][2], "run_s": time.perf_counter() - t_start,
        "arviz": "arviz_stats" in sys.modules, "matplotlib": "matplotlib" in sys.modules,
    }))  # fmt: skip


def measure(src: Path, archive: str) -> dict[str, float]:
    """One fresh process running :func:`child` with ``src``'s specreplay first on the path."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", archive]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archive", type=Path)
    ap.add_argument("--requests", type=int, default=6250)
    ap.add_argument("--old", type=Path, help="folder holding an older specreplay package")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    tmp = None
    archive = args.archive
    if archive is None:
        tmp = Path(tempfile.mkdtemp(prefix="tail-check-"))
        archive = tmp / "archive"
        subprocess.run([sys.executable, "-m", "specreplay.cli", "synth", str(archive),
                        "--requests", str(args.requests), "--format", "ipc", "--depth", "5",
                        "-q"],
                       check=True)  # fmt: skip
    versions = {"this": HERE} | ({"old": args.old.resolve()} if args.old else {})
    try:
        best: dict[str, dict[str, float]] = {}
        for name, src in versions.items():
            print(f"warm-up ({name}): {measure(src, str(archive))}", flush=True)
        for _ in range(args.repeats):
            for name, src in versions.items():
                got = measure(src, str(archive))
                print(f"{name}: {got}", flush=True)
                for key, value in got.items():  # best of each figure on its own
                    if isinstance(value, float):
                        value = min(value, best.get(name, {}).get(key, value))
                    best.setdefault(name, {})[key] = value
    finally:
        if tmp is not None:
            shutil.rmtree(tmp)
    for name, got in best.items():
        print(f"best {name}: tail check {got['tail_check_s']:.3f} s wall, "
              f"{got['tail_check_cpu_s']:.3f} s CPU over {got['fits']:.0f} diagnoses; cell "
              f"checks with their tails gathered {got['cell_checks_s']:.3f} s wall, "
              f"{got['cell_checks_cpu_s']:.3f} s CPU; run {got['run_s']:.1f} s; arviz imported: "
              f"{got['arviz']}")  # fmt: skip
    if "old" in best:
        for key in ("tail_check_s", "tail_check_cpu_s", "cell_checks_s", "cell_checks_cpu_s"):
            print(f"{key} old / this: {best['old'][key] / best['this'][key]:.1f}×")


if __name__ == "__main__":
    main()
