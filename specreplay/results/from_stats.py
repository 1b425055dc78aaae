"""The typed statistics mapped onto the results model: one function per statistics type.

The statistics layer returns frozen dataclasses (:mod:`specreplay.stats.compare`,
:mod:`specreplay.stats.cells`, :mod:`specreplay.stats.lawtest`,
:mod:`specreplay.replay.lawcases`); every pipeline turns them into the model of
:mod:`specreplay.results.model` here and nowhere else. Each function builds new objects and
copies every figure as it is, so results.json shows what the statistics computed; the only
conversions are to the model's enums (:class:`~specreplay.results.model.Label`,
:class:`~specreplay.results.model.Level`, :class:`~specreplay.results.model.Role`) and of whole
numbers to ``float`` where the model holds a float (as reading results.json back does).

What a pipeline adds to a cell afterwards (a delta's role or depth, no verdict, MCSE, survival of
a replay) it adds to these model objects with ``dataclasses.replace``.
"""

from __future__ import annotations

from collections.abc import Iterable

from specreplay.replay.lawcases import SkippedLawTest
from specreplay.results import model
from specreplay.stats.cells import ArmEstimate, MeasuredCell, SurvivalEstimate
from specreplay.stats.compare import (
    BcaInterval,
    BonferroniInterval,
    ComparedCell,
    CredibleInterval,
    DeltaEstimate,
    TostResult,
)
from specreplay.stats.lawtest import LawTestResult
from specreplay.stats.studied import StudiedSize

__all__ = [
    "arm_figure",
    "bca",
    "bonferroni",
    "comparison_cell",
    "coverage_at_size",
    "credible_interval",
    "delta",
    "law_test",
    "law_tests",
    "measured_cell",
    "skipped_law_test",
    "survival",
    "tost",
]


def _f(x: float | None) -> float | None:
    """Return ``x`` as a float (None stays None): the model holds floats, never ints."""
    return None if x is None else float(x)


def arm_figure(a: ArmEstimate) -> model.ArmFigure:
    """Return one arm's R in a cell (no MCSE or estimator yet: a replay adds them)."""
    return model.ArmFigure(
        R=_f(a.R),
        n_rounds=a.n_rounds,
        label=model.Label(a.label),
        mcse=None,
        null_reason=a.null_reason,
        lo=_f(a.lo),
        hi=_f(a.hi),
        level=_f(a.level),
        tail_width=_f(a.tail_width),
        tail_limit=_f(a.tail_limit),
    )


def bca(b: BcaInterval) -> model.BCa:
    """Return the BCa intervals of a delta."""
    return model.BCa(
        lo=_f(b.lo),
        hi=_f(b.hi),
        rel_lo=_f(b.rel_lo),
        rel_hi=_f(b.rel_hi),
        acceleration=_f(b.acceleration),
        z0=_f(b.z0),
        null_reason=b.null_reason,
    )


def bonferroni(b: BonferroniInterval) -> model.Bonferroni:
    """Return the family-wise intervals of a delta."""
    return model.Bonferroni(
        level=float(b.level),
        lo=float(b.lo),
        hi=float(b.hi),
        rel_lo=float(b.rel_lo),
        rel_hi=float(b.rel_hi),
    )


def tost(t: TostResult) -> model.Tost:
    """Return the equivalence test's interval with its margin (value, kind and spelling)."""
    return model.Tost(
        alpha=float(t.alpha),
        margin=float(t.margin.value),
        kind="relative" if t.margin.relative else "absolute",
        text=t.margin.text,
        lo=float(t.lo),
        hi=float(t.hi),
        level=float(t.level),
    )


def credible_interval(c: CredibleInterval) -> model.CredibleInterval:
    """Return an HDI or ETI of a delta's replicates."""
    return model.CredibleInterval(
        prob=float(c.prob),
        lo=float(c.lo),
        hi=float(c.hi),
        rel_lo=float(c.rel_lo),
        rel_hi=float(c.rel_hi),
    )


def coverage_at_size(s: StudiedSize) -> model.CoverageAtSize:
    """Return what the calibration study measured at a small cell's size."""
    return model.CoverageAtSize(
        coverage=float(s.coverage), mc_se=float(s.mc_se), n_requests=s.n_requests, setting=s.setting
    )


