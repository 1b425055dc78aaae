"""``--estimator auto``: importance wherever the archive supports it, judged cell by cell.

The default of ``requalify``, ``sweep`` and ``demo``. One pass replays every arm with the analytic
estimator and, beside it, the importance estimator
(docs/methods.md#auto-the-estimator-per-run-and-per-cell; dropped from the pass's ``replays`` when
the archive cannot support it). :func:`choose` then settles the **run's** estimator, a lookup in
that map (:meth:`~specreplay.replay.engine.ReplayResult.with_estimator`):

1. **importance** for every arm when the archive carries ``drafted_id`` and a logging law
   (``emitted_q``, else a logging arm) in every file: no path assumption, unbiased, and both
   arms of every comparison use it, so a paired Δ never carries a difference of path biases;
2. else **analytic** for every arm, with the reason (importance is impossible for the whole
   archive).

Nothing about one arm switches the others. An arm that can accept a token its logging law
never drafts (**support**) keeps its importance replay, but its figures, and every delta it
enters, are null in the cells whose requests hold such rows (the results layer's
``with_support_nulls``, with the count).

**Tails, per cell and per comparison** (:func:`cell_checks`, :func:`tail_blocks`). In every
cell that has a verdict, both arms of the comparison are checked at every depth k ≤ the arm's
depth over that cell's rounds that recorded k positions: the ESS share of the policy ratio r_k
must be ≥ 0.1, and its Pareto k̂ at most min(1 − 1/log10 S, 0.7) *unless* the exact
second-moment bound of r_k is at most 10 times the squared mean ratio. A cell that fails is
INCONCLUSIVE with the figures (arm, depth, ESS share, k̂, bound/mean, second moment/mean²); its
Δ figures stay. It never moves silently to the path-biased analytic estimator.

Why a bound, and which. k̂ reads the tail's *shape*, not its size
(:mod:`specreplay.stats.importance_diag`): bounded, discrete ratios (dyadic quantizers) fit
power laws with k̂ far above 0.7. A tail cannot hurt an estimate whose normalised second moment
E[r²]/r̄² is at most B: the ESS share is then at least 1/B and the importance mean of S rounds
is never noisier than an on-policy mean of S/B rounds. B ≤ 10 is what the ESS-share rule
already accepts (share ≥ 0.1). B must hold for ratios the archive did not show, so it is read
off the laws, not the sampled ratios; both laws are known on every candidate
(:mod:`specreplay.replay.estimators.importance`), which gives two exact per-round figures:

- the **ratio bound** b_k = Π_{j≤k} max_x q^s_j(x)/q^L_j(x) (r_k ≤ b_k whatever was drafted),
  reported as ``bound_ratio`` = max over the cell's rounds of b_k / the mean r_k. It bounds
  E[r²]/r̄² too, but far too loosely for quantizers: a dyadic grid rounds a few tiny logging
  probabilities up by large factors (2^−N over q^L), so on the built-in demo archive
  dyadic8..24's bound/mean reaches 90 to 1.4 million at depth 8 although those candidates are
  almost never drafted (their ESS shares are ≥ 0.88);
- the **second-moment bound** m_k = Π_{j≤k} Σ_x q^s_j(x)²/q^L_j(x), each factor the exact
  E_L[(q^s_j/q^L_j)²] at the archived prefix, so rare candidates weigh what they are drafted;
  ``moment_ratio`` = max over the cell's rounds of m_k / r̄_k² is B of the argument above
  (dyadic8..24: ≤ 1.5 at depth 8 on the demo archive; greedy 311; at depth 5 of the
  5-position archive before issue 14, temperature 2: 10^23).

The rule reads ``moment_ratio``. Like ``bound_ratio``, it is exact per position at the archived
prefixes (a later position's laws at a prefix the archive did not draft are unknown to both).
Where it exceeds 10, k̂'s warning that unseen larger ratios may dominate is the operative one.

The Monte Carlo estimator is never chosen by ``auto`` (it is the analytic estimator's noisy twin;
ask for it by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
from numpy.typing import NDArray

from specreplay.replay.accumulate import ArmSums
from specreplay.replay.engine import ReplayResult
from specreplay.replay.shard import needed_columns
from specreplay.replay.tails import RatioTail
from specreplay.sim.arms import Arm
from specreplay.stats.importance_diag import ESS_SHARE_MIN, TailDiagnostic, diagnose

__all__ = [
    "AUTO",
    "BOUND_MAX",
    "DepthCheck",
    "EstimatorChoice",
    "auto_passes",
    "cell_checks",
    "choose",
    "first_failure",
    "pass_columns",
    "resolve_auto",
    "tail_blocks",
]

AUTO: Final = "auto"
BOUND_MAX: Final = 1.0 / ESS_SHARE_MIN
"""Largest exact second-moment bound / squared mean ratio at which a heavy-shaped tail (k̂ above
threshold) is accepted."""


@dataclass(frozen=True)
class EstimatorChoice:
    """The estimator a run uses and why.

    Attributes
    ----------
    used : str
        ``importance`` or ``analytic``.
    reason : str
        The evidence for it (for analytic, what importance lacked).
    fell_back : bool
        True when importance was impossible (the reason is then also a warning).
    """

    used: str
    reason: str
    fell_back: bool


@dataclass(frozen=True)
class DepthCheck:
    """The tail rule at one arm and depth over one cell's rounds (module docstring).

    Attributes
    ----------
    arm : str
    depth : int
    diagnostic : TailDiagnostic
        ESS, ESS share, k̂ and its threshold over the S rounds that recorded ``depth``
        positions.
    bound_ratio : float or None
        Largest exact per-round bound of r_k over those rounds / their mean r_k (None with no
        round or a mean of 0).
    moment_ratio : float or None
        Largest exact per-round second-moment bound m_k over those rounds / their squared mean
        r_k (None likewise): what the rule reads.
    fails : str or None
        Why the tail rules importance out here (None: adequate, or no round to judge).
    """

    arm: str
    depth: int
    diagnostic: TailDiagnostic
    bound_ratio: float | None
    moment_ratio: float | None
    fails: str | None

    @property
    def khat_by_bound(self) -> bool:
        """k̂ exceeded its threshold and was accepted only because second moment/mean² ≤ 10."""
        d = self.diagnostic
        if self.fails is not None or d.pareto_k is None or d.khat_threshold is None:
            return False
        return d.pareto_k > d.khat_threshold

    def figures(self) -> str:
        """Return the figures in words: arm, depth, ESS share, k̂, its threshold, both bounds."""
        d = self.diagnostic
        share = "null" if d.ess_share is None else f"{d.ess_share:.3g}"
        thr = "" if d.khat_threshold is None else f" (threshold {d.khat_threshold:.2f})"
        bound = "null" if self.bound_ratio is None else f"{self.bound_ratio:.3g}"
        moment = "null" if self.moment_ratio is None else f"{self.moment_ratio:.3g}"
        return (
            f"{self.arm} at depth {self.depth}: ESS share {share}, k̂ {_k(d.pareto_k)}{thr}, "
            f"exact second moment/mean² {moment}, exact ratio bound/mean {bound}"
        )


def auto_passes(estimator: str) -> tuple[str, str | None]:
    """Return the (own, other) estimators of the one pass behind ``--estimator estimator``."""
    if estimator == AUTO:
        return "analytic", "importance"
    return estimator, "analytic" if estimator == "importance" else "importance"


def pass_columns(estimator: str, by: str | None = None) -> frozenset[str] | None:
    """Return the columns the pass behind ``--estimator estimator`` reads (None: every one).

    With ``--by COLUMN`` the column too: the pass codes requests by it (the ``by`` cells).
    """
    cols = needed_columns(*auto_passes(estimator))
    return None if cols is None else cols | ({by} if by else set())


def _missing(res: ReplayResult) -> str:
    """Why the pass holds no importance replay, from the archive's columns."""
    if "drafted_id" not in res.columns:
        return "the archive has no drafted_id column (the token each position drafted)"
    if "emitted_q" not in res.columns and res.logging_arm is None:
        return "the archive has no logging law (no emitted_q column, no logging arm)"
    return "a file of the archive lacks drafted_id (null) or a logging law"


