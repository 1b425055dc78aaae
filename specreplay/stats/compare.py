"""Paired comparison of two arms, cell by cell: R per arm, Δ with intervals, verdicts (SPEC §3.4).

Cells are pooled, per family, per context bucket and per family × bucket, all domain estimates
from the same requests. Per cell and delta: the point Δ = R_b − R_a and Δ/R_a; the default
interval (``method`` ``cr2-eff-hall``: the CR2 t interval with effective degrees of freedom and
Hall's skewness correction of :mod:`specreplay.stats.cr2`, chosen by the calibration study,
README "Calibration of the intervals"), with its degrees of freedom and the requests that differ
between the arms; BCa from
the bootstrap replicates (jackknife over requests from leave-one-out sums); the (1 − 2α) default
interval used by the equivalence test (TOST); p-values by inversion of the default interval;
Bonferroni intervals at 1 − α/m and Holm-adjusted p-values, m being the number of cells of the
same level with a delta (the pooled cell is its own family of one); the verdict and, where a rule
forced it, ``verdict_reason``; the smallest margin at which the Holm-adjusted verdict would be
EQUIVALENT; the requests that would give the EQUIVALENT verdict with 80% power at the Holm level
α/m if the true delta were 0 (a power calculation at the observed per-request SD).

The verdict rule (README "The verdict rule"): EQUIVALENT when the Holm-adjusted TOST p < α;
otherwise DIFFERENT when the Holm-adjusted p of Δ = 0 is < α; otherwise INCONCLUSIVE. A cell is
INCONCLUSIVE whatever its interval when fewer than :data:`~specreplay.stats.cr2.MIN_DIFFERING`
of its requests differ between the arms (its standard error rests on too few requests; a
conservative interval is shown) or when it holds fewer than
:data:`~specreplay.stats.cr2.MIN_REQUESTS` requests. One exception gives EQUIVALENT with
SE = 0: every request of the whole comparison is identical in both arms ("identical inputs").
A cell smaller than :data:`~specreplay.stats.studied.NOMINAL_REQUESTS` carries
``small_sample: true`` with the study's lowest coverage at its size (``coverage_at_size``).

The bootstrap replicates (one joint resampling of requests per comparison and seed) still give
BCa, the sweep's P(best) and tokens/s replicates and ``to_arviz``; the intervals behind the
verdicts do not use them. Verdicts use the Holm-adjusted p-values; the intervals printed beside
them stay unadjusted (their ``adjusted`` field says so) and the Bonferroni ones are given
separately.
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
from specreplay.stats.cells import Cell, cell_layout
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
    bca_interval,
    holm,
    holm_smallest_margins,
    requests_for_margin,
    verdict,
)
from specreplay.stats.studied import NOMINAL_REQUESTS, coverage_at_size

__all__ = ["Cell", "CellSupport", "Comparison", "Margin", "compare", "parse_margin"]

CellSupport = Callable[[Cell], tuple[str | None, str | None]]
"""Why arm a's and arm b's figures in a cell are unsupported although the arm has rounds there
(None: supported), e.g. a round recording fewer positions than the arm's depth (SPEC §2.1): that
arm's R, and the cell's delta, are then null with the reason, and the cell takes no part in the
Holm and Bonferroni adjustments of its level."""

IDENTICAL: Final = (
    "identical inputs: every request has the same rounds and retained tokens in both arms"
)
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
class Comparison:
    """Result of :func:`compare`: cells for results.json and the replicates behind them.

    Attributes
    ----------
    cells : list of dict
        SPEC §4.1 cells, each with per-arm R and one delta (b − a).
    layout : list of Cell
        The cells' definitions, in the same order.
    delta_reps, rel_reps : float64, (n_boot, n_cells)
        Bootstrap replicates of Δ and Δ/R_a per cell (NaN where a replicate has no rounds).
    rb_reps : float64, (n_boot, n_cells)
        Bootstrap replicates of R_b per cell (the same resamples for every comparison of the
        same requests and seed: a depth sweep compares them across depths).
    rb_tests : list of TTest or None
        Per cell, the test of R_b alone (its interval; None without rounds).
    """

    cells: list[dict[str, Any]]
    layout: list[Cell]
    delta_reps: NDArray[np.float64]
    rel_reps: NDArray[np.float64]
    rb_reps: NDArray[np.float64] | None = None
    rb_tests: list[TTest | None] | None = None


def _layout(ps: PairedSums, present_buckets: set[int]) -> list[Cell]:
    """Cells of the comparison: bucket cells for buckets holding rounds, never ``unbucketed``."""
    user_b = [b for b in range(len(ps.buckets)) if b != ps.unbucketed and b in present_buckets]
    return cell_layout(
        ps.families, ps.buckets, bucket_cells=user_b, pooled_buckets=range(len(ps.buckets))
    )


def _ratio(t: NDArray[np.float64], n: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, t / np.where(n > 0, n, 1.0), np.nan)


def _cell_stats(
    ps: PairedSums,
    point: NDArray[np.float64],
    reps_sums: NDArray[np.float64],
    cell: Cell,
    identical: bool,
) -> tuple[dict[str, Any], NDArray[np.float64], NDArray[np.float64]]:
    """Point sums, R per arm, replicates of Δ and Δ/R_a, the cell's tests and jackknife values."""
    n_boot = reps_sums.shape[0]
    n_req = ps.n_requests
    fam_of_piece = ps.family[ps.piece_request].astype(np.int64)
    fi, bi = np.asarray(cell.fam_idx), np.asarray(cell.bucket_idx)
    sel = point[np.ix_(fi, bi)].reshape(-1, 4).sum(axis=0)
    reps = reps_sums[:, fi][:, :, bi].reshape(n_boot, -1, 4).sum(axis=1)
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
    raw = {
        "cell": cell,
        "n_requests": int(members.sum()),
        "na": na,
        "nb": nb_,
        "ra": ta / na if na > 0 else None,
        "rb": tb / nb_ if nb_ > 0 else None,
        "jack_delta": loo_b - loo_a,
        "jack_rel": loo_b / loo_a - 1.0,
    }
    if na > 0 and nb_ > 0:
        rows = per_req[members]
        raw["tests"] = paired_tests(rows, depths=ps.depths, identical=identical)
        d_a, d_b = ps.depths if ps.depths is not None else (None, None)
        has_b, has_a = rows[:, 2] > 0, rows[:, 0] > 0
        raw["rb_test"] = ratio_test(rows[has_b, 2], rows[has_b, 3], depth=d_b)
        raw["ra_test"] = ratio_test(rows[has_a, 0], rows[has_a, 1], depth=d_a)
    raw["rb_reps"] = rb_reps
    return raw, rb_reps - ra_reps, rb_reps / ra_reps - 1.0


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
    label : str
        Label of the per-arm figures and deltas.
    role : str
        The delta's role in results.json.
    support : CellSupport, optional
        Per cell, why an arm's figures there are unsupported (the others are computed as if
        it were not given; a null cell is left out of its level's adjustments).
    """
    margin = margin or parse_margin("0.5%")
    reps_sums = bootstrap_sums(ps, n_boot=n_boot, seed=seed, stratify=stratify)
    point = point_sums(ps)
    identical = bool(np.array_equal(ps.n_a, ps.n_b) and np.array_equal(ps.t_a, ps.t_b))
    present = {int(b) for b in np.unique(ps.piece_bucket)}
    layout = _layout(ps, present)
    delta_reps = np.full((n_boot, len(layout)), np.nan)
    rel_reps = np.full((n_boot, len(layout)), np.nan)
    raw: list[dict[str, Any]] = []
    for ci, cell in enumerate(layout):
        r, delta_reps[:, ci], rel_reps[:, ci] = _cell_stats(ps, point, reps_sums, cell, identical)
        raw.append(r)
    cells = [
        _cell_json(
            r,
            delta_reps[:, i],
            rel_reps[:, i],
            arm_a=arm_a,
            arm_b=arm_b,
            level=level,
            margin=margin,
            alpha=alpha,
            min_requests=min_requests,
            label=label,
            role=role,
            n_boot=n_boot,
        )
        for i, r in enumerate(raw)
    ]
    if support is not None:
        for record, spec in zip(cells, layout, strict=True):
            _null_unsupported(record, support(spec), arm_a, arm_b)
    _adjust(cells, [r.get("tests") for r in raw], margin, alpha)
    _warn_large_margin(cells, raw, margin)
    return Comparison(
        cells=cells, layout=layout, delta_reps=delta_reps, rel_reps=rel_reps,
        rb_reps=np.stack([r["rb_reps"] for r in raw], axis=1) if raw else None,
        rb_tests=[r.get("rb_test") for r in raw],
    )  # fmt: skip


_DELTA_KEPT = frozenset({"a", "b", "role", "method", "level", "adjusted", "n_boot", "label"})


def _null_unsupported(
    cell: dict[str, Any], why: tuple[str | None, str | None], arm_a: str, arm_b: str
) -> None:
    """Null, in place, the figures of an arm unsupported in ``cell`` and the cell's delta."""
    for arm, reason in zip((arm_a, arm_b), why, strict=True):
        if reason is not None:
            fig = cell["arms"][arm]
            fig.update(R=None, lo=None, hi=None, level=None, null_reason=reason)
    reason = why[0] or why[1]
    if reason is None:
        return
    delta = cell["deltas"][0]
    delta.update({k: None for k in delta if k not in _DELTA_KEPT})
    delta.update(null_reason=reason, requests_for_margin_null_reason=reason)


