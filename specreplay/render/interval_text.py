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
"""

from __future__ import annotations

from collections.abc import Iterable

from specreplay.results.model import CoverageAtSize, Delta, IntervalMethod, Result

__all__ = [
    "NOMINAL",
    "coverage_text",
    "has_interval_fields",
    "interval_method_line",
    "method_text",
    "small_sample_text",
    "verdict_text",
]

NOMINAL = 0.95
"""The coverage the intervals promise; a small-sample cell's study coverage is below it."""


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


def small_sample_text(d: Delta) -> str | None:
    """Return the small-sample mark of ``d`` with the study's coverage at its size (None if not).

    Examples
    --------
    >>> from specreplay.results.model import Label, Role
    >>> d = Delta("a", "b", Role.B_VS_A, 0.1, 0.01, 0.0, 0.2, 0.0, 0.02, "cr2-eff", 0.95, False,
    ...           None, None, None, None, None, "INCONCLUSIVE", None, None, 2000, None, None,
    ...           Label.SIMULATED, None, small_sample=True,
    ...           coverage_at_size=CoverageAtSize(0.93, 0.004, 10, "skew-zero"))
    >>> small_sample_text(d)
    'small sample: coverage 0.93 ± 0.004 at 10 requests (setting skew-zero)'
    """
    if not d.small_sample:
        return None
    if d.coverage_at_size is None:
        return "small sample (no study figure at this size)"
    return f"small sample: {coverage_text(d.coverage_at_size)}"


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
    study: a cell with fewer than 20 requests, or fewer than 5 requests that differ between the
    arms, is INCONCLUSIVE, never EQUIVALENT; the study: cmd --seed 1.
    """
    m: IntervalMethod | None = result.interval_method
    if m is None:
        return None
    return (
        f"Interval method: {m.method} ({m.description}). Thresholds from the calibration study: "
        f"a cell with fewer than {m.min_requests:,} requests, or fewer than "
        f"{m.min_differing:,} requests that differ between the arms, is INCONCLUSIVE, never "
        f"EQUIVALENT; the study: {m.study}."
    )