def tail_blocks(
    ess_share: float, k_hat: float | None, threshold: float | None, moment: float
) -> str | None:
    """Return why a cell's tail rules importance out, or None when it is adequate.

    ``moment`` is the largest exact per-round second-moment bound of the policy ratio over the
    squared mean ratio; a null k̂ or threshold (too few rounds for a fit) does not block on its
    own.
    """
    if not ess_share >= ESS_SHARE_MIN:  # a NaN share (overflowed ratios) blocks too
        return f"ESS share < {ESS_SHARE_MIN}"
    over = not moment <= BOUND_MAX  # NaN (inf / inf) counts as over
    if k_hat is not None and threshold is not None and k_hat > threshold and over:
        return f"k̂ > {threshold:.2f} with exact second moment/mean² > {BOUND_MAX:g}"
    return None


def _k(k: float | None) -> str:
    return "null" if k is None else f"{k:.2f}"


_CHECKED_SUMS = (
    "short",
    "ratio_sum",
    "ratio_sq",
    "ratio_min",
    "ratio_max",
    "bound_max",
    "moment_max",
)
"""The (k, D) sums of :class:`ArmSums` the tail rule reads, per depth."""


def cell_checks(
    sums: ArmSums,
    tail: RatioTail,
    arm: Arm,
    mask: NDArray[np.bool_],
    fam_idx: tuple[int, ...],
    bucket_idx: tuple[int, ...],
) -> tuple[DepthCheck, ...]:
    """Return the tail rule of ``arm`` at depths 1..its depth over one cell (importance sums).

    Parameters
    ----------
    sums : ArmSums
        The arm's importance sums.
    tail : RatioTail
        Its kept largest ratios.
    arm : Arm
    mask : bool, (k,)
        The cell's rows of ``sums``.
    fam_idx, bucket_idx : tuple of int
        The finest cells the cell pools (for the tail).
    """
    out = []
    rounds = float(sums.n[mask].sum())
    # the cell's rows once, one contiguous row per depth (the sums NumPy took per depth before)
    col = {name: np.ascontiguousarray(getattr(sums, name)[mask].T) for name in _CHECKED_SUMS}
    for k in range(1, arm.depth + 1):
        values, dropped = tail.cell(fam_idx, bucket_idx, k)
        n = int(rounds - col["short"][k - 1].sum())  # rounds that recorded k positions
        total = float(col["ratio_sum"][k - 1].sum())
        d = diagnose(
            n=n,
            ratio_sum=total,
            ratio_sq=float(col["ratio_sq"][k - 1].sum()),
            ratio_min=float(col["ratio_min"][k - 1].min(initial=np.inf)),
            ratio_max=float(col["ratio_max"][k - 1].max(initial=-np.inf)),
            tail=values,
            dropped=dropped,
        )
        mean = total / n if n > 0 else 0.0
        top = float(col["bound_max"][k - 1].max(initial=0.0))
        bound = top / mean if mean > 0.0 else None
        second = float(col["moment_max"][k - 1].max(initial=0.0))
        moment = second / (mean * mean) if mean > 0.0 else None
        fails = None
        if d.ess_share is None:
            if n > 0:  # every ratio 0: the arm never drafts the archived tokens
                fails = d.null_reason
        else:
            fails = tail_blocks(d.ess_share, d.pareto_k, d.khat_threshold, moment or 0.0)
        out.append(DepthCheck(arm.canonical, k, d, bound, moment, fails))
    return tuple(out)


