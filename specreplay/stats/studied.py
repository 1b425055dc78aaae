"""What the calibration study measured of the default interval, by cell size (issue 10, item 4).

``bench/calibration.py --study`` measures the coverage of the default 95% interval
(:mod:`specreplay.stats.cr2`) over a grid of hard settings (heavy-tailed round counts, request
random effects, skewed and sparse per-request effects, families that differ) at 10, 20 and 50
requests per family cell and 40, 80 and 200 per pooled cell. :data:`LOWEST_COVERAGE` keeps, per
studied size, the lowest coverage over every setting with that setting's name; a cell smaller than
:data:`NOMINAL_REQUESTS` carries ``small_sample: true`` and the entry of the largest studied size ≤
its request count (:func:`coverage_at_size`). docs/calibration.md#calibration-of-the-intervals holds
the whole table, its seed and the command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "LOWEST_COVERAGE",
    "NOMINAL_REQUESTS",
    "SMALL_CELL_COVERAGE",
    "SMALL_CELL_STUDY",
    "STUDY",
    "StudiedSize",
    "coverage_at_size",
]


@dataclass(frozen=True)
class StudiedSize:
    """The lowest coverage measured at one cell size, ± its Monte Carlo SE, and where."""

    n_requests: int
    coverage: float
    mc_se: float
    setting: str


STUDY: Final = (
    "PYTHONPATH=. python bench/calibration.py --study --only-cr2 --datasets 4000 "
    "--seed 20261202 (and --sizes 250 --seed 20261203)"
)
LOWEST_COVERAGE: Final[tuple[StudiedSize, ...]] = (
    StudiedSize(10, 0.9045, 0.0046, "heavy/skew+/free, family cell, Δ"),
    StudiedSize(20, 0.9205, 0.0043, "heavy/skew+/free, family cell, Δ/R_a"),
    StudiedSize(40, 0.9290, 0.0041, "heavy/skew+/free, pooled cell, Δ/R_a"),
    StudiedSize(50, 0.9365, 0.0039, "heavy/skew+/free, family cell, Δ"),
    StudiedSize(80, 0.9357, 0.0039, "heavy/skew+/zero, pooled cell, Δ/R_a"),
    StudiedSize(200, 0.9485, 0.0035, "heavy/exp/zero, pooled cell, Δ/R_a"),
    StudiedSize(250, 0.9465, 0.0036, "mild/sparse/zero, family cell, Δ"),
    StudiedSize(1000, 0.9455, 0.0036, "heavy/skew-/zero, pooled cell, Δ"),
)
"""The default's (cr2-eff-hall) lowest 95% coverage per studied size over the 30 settings,
4,000 datasets each (docs/calibration.md#calibration-of-the-intervals)."""
SMALL_CELL_STUDY: Final = (
    "PYTHONPATH=. python bench/smallcells.py --datasets 4000 --seed 20261207 "
    "(coverage on the first 1,000 datasets of each setting)"
)
SMALL_CELL_COVERAGE: Final[tuple[StudiedSize, ...]] = (
    StudiedSize(10, 0.955, 0.0066, "heavy/skew-/free, family cell, Δ/R_a"),
    StudiedSize(20, 0.951, 0.0068, "heavy/skew+/zero, family cell, Δ/R_a"),
    StudiedSize(30, 0.957, 0.0064, "heavy/skew+/free, family cell, Δ/R_a"),
    StudiedSize(40, 0.957, 0.0064, "heavy/skew-/free, family cell, Δ/R_a"),
)
"""Below the verdict minimum the interval printed is the hull of the CR2 and sign-flip intervals
at 1 − α/2 (:mod:`specreplay.stats.signflip`): its lowest coverage per studied size over the
study's 22 settings (docs/calibration.md#small-cells)."""
NOMINAL_REQUESTS: Final = 200
"""Smallest studied size at which every setting's coverage is within 2 MC SE of 0.95."""


def coverage_at_size(n_requests: int, small_cell: bool = False) -> StudiedSize | None:
    """Return the study's entry at the largest studied size ≤ ``n_requests`` (None below all).

    ``small_cell``: the interval printed is the small-cell hull (:data:`SMALL_CELL_COVERAGE`).

    Examples
    --------
    >>> coverage_at_size(35).n_requests
    20
    >>> coverage_at_size(35, small_cell=True).n_requests
    30
    """
    best = None
    for s in SMALL_CELL_COVERAGE if small_cell else LOWEST_COVERAGE:
        if s.n_requests <= n_requests and (best is None or s.n_requests > best.n_requests):
            best = s
    return best