def _bounds(test: TTest, level: float) -> tuple[float | None, float | None]:
    """Return the test's interval at ``level``, None bounds where it cannot be formed (NaN)."""
    lo, hi = test.interval(level)
    if math.isnan(lo) or math.isnan(hi):
        return None, None
    return lo, hi


def _bounds_reason(test: TTest) -> str:
    """Why a test's interval is null (unknown depth: no clamp, no bound for few differences)."""
    if test.forced is not None and test.bound_scale is None:
        return f"{test.forced}; the depth is unknown, so no bound can be formed"
    return f"a bound lies beyond ±{HUGE_BOUND:g} and the depth is unknown (no clamp)"


def _arm_json(
    r: float | None, n: float, label: str, why: str | None, test: TTest | None, level: float
) -> dict[str, Any]:
    """One arm's R in a cell with its default interval at ``level`` (None without rounds)."""
    lo, hi = _bounds(test, level) if test is not None and r is not None else (None, None)
    return {
        "R": r,
        "n_rounds": int(n),
        "label": label,
        "mcse": None,
        "null_reason": why if r is None else None,
        "lo": lo,
        "hi": hi,
        "level": level if lo is not None else None,
    }


def _cell_json(
    r: dict[str, Any],
    d_reps: NDArray[np.float64],
    rel_reps: NDArray[np.float64],
    *,
    arm_a: str,
    arm_b: str,
    level: float,
    margin: Margin,
    alpha: float,
    min_requests: int,
    label: str,
    role: str,
    n_boot: int,
) -> dict[str, Any]:
    cell: Cell = r["cell"]
    k = r["n_requests"]
    empty = "no rounds in this cell"
    why = _null_reason(r, d_reps, rel_reps, min_requests, n_boot)
    # an arm's R gets an interval where the cell's delta does (too few requests: none)
    ta, tb = (None, None) if why is not None else (r.get("ra_test"), r.get("rb_test"))
    out: dict[str, Any] = {
        "level": cell.level,
        "family": cell.family,
        "bucket": cell.bucket,
        "n_requests": k,
        "arms": {
            arm_a: _arm_json(r["ra"], r["na"], label, empty, ta, level),
            arm_b: _arm_json(r["rb"], r["nb"], label, empty, tb, level),
        },
        "deltas": [],
        "depths": [],
        "null_reason": None if k else empty,
    }
    delta = _empty_delta(arm_a, arm_b, role=role, level=level, n_boot=n_boot, label=label)
    out["deltas"].append(delta)
    if why is not None:
        delta["null_reason"] = why
        delta["requests_for_margin_null_reason"] = why
        return out
    unbounded = [t for t in r["tests"] if _bounds(t, level)[0] is None]
    if unbounded:  # the depth is unknown and the interval cannot be bounded: null, with why
        delta["null_reason"] = _bounds_reason(unbounded[0])
        delta["requests_for_margin_null_reason"] = delta["null_reason"]
        return out
    delta.update(_delta_figures(r, d_reps, rel_reps, level=level, margin=margin, alpha=alpha))
    delta.update(_small_sample(r["n_requests"]))
    return out


