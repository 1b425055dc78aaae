"""Time to draw every plot of a run, from its results.json, in a fresh process (issue 13: ≤ 1 s).

For each run folder given (a demo's folder holds several: its chapters' sub-folders are found by
their results.json), a fresh process reads the results, then renders every PNG the run writes
(:func:`specreplay.render.files.render`'s plots: forest, context, survival, depths, screen) into
a temporary folder, timing each plot function, the first one including matplotlib's import (of
what the package imports: ``matplotlib.figure`` and the Agg backend, never pyplot) and its font
cache. Prints per run the plots' wall time and the process's CPU time for all of the run's files
(CPU time is what a loaded machine inflates least), then one process's split by plot function
and PNG writing, wall and CPU seconds. Best of ``--repeats`` (fresh processes). Give the same
folders with ``PYTHONPATH`` pointing at another specreplay to compare two versions.

    python bench/plot_speed.py RUN_DIR [RUN_DIR ...] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PLOTS = ("forest_plot", "context_plot", "survival_plot", "depth_plot", "screen_plot")


def child(folders: list[str]) -> None:
    """Render every run's plots in this process; print the seconds per run and per step."""
    from specreplay.render import files, plots
    from specreplay.results.io import read_result

    steps: dict[str, float] = {}
    cpu_steps: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., object]) -> Callable[..., object]:
        def run(*args: object, **kw: object) -> object:
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                steps[name] = steps.get(name, 0.0) + time.perf_counter() - t0
                cpu_steps[name] = cpu_steps.get(name, 0.0) + time.process_time() - c0

        return run

    for name in PLOTS:
        setattr(files, name, timed(name, getattr(plots, name)))
    plots._save = timed("savefig", plots._save)  # type: ignore[assignment]
    per_run = {}
    cpu = {}
    with tempfile.TemporaryDirectory() as tmp:
        for folder in folders:
            result = read_result(Path(folder) / "results.json")
            before = sum(v for k, v in steps.items() if k in PLOTS)
            t0, c0 = time.perf_counter(), time.process_time()
            # the first run pays the import
            import matplotlib.backends.backend_agg
            import matplotlib.figure  # noqa: F401

            imported = time.perf_counter() - t0
            out = Path(tmp) / str(len(per_run))
            out.mkdir()
            files.render(result, out)
            drawn = sum(v for k, v in steps.items() if k in PLOTS) - before
            per_run[folder] = drawn + imported
            cpu[folder] = time.process_time() - c0  # the run's other files included
    print(json.dumps({"runs": per_run, "cpu": cpu, "steps": steps, "cpu_steps": cpu_steps}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child([str(r) for r in args.runs])
        return
    folders = sorted(
        str(p.parent) for r in args.runs for p in r.rglob("results.json") if p.parent.is_dir()
    )
    best: dict[str, float] = {}
    best_cpu: dict[str, float] = {}
    last: dict[str, float] = {}
    last_cpu: dict[str, float] = {}
    for _ in range(args.repeats):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", *folders]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        for k, v in got["runs"].items():
            best[k] = min(best.get(k, float("inf")), v)
            best_cpu[k] = min(best_cpu.get(k, float("inf")), got["cpu"][k])
        last, last_cpu = got["steps"], got["cpu_steps"]
    print("plots wall s | process CPU s (all the run's files) | run")
    for k, v in best.items():
        print(f"{v:6.2f} | {best_cpu[k]:6.2f} | {k}")
    print(f"{sum(best.values()):6.2f} | {sum(best_cpu.values()):6.2f} | all, one process")
    print("one process's steps (wall s):", {k: round(v, 2) for k, v in last.items()})
    print("one process's steps (CPU s):", {k: round(v, 2) for k, v in last_cpu.items()})


if __name__ == "__main__":
    main()