def first_failure(checks: Sequence[DepthCheck]) -> DepthCheck | None:
    """Return the first check (in the given order) whose tail fails, or None."""
    return next((c for c in checks if c.fails is not None), None)


def _pooled_notes(res: ReplayResult, arms: Sequence[Arm]) -> str:
    """Return the pooled findings in words: failures, k̂ accepted by the bound, the weakest."""
    every_f = tuple(range(len(res.families)))
    every_b = tuple(range(len(res.buckets.names)))
    fails: list[str] = []
    by_bound: list[str] = []
    weakest: tuple[float, str] = (np.inf, "")
    for arm in arms:
        s = res.sums[arm.canonical]
        checks = cell_checks(
            s, res.tails[arm.canonical], arm, np.ones(s.n.shape[0], bool), every_f, every_b
        )
        for c in checks:
            if c.fails is not None:
                fails.append(f"{c.figures()} ({c.fails})")
            elif c.khat_by_bound:
                by_bound.append(c.figures())
            if c.diagnostic.ess_share is not None:
                weakest = min(weakest, (c.diagnostic.ess_share, c.figures()))
    out = []
    if fails:
        out.append("pooled tails that fail (their comparisons INCONCLUSIVE): " + "; ".join(fails))
    if by_bound:
        out.append(
            f"k̂ above its threshold but accepted only because the exact second moment/mean² ≤ "
            f"{BOUND_MAX:g} (pooled): " + "; ".join(by_bound)
        )
    out.append(f"weakest pooled ESS share: {weakest[1] or 'none'}")
    return "; ".join(out)


def choose(res: ReplayResult, arms: Sequence[Arm]) -> EstimatorChoice:
    """Choose the run's estimator for ``arms`` from an analytic pass with importance beside.

    ``res`` is the pass of :func:`auto_passes` (``auto``), after any request selection.
    """
    if "importance" not in res.replays:
        return EstimatorChoice(
            "analytic", f"importance is impossible: {_missing(res)}; analytic instead", True
        )
    imp = res.with_estimator("importance")
    law = "emitted_q" if "emitted_q" in res.columns else f"the logging arm {res.logging_arm}"
    unsupported = [
        f"{a.canonical} ({rows} position rows)"
        for a in arms
        if (rows := int(imp.unlogged[a.canonical][imp.selected].sum()))
    ]
    support = (
        "every arm's support holds"
        if not unsupported
        else "arms that can accept tokens the logging law never drafts keep importance, their "
        "figures null in the cells holding such rows: " + ", ".join(unsupported)
    )
    return EstimatorChoice(
        "importance",
        f"the archive carries drafted_id and the logging law ({law}): importance for every "
        f"arm; {support}; each comparison with a verdict checks both arms' tails per cell at "
        f"every depth (ESS share ≥ {ESS_SHARE_MIN}; k̂ ≤ min(1 − 1/log10 S, 0.7) unless the "
        f"exact second moment/mean² ≤ {BOUND_MAX:g}) and is INCONCLUSIVE where they fail; "
        + _pooled_notes(imp, arms),
        False,
    )


def resolve_auto(res: ReplayResult, arms: Sequence[Arm]) -> tuple[ReplayResult, EstimatorChoice]:
    """Return the pass with the chosen estimator as the run's own, and the choice."""
    c = choose(res, arms)
    return replace(res, estimator=c.used, estimator_reason=c.reason), c
