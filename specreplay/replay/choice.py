"""``--estimator auto``: one estimator for every arm and cell of a run, chosen by evidence.

The default of ``requalify`` and ``demo``. One pass replays every arm with the analytic estimator
and, as its companion, the importance estimator (SPEC §3.2; the companion is dropped when the
archive cannot support it); :func:`resolve_auto` then keeps **importance** (no path assumption,
unbiased) when all of the following hold, else **analytic**, with the reason in words:

1. the archive carries ``drafted_id`` and a logging law (``emitted_q``, else a logging arm) in
   every file;
2. **support**: no arm can accept a token its logging law never drafts (a single such row makes
   that arm's importance cells null, and a run never mixes estimators inside one Δ);
3. **tails**, per arm and depth k over the pooled cell (the run's selected requests):
   the ESS share of the policy ratio r_k is ≥ 0.1, and its Pareto k̂ is at most
   min(1 − 1/log10 S, 0.7) *or* the largest ratio is at most 10 times the mean ratio.

Why the second half of rule 3. k̂ reads the tail's *shape*, not its size
(:mod:`specreplay.stats.importance_diag`): on the built-in archive the dyadic24 arm's ratios all
lie within [0.999, 1.33] yet their rare deviations fit a power law with k̂ = 0.77 at depth 5. A
tail cannot hurt an estimate whose weights are bounded by a small multiple of their mean: with
r ≤ B·r̄ the normalised second moment E[r²]/r̄² is at most B, so the ESS share is at least 1/B
and the importance mean of S rounds is never noisier than an on-policy mean of S/B rounds. B ≤ 10
is the bound the ESS-share rule already accepts (share ≥ 0.1), so a heavy-shaped tail blocks
only when it is also large (B > 10), where k̂'s warning that unseen larger ratios may dominate
is the operative one. The bound is read from the observed maximum; k̂ is what covers the unseen.

The Monte Carlo estimator is never chosen by ``auto`` (it is the analytic estimator's noisy twin;
ask for it by name).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from specreplay.replay.engine import ReplayResult
from specreplay.replay.shard import needed_columns
from specreplay.sim.arms import Arm
from specreplay.stats.importance_diag import ESS_SHARE_MIN, diagnose

__all__ = [
    "AUTO",
    "BOUND_MAX",
    "EstimatorChoice",
    "auto_passes",
    "choose",
    "pass_columns",
    "resolve_auto",
    "tail_blocks",
]

AUTO: Final = "auto"
BOUND_MAX: Final = 1.0 / ESS_SHARE_MIN
"""Largest max-ratio / mean-ratio at which a heavy-shaped tail (k̂ above threshold) is accepted."""


@dataclass(frozen=True)
class EstimatorChoice:
    """The estimator a run uses and why.

    Attributes
    ----------
    used : str
        ``importance`` or ``analytic``.
    reason : str
        One sentence: the evidence for it (for analytic, what importance lacked).
    fell_back : bool
        True when importance was ruled out (the reason is then also a warning).
    """

    used: str
    reason: str
    fell_back: bool


def auto_passes(estimator: str) -> tuple[str, str | None]:
    """Return (estimator, companion) of the one pass behind ``--estimator estimator``."""
    if estimator == AUTO:
        return "analytic", "importance"
    return estimator, "analytic" if estimator == "importance" else "importance"


def pass_columns(estimator: str, by: str | None = None) -> frozenset[str] | None:
    """Return the columns the pass behind ``--estimator estimator`` reads (None: every one).

    With ``--by COLUMN`` the column too: the ``--by`` passes read it to code their cells, and
    read by the main pass as well, a malformed value of it fails in that first pass.
    """
    cols = needed_columns(*auto_passes(estimator))
    return None if cols is None else cols | ({by} if by else set())


def _missing(res: ReplayResult) -> str:
    """Why no importance companion ran, from the archive's columns."""
    if "drafted_id" not in res.columns:
        return "the archive has no drafted_id column (the token each position drafted)"
    if "emitted_q" not in res.columns and res.logging_arm is None:
        return "the archive has no logging law (no emitted_q column, no logging arm)"
    return "a file of the archive lacks drafted_id (null) or a logging law"


