"""Paired comparison of two arms, cell by cell: R per arm, Δ with intervals, verdicts.

See docs/methods.md#the-paired-comparison-cells-and-sums.

Cells are pooled, per family, per context bucket and per family × bucket, all domain estimates from
the same requests. Per cell and delta: the point Δ = R_b − R_a and Δ/R_a; the default interval
(``method`` ``cr2-eff-hall``: the CR2 t interval with effective degrees of freedom and Hall's
skewness correction of :mod:`specreplay.stats.cr2`, chosen by the calibration study,
docs/calibration.md#calibration-of-the-intervals), with its degrees of freedom and the requests that
differ between the arms; BCa from the bootstrap replicates (jackknife over requests from
leave-one-out sums); the (1 − 2α) default interval used by the equivalence test (TOST); p-values by
inversion of the default interval; Bonferroni intervals at 1 − α/m and Holm-adjusted p-values, m
being the number of cells of the same level with a delta (the pooled cell is its own family of one);
the verdict and, where a rule forced it, ``verdict_reason``; the smallest margin at which the
Holm-adjusted verdict would be EQUIVALENT; the requests that would give the EQUIVALENT verdict with
80% power at the Holm level α/m if the true delta were 0 (a power calculation at the observed
per-request SD).

The verdict rule (docs/methods.md#the-verdict-rule): EQUIVALENT when the Holm-adjusted TOST p < α;
otherwise DIFFERENT when the Holm-adjusted p of Δ = 0 is < α; otherwise INCONCLUSIVE. A cell is
INCONCLUSIVE whatever its interval when fewer than :data:`~specreplay.stats.cr2.MIN_DIFFERING`
of its requests differ between the arms (its standard error rests on too few requests; a
conservative interval is shown; it is EQUIVALENT only where that interval's hull lies inside the
margin, at any size: :mod:`specreplay.stats.cr2`) or when it holds fewer than
:data:`~specreplay.stats.cr2.MIN_REQUESTS` requests. One exception gives EQUIVALENT with
SE = 0: the two arms are one computation by construction (``same``: "identical inputs"), never
inferred from equal data.
A cell smaller than :data:`~specreplay.stats.studied.NOMINAL_REQUESTS` carries
``small_sample: true`` with the study's lowest coverage at its size (``coverage_at_size``).

The bootstrap replicates (one joint resampling of requests per run and seed, shared by every
comparison of the run: ``replicates``) still give BCa, ``n_boot_valid``, the sweep's P(best) and
tokens/s replicates and ``to_arviz``; the intervals behind the verdicts do not use them.
Verdicts use the Holm-adjusted p-values; the intervals printed beside them stay unadjusted
(their ``adjusted`` field says so) and the Bonferroni ones are given separately.

The result is typed: a :class:`Comparison` holds one :class:`ComparedCell` per cell, with both
arms' :class:`~specreplay.stats.cells.ArmEstimate` and exactly one :class:`DeltaEstimate` (its
:class:`BcaInterval`, :class:`TostResult` and :class:`BonferroniInterval`). The Holm and
Bonferroni pass, the nulling of unsupported cells and the margin warning build new frozen
objects (``dataclasses.replace``); :mod:`specreplay.results.from_stats` maps them onto the
results model.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.stats.bootstrap import PairedSums, bootstrap_sums, point_sums
from specreplay.stats.cells import ArmEstimate, Cell, cell_layout
from specreplay.stats.cr2 import (
    HUGE_BOUND,
    MIN_REQUESTS,
    TTest,
    paired_tests,
    ratio_test,
    tost_p_values,
)
from specreplay.stats.intervals import (
    DEFAULT_METHOD,
    DIFFERENT,
    EQUIVALENT,
    INCONCLUSIVE,
    bca_interval,
    holm,
    holm_smallest_margins,
    requests_for_margin,
    verdict,
)
from specreplay.stats.signflip import (
    SMALL_CELL_MIN,
    SMALL_METHOD,
    SmallCellTest,
    sign_flip_tests,
)
from specreplay.stats.studied import NOMINAL_REQUESTS, StudiedSize, coverage_at_size

__all__ = [
    "TAIL_WIDTH_LIMIT",
    "ArmEstimate",
    "BcaInterval",
    "BonferroniInterval",
    "Cell",
    "CellSupport",
    "ComparedCell",
    "Comparison",
    "CredibleInterval",
    "DeltaEstimate",
    "Margin",
    "TostResult",
    "cell_sums",
    "compare",
    "parse_margin",
]

CellSupport = Callable[[Cell], tuple[str | None, str | None]]
"""Why arm a's and arm b's figures in a cell are unsupported although the arm has rounds there
(None: supported), e.g. a round recording fewer positions than the arm's depth
(docs/inputs.md#position-traces-schema-v1): that arm's R, and the cell's delta, are then null
with the reason, and the cell takes no part in the Holm and Bonferroni adjustments of its level."""

IDENTICAL: Final = (
    "identical inputs: every request has the same rounds and retained tokens in both arms"
)
TAIL_WIDTH_LIMIT: Final = 0.1
"""Tokens/round: an arm bounded over a truncated law whose mean range in a cell is wider than
this has no figure there (about 3% of a typical R of 3; a capture keeping ≥ 99% of both laws at
every position stays within it up to depth 4: Σ_j (5 − j)·0.01 = 0.1)."""

NEITHER: Final = (
    "neither test decides after Holm: the 1 − 2α interval is not inside ±margin and the 1 − α "
    "interval holds 0"
)
"""The ``verdict_reason`` of an INCONCLUSIVE that no rule forced."""
POWER: Final[float] = 0.8
"""Power of the ``requests_for_margin`` calculation."""


@dataclass(frozen=True)
class Margin:
    """Equivalence margin: ``value`` in tokens/round, or relative to R_a when ``relative``."""

    value: float
    relative: bool
    text: str

    @classmethod
    def absolute(cls, value: float) -> Margin:
        """Return an absolute margin of ``value`` tokens/round (as ``--margin`` ``0.01``).

        >>> Margin.absolute(0.01) == parse_margin("0.01")
        True
        """
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and value > 0):
            why = "should be a positive number of tokens/round"
            raise SpecReplayError(f"--margin: {value!r} {why}")
        return cls(float(value), False, repr(float(value)))

    def to_json(self) -> dict[str, Any]:
        """Return the margin as results.json shows it."""
        return {
            "margin": self.value,
            "kind": "relative" if self.relative else "absolute",
            "text": self.text,
        }


def parse_margin(text: str) -> Margin:
    """Parse ``--margin``: ``0.5%`` (relative to R_a) or ``0.02`` (tokens per round).

    Examples
    --------
    >>> parse_margin("0.5%")
    Margin(value=0.005, relative=True, text='0.5%')
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*", text)
    if m is None or not 0 < float(m.group(1)) < math.inf:
        raise SpecReplayError(
            f"--margin: {text!r} should be a positive number of tokens/round (0.02) "
            "or a percentage of R_a (0.5%)"
        )
    value = float(m.group(1))
    if m.group(2):
        return Margin(value / 100.0, True, text.strip())
    return Margin(value, False, text.strip())


@dataclass(frozen=True)
class BcaInterval:
    """BCa intervals of Δ and of Δ/R_a from the bootstrap replicates (jackknife acceleration).

    Attributes
    ----------
    lo, hi : float or None
        BCa interval of Δ.
    rel_lo, rel_hi : float or None
        BCa interval of Δ/R_a.
    acceleration, z0 : float or None
        Δ's acceleration and bias correction.
    null_reason : str or None
        Why a bound is None (Δ's reason first, else Δ/R_a's).
    """

    lo: float | None
    hi: float | None
    rel_lo: float | None
    rel_hi: float | None
    acceleration: float | None
    z0: float | None
    null_reason: str | None


@dataclass(frozen=True)
class TostResult:
    """The equivalence test's (1 − 2α) interval and the margin it is judged against.

    Attributes
    ----------
    alpha : float
        Test level α of each one-sided test.
    margin : Margin
        The equivalence margin (relative: the interval is of Δ/R_a, else of Δ).
    lo, hi : float
        The (1 − 2α) default interval of the tested statistic.
    level : float
        1 − 2α.
    """

    alpha: float
    margin: Margin
    lo: float
    hi: float
    level: float


@dataclass(frozen=True)
class BonferroniInterval:
    """Family-wise intervals of Δ and Δ/R_a at 1 − (1 − level)/m, m the cells of the level.

    Attributes
    ----------
    level : float
    lo, hi : float
        Interval of Δ.
    rel_lo, rel_hi : float
        Interval of Δ/R_a.
    """

    level: float
    lo: float
    hi: float
    rel_lo: float
    rel_hi: float


@dataclass(frozen=True)
class CredibleInterval:
    """An ArviZ HDI or ETI of the bootstrap replicates of Δ and Δ/R_a at ``prob``.

    Filled by :func:`specreplay.stats.arviz_bridge.hdi_eti` (the ``interval`` command).
    """

    prob: float
    lo: float
    hi: float
    rel_lo: float
    rel_hi: float


@dataclass(frozen=True)
class DeltaEstimate:
    """The paired delta Δ = R_b − R_a of one cell: estimate, intervals, tests and verdict.

    Every figure is None when the delta cannot be computed (``null_reason`` says why).

    Attributes
    ----------
    a, b : str
        The arms (a is the reference).
    role : str
        The delta's role in results.json (e.g. ``b-vs-a``).
    label : str
        Label of the figures (``MEASURED``, ``SIMULATED``, ``ESTIMATED``).
    method : str
        The default interval (:data:`~specreplay.stats.intervals.DEFAULT_METHOD`).
    level : float
        Level of ``lo``/``hi`` and of the arms' intervals.
    n_boot : int
        Bootstrap resamples drawn.
    adjusted : bool
        Whether ``lo``/``hi`` are multiplicity-adjusted (never: see ``bonferroni``).
    point, rel : float or None
        Δ and Δ/R_a.
    lo, hi, rel_lo, rel_hi : float or None
        The default interval of Δ and of Δ/R_a at ``level``.
    df : float or None
        The t interval's degrees of freedom (None with a zero standard error).
    n_differing : int or None
        Requests whose (n, t) differ between the arms (0 for identical inputs).
    n_boot_valid : int or None
        Resamples with rounds of the cell in both arms.
    bca : BcaInterval or None
    tost : TostResult or None
    bonferroni : BonferroniInterval or None
        None also where a bound cannot be formed at its level (beyond ±1e6, depth unknown).
    p_difference, p_equivalence : float or None
        Raw p-values of Δ = 0 and of the TOST (1 where a rule forced INCONCLUSIVE).
    p_difference_adj, p_equivalence_adj : float or None
        Holm-adjusted over the ``tests_in_level`` deltas of the cell's level.
    tests_in_level : int or None
        m, the deltas of the level that entered the adjustment.
    verdict : str or None
        ``EQUIVALENT``, ``DIFFERENT`` or ``INCONCLUSIVE``.
    verdict_reason : str or None
        Why, where a rule decided or qualified the verdict (or neither test decided).
    smallest_equivalent_margin : float or None
        The smallest margin at which the Holm-adjusted verdict would be EQUIVALENT.
    smallest_equivalent_margin_kind : str or None
        ``relative`` or ``absolute``, as the margin.
    requests_for_margin : int or None
        Requests for EQUIVALENT with 80% power if the true Δ were 0.
    requests_for_margin_null_reason : str or None
    small_sample : bool or None
        The cell is below :data:`~specreplay.stats.studied.NOMINAL_REQUESTS`.
    coverage_at_size : StudiedSize or None
        The study's lowest coverage at the cell's size (with ``small_sample``).
    warning : str or None
        E.g. an absolute margin above half of R_a.
    null_reason : str or None
        Why the delta's figures are None.
    hdi, eti : CredibleInterval or None
        ArviZ intervals of the replicates (the ``interval`` command only).
    tail_width : float or None
        Where an arm's R is bounded over a truncated law (:mod:`specreplay.replay.truncation`):
        the width W_a + W_b of the range Δ can take whatever the mass outside the candidates
        does; ``point`` is the range's midpoint and every interval is widened by half of it
        (:func:`_widen`); the verdict must hold at both ends (:func:`_tail_verdict`). None: exact.
    """

    a: str
    b: str
    role: str
    label: str
    method: str
    level: float
    n_boot: int
    adjusted: bool = False
    point: float | None = None
    rel: float | None = None
    lo: float | None = None
    hi: float | None = None
    rel_lo: float | None = None
    rel_hi: float | None = None
    df: float | None = None
    n_differing: int | None = None
    n_boot_valid: int | None = None
    bca: BcaInterval | None = None
    tost: TostResult | None = None
    bonferroni: BonferroniInterval | None = None
    p_difference: float | None = None
    p_equivalence: float | None = None
    p_difference_adj: float | None = None
    p_equivalence_adj: float | None = None
    tests_in_level: int | None = None
    verdict: str | None = None
    verdict_reason: str | None = None
    smallest_equivalent_margin: float | None = None
    smallest_equivalent_margin_kind: str | None = None
    requests_for_margin: int | None = None
    requests_for_margin_null_reason: str | None = None
    small_sample: bool | None = None
    coverage_at_size: StudiedSize | None = None
    warning: str | None = None
    null_reason: str | None = None
    hdi: CredibleInterval | None = None
    eti: CredibleInterval | None = None
    tail_width: float | None = None

    def nulled(self, why: str) -> DeltaEstimate:
        """Return this delta with every figure None and ``why`` as its reasons."""
        keep = {k: getattr(self, k) for k in _KEPT_IN_NULL}
        return DeltaEstimate(**keep, null_reason=why, requests_for_margin_null_reason=why)


_KEPT_IN_NULL = ("a", "b", "role", "label", "method", "level", "n_boot", "adjusted")
"""The fields of a null delta that still say what it is."""


@dataclass(frozen=True)
class ComparedCell:
    """One cell of a paired comparison: R per arm and the one delta b − a.

    Attributes
    ----------
    spec : Cell
        Where the cell sits (level, family, bucket and the finest cells it pools).
    n_requests : int
        Requests with rounds of either arm in the cell.
    arm_a, arm_b : ArmEstimate
        R of each arm with its interval (none where the delta is null).
    delta : DeltaEstimate
        Δ = R_b − R_a.
    null_reason : str or None
        ``no rounds in this cell`` for an empty cell.
    """

    spec: Cell
    n_requests: int
    arm_a: ArmEstimate
    arm_b: ArmEstimate
    delta: DeltaEstimate
    null_reason: str | None


@dataclass(frozen=True)
class Comparison:
    """Result of :func:`compare`: the compared cells and the replicates behind them.

    Attributes
    ----------
    cells : tuple of ComparedCell
        Pooled first, then per family, per bucket and per family × bucket.
    delta_reps, rel_reps : float64, (n_boot, n_cells)
        Bootstrap replicates of Δ and Δ/R_a per cell (NaN where a replicate has no rounds).
    rb_reps : float64, (n_boot, n_cells)
        Bootstrap replicates of R_b per cell (the same resamples for every comparison of the
        same requests and seed: a depth sweep compares them across depths).
    rb_tests : list of TTest or None
        Per cell, the test of R_b alone (its interval; None without rounds).
    """

    cells: tuple[ComparedCell, ...]
    delta_reps: NDArray[np.float64]
    rel_reps: NDArray[np.float64]
    rb_reps: NDArray[np.float64] | None = None
    rb_tests: list[TTest | None] | None = None

    @property
    def layout(self) -> list[Cell]:
        """The cells' definitions, in order."""
        return [c.spec for c in self.cells]

    @property
    def pooled(self) -> ComparedCell:
        """The pooled cell (the layout puts it first)."""
        return self.cells[0]


@dataclass(frozen=True)
class _CellData:
    """What one cell's figures are computed from (private to :func:`compare`)."""

    cell: Cell
    n_requests: int
    na: float
    nb: float
    ra: float | None
    rb: float | None
    jack_delta: NDArray[np.float64]
    jack_rel: NDArray[np.float64]
    rb_reps: NDArray[np.float64]
    tests: tuple[TTest, TTest] | None = None
    ra_test: TTest | None = None
    rb_test: TTest | None = None
    tails: tuple[float, float, float, float] | None = None  # W_a, limit_a, W_b, limit_b
    small: tuple[SmallCellTest, SmallCellTest] | None = None  # below the verdict minimum

    def small_tests(self) -> tuple[SmallCellTest, SmallCellTest] | None:
        """Return the small-cell tests where they decide (else None).

        Below the verdict minimum, neither forced (too few requests differ) nor identical by
        construction.
        """
        if self.small is None or self.tests is None:
            return None
        if any(t.forced is not None or t.identical for t in self.tests):
            return None
        return self.small


def _layout(ps: PairedSums, present_buckets: set[int]) -> list[Cell]:
    """Cells of the comparison: bucket cells for buckets holding rounds, never ``unbucketed``."""
    user_b = [b for b in range(len(ps.buckets)) if b != ps.unbucketed and b in present_buckets]
    return cell_layout(
        ps.families, ps.buckets, bucket_cells=user_b, pooled_buckets=range(len(ps.buckets))
    )


def _ratio(t: NDArray[np.float64], n: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, t / np.where(n > 0, n, 1.0), np.nan)


def cell_sums(
    reps_sums: NDArray[np.float64], fam_idx: NDArray[np.int64], bucket_idx: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Return a cell's replicate sums: ``reps_sums[:, f, b, :]`` added over its (family, bucket).

    The terms are added one at a time in the order (f, b) of ``fam_idx`` × ``bucket_idx``, which
    is the order ``reps_sums[:, fam_idx][:, :, bucket_idx].reshape(B, -1, 4).sum(axis=1)``
    adds them in (a reduction over a middle axis adds its rows in turn: no pairwise
    summation), so the sums are the same to the bit (``tests/test_compare_speed.py``); without
    that expression's two copies, each of the whole (B, F, B_b, 4) block for the pooled cell,
    which took 11 ms of the pooled cell's 13 at 10,000 resamples (the one pass stores the
    replicates arm-sum outermost, so the copies gathered across strides).

    Parameters
    ----------
    reps_sums : float64, (B, n_families, n_buckets, 4)
        Replicate sums (any strides).
    fam_idx, bucket_idx : int64, (k_f,), (k_b,)
        The cell's families and buckets, each non-empty.

    Returns
    -------
    float64, (B, 4)
        A new array.
    """
    acc: NDArray[np.float64] | None = None
    for f in fam_idx:
        for b in bucket_idx:
            term = reps_sums[:, f, b, :]
            if acc is None:
                acc = term.copy()
            else:
                acc += term
    if acc is None:
        raise ValueError("a cell of no family or no bucket")
    return acc


def _cell_stats(
    ps: PairedSums,
    point: NDArray[np.float64],
    reps_sums: NDArray[np.float64],
    cell: Cell,
    identical: bool,
) -> tuple[_CellData, NDArray[np.float64], NDArray[np.float64]]:
    """Point sums, R per arm, replicates of Δ and Δ/R_a, the cell's tests and jackknife values."""
    n_req = ps.n_requests
    fam_of_piece = ps.family[ps.piece_request].astype(np.int64)
    fi, bi = np.asarray(cell.fam_idx), np.asarray(cell.bucket_idx)
    sel = point[np.ix_(fi, bi)].reshape(-1, 4).sum(axis=0)
    reps = cell_sums(reps_sums, fi, bi)
    na, ta, nb_, tb = (float(x) for x in sel)
    in_cell = np.isin(fam_of_piece, fi) & np.isin(ps.piece_bucket, bi)
    per_req = np.zeros((n_req, 4))
    for v, arr in enumerate((ps.n_a, ps.t_a, ps.n_b, ps.t_b)):
        # the request is the cluster: its pieces in the cell are summed before any variance
        per_req[:, v] = np.bincount(
            ps.piece_request[in_cell], weights=arr[in_cell], minlength=n_req
        )
    members = (per_req[:, 0] + per_req[:, 2]) > 0
    ra_reps = _ratio(reps[:, 1], reps[:, 0])
    rb_reps = _ratio(reps[:, 3], reps[:, 2])
    # leave-one-request-out values (requests outside the cell leave it unchanged)
    with np.errstate(divide="ignore", invalid="ignore"):
        loo_a = (ta - per_req[:, 1]) / (na - per_req[:, 0])
        loo_b = (tb - per_req[:, 3]) / (nb_ - per_req[:, 2])
    data = _CellData(
        cell=cell,
        n_requests=int(members.sum()),
        na=na,
        nb=nb_,
        ra=ta / na if na > 0 else None,
        rb=tb / nb_ if nb_ > 0 else None,
        jack_delta=loo_b - loo_a,
        jack_rel=loo_b / loo_a - 1.0,
        rb_reps=rb_reps,
        tails=_cell_tails(ps, in_cell, na, nb_),
    )
    if na > 0 and nb_ > 0:
        rows = per_req[members]
        d_a, d_b = ps.depths if ps.depths is not None else (None, None)
        has_b, has_a = rows[:, 2] > 0, rows[:, 0] > 0
        tests = paired_tests(rows, depths=ps.depths, identical=identical)
        small = None
        if SMALL_CELL_MIN <= rows.shape[0] < MIN_REQUESTS and not identical:
            flips = sign_flip_tests(rows, depths=ps.depths)
            small = (SmallCellTest(tests[0], flips[0]), SmallCellTest(tests[1], flips[1]))
        data = dataclasses.replace(
            data,
            tests=tests,
            rb_test=ratio_test(rows[has_b, 2], rows[has_b, 3], depth=d_b),
            ra_test=ratio_test(rows[has_a, 0], rows[has_a, 1], depth=d_a),
            small=small,
        )
    return data, rb_reps - ra_reps, rb_reps / ra_reps - 1.0


def _cell_tails(
    ps: PairedSums, in_cell: NDArray[np.bool_], na: float, nb: float
) -> tuple[float, float, float, float] | None:
    """Per round in the cell: each arm's mean tail width and its limit (None: both exact)."""
    if ps.tails is None:
        return None
    w = ps.tails[:, in_cell].sum(axis=1)
    per = [w[0] / na, w[1] / na, w[2] / nb, w[3] / nb] if na > 0 and nb > 0 else [0.0] * 4
    if not (per[0] > 0.0 or per[2] > 0.0):
        return None
    return (float(per[0]), float(per[1]), float(per[2]), float(per[3]))


def compare(
    ps: PairedSums,
    *,
    arm_a: str,
    arm_b: str,
    n_boot: int = 10_000,
    seed: int = 0,
    stratify: str = "family",
    level: float = 0.95,
    margin: Margin | None = None,
    alpha: float = 0.05,
    min_requests: int = 10,
    label: str = "MEASURED",
    role: str = "b-vs-a",
    support: CellSupport | None = None,
    replicates: NDArray[np.float64] | None = None,
    tail_limit: float = TAIL_WIDTH_LIMIT,
    same: bool = False,
) -> Comparison:
    """Compare arm b with arm a in every cell (see the module docstring).

    Parameters
    ----------
    ps : PairedSums
        Paired per-(request, bucket) sums.
    arm_a, arm_b : str
        Arm names (a is the reference of Δ = R_b − R_a).
    n_boot, seed, stratify, level
        Bootstrap resamples, seed, ``family`` or ``none``, interval confidence level.
    margin : Margin, optional
        Equivalence margin (default 0.5% of R_a).
    alpha : float
        Test level of the verdicts (the TOST uses the 1 − 2α interval).
    min_requests : int
        Cells with fewer requests get null deltas with the reason.
    label, role : str
        Label of the per-arm figures and deltas; the delta's role in results.json.
    support : CellSupport, optional
        Per cell, why an arm's figures there are unsupported (the others are computed as if
        it were not given; a null cell is left out of its level's adjustments).
    replicates : float64, (n_boot, n_families, n_buckets, 4), optional
        Sums of ``ps`` from its run's one pass (:func:`~.bootstrap.resample_sums`); else drawn.
    tail_limit, same : float, bool
        An arm wider than ``tail_limit`` over a truncated law (``ps.tails``) is null, with its
        delta; ``same``: the arms are one computation by construction ("identical inputs").

    Returns
    -------
    Comparison
        One :class:`ComparedCell` per cell, each with exactly one delta.
    """
    margin = margin or parse_margin("0.5%")
    reps_sums, point = _replicates(ps, replicates, n_boot, seed, stratify), point_sums(ps)
    identical = same and bool(np.array_equal(ps.n_a, ps.n_b) and np.array_equal(ps.t_a, ps.t_b))
    present = {int(b) for b in np.unique(ps.piece_bucket)}
    layout = _layout(ps, present)
    delta_reps = np.full((n_boot, len(layout)), np.nan)
    rel_reps = np.full((n_boot, len(layout)), np.nan)
    raw: list[_CellData] = []
    for ci, cell in enumerate(layout):
        r, delta_reps[:, ci], rel_reps[:, ci] = _cell_stats(ps, point, reps_sums, cell, identical)
        raw.append(r)
    empty = DeltaEstimate(arm_a, arm_b, role, label, DEFAULT_METHOD, level, n_boot)
    cells = _cells(raw, delta_reps, rel_reps, empty, (arm_a, arm_b), min_requests, tail_limit)
    for i, c in enumerate(cells):
        if c.delta.null_reason is None:  # computable: its figures
            d = _delta_figures(raw[i], delta_reps[:, i], rel_reps[:, i], c.delta, margin, alpha)
            cells[i] = dataclasses.replace(c, delta=d)
    if support is not None:
        cells = [_null_unsupported(c, support(c.spec)) for c in cells]
    cells = _adjust(cells, raw, margin, alpha)
    cells = _warn_large_margin(cells, raw, margin)
    return Comparison(
        cells=tuple(cells),
        delta_reps=delta_reps,
        rel_reps=rel_reps,
        rb_reps=np.stack([r.rb_reps for r in raw], axis=1) if raw else None,
        rb_tests=[r.rb_test for r in raw],
    )


def _cells(
    raw: list[_CellData],
    d_reps: NDArray[np.float64],
    rel_reps: NDArray[np.float64],
    empty: DeltaEstimate,
    arms: tuple[str, str],
    min_requests: int,
    tail_limit: float,
) -> list[ComparedCell]:
    """Every cell with R per arm and its delta still ``empty`` (or null): see :func:`compare`."""
    return [
        _tail_null(
            _compared_cell(r, d_reps[:, i], rel_reps[:, i], empty, arms, min_requests),
            r,
            tail_limit,
        )
        for i, r in enumerate(raw)
    ]


def _replicates(
    ps: PairedSums,
    given: NDArray[np.float64] | None,
    n_boot: int,
    seed: int,
    stratify: str,
) -> NDArray[np.float64]:
    """Return the resampled sums of ``ps``: ``given`` (the run's one pass, checked), else drawn."""
    if given is None:
        return bootstrap_sums(ps, n_boot=n_boot, seed=seed, stratify=stratify)
    want = (n_boot, len(ps.families), len(ps.buckets), 4)
    if given.shape != want:
        raise ValueError(f"replicates of shape {given.shape} for a comparison of shape {want}")
    return given


def _null_unsupported(cell: ComparedCell, why: tuple[str | None, str | None]) -> ComparedCell:
    """Return ``cell`` with the figures of an unsupported arm and the cell's delta nulled."""
    arms = [
        fig if reason is None else _null_arm(fig, reason)
        for fig, reason in zip((cell.arm_a, cell.arm_b), why, strict=True)
    ]
    reason = why[0] or why[1]
    delta = cell.delta if reason is None else cell.delta.nulled(reason)
    return dataclasses.replace(cell, arm_a=arms[0], arm_b=arms[1], delta=delta)


def _tail_null(cell: ComparedCell, r: _CellData, limit: float) -> ComparedCell:
    """Null the arms whose tail width in the cell exceeds ``limit``, and the cell's delta."""
    if r.tails is None:
        return cell
    why = [
        None
        if w <= limit
        else (
            f"the mass outside the candidates leaves R anywhere in a range {w:.3g} tokens/round "
            f"wide (at most {bound:.3g}: Σ_j (d − j + 1)·min(1 − kept target mass, 1 − kept "
            f"draft mass)), beyond the limit {limit:g}: re-capture keeping more candidates "
            "(SPECREPLAY_CAPTURE_TOP_K, the recorder's top_k)"
        )
        for w, bound in (r.tails[:2], r.tails[2:])
    ]
    if why == [None, None]:
        return cell
    return _null_unsupported(cell, (why[0], why[1]))


def _null_arm(fig: ArmEstimate, why: str) -> ArmEstimate:
    """Return ``fig`` with R and its interval None for ``why``."""
    return dataclasses.replace(fig, R=None, lo=None, hi=None, level=None, null_reason=why)


def _bounds(test: TTest | SmallCellTest, level: float) -> tuple[float | None, float | None]:
    """Return the test's interval at ``level``, None bounds where it cannot be formed (NaN)."""
    lo, hi = test.interval(level)
    if math.isnan(lo) or math.isnan(hi):
        return None, None
    return lo, hi


def _bounds_reason(test: TTest | SmallCellTest) -> str:
    """Why a test's interval is null (unknown depth: no clamp, no bound for few differences)."""
    if isinstance(test, TTest) and test.forced is not None and test.bound_scale is None:
        return f"{test.forced}; the depth is unknown, so no bound can be formed"
    return f"a bound lies beyond ±{HUGE_BOUND:g} and the depth is unknown (no clamp)"


def _arm_estimate(
    name: str,
    r: float | None,
    n: float,
    label: str,
    why: str | None,
    test: TTest | None,
    level: float,
    tail: tuple[float, float] | None = None,
) -> ArmEstimate:
    """One arm's R in a cell with its default interval at ``level`` (None without rounds).

    ``tail``: (W, limit), the arm's mean tail width and its limit in the cell (R is then the
    range's midpoint): the interval is widened by W/2 on each side.
    """
    lo, hi = _bounds(test, level) if test is not None and r is not None else (None, None)
    reason = why if r is None else None
    width = limit = None
    if tail is not None and tail[0] > 0.0 and r is not None:
        width, limit = tail
        lo = None if lo is None else lo - width / 2
        hi = None if hi is None else hi + width / 2
    return ArmEstimate(
        name, r, int(n), label, reason, lo, hi, level if lo is not None else None, width, limit
    )


def _compared_cell(
    r: _CellData,
    d_reps: NDArray[np.float64],
    rel_reps: NDArray[np.float64],
    empty: DeltaEstimate,
    arms: tuple[str, str],
    min_requests: int,
) -> ComparedCell:
    """Return one cell with R per arm and its delta still ``empty``, or null with the reason.

    The caller fills a computable delta (:func:`_delta_figures`), then adjusts its level.
    """
    k = r.n_requests
    none = "no rounds in this cell"
    why = _null_reason(r, d_reps, rel_reps, min_requests, empty.n_boot)
    # an arm's R gets an interval where the cell's delta does (too few requests: none)
    ta, tb = (None, None) if why is not None else (r.ra_test, r.rb_test)
    cell = ComparedCell(
        spec=r.cell,
        n_requests=k,
        arm_a=_arm_estimate(
            arms[0], r.ra, r.na, empty.label, none, ta, empty.level, r.tails and r.tails[:2]
        ),
        arm_b=_arm_estimate(
            arms[1], r.rb, r.nb, empty.label, none, tb, empty.level, r.tails and r.tails[2:]
        ),
        delta=empty,
        null_reason=None if k else none,
    )
    if why is not None:
        return dataclasses.replace(cell, delta=empty.nulled(why))
    assert r.tests is not None  # both arms have rounds: the tests were run
    deciding: tuple[TTest | SmallCellTest, ...] = r.small_tests() or r.tests
    unbounded = [t for t in deciding if _bounds(t, empty.level)[0] is None]
    if unbounded:  # the depth is unknown and the interval cannot be bounded: null, with why
        return dataclasses.replace(cell, delta=empty.nulled(_bounds_reason(unbounded[0])))
    return cell


def _small_sample(n: int, small_cell: bool) -> tuple[bool, StudiedSize | None]:
    """``small_sample`` and ``coverage_at_size`` of a delta over ``n`` requests.

    ``small_cell``: its interval is the small-cell hull, whose own study gives the coverage.
    """
    if n >= NOMINAL_REQUESTS:
        return False, None
    return True, coverage_at_size(n, small_cell=small_cell)


def _null_reason(
    r: _CellData,
    d_reps: NDArray[np.float64],
    rel_reps: NDArray[np.float64],
    min_requests: int,
    n_boot: int,
) -> str | None:
    """Why a cell's delta cannot be computed (None when it can)."""
    k = r.n_requests
    if r.ra is None or r.rb is None:
        return "no rounds in this cell" if k == 0 else "an arm has no rounds in this cell"
    if k < min_requests:
        return f"{k} requests < --min-requests {min_requests}"
    ok = np.isfinite(d_reps) & np.isfinite(rel_reps)
    if ok.sum() < 0.99 * n_boot:
        return (
            f"{n_boot - int(ok.sum())} of {n_boot} resamples drew no round of this cell: "
            "too few requests for a domain estimate"
        )
    return None


def _delta_figures(
    r: _CellData,
    d_reps: NDArray[np.float64],
    rel_reps: NDArray[np.float64],
    empty: DeltaEstimate,
    margin: Margin,
    alpha: float,
) -> DeltaEstimate:
    """Point, default and BCa intervals, TOST interval and p-values of a delta."""
    assert r.tests is not None
    ok = np.isfinite(d_reps) & np.isfinite(rel_reps)
    d, rel = d_reps[ok], rel_reps[ok]
    st_d, st_r = r.tests
    small_tests = r.small_tests()
    # below the verdict minimum the interval printed is the one that decides (SmallCellTest)
    dec_d, dec_r = small_tests if small_tests is not None else (st_d, st_r)
    lo, hi = _bounds(dec_d, empty.level)
    rlo, rhi = _bounds(dec_r, empty.level)
    bca_d = bca_interval(d, st_d.theta, r.jack_delta, empty.level)
    bca_r = bca_interval(rel, st_r.theta, r.jack_rel, empty.level)
    test: TTest = st_r if margin.relative else st_d
    tost_level = 1.0 - 2.0 * alpha
    lo90, hi90 = _bounds(test, tost_level)
    if test.forced is not None and test.bound_scale is not None:  # the hull that decides
        tost_level = 1.0 - alpha
        lo90, hi90 = test.hull(tost_level)
    assert lo90 is not None and hi90 is not None  # inside the bounded interval at ``level``
    small, coverage = _small_sample(r.n_requests, small_tests is not None)
    out = dataclasses.replace(
        empty,
        method=SMALL_METHOD if small_tests is not None else empty.method,
        point=st_d.theta,
        rel=st_r.theta,
        lo=lo,
        hi=hi,
        rel_lo=rlo,
        rel_hi=rhi,
        df=st_d.df if st_d.se > 0.0 else None,
        n_differing=st_d.n_differing if not st_d.identical else 0,
        n_boot_valid=int(ok.sum()),
        bca=BcaInterval(
            bca_d.lo,
            bca_d.hi,
            bca_r.lo,
            bca_r.hi,
            bca_d.acceleration,
            bca_d.z0,
            bca_d.null_reason or bca_r.null_reason,
        ),
        tost=TostResult(alpha, margin, lo90, hi90, tost_level),
        p_difference=(dec_r if margin.relative else dec_d).p_difference(),
        p_equivalence=test.p_equivalence(margin.value),
        smallest_equivalent_margin_kind="relative" if margin.relative else "absolute",
        small_sample=small,
        coverage_at_size=coverage,
    )
    # an arm compared with itself: Δ is 0 whatever the tail does
    return out if r.tails is None or st_d.identical else _widen(out, r)


def _shifts(r: _CellData) -> tuple[float, float, float]:
    """How far the tails move Δ (either way) and Δ/R_a (down, up): see :func:`_widen`."""
    assert r.tails is not None and r.ra is not None and r.rb is not None
    wa, _, wb, _ = r.tails
    centre = r.rb / r.ra
    down = centre - (r.rb - wb / 2) / (r.ra + wa / 2)
    up = (r.rb + wb / 2) / (r.ra - wa / 2) - centre if r.ra > wa / 2 else math.inf
    return (wa + wb) / 2, down, up


def _tail_verdict(
    verdict_: str,
    r: _CellData,
    test: TTest | SmallCellTest,
    relative: bool,
    margin: float,
    alpha: float,
    m: int,
) -> tuple[str, str]:
    """Return the verdict of a delta with a tail width: it must hold at both ends of its range.

    EQUIVALENT stands when the Bonferroni (1 − 2α/m) interval widened by the tails lies inside
    (−m, m); DIFFERENT when the (1 − α/m) interval widened by them excludes 0 (Bonferroni:
    conservative against Holm, whose adjusted p-values do not know the widths). Returns the
    verdict and its reason.
    """
    h, down, up = _shifts(r)
    s0, s1 = (down, up) if relative else (h, h)
    what = f"the mass outside the candidates moves Δ by up to ±{h:.3g} tokens/round"
    if verdict_ == EQUIVALENT:
        lo, hi = test.interval(1.0 - 2.0 * alpha / m)
        if lo - s0 > -margin and hi + s1 < margin:
            return verdict_, f"{what}; EQUIVALENT holds at both ends (Bonferroni, widened)"
    elif verdict_ == DIFFERENT:
        lo, hi = test.interval(1.0 - alpha / m)
        if lo - s0 > 0.0 or hi + s1 < 0.0:
            return verdict_, f"{what}; DIFFERENT holds at both ends (Bonferroni, widened)"
    else:
        return verdict_, f"{what}; neither test decided"
    return INCONCLUSIVE, f"{what}: {verdict_} does not hold at both ends (Bonferroni, widened)"


def _widen(d: DeltaEstimate, r: _CellData) -> DeltaEstimate:
    """Return ``d`` with every interval widened by half the tail width (see DeltaEstimate).

    Δ = R_b − R_a, each R known to ±W/2 around its midpoint: Δ lies within ±(W_a + W_b)/2 of
    the midpoints' difference. Δ/R_a: from [(R_b − W_b/2)/(R_a + W_a/2), (R_b + W_b/2)/(R_a −
    W_a/2)] − 1 around R_b/R_a − 1, each end moved by its distance to the centre.
    """
    assert r.tails is not None
    wa, _, wb, _ = r.tails
    h, down, up = _shifts(r)

    def pair(lo: float | None, hi: float | None, by: tuple[float, float]) -> tuple[Any, Any]:
        return (None if lo is None else lo - by[0], None if hi is None else hi + by[1])

    lo, hi = pair(d.lo, d.hi, (h, h))
    rel_lo, rel_hi = pair(d.rel_lo, d.rel_hi, (down, up))
    bca = d.bca
    if bca is not None:
        b_lo, b_hi = pair(bca.lo, bca.hi, (h, h))
        b_rlo, b_rhi = pair(bca.rel_lo, bca.rel_hi, (down, up))
        bca = dataclasses.replace(bca, lo=b_lo, hi=b_hi, rel_lo=b_rlo, rel_hi=b_rhi)
    tost = d.tost
    if tost is not None:
        by = (h, h) if not tost.margin.relative else (down, up)
        tost = dataclasses.replace(tost, lo=tost.lo - by[0], hi=tost.hi + by[1])
    return dataclasses.replace(
        d, lo=lo, hi=hi, rel_lo=rel_lo, rel_hi=rel_hi, bca=bca, tost=tost, tail_width=wa + wb
    )


def _forced_reason(test: TTest, n_requests: int) -> str | None:
    """Return why a rule decides a delta's verdict (None: the tests decide).

    Identical inputs: EQUIVALENT; a forced interval: decided by its hull alone (EQUIVALENT or
    INCONCLUSIVE); too few requests: INCONCLUSIVE.
    """
    if test.identical:
        return IDENTICAL
    if test.forced is not None:
        return test.forced
    if n_requests < SMALL_CELL_MIN:
        return (
            f"{n_requests} requests < {SMALL_CELL_MIN}: too few for any test to decide (the "
            "sign-flip test's smallest p-value, 2/2^n, exceeds α/2): INCONCLUSIVE"
        )
    if n_requests < MIN_REQUESTS:
        return (
            f"{n_requests} requests < {MIN_REQUESTS} (the verdict minimum): EQUIVALENT is out of "
            "reach, and DIFFERENT needs the CR2 and sign-flip tests both to reject at α/2"
        )
    return None


SMALL_DIFFERENT: Final = (
    "{n} requests < {minimum} (the verdict minimum): DIFFERENT because the CR2 and sign-flip "
    "tests both reject Δ = 0 at α/2 (Holm); EQUIVALENT is out of reach"
)
"""The ``verdict_reason`` of a small cell's DIFFERENT.

See docs/methods.md#small-cells-the-sign-flip-test.
"""


def _adjust(
    cells: list[ComparedCell],
    raw: list[_CellData],
    margin: Margin,
    alpha: float,
) -> list[ComparedCell]:
    """Holm-adjusted verdicts, margins and sample sizes, and Bonferroni intervals per level.

    A cell forced INCONCLUSIVE keeps its place in its level's count m (its p-values are 1):
    leaving it out would let the data choose the family.
    """
    by_level: dict[str, list[int]] = {}
    for i, c in enumerate(cells):
        if c.delta.null_reason is None:
            by_level.setdefault(c.spec.level, []).append(i)
    out = list(cells)
    for idx in by_level.values():
        level = _adjust_level([cells[i] for i in idx], [raw[i] for i in idx], margin, alpha)
        for i, delta in zip(idx, level, strict=True):
            out[i] = dataclasses.replace(cells[i], delta=delta)
    return out


def _adjust_level(
    cells: list[ComparedCell],
    raw: list[_CellData],
    margin: Margin,
    alpha: float,
) -> list[DeltaEstimate]:
    """Return the adjusted deltas of the m cells of one level (see :func:`_adjust`).

    A delta with a tail width keeps its verdict only where it holds at both ends
    (:func:`_tail_verdict`).
    """
    tests = [r.tests for r in raw]
    m = len(cells)
    deltas = [c.delta for c in cells]
    ns = [c.n_requests for c in cells]
    both = [t for t in tests if t is not None]
    assert len(both) == m  # a delta was computed in each
    chosen = [st_r if margin.relative else st_d for st_d, st_r in both]
    smalls = [r.small_tests() for r in raw]
    reasons = [_forced_reason(t, n) for t, n in zip(chosen, ns, strict=True)]
    deltas = [
        d  # a forced interval's p-values: its hull's (cr2.TTest.p_equivalence) and 1
        if why is None or t.identical or t.forced is not None
        else dataclasses.replace(d, p_equivalence=1.0)  # a small cell: its own p of Δ = 0
        if small is not None
        else dataclasses.replace(d, p_equivalence=1.0, p_difference=1.0)  # not tested
        for d, why, t, small in zip(deltas, reasons, chosen, smalls, strict=True)
    ]
    pe = holm([_p(d.p_equivalence) for d in deltas])
    pd = holm([_p(d.p_difference) for d in deltas])
    smallest = holm_smallest_margins(chosen, alpha, tost_p_values(chosen))
    out = []
    for j, d in enumerate(deltas):
        st_d, st_r = both[j]
        v = verdict(chosen[j], margin.value, alpha, p_equivalence=pe[j], p_difference=pd[j])
        forced = reasons[j] is not None and not chosen[j].identical
        # Holm's first step tests at α/m: the sample size for the verdict as it is adjusted
        size = requests_for_margin(
            chosen[j].se, margin.value, ns[j], alpha / m, POWER, df=chosen[j].df
        )
        hull = forced and chosen[j].forced is not None
        small = smalls[j]
        small_different = small is not None and forced and v.verdict == DIFFERENT
        keep = (hull and v.verdict == EQUIVALENT) or small_different
        final = "INCONCLUSIVE" if forced and not keep else v.verdict
        reason = reasons[j] or (NEITHER if final == "INCONCLUSIVE" else None)
        if hull and final == EQUIVALENT:
            why = str(chosen[j].forced).split(":")[0]
            reason = f"{why}: its hull at 1 − α lies inside the margin"
        if small_different:
            reason = SMALL_DIFFERENT.format(n=ns[j], minimum=MIN_REQUESTS)
        smallest_j = smallest[j] if hull or not forced else None
        decides = (small[1] if margin.relative else small[0]) if small is not None else chosen[j]
        if d.tail_width is not None and (not forced or small_different):
            final, reason = _tail_verdict(
                final, raw[j], decides, margin.relative, margin.value, alpha, m
            )
            h, down, up = _shifts(raw[j])
            if smallest_j is not None:  # the margin must cover the tails' move too
                smallest_j += max(down, up) if margin.relative else h
        out.append(
            dataclasses.replace(
                d,
                verdict=final,
                verdict_reason=reason,
                p_equivalence_adj=pe[j],
                p_difference_adj=pd[j],
                tests_in_level=m,
                smallest_equivalent_margin=smallest_j,
                requests_for_margin=None if forced else size.requests,
                requests_for_margin_null_reason=reasons[j] if forced else size.null_reason,
                bonferroni=_bonferroni(
                    small[0] if small is not None else st_d,
                    small[1] if small is not None else st_r,
                    1.0 - (1.0 - d.level) / m,
                    raw[j] if d.tail_width else None,
                ),
            )
        )
    return out


def _bonferroni(
    st_d: TTest | SmallCellTest,
    st_r: TTest | SmallCellTest,
    level: float,
    tails: _CellData | None = None,
) -> BonferroniInterval | None:
    """Return the intervals of Δ and Δ/R_a at ``level`` (None when a bound cannot be formed).

    ``tails``: the cell of a delta with a tail width, whose intervals are widened (:func:`_widen`).
    """
    lo, hi = _bounds(st_d, level)
    rlo, rhi = _bounds(st_r, level)
    if lo is None or hi is None or rlo is None or rhi is None:
        return None
    if tails is not None:
        h, down, up = _shifts(tails)
        lo, hi, rlo, rhi = lo - h, hi + h, rlo - down, rhi + up
    return BonferroniInterval(level, lo, hi, rlo, rhi)


def _p(p: float | None) -> float:
    """Return a computed delta's p-value (set by :func:`_delta_figures`)."""
    assert p is not None
    return p


def _warn_large_margin(
    cells: list[ComparedCell], raw: list[_CellData], m: Margin
) -> list[ComparedCell]:
    """Warn where an absolute margin exceeds half of R_a (``--margin 5`` meant as 5%?)."""
    if m.relative:
        return cells
    out = []
    for c, r in zip(cells, raw, strict=True):
        d = c.delta
        if r.ra is not None and m.value > 0.5 * r.ra and d.null_reason is None:
            text = (
                f"absolute margin {m.text} tokens/round exceeds half of R_a ({r.ra:.3g}): "
                f"a relative margin is written with %, e.g. {m.text}%"
            )
            warning = f"{d.warning}; {text}" if d.warning else text
            c = dataclasses.replace(c, delta=dataclasses.replace(d, warning=warning))
        out.append(c)
    return out
