"""Law tests of one run: every arm × position tested, Holm's adjustment over the family.

:func:`run_law_tests` takes the exact law (:mod:`~specreplay.stats.lawtest.exact`), chooses the
draws for power (:mod:`~specreplay.stats.lawtest.power`), samples the counts
(:mod:`~specreplay.stats.lawtest.sampler`), tests them (:mod:`~specreplay.stats.lawtest.gof`) and
adjusts the p-values over the run (:func:`specreplay.stats.multiple.holm`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.sim.rng import request_key
from specreplay.stats.lawtest.exact import (
    Method,
    OutputLaw,
    check_dyadic,
    check_laws,
    check_method,
    output_law_of_checked,
    reference_law,
)
from specreplay.stats.lawtest.gof import GofResult, goodness_of_fit
from specreplay.stats.lawtest.power import (
    DEFAULT_MAX_DRAWS,
    DEFAULT_MIN_DRAWS,
    TARGET_POWER,
    Draws,
    choose_draws,
)
from specreplay.stats.lawtest.sampler import counts_of_checked
from specreplay.stats.multiple import holm

__all__ = ["DEFAULT_FAMILY_ALPHA", "LawCase", "LawTestResult", "run_law_tests"]

DEFAULT_FAMILY_ALPHA = 1e-5


class LawCase(NamedTuple):
    """One (arm, position) to test; a plain tuple in this field order works too.

    Attributes
    ----------
    arm : str
        Arm text (canonical form, docs/commands.md#arms).
    position : int
        Position index (1-based in SPEC outputs; any non-negative int here).
    q_s, q_v, p : float64, (n,)
        Sampler law, verifier law, target probabilities of the candidates.
    p_other : float
        Target mass outside the candidates.
    m_s : int64, (n,) or None
        Dyadic integers of the sampler, or None for a float sampler.
    bits : int or None
        N of the dyadic sampler (ignored when m_s is None).
    request : str or None
        The archive request the position is from (None for a toy position).
    round : int or None
        Its round within the request (None for a toy position).
    """

    arm: str
    position: int
    q_s: NDArray[np.float64]
    q_v: NDArray[np.float64]
    p: NDArray[np.float64]
    p_other: float
    m_s: NDArray[np.int64] | None
    bits: int | None
    request: str | None = None
    round: int | None = None


@dataclass(frozen=True)
class LawTestResult:
    """Law test of one (arm, position) (docs/methods.md#law-tests); label SIMULATED.

    Attributes
    ----------
    arm : str
    position : int
    tv : float
        Exact total variation of the output law to p.
    alpha : float
        Exact acceptance α of the position.
    draws : int
        Monte Carlo draws used.
    statistic : float
        G or Pearson statistic.
    df : int
        Degrees of freedom (merged categories − 1).
    p_value : float
        Unadjusted p-value.
    p_adj : float
        Holm-adjusted p-value over the run's family.
    passed : bool
        p_adj ≥ family alpha.
    power : float or None
        Power against the exact law at ``draws`` (None for a null law: nothing to detect).
    underpowered : bool
        ``max_draws`` could not reach the target power.
    merged_categories : tuple of int
        Candidates merged away (and n when the other bucket was merged into a candidate).
    categories : int
        Categories after merging.
    method : str
        ``G`` or ``pearson``.
    draws_rule : str
        Why this many draws: ``power``, ``min-draws``, ``max-draws`` or ``null-law``.
    label : str
        ``SIMULATED``.
    request, round : str or None, int or None
        Where in the archive the position is (None for a toy position).
    """

    arm: str
    position: int
    tv: float
    alpha: float
    draws: int
    statistic: float
    df: int
    p_value: float
    p_adj: float
    passed: bool
    power: float | None
    underpowered: bool
    merged_categories: tuple[int, ...]
    categories: int
    method: str
    draws_rule: str
    label: str = "SIMULATED"
    request: str | None = None
    round: int | None = None


def run_law_tests(
    cases: Iterable[LawCase | tuple[Any, ...]],
    *,
    seed: int,
    family_alpha: float = DEFAULT_FAMILY_ALPHA,
    max_draws: int = DEFAULT_MAX_DRAWS,
    min_draws: int = DEFAULT_MIN_DRAWS,
    method: str = "G",
) -> list[LawTestResult]:
    """Run the law test of every (arm, position) with Holm's correction over all of them.

    Parameters
    ----------
    cases : iterable of LawCase
        (arm, position, q_s, q_v, p, p_other, m_s or None, bits) per test.
    seed : int
        Seed of the counter-based uniforms (each case keyed by ``request_key(arm)`` and its
        position).
    family_alpha : float
        Family-wise error rate of Holm's procedure; the draws are powered at family_alpha / m.
    max_draws, min_draws : int
        Cap and floor of the draws per test (``min_draws`` also for null laws).
    method : {"G", "pearson"}
        Goodness-of-fit statistic.

    Returns
    -------
    list of LawTestResult
        In the order of ``cases``.
    """
    kind = check_method(method)
    prepared = _prepare(cases, family_alpha, min_draws, max_draws)
    if not prepared:
        return []
    level = family_alpha / len(prepared)  # Bonferroni level for the power computation
    rows = [_test_one(c, level, int(min_draws), int(max_draws), int(seed), kind) for c in prepared]
    p_adj = holm([gof.p_value for _, _, _, gof in rows])
    return [
        LawTestResult(
            arm=case.arm,
            position=int(case.position),
            request=case.request,
            round=None if case.round is None else int(case.round),
            tv=exact.tv,
            alpha=exact.alpha,
            draws=plan.draws,
            statistic=gof.statistic,
            df=gof.df,
            p_value=gof.p_value,
            p_adj=float(pa),
            passed=bool(pa >= family_alpha),
            power=plan.power,
            underpowered=plan.underpowered,
            merged_categories=gof.merged,
            categories=gof.df + 1,
            method=kind,
            draws_rule=plan.rule,
        )
        for (case, exact, plan, gof), pa in zip(rows, p_adj, strict=True)
    ]


class _Prepared(NamedTuple):
    """One validated law-test case: contiguous float64 laws and the sampler's dyadic form."""

    case: LawCase
    qs: NDArray[np.float64]
    qv: NDArray[np.float64]
    pp: NDArray[np.float64]
    po: float
    m_cum: NDArray[np.int64]  # cumulative dyadic integers; empty for a float sampler
    bits: int


def _prepare(
    cases: Iterable[LawCase | tuple[Any, ...]], family_alpha: float, min_draws: int, max_draws: int
) -> list[_Prepared]:
    """Validate the run's options and every case (SpecReplayError naming the case)."""
    if not 0.0 < family_alpha < 1.0:
        raise SpecReplayError(f"family_alpha must be in (0, 1), got {family_alpha!r}")
    if not 1 <= int(min_draws) <= int(max_draws):
        raise SpecReplayError(
            f"need 1 <= min_draws <= max_draws, got min_draws={min_draws}, max_draws={max_draws}"
        )
    prepared = []
    for raw in cases:
        case = LawCase(*raw)
        where = f"law test {case.arm!r} position {case.position}: "
        if int(case.position) < 0:
            raise SpecReplayError(f"{where}position must be non-negative")
        qs, qv, pp, po = check_laws(case.q_s, case.q_v, case.p, case.p_other, where)
        m_cum, bits = check_dyadic(case.m_s, case.bits, qs, where)
        prepared.append(_Prepared(case, qs, qv, pp, po, m_cum, bits))
    return prepared


def _test_one(
    c: _Prepared, level: float, min_draws: int, max_draws: int, seed: int, kind: Method
) -> tuple[LawCase, OutputLaw, Draws, GofResult]:
    """Exact law, draws for power, Monte Carlo counts and goodness of fit of one case."""
    exact = output_law_of_checked(c.qs, c.qv, c.pp, c.po)
    ref = reference_law(c.pp, c.po)
    plan = choose_draws(exact.law, ref, level, min_draws, max_draws, TARGET_POWER)
    counts = counts_of_checked(
        c.qs,
        c.qv,
        c.pp,
        c.po,
        c.m_cum,
        c.bits,
        plan.draws,
        seed,
        int(request_key(c.case.arm)),
        int(c.case.position),
    )
    return c.case, exact, plan, goodness_of_fit(counts, ref, method=kind)
