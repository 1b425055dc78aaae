"""The words every renderer uses for a delta's interval method, size flag and forced verdict.

TABLES.md, REPORT.md and the forest plot say the same things about a delta's interval (issue 10,
item 4), so they take the phrases from here: the run's interval method with the thresholds the
calibration study set (:class:`~specreplay.results.model.IntervalMethod`), each delta's method,
degrees of freedom and number of requests that differ between the arms, the small-sample mark
with the coverage the study measured at the cell's size
(:class:`~specreplay.results.model.CoverageAtSize`), and the reason beside a verdict a rule
forced (``verdict_reason``). A field that is null is left out of the text, so a result written
before these fields existed renders as it did.

Terms. A request **differs** when its (n, t) is not the same in both arms; a cell is a **small
sample** when it is below the size at which the study shows nominal coverage.

Sizes (issue 16, item 4): three request counts act on a cell, each with one name every output
uses (:data:`SIZE_NAMES`): the **reporting minimum** (``--min-requests``: a cell with fewer
requests gets no Δ at all, ``—`` with the reason), the **verdict minimum** (the interval method's
``min_requests``: below it the t interval may not give EQUIVALENT or DIFFERENT) and the
**nominal-coverage size** (below it a delta is a small sample, marked with what the study's 95%
intervals covered at its size).
"""

from __future__ import annotations

from collections.abc import Iterable

from specreplay.results.model import CoverageAtSize, Delta, IntervalMethod, Result

__all__ = [
    "NOMINAL",
    "SIZE_NAMES",
    "brief_reason",
    "coverage_text",
    "has_interval_fields",
    "interval_method_line",
    "method_text",
    "sign_note",
    "sizes_line",
    "small_sample_text",
    "verdict_text",
]

NOMINAL = 0.95
"""The coverage the intervals promise; a small-sample cell's study coverage is below it."""

SIZE_NAMES = ("reporting minimum", "verdict minimum", "nominal-coverage size")
"""The names of the three sizes (module docstring): ``--min-requests``, the verdict rule's
request minimum, the size from which the study shows nominal coverage."""

_AUTO = "--estimator auto: "
"""How the part of a verdict reason that ``--estimator auto``'s tail rule wrote starts."""


def coverage_text(c: CoverageAtSize) -> str:
    """Return what the study measured at a size, e.g. ``coverage 0.93 ± 0.004 at 10 requests``.

    Examples
    --------
    >>> coverage_text(CoverageAtSize(0.93, 0.004, 10, "skew-zero"))
    'coverage 0.93 ± 0.004 at 10 requests (setting skew-zero)'
    """
    return (
        f"coverage {c.coverage:.3g} ± {c.mc_se:.1g} at {c.n_requests:,} requests "
        f"(setting {c.setting})"
    )


def small_sample_text(d: Delta, *, setting: bool = True) -> str | None:
    """Return the small-sample mark of ``d``: what the study's intervals covered at its size.

    None when ``d`` is not a small sample. The figures are those of its
    :class:`~specreplay.results.model.CoverageAtSize`: the lowest coverage over the study's
    settings (its hardest setting, named unless ``setting`` is False) at the largest studied size
    at or below the cell's requests.

    Examples
    --------
    >>> from specreplay.results.model import Label, Role
    >>> d = Delta("a", "b", Role.B_VS_A, 0.1, 0.01, 0.0, 0.2, 0.0, 0.02, "cr2-eff", 0.95, False,
    ...           None, None, None, None, None, "INCONCLUSIVE", None, None, 2000, None, None,
    ...           Label.SIMULATED, None, small_sample=True,
    ...           coverage_at_size=CoverageAtSize(0.93, 0.004, 96, "skew-zero"))
    >>> small_sample_text(d)
    "small sample: in the study's hardest setting (skew-zero), 95% intervals of 96 requests covered 0.93 ± 0.004"
    >>> small_sample_text(d, setting=False)
    "small sample: in the study's hardest setting, 95% intervals of 96 requests covered 0.93"
    """  # noqa: E501
    if not d.small_sample:
        return None
    c = d.coverage_at_size
    if c is None:
        return "small sample: below the nominal-coverage size, smaller than any size the study ran"
    if not setting:
        return (
            f"small sample: in the study's hardest setting, {NOMINAL:.0%} intervals of "
            f"{c.n_requests:,} requests covered {c.coverage:.3g}"
        )
    return (
        f"small sample: in the study's hardest setting ({c.setting}), {NOMINAL:.0%} intervals "
        f"of {c.n_requests:,} requests covered {c.coverage:.3g} ± {c.mc_se:.1g}"
    )