def _tail_problem(res: ReplayResult, arm: Arm) -> tuple[str | None, tuple[float, str]]:
    """Return the first depth failing rule 3 (None if none) and the weakest figures.

    The weakest figures are (ESS share, text) at the arm's depth of smallest ESS share.
    """
    s = res.companion_sums[arm.canonical]
    tail = res.companion_tails[arm.canonical]
    every_f = tuple(range(len(res.families)))
    every_b = tuple(range(len(res.buckets.names)))
    weakest = (np.inf, "")
    for k in range(1, arm.depth + 1):
        values, dropped = tail.cell(every_f, every_b, k)
        n = int(s.n.sum() - s.short[:, k - 1].sum())
        total = float(s.ratio_sum[:, k - 1].sum())
        top = float(s.ratio_max[:, k - 1].max(initial=-np.inf))
        d = diagnose(
            n=n, ratio_sum=total, ratio_sq=float(s.ratio_sq[:, k - 1].sum()),
            ratio_min=float(s.ratio_min[:, k - 1].min(initial=np.inf)), ratio_max=top,
            tail=values, dropped=dropped,
        )  # fmt: skip
        if d.ess_share is None:
            if d.null_reason is not None and n > 0:
                return f"{arm.canonical} at depth {k}: {d.null_reason}", weakest
            continue
        bound = top / (total / n)
        here = (
            f"{arm.canonical} at depth {k}: ESS share {d.ess_share:.3g}, k̂ {_k(d.pareto_k)}, "
            f"max/mean ratio {bound:.3g}"
        )
        weakest = min(weakest, (d.ess_share, here))
        why = tail_blocks(d.ess_share, d.pareto_k, d.khat_threshold, bound)
        if why is not None:
            return f"{here} ({why})", weakest
    return None, weakest


def tail_blocks(
    ess_share: float, k_hat: float | None, threshold: float | None, bound: float
) -> str | None:
    """Return why a pooled tail rules importance out (rule 3), or None when it is adequate.

    ``bound`` is the largest policy ratio over the mean ratio; a null k̂ or threshold (too few
    rounds for a fit) does not block on its own.
    """
    if ess_share < ESS_SHARE_MIN:
        return f"ESS share < {ESS_SHARE_MIN}"
    if k_hat is not None and threshold is not None and k_hat > threshold and bound > BOUND_MAX:
        return f"k̂ > {threshold:.2f} with max/mean ratio > {BOUND_MAX:g}"
    return None


def _k(k: float | None) -> str:
    return "null" if k is None else f"{k:.2f}"


def choose(res: ReplayResult, arms: list[Arm]) -> EstimatorChoice:
    """Choose importance or analytic for ``arms`` from an analytic pass with importance beside.

    ``res`` is the pass of :func:`auto_passes` (``auto``), after any request selection.
    """
    if res.companion != "importance":
        return EstimatorChoice(
            "analytic", f"importance is impossible: {_missing(res)}; analytic instead", True
        )
    for arm in arms:
        rows = int(res.companion_unlogged[arm.canonical][res.selected].sum())
        if rows:
            return EstimatorChoice(
                "analytic",
                f"importance ruled out: {rows} position rows where {arm.canonical} can accept a "
                "token the logging law never drafts (support); analytic instead",
                True,
            )
    weakest = (np.inf, "")
    for arm in arms:
        problem, here = _tail_problem(res, arm)
        if problem is not None:
            return EstimatorChoice(
                "analytic", f"importance ruled out by its tail diagnostics: {problem}; analytic "
                "instead", True,
            )  # fmt: skip
        weakest = min(weakest, here)
    law = "emitted_q" if "emitted_q" in res.columns else f"the logging arm {res.logging_arm}"
    return EstimatorChoice(
        "importance",
        f"the archive carries drafted_id and the logging law ({law}); every arm's support "
        "holds; every arm's pooled tail is adequate (ESS share ≥ 0.1; k̂ ≤ min(1 − 1/log10 S, "
        f"0.7) or max/mean ratio ≤ {BOUND_MAX:g}); weakest: {weakest[1] or 'none'}",
        False,
    )


def resolve_auto(res: ReplayResult, arms: list[Arm]) -> tuple[ReplayResult, EstimatorChoice]:
    """Return the pass with the chosen estimator as the run's own, and the choice."""
    c = choose(res, arms)
    out = res.swapped() if c.used == "importance" else res
    return replace(out, estimator_reason=c.reason), c