def delta(d: DeltaEstimate) -> model.Delta:
    """Return a paired delta (role as the comparison named it; no depth or estimator yet)."""
    cov = d.coverage_at_size
    return model.Delta(
        a=d.a,
        b=d.b,
        role=model.Role(d.role),
        point=_f(d.point),
        rel=_f(d.rel),
        lo=_f(d.lo),
        hi=_f(d.hi),
        rel_lo=_f(d.rel_lo),
        rel_hi=_f(d.rel_hi),
        method=d.method,
        level=float(d.level),
        adjusted=d.adjusted,
        bca=None if d.bca is None else bca(d.bca),
        bonferroni=None if d.bonferroni is None else bonferroni(d.bonferroni),
        tost=None if d.tost is None else tost(d.tost),
        p_difference=_f(d.p_difference),
        p_equivalence=_f(d.p_equivalence),
        verdict=d.verdict,
        smallest_equivalent_margin=_f(d.smallest_equivalent_margin),
        requests_for_margin=d.requests_for_margin,
        n_boot=d.n_boot,
        n_boot_valid=d.n_boot_valid,
        warning=d.warning,
        label=model.Label(d.label),
        null_reason=d.null_reason,
        smallest_equivalent_margin_kind=d.smallest_equivalent_margin_kind,
        p_equivalence_adj=_f(d.p_equivalence_adj),
        p_difference_adj=_f(d.p_difference_adj),
        tests_in_level=d.tests_in_level,
        requests_for_margin_null_reason=d.requests_for_margin_null_reason,
        hdi=None if d.hdi is None else credible_interval(d.hdi),
        eti=None if d.eti is None else credible_interval(d.eti),
        df=_f(d.df),
        n_differing=d.n_differing,
        small_sample=d.small_sample,
        coverage_at_size=None if cov is None else coverage_at_size(cov),
        verdict_reason=d.verdict_reason,
        tail_width=_f(d.tail_width),
    )


def comparison_cell(c: ComparedCell) -> model.Cell:
    """Return a compared cell: both arms' R and its one delta.

    Both arms are keyed by name, a before b (one entry when they share a name: b's figure).
    """
    arms = {c.arm_a.name: arm_figure(c.arm_a), c.arm_b.name: arm_figure(c.arm_b)}
    return model.Cell(
        level=model.Level(c.spec.level),
        family=c.spec.family,
        bucket=c.spec.bucket,
        n_requests=c.n_requests,
        arms=arms,
        deltas=(delta(c.delta),),
        null_reason=c.null_reason,
    )


def survival(s: SurvivalEstimate) -> model.Survival:
    """Return one arm's P(A ≥ j) in a cell."""
    return model.Survival(
        arm=s.arm,
        position=s.position,
        value=_f(s.value),
        label=model.Label(s.label),
        null_reason=s.null_reason,
        rounds=s.rounds,
    )


def measured_cell(c: MeasuredCell) -> model.Cell:
    """Return a MEASURED cell: the archive arm's R and survival curve."""
    return model.Cell(
        level=model.Level(c.spec.level),
        family=c.spec.family,
        bucket=c.spec.bucket,
        n_requests=c.n_requests,
        arms={c.arm.name: arm_figure(c.arm)},
        survival=tuple(survival(s) for s in c.survival),
        null_reason=c.null_reason,
    )


def law_test(t: LawTestResult) -> model.LawTest:
    """Return one law test of an arm at one position."""
    return model.LawTest(
        arm=t.arm,
        position=t.position,
        tv=float(t.tv),
        p_adj=float(t.p_adj),
        passed=t.passed,
        label=model.Label(t.label),
        request=t.request,
        round=t.round,
        acceptance_rate=float(t.alpha),
        draws=t.draws,
        statistic=float(t.statistic),
        df=t.df,
        p_value=float(t.p_value),
        power=_f(t.power),
        underpowered=t.underpowered,
        merged_categories=tuple(t.merged_categories),
        categories=t.categories,
        method=t.method,
        draws_rule=t.draws_rule,
    )


def skipped_law_test(t: SkippedLawTest) -> model.LawTest:
    """Return a position that was not law-tested: null figures and the reason."""
    return model.LawTest(
        arm=t.arm,
        position=t.position,
        tv=None,
        p_adj=None,
        passed=None,
        label=model.Label(t.label),
        null_reason=t.null_reason,
        request=t.request,
        round=t.round,
    )


def law_tests(records: Iterable[LawTestResult | SkippedLawTest]) -> tuple[model.LawTest, ...]:
    """Return the law tests of :func:`~specreplay.replay.lawcases.run_cases`, in its order."""
    return tuple(
        skipped_law_test(t) if isinstance(t, SkippedLawTest) else law_test(t) for t in records
    )