def _small_sample(n: int) -> dict[str, Any]:
    """``small_sample`` and ``coverage_at_size`` of a delta over ``n`` requests."""
    if n >= NOMINAL_REQUESTS:
        return {"small_sample": False, "coverage_at_size": None}
    studied = coverage_at_size(n)
    return {
        "small_sample": True,
        "coverage_at_size": None if studied is None else dataclasses.asdict(studied),
    }


def _empty_delta(
    arm_a: str, arm_b: str, *, role: str, level: float, n_boot: int, label: str
) -> dict[str, Any]:
    """Return a delta record with every figure null (filled by the caller where it can be)."""
    return {
        "a": arm_a,
        "b": arm_b,
        "role": role,
        "point": None,
        "rel": None,
        "lo": None,
        "hi": None,
        "rel_lo": None,
        "rel_hi": None,
        "method": DEFAULT_METHOD,
        "level": level,
        "adjusted": False,
        "bca": None,
        "bonferroni": None,
        "tost": None,
        "p_difference": None,
        "p_equivalence": None,
        "verdict": None,
        "smallest_equivalent_margin": None,
        "requests_for_margin": None,
        "requests_for_margin_null_reason": None,
        "n_boot": n_boot,
        "n_boot_valid": None,
        "warning": None,
        "label": label,
        "null_reason": None,
        "df": None,
        "n_differing": None,
        "small_sample": None,
        "coverage_at_size": None,
        "verdict_reason": None,
    }


