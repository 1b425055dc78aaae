"""Mutation check: plant plausible one-line bugs in a copy of specreplay; the tests must fail.

Each mutant is an exact string replacement in one module of the package (it must match exactly
once, so a mutant that no longer applies is reported rather than silently skipped). For each
mutant the script copies ``specreplay/``, ``tests/`` and ``pyproject.toml`` into a fresh temporary
folder, applies the edit, and runs the mutant's test files there in a subprocess with
``PYTHONPATH`` pointing at the copy and a fresh ``NUMBA_CACHE_DIR`` (a stale cache would run the
unmutated kernel). An unmutated copy is run first: its tests must pass, or no verdict means
anything.

Prints one line per mutant: KILLED with the first failing test (and how many failed), or
SURVIVED. Exits 1 when a mutant survives or the unmutated copy fails, 2 when a mutant does not
apply. Not part of ``make test``: every mutant recompiles its kernels (minutes in all).

Usage: ``python bench/mutants.py [NAME ...]`` (default: every mutant).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOT, VALID, REPLAY, RNG = (
    "tests/test_bootstrap.py",
    "tests/test_validation.py",
    "tests/test_replay.py",
    "tests/test_rng.py",
)


@dataclass(frozen=True)
class Mutant:
    """One planted bug: replace ``old`` by ``new`` in ``path`` (relative to the repository)."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = [
    # -- the planted bugs of issue 5, item 6 --
    Mutant(
        "verdict: DIFFERENT tested before EQUIVALENT",
        "specreplay/stats/intervals.py",
        "    if pe < alpha:\n        v = EQUIVALENT\n    elif pd < alpha:\n        v = DIFFERENT\n",
        "    if pd < alpha:\n        v = DIFFERENT\n    elif pe < alpha:\n        v = EQUIVALENT\n",
        (BOOT,),
    ),
    Mutant(
        "BCa: acceleration sign flipped",
        "specreplay/stats/intervals.py",
        "a = float((d**3).sum()) / (6.0 * den**1.5)",
        "a = -float((d**3).sum()) / (6.0 * den**1.5)",
        (BOOT,),
    ),
    Mutant(
        "compare: verdicts from raw p-values, not Holm",
        "specreplay/stats/compare.py",
        "        v = verdict(chosen[j], margin.value, alpha, p_equivalence=pe[j], "
        "p_difference=pd[j])",
        "        v = verdict(chosen[j], margin.value, alpha)",
        (BOOT, "tests/test_verdict_rules.py"),
    ),
    Mutant(
        "compare: TOST interval and smallest margin at 95%",
        "specreplay/stats/compare.py",
        "    lo90, hi90 = _bounds(test, 1.0 - 2.0 * alpha)\n",
        "    lo90, hi90 = _bounds(test, empty.level)\n",
        (BOOT,),
    ),
    Mutant(
        "ordercheck: accepted-after-False state reset per chunk",
        "specreplay/replay/archive/ordercheck.py",
        "    n = req.shape[0]\n    for i in range(n):\n",
        "    n = req.shape[0]\n    carry[C_FALSE_LOC] = -1\n    for i in range(n):\n",
        (VALID,),
    ),
    Mutant(
        "montecarlo: accept uniform from the draft stream",
        "specreplay/replay/estimators/montecarlo.py",
        "v = uniform(seed, key, rnd, j + 1, base + STREAM_ACCEPT)",
        "v = uniform(seed, key, rnd, j + 1, base + STREAM_DRAFT)",
        (REPLAY,),
    ),
    Mutant(
        "rng: STREAM_ACCEPT = STREAM_DRAFT",
        "specreplay/sim/rng.py",
        "STREAM_ACCEPT = 1\n",
        "STREAM_ACCEPT = STREAM_DRAFT\n",
        (REPLAY,),
    ),
    Mutant(
        "montecarlo: replicate streams overlap (stride 1)",
        "specreplay/replay/estimators/montecarlo.py",
        "base = STREAMS_PER_REPLICATE * m",
        "base = m",
        (REPLAY,),
    ),
    Mutant(
        "rng: STREAMS_PER_REPLICATE = 1",
        "specreplay/sim/rng.py",
        "STREAMS_PER_REPLICATE = 4\n",
        "STREAMS_PER_REPLICATE = 1\n",
        (REPLAY,),
    ),
    Mutant(
        "montecarlo: survival counts A > k",
        "specreplay/replay/estimators/montecarlo.py",
        "if big_a >= d + 1:",
        "if big_a > d + 1:",
        (REPLAY,),
    ),
    # -- more of the same kind --
    Mutant(
        "studentized: t* over the sample's SE, not each replicate's",
        "specreplay/stats/studentized.py",
        "            t = (reps - theta) / se_reps",
        "            t = (reps - theta) / se",
        ("tests/test_studentized.py",),
    ),
    Mutant(
        "studentized: quantiles of t* not reflected",
        "specreplay/stats/studentized.py",
        "        return float(self.theta - q_hi * self.se), float(self.theta - q_lo * self.se)",
        "        return float(self.theta + q_lo * self.se), float(self.theta + q_hi * self.se)",
        ("tests/test_studentized.py",),
    ),
    Mutant(
        "studentized: stratum centering dropped",
        "specreplay/stats/studentized.py",
        "        centred = quad - np.where(",
        "        centred = quad + 0.0 * np.where(",
        ("tests/test_studentized.py",),
    ),
    Mutant(
        "compare: smallest margin from the unadjusted interval beside Holm verdicts",
        "specreplay/stats/compare.py",
        "smallest_equivalent_margin=None if forced else smallest[j],",
        "smallest_equivalent_margin=None if forced else v.smallest_equivalent_margin,",
        (BOOT, "tests/test_from_stats.py"),
    ),
    Mutant(
        "requests_for_margin: Holm level α/m replaced by α",
        "specreplay/stats/compare.py",
        "alpha / m, POWER, df=",
        "alpha, POWER, df=",
        (BOOT,),
    ),
    Mutant(
        "compare: point delta sign flipped",
        "specreplay/stats/compare.py",
        "        point=st_d.theta,\n",
        "        point=-st_d.theta,\n",
        (BOOT,),
    ),
    Mutant(
        "compare: jackknife delta sign flipped",
        "specreplay/stats/compare.py",
        "jack_delta=loo_b - loo_a,",
        "jack_delta=loo_a - loo_b,",
        (BOOT,),
    ),
    Mutant(
        "montecarlo: depth d keeps min(A, d - 1) accepted drafts",
        "specreplay/replay/estimators/montecarlo.py",
        "kept = min(big_a, d + 1)",
        "kept = min(big_a, d)",
        (REPLAY,),
    ),
    Mutant(
        "analytic: rounds replayed one position short",
        "specreplay/replay/estimators/analytic.py",
        "d_r = min(round_offsets[r + 1] - a, max_depth)",
        "d_r = min(round_offsets[r + 1] - a, max_depth - 1)",
        ("tests/test_analytic.py", REPLAY),
    ),
    # -- issue 5, items 1–2: the fused importance kernel and --estimator auto --
    Mutant(
        "importance: support check flags candidates the arm can never accept",
        "specreplay/replay/estimators/importance.py",
        "elif qs[i] > 0.0 and accept_prob(qver[i], p[i]) > 0.0:",
        "elif qs[i] > 0.0:",
        ("tests/test_auto_cells.py", "tests/test_importance.py"),
    ),
    Mutant(
        "auto: k̂ blocks whatever the tail's size",
        "specreplay/replay/choice.py",
        "k_hat > threshold and over:",
        "k_hat > threshold:",
        ("tests/test_auto_estimator.py", "tests/test_auto_cells.py"),
    ),
    # -- issue 10, item 5: auto per cell and per comparison --
    Mutant(
        "auto: k̂ never blocks",
        "specreplay/replay/choice.py",
        "k_hat > threshold and over:",
        "k_hat > threshold and over and False:",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "auto: second moment over sum instead of squared mean",
        "specreplay/replay/choice.py",
        "moment = second / (mean * mean) if",
        "moment = second / total if",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "auto: ratio bound over sum instead of mean",
        "specreplay/replay/choice.py",
        "bound = top / mean if",
        "bound = top / total if",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "auto: depth k counts rounds that never recorded k positions",
        "specreplay/replay/choice.py",
        "n = int(rounds - sums.short[mask, k - 1].sum())",
        "n = int(rounds)",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "auto: the rule reads the observed ratios, not the exact second moment",
        "specreplay/replay/choice.py",
        "second = float(sums.moment_max[mask, k - 1].max(initial=0.0))",
        "second = float(sums.ratio_max[mask, k - 1].max(initial=0.0)) ** 2",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "auto: the rule reads the ratio bound, not the second moment",
        "specreplay/replay/choice.py",
        "d.khat_threshold, moment or 0.0)",
        "d.khat_threshold, bound or 0.0)",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "auto: per-cell tail rule not applied",
        "specreplay/pipelines/importance.py",
        '    if res.estimator != "importance":\n        return tuple(cells)\n    by_name',
        "    if True:\n        return tuple(cells)\n    by_name",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "auto: the bits walk ignores the per-cell rule",
        "specreplay/pipelines/sweep.py",
        'verdict = "INCONCLUSIVE"  # auto',
        "verdict = verdict  # auto",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "auto: the path-bias diagnostic's estimator is the run's",
        "specreplay/pipelines/importance.py",
        'return f"{path} − importance"',
        "return res.estimator",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "support: sweeps ignore rows outside the logging support",
        "specreplay/replay/engine.py",
        "return self.short_reason(arm, depth, mask) or self.unlogged_reason(arm, mask)",
        "return self.short_reason(arm, depth, mask)",
        ("tests/test_auto_cells.py",),
    ),
    Mutant(
        "auto: choosing importance keeps the analytic replay under its name",
        "specreplay/replay/engine.py",
        "        return replace(self, estimator=estimator)\n",
        "        return replace(self, estimator=estimator, replays={estimator: self.own})\n",
        ("tests/test_auto_estimator.py",),
    ),
    Mutant(
        "--by: a request's value is its neighbour's (a by cell of another value's requests)",
        "specreplay/replay/engine.py",
        "request_value=to_value[code].astype(np.int32),",
        "request_value=np.roll(to_value[code], 1).astype(np.int32),",
        ("tests/test_by_one_pass.py", "tests/test_privacy_grouping.py"),
    ),
    # -- one resample pass per run (issue 13, item 1) --
    Mutant(
        "resample: every comparison drawn on its own again",
        "specreplay/pipelines/resample.py",
        "    sums = resample_sums(rs, [p.ps for p in pairings])\n",
        "    from specreplay.stats.bootstrap import bootstrap_sums\n\n"
        "    sums = [bootstrap_sums(p.ps, n_boot=boot.n_boot, seed=seed, stratify=boot.stratify)"
        " for p in pairings]\n",
        ("tests/test_by_one_pass.py",),
    ),
    Mutant(
        "resample: requalify's --by cells resampled per grouping",
        "specreplay/pipelines/requalify.py",
        "requalify_result(runs[at[level]], arms, opts, archive, plans[at[level]])",
        "requalify_result(runs[at[level]], arms, opts, archive)",
        ("tests/test_by_one_pass.py",),
    ),
    Mutant(
        "resample: sweep's --by cells resampled per grouping",
        "specreplay/pipelines/sweep.py",
        "runs[at[level]], prep.arms, opts, archive, prep.baseline, plans[at[level]]",
        "runs[at[level]], prep.arms, opts, archive, prep.baseline",
        ("tests/test_by_one_pass.py",),
    ),
    Mutant(
        "resample: a table's requests matched to members by position",
        "specreplay/stats/bootstrap.py",
        "        at = order[pos] if keys.shape[0] else pos\n",
        "        at = pos\n",
        ("tests/test_resample_pass.py",),
    ),
    Mutant(
        "resample: columns merged by their sampled key alone",
        "specreplay/stats/bootstrap.py",
        "if np.array_equal(cols[i], values)), None",
        "if True), None",
        ("tests/test_resample_pass.py",),
    ),
    Mutant(
        "resample: layouts merged by their sampled key alone",
        "specreplay/stats/bootstrap.py",
        "                and np.array_equal(out.layouts[i].piece_member, p.piece_member)\n",
        "",
        ("tests/test_resample_pass.py",),
    ),
    Mutant(
        "resample: a cell with one break read as a run of members",
        "specreplay/stats/bootstrap.py",
        "run = filled[breaks[hi[filled] - 1] == breaks[lo[filled]]]",
        "run = filled[breaks[hi[filled] - 1] <= breaks[lo[filled]] + 1]",
        ("tests/test_resample_pass.py",),
    ),
]


