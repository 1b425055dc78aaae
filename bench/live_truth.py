"""Live ground truth against the replay estimators on the built-in world (issue 5, item 4).

Samples round starts of the synthetic archive (regenerated from its configuration and seed), runs
each arm's round live ``--n-live`` times from every start, and prints per arm and depth k:

- SIMULATED: the live truth P(A ≥ k) ± its standard error;
- ESTIMATED: importance, analytic and Monte Carlo on the same archived rounds, each with its
  estimate, its bias (estimate − truth, paired by start) and the 95% interval of that bias;
- the same for R_D = 1 + Σ_{k≤D} P(A ≥ k).

The bias SE clusters by request (``specreplay_testing.livetruth``). ``--surprise-growth 0`` turns
the toy's prefix dependence off: the path assumption then holds and every estimator should agree
with the truth within its interval.

``--depth 8`` (with arms ``@8``) samples the starts of the 8-position built-in archive that
``specreplay synth`` and ``demo`` write; the default, 5, is ``SynthConfig``'s (the table of
docs/calibration.md).

Usage: ``NUMBA_CACHE_DIR=/tmp/numba .venv/bin/python bench/live_truth.py [--surprise-growth 0]``
"""

from __future__ import annotations

import argparse
import time

from specreplay.sim.synth import SynthConfig
from specreplay.sim.toy import ToyPair
from specreplay_testing.livetruth import ArmTruth, LiveTruthTable, live_truth

ARMS = "top32:t0.7@5,top32:t0.7:dyadic8@5,greedy@5,top32:t1@5"
SHORT = {"importance": "importance", "analytic": "analytic", "montecarlo": "MC"}


def _arm_lines(a: ArmTruth) -> list[str]:
    head = f"{'k':>3} {'SIMULATED truth':>17} |"
    for name in a.survival:
        head += f" {SHORT[name] + ' est':>15} {'bias':>8} {'95% interval':>19} |"
    lines = [f"arm {a.arm}", "    " + head]
    rows = [
        (str(k + 1), a.truth[k], a.truth_se[k], {n: (p, k) for n, p in a.survival.items()})
        for k in range(a.truth.shape[0])
    ]
    d = a.truth.shape[0] - 1
    rows.append((f"R{d + 1}", a.retained_truth[d], a.retained_truth_se[d],
                 {n: (p, d) for n, p in a.retained.items()}))  # fmt: skip
    for label, t, se, cells in rows:
        line = f"{label:>3} {t:>9.4f} ± {se:.4f} |"
        for p, k in cells.values():
            lo, hi = p.interval(0.95)
            flag = "*" if lo[k] > 0.0 or hi[k] < 0.0 else " "
            ci = f"[{lo[k]:>+8.4f}, {hi[k]:>+8.4f}]"
            line += f" {p.estimate[k]:>15.4f} {p.bias[k]:>+8.4f} {ci}{flag}|"
        lines.append("    " + line)
    return lines


def render(tab: LiveTruthTable, seconds: float) -> str:
    """The table as text (``*``: the 95% interval of the bias excludes 0)."""
    out = [
        f"live truth: {tab.n_starts} starts ({tab.n_requests} requests), {tab.n_live} live "
        f"rounds per start and arm, seed {tab.seed}, surprise_growth {tab.surprise_growth:g}, "
        f"logging arm {tab.logging_arm}, MC replicates {tab.replicates} ({seconds:.1f} s)",
        "SIMULATED = live truth P(A >= k) (R: 1 + sum over k); ESTIMATED = replay estimators on "
        "the archived rounds; bias = estimate - truth (paired by start, SE clustered by request)",
    ]
    for a in tab.arms:
        out.extend(["", *_arm_lines(a)])
    return "\n".join(out)


def main() -> None:
    """Parse the options, run, print."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-starts", type=int, default=16000)
    ap.add_argument("--rounds-per-request", type=int, default=8)
    ap.add_argument("--n-live", type=int, default=16)
    ap.add_argument("--surprise-growth", type=float, default=ToyPair().surprise_growth)
    ap.add_argument("--arms", default=ARMS, help="comma-separated arms")
    ap.add_argument("--seed", type=int, default=0, help="the synthetic archive's seed")
    ap.add_argument("--replicates", type=int, default=16)
    ap.add_argument("--depth", type=int, default=5, help="the synthetic archive's depth")
    args = ap.parse_args()
    cfg = SynthConfig(pair=ToyPair(surprise_growth=args.surprise_growth), depth=args.depth)
    t0 = time.perf_counter()
    tab = live_truth(
        cfg, args.seed, [a.strip() for a in args.arms.split(",") if a.strip()],
        n_starts=args.n_starts, n_live=args.n_live, rounds_per_request=args.rounds_per_request,
        replicates=args.replicates,
    )  # fmt: skip
    print(render(tab, time.perf_counter() - t0))


if __name__ == "__main__":
    main()