def brief_reason(reason: str, where: str = "TABLES.md") -> str:
    """Return a verdict reason with ``--estimator auto``'s tail figures left to ``where``.

    The rule's own words stay (what failed, or what accepted k̂); the figures per arm and depth,
    which can run to thousands of characters, are named as being in ``where``.

    Examples
    --------
    >>> brief_reason("12 requests < 50: INCONCLUSIVE; --estimator auto: the importance tail "
    ...              "fails in this cell: arm at depth 5: ESS share 0.01")
    '12 requests < 50: INCONCLUSIVE; --estimator auto: the importance tail fails in this cell (figures in TABLES.md)'
    >>> brief_reason("too few requests differ")
    'too few requests differ'
    """  # noqa: E501
    head, sep, auto = reason.partition(_AUTO)
    if not sep:
        return reason
    return f"{head}{_AUTO}{auto.split(': ', 1)[0]} (figures in {where})"


def sign_note(d: Delta) -> str | None:
    """Return why Δ's absolute and relative intervals disagree in sign (None when they agree).

    The relative interval of Δ/R_a is formed on its own scale, with its own influences (R_a
    varies with the resample), so one can exclude 0 while the other holds it, or the two lie
    on opposite sides of 0; the verdict uses the scale of the margin.

    Examples
    --------
    >>> from specreplay.results.model import Label, Role
    >>> d = Delta("a", "b", Role.B_VS_A, 0.88, 0.2, 0.32, 3.71, -0.11, 0.61, "cr2-eff", 0.95,
    ...           False, None, None, None, None, None, "INCONCLUSIVE", None, None, 0, None, None,
    ...           Label.MEASURED, None)
    >>> sign_note(d)
    'the relative interval holds 0 and the absolute one does not: each is formed on its own scale, with its own influences (R_a varies with the resample)'
    """  # noqa: E501
    if None in (d.lo, d.hi, d.rel_lo, d.rel_hi):
        return None

    def side(lo: float | None, hi: float | None) -> int:
        assert lo is not None and hi is not None
        return 1 if lo > 0 else (-1 if hi < 0 else 0)

    a, r = side(d.lo, d.hi), side(d.rel_lo, d.rel_hi)
    if a == r:
        return None
    which = {0: "holds 0", 1: "lies above 0", -1: "lies below 0"}
    used = f"; the verdict is judged on the {d.tost.kind} scale" if d.tost is not None else ""
    return (
        f"the relative interval {which[r]} and the absolute one "
        + ("does not" if r == 0 else which[a])
        + ": each is formed on its own scale, with its own influences (R_a varies with the "
        f"resample){used}"
    )


def method_text(d: Delta) -> str:
    """Return the delta's interval method, its degrees of freedom and its differing requests.

    Examples
    --------
    >>> from specreplay.results.model import Label, Role
    >>> d = Delta("a", "b", Role.B_VS_A, 0.1, 0.01, 0.0, 0.2, 0.0, 0.02, "cr2-eff", 0.95, False,
    ...           None, None, None, None, None, "EQUIVALENT", None, None, 2000, None, None,
    ...           Label.SIMULATED, None, df=8.25, n_differing=7)
    >>> method_text(d)
    'cr2-eff, df 8.2, 7 requests differ'
    """
    parts = [d.method]
    if d.df is not None:
        parts.append(f"df {d.df:.1f}")
    if d.n_differing is not None:
        parts.append(f"{d.n_differing:,} request{'' if d.n_differing == 1 else 's'} differ")
    return ", ".join(parts)