def _copy(dest: Path) -> None:
    for sub in ("specreplay", "specreplay_testing", "tests"):
        shutil.copytree(
            ROOT / sub, dest / sub, ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc")
        )
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")


def _matches(m: Mutant, root: Path = ROOT) -> int:
    """How many times the mutant's edit matches its module (it must be exactly once)."""
    return (root / m.path).read_text(encoding="utf-8").count(m.old)


def _apply(dest: Path, m: Mutant) -> None:
    target = dest / m.path
    target.write_text(target.read_text(encoding="utf-8").replace(m.old, m.new), encoding="utf-8")


def _run(dest: Path, tests: tuple[str, ...]) -> tuple[int, list[str], str]:
    """Run ``tests`` in ``dest``: (pytest exit code, failing test ids, last output line)."""
    env = {**os.environ, "PYTHONPATH": str(dest), "NUMBA_CACHE_DIR": str(dest / ".numba-cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=dest, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    out = proc.stdout.splitlines()
    failed = [re.split(r"\s+-\s+", ln[7:])[0] for ln in out if ln.startswith(("FAILED ", "ERROR "))]
    return proc.returncode, failed, out[-1] if out else proc.stderr.strip()[-200:]


def _trial(m: Mutant | None, tests: tuple[str, ...]) -> tuple[int, list[str], str, float]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specreplay-mutant-") as tmp:
        dest = Path(tmp)
        _copy(dest)
        if m is not None:
            _apply(dest, m)
        code, failed, last = _run(dest, tests)
    return code, failed, last, time.perf_counter() - t0


def main(names: list[str]) -> int:
    """Run the chosen mutants (all when ``names`` is empty); return the exit code."""
    chosen = [m for m in MUTANTS if not names or m.name in names]
    stale = [
        f"{m.name}: matches {_matches(m)} times in {m.path}" for m in chosen if _matches(m) != 1
    ]
    if stale:
        print("mutants that do not apply exactly once:\n  " + "\n  ".join(stale))
        return 2
    all_tests = tuple(sorted({t for m in chosen for t in m.tests}))
    code, failed, last, secs = _trial(None, all_tests)
    print(f"unmutated copy: {last} ({secs:.0f} s)", flush=True)
    if code != 0:
        print("the unmutated copy fails: " + ", ".join(failed))
        return 1
    width = max(len(m.name) for m in chosen)
    survivors = 0
    for m in chosen:
        code, failed, last, secs = _trial(m, m.tests)
        if code == 0:
            survivors += 1
            verdict = f"SURVIVED ({last})"
        elif failed:
            more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
            verdict = f"killed   {failed[0]}{more}"
        else:
            verdict = f"killed   pytest exit {code}: {last}"
        print(f"{m.name:<{width}}  {verdict}  [{secs:.0f} s]", flush=True)
    print(f"{len(chosen) - survivors} of {len(chosen)} mutants killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