def _null_reason(
    r: dict[str, Any],
    d_reps: NDArray[np.float64],
    rel_reps: NDArray[np.float64],
    min_requests: int,
    n_boot: int,
) -> str | None:
    """Why a cell's delta cannot be computed (None when it can)."""
    k = r["n_requests"]
    if r["ra"] is None or r["rb"] is None:
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
    r: dict[str, Any],
    d_reps: NDArray[np.float64],
    rel_reps: NDArray[np.float64],
    *,
    level: float,
    margin: Margin,
    alpha: float,
) -> dict[str, Any]:
    """Point, default and BCa intervals, TOST interval and p-values of a delta."""
    ok = np.isfinite(d_reps) & np.isfinite(rel_reps)
    d, rel = d_reps[ok], rel_reps[ok]
    st_d, st_r = r["tests"]
    lo, hi = _bounds(st_d, level)
    rlo, rhi = _bounds(st_r, level)
    bca_d = bca_interval(d, st_d.theta, r["jack_delta"], level)
    bca_r = bca_interval(rel, st_r.theta, r["jack_rel"], level)
    test: TTest = st_r if margin.relative else st_d
    lo90, hi90 = _bounds(test, 1.0 - 2.0 * alpha)
    return {
        "point": st_d.theta,
        "rel": st_r.theta,
        "lo": lo,
        "hi": hi,
        "rel_lo": rlo,
        "rel_hi": rhi,
        "df": st_d.df if st_d.se > 0.0 else None,
        "n_differing": st_d.n_differing if not st_d.identical else 0,
        "n_boot_valid": int(ok.sum()),
        "bca": {
            "lo": bca_d.lo,
            "hi": bca_d.hi,
            "rel_lo": bca_r.lo,
            "rel_hi": bca_r.hi,
            "acceleration": bca_d.acceleration,
            "z0": bca_d.z0,
            "null_reason": bca_d.null_reason or bca_r.null_reason,
        },
        "tost": {
            "alpha": alpha,
            **margin.to_json(),
            "lo": lo90,
            "hi": hi90,
            "level": 1.0 - 2.0 * alpha,
        },
        "p_difference": test.p_difference(),
        "p_equivalence": test.p_equivalence(margin.value),
        "smallest_equivalent_margin_kind": "relative" if margin.relative else "absolute",
    }