def verdict_text(d: Delta) -> str:
    """Return the verdict with the reason a rule forced it, if one did: ``INCONCLUSIVE (why)``."""
    verdict = str(d.verdict) if d.verdict is not None else "—"
    return f"{verdict} ({d.verdict_reason})" if d.verdict_reason else verdict


def has_interval_fields(deltas: Iterable[Delta | None]) -> bool:
    """Say whether any delta carries the interval fields (df, differing requests, size flag)."""
    return any(
        d is not None
        and (d.df is not None or d.n_differing is not None or d.small_sample is not None)
        for d in deltas
    )


def interval_method_line(result: Result) -> str | None:
    """Return one line naming the run's interval method and its thresholds (None without one).

    Examples
    --------
    >>> m = IntervalMethod("cr2-eff", "CR2 / Bell–McCaffrey t interval", 20, 5, "cmd --seed 1")
    >>> from specreplay.results.model import Result
    >>> r = Result("interval", "0", "t", 0, {}, (), {}, (), (), (), (), (), interval_method=m)
    >>> print(interval_method_line(r))  # doctest: +NORMALIZE_WHITESPACE
    Interval method: cr2-eff (CR2 / Bell–McCaffrey t interval). Thresholds from the calibration
    study: below the verdict minimum of 20 requests a cell is never EQUIVALENT, and DIFFERENT
    only where the CR2 and sign-flip tests both reject at α/2; with fewer than 5 requests that
    differ between the arms it is decided by its conservative hull (EQUIVALENT only inside the
    margin, never DIFFERENT); the study: cmd --seed 1.
    """
    m: IntervalMethod | None = result.interval_method
    if m is None:
        return None
    return (
        f"Interval method: {m.method} ({m.description}). Thresholds from the calibration study: "
        f"below the verdict minimum of {m.min_requests:,} requests a cell is never EQUIVALENT, "
        "and DIFFERENT only where the CR2 and sign-flip tests both reject at α/2; with fewer "
        f"than {m.min_differing:,} requests that differ between the arms it is decided by its "
        "conservative hull (EQUIVALENT only inside the margin, never DIFFERENT); the study: "
        f"{m.study}."
    )


def sizes_line(result: Result) -> str | None:
    """Return the run's three sizes in one line, by their names (None without any of them).

    Examples
    --------
    >>> m = IntervalMethod("cr2-eff", "t", 50, 3, "cmd")
    >>> from specreplay.results.model import Result
    >>> r = Result("interval", "0", "t", 0, {}, (), {"min_requests": 10}, (), (), (), (), (),
    ...            interval_method=m)
    >>> print(sizes_line(r))  # doctest: +NORMALIZE_WHITESPACE
    Sizes: reporting minimum (--min-requests) 10 requests: a cell with fewer gets no Δ;
    verdict minimum 50: below it no EQUIVALENT, and DIFFERENT only where the CR2 and sign-flip
    tests both reject at α/2; nominal-coverage size (docs/calibration.md): below it a Δ is marked
    small sample, with what the study's 95% intervals covered at its size.
    """
    reporting = result.options.get("min_requests")
    m = result.interval_method
    if reporting is None and m is None:
        return None
    parts = []
    if reporting is not None:
        parts.append(
            f"reporting minimum (--min-requests) {reporting:,} requests: a cell with fewer gets "
            "no Δ"
        )
    if m is not None:
        parts += [
            f"verdict minimum {m.min_requests:,}: below it no EQUIVALENT, and DIFFERENT only "
            "where the CR2 and sign-flip tests both reject at α/2",
            "nominal-coverage size (docs/calibration.md): below it a Δ is marked small sample, "
            f"with what the study's {NOMINAL:.0%} intervals covered at its size",
        ]
    return "Sizes: " + "; ".join(parts) + "."
