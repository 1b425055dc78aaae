"""What one resample pass per run saves: the time after the replay pass, before and after issue 13.

Until issue 13 every comparison of a run drew the bootstrap's request multiplicities again and
summed its own four columns (the candidate, the reference, the path biases, and each ``--by``
grouping's comparisons); a run now draws them once and sums each distinct column of its
comparisons once (:mod:`specreplay.pipelines.resample`). The replay pass is run once, by the
first checkout, and its result pickled; then for each checkout given with ``--repo NAME=PATH``
(the first is the baseline), alternately and each in a fresh process, ``--repeats`` times after
one untimed warm-up (kernels compiled into a Numba cache per checkout under ``--work``), the
pipeline's own ``_passes`` of

    requalify ARCHIVE --baseline top32:t0.7@5 --candidate top32:t0.7:dyadic24@5
                      --reference greedy@5 [--by COLUMN]

at default options (``auto``: importance with the analytic companion, n_boot 10,000) runs on
that pickled pass (``_replay`` returns it). Timers inside the process give the **comparisons**
(``comparands``: plan, resample, compare; since issue 13 the run plans and resamples first, in
``resampled_plan``, whose time is added) and the **time after the pass** (everything the result
needs once the pass is done: auto's resolution, the comparisons, the replay figures, the tail
rule, the law tests, the ``--by`` cells; not the files and plots, which issue 13 does not
change), in wall and in CPU seconds (all threads; steadier than wall time on a loaded machine).
Prints every run, the best of each checkout and the ratios against the first checkout measured
in the same run.

    python bench/resample_pass.py ARCHIVE --repo before=/tmp/before --repo after=. \\
        --repeats 3 --work /tmp/resample-bench [--by worker]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ARMS = {"baseline": "top32:t0.7@5", "candidate": "top32:t0.7:dyadic24@5", "reference": "greedy@5"}


def child(archive: Path, by: str | None, saved: Path, save: bool) -> dict[str, float]:
    """Run one requalification in this process; return its timers (seconds).

    ``save``: replay and pickle the pass into ``saved``; else run on the pass pickled there.
    """
    import specreplay.pipelines.requalify as rq
    from specreplay.pipelines.options import RequalifyOptions
    from specreplay.replay.backend import backend_runner

    marks: dict[str, float] = {"comparisons": 0.0, "comparisons_cpu": 0.0}
    replay, comparands = rq._replay, rq.comparands
    planned = getattr(rq, "resampled_plan", None)  # issue 13: the pass resamples before
    loaded = None if save else pickle.loads(saved.read_bytes())

    def timed_replay(*a: Any, **k: Any) -> Any:
        out = replay(*a, **k) if save else loaded
        if save:
            saved.write_bytes(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
        marks["pass_end"] = time.perf_counter()
        marks["pass_end_cpu"] = time.process_time()
        return out

    def timed_comparands(*a: Any, **k: Any) -> Any:
        t, c = time.perf_counter(), time.process_time()
        out = comparands(*a, **k)
        marks["comparisons"] += time.perf_counter() - t
        marks["comparisons_cpu"] += time.process_time() - c
        return out

    def timed_plan(*a: Any, **k: Any) -> Any:
        assert planned is not None
        t, c = time.perf_counter(), time.process_time()
        out = planned(*a, **k)
        marks["comparisons"] += time.perf_counter() - t
        marks["comparisons_cpu"] += time.process_time() - c
        return out

    rq._replay, rq.comparands = timed_replay, timed_comparands  # type: ignore[assignment]
    if planned is not None:
        rq.resampled_plan = timed_plan
    opts = RequalifyOptions.build(**ARMS, by=by)
    t0 = time.perf_counter()
    opened = rq.requalify_open(archive, opts)
    filters = {"families": None, "sample_requests": None}
    with backend_runner(None, filters, inputs=[archive]) as run:
        rq._passes(opened, archive, opts, None, run)
    t1, c1 = time.perf_counter(), time.process_time()
    return {
        "pass": marks["pass_end"] - t0,
        "after": t1 - marks["pass_end"],
        "after_cpu": c1 - marks["pass_end_cpu"],
        "comparisons": marks["comparisons"],
        "comparisons_cpu": marks["comparisons_cpu"],
    }


def _env(repo: Path, work: Path) -> dict[str, str]:
    """The environment of a checkout's runs: its package first, its own Numba cache."""
    tag = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:12]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo.resolve())
    env["NUMBA_CACHE_DIR"] = str(work / "numba" / tag)
    return env


def _run(
    repo: Path, work: Path, archive: Path, by: str | None, save: bool = False
) -> dict[str, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), str(archive), "--child"]
    cmd += ["--by", by] if by else []
    cmd += ["--work", str(work)] + (["--save"] if save else [])
    out = subprocess.run(cmd, env=_env(repo, work), capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{repo}: {' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    """Parse the arguments; run the child, or alternate the checkouts and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("archive", type=Path)
    p.add_argument("--repo", action="append", default=[], help="NAME=PATH (first: baseline)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--work", type=Path, default=Path("/tmp/resample-bench"))
    p.add_argument("--by", default=None)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--save", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--reuse", action="store_true", help="use the pass pickled by an earlier run")
    a = p.parse_args()
    saved = a.work / "pass.pickle"
    if a.child:
        print(json.dumps(child(a.archive, a.by, saved, a.save)))
        return
    a.work.mkdir(parents=True, exist_ok=True)
    repos = [(r.split("=", 1)[0], Path(r.split("=", 1)[1])) for r in a.repo] or [("this", ROOT)]
    if not (a.reuse and saved.exists()):
        r = _run(repos[0][1], a.work, a.archive, a.by, save=True)
        print(f"the replay pass ({repos[0][0]}): {r['pass']:.2f} s, pickled", flush=True)
    for _, repo in repos:  # warm-up: compile into the checkout's cache
        _run(repo, a.work, a.archive, a.by)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in repos}
    for i in range(a.repeats):
        for name, repo in repos:
            r = _run(repo, a.work, a.archive, a.by)
            runs[name].append(r)
            line = f"after the pass {r['after']:6.2f} s ({r['after_cpu']:6.2f} s CPU), "
            line += f"comparisons {r['comparisons']:6.2f} s ({r['comparisons_cpu']:6.2f} s CPU)"
            print(f"run {i + 1} {name:>8}: {line}", flush=True)
    print(f"\n{a.archive} {'--by ' + a.by if a.by else ''} best of {a.repeats} (seconds)")
    best = {n: {k: min(r[k] for r in rs) for k in rs[0]} for n, rs in runs.items()}
    first = repos[0][0]
    for name, b in best.items():
        ratio = {k: b[k] / best[first][k] if best[first][k] else float("nan") for k in b}
        line = "  ".join(
            f"{k} {b[k]:6.2f} ({ratio[k]:.2f}×)"
            for k in ("after", "after_cpu", "comparisons", "comparisons_cpu")
        )
        print(f"{name:>8}: {line}")


if __name__ == "__main__":
    main()