def _forced_reason(test: TTest, n_requests: int) -> str | None:
    """Why a delta's verdict is INCONCLUSIVE by rule (or EQUIVALENT by identical inputs)."""
    if test.identical:
        return IDENTICAL
    if test.forced is not None:
        return test.forced
    if n_requests < MIN_REQUESTS:
        return (
            f"{n_requests} requests < {MIN_REQUESTS}, the fewest at which the calibration study "
            "shows the interval meets its targets: INCONCLUSIVE"
        )
    return None


def _adjust(
    cells: list[dict[str, Any]],
    tests: list[tuple[TTest, TTest] | None],
    margin: Margin,
    alpha: float,
) -> None:
    """Holm-adjusted verdicts, margins and sample sizes, and Bonferroni intervals per level.

    A cell forced INCONCLUSIVE keeps its place in its level's count m (its p-values are 1):
    leaving it out would let the data choose the family.
    """
    by_level: dict[str, list[int]] = {}
    for i, c in enumerate(cells):
        if c["deltas"][0]["null_reason"] is None:
            by_level.setdefault(c["level"], []).append(i)
    for idx in by_level.values():
        m = len(idx)
        deltas = [cells[i]["deltas"][0] for i in idx]
        ns = [cells[i]["n_requests"] for i in idx]
        both = [t for t in (tests[i] for i in idx) if t is not None]
        assert len(both) == m  # a delta was computed in each
        chosen = [st_r if margin.relative else st_d for st_d, st_r in both]
        reasons = [_forced_reason(t, n) for t, n in zip(chosen, ns, strict=True)]
        for j, why in enumerate(reasons):
            if why is not None and not chosen[j].identical:  # not tested: p-values of 1
                deltas[j]["p_equivalence"] = deltas[j]["p_difference"] = 1.0
        pe = holm([d["p_equivalence"] for d in deltas])
        pd = holm([d["p_difference"] for d in deltas])
        smallest = holm_smallest_margins(chosen, alpha, tost_p_values(chosen))
        for j, d in enumerate(deltas):
            st_d, st_r = both[j]
            v = verdict(chosen[j], margin.value, alpha, p_equivalence=pe[j], p_difference=pd[j])
            bl = 1.0 - (1.0 - d["level"]) / m
            blo, bhi = _bounds(st_d, bl)
            brlo, brhi = _bounds(st_r, bl)
            forced = reasons[j] is not None and not chosen[j].identical
            # Holm's first step tests at α/m: the sample size for the verdict as it is adjusted
            size = requests_for_margin(
                chosen[j].se, margin.value, ns[j], alpha / m, POWER, df=chosen[j].df
            )
            final = "INCONCLUSIVE" if forced else v.verdict
            d.update(
                verdict=final,
                verdict_reason=reasons[j] or (NEITHER if final == "INCONCLUSIVE" else None),
                p_equivalence_adj=pe[j],
                p_difference_adj=pd[j],
                tests_in_level=m,
                smallest_equivalent_margin=None if forced else smallest[j],
                requests_for_margin=None if forced else size.requests,
                requests_for_margin_null_reason=reasons[j] if forced else size.null_reason,
                bonferroni={"level": bl, "lo": blo, "hi": bhi, "rel_lo": brlo, "rel_hi": brhi},
            )


def _warn_large_margin(cells: list[dict[str, Any]], raw: list[dict[str, Any]], m: Margin) -> None:
    """Warn where an absolute margin exceeds half of R_a (``--margin 5`` meant as 5%?)."""
    if m.relative:
        return
    for c, r in zip(cells, raw, strict=True):
        d = c["deltas"][0]
        if r["ra"] is not None and m.value > 0.5 * r["ra"] and d["null_reason"] is None:
            text = (
                f"absolute margin {m.text} tokens/round exceeds half of R_a ({r['ra']:.3g}): "
                f"a relative margin is written with %, e.g. {m.text}%"
            )
            d["warning"] = f"{d['warning']}; {text}" if d["warning"] else text
