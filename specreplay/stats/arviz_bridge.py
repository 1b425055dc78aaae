"""ArviZ views of bootstrap replicates: HDI/ETI beside percentile/BCa, and a DataTree.

The HDI and ETI are ArviZ's (``arviz_stats`` 1.3 ``hdi``, method ``nearest``, and ``eti``,
method ``linear``), computed here in NumPy with the same operations (:func:`hdi_nearest`,
:func:`eti`; ``tests/test_lazy_imports.py`` checks them against ``arviz_stats`` bit for bit):
ArviZ 1.x takes seconds to import, so it is imported only inside the functions that build a
``DataTree`` (``Result.to_arviz()``). The replicate draws are stored with dims (chain = 1,
draw = n_boot, cell), so ArviZ's functions treat them as one chain of draws. A cell whose draws
are the pooled cell's in every variable (it holds every request: a single bucket, a single
family) is left out of the tree, and named in its attrs (:func:`kept_cells`); the tree's attrs
hold the run's interval level as ``ci_prob``, ArviZ 1.x's name for it, so that
``az.summary(tree, ci_prob=tree.attrs["ci_prob"])`` shows the report's 95% rather than
ArviZ's default of 0.89.
:func:`save_netcdf` writes that tree as netCDF4 with the optional extra ``specreplay[netcdf]``
(h5netcdf and h5py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from os import PathLike
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.stats.cells import Cell
from specreplay.stats.compare import Comparison, CredibleInterval

if TYPE_CHECKING:
    from xarray import DataTree

__all__ = [
    "REPEATS_POOLED",
    "ComparisonReplicates",
    "DepthReplicates",
    "eti",
    "hdi_eti",
    "hdi_nearest",
    "kept_cells",
    "replicates_tree",
    "save_netcdf",
]


def hdi_nearest(draws: NDArray[np.float64], prob: float) -> NDArray[np.float64]:
    """Return the narrowest interval of sorted draws holding ⌊prob·n⌋ + 1 of them (ArviZ's HDI).

    ``arviz_stats`` ``hdi(method="nearest")``: with the draws sorted, the interval from draw i to
    draw i + ⌊prob·n⌋ (at most n − 1) of least width, the first such i on ties.

    Raises
    ------
    ValueError
        No draws (as ArviZ).
    """
    ary = np.sort(draws)
    n = len(ary)
    inc = min(int(np.floor(prob * n)), n - 1)
    width = np.subtract(ary[inc:], ary[: n - inc], dtype=np.float64)
    if len(width) == 0:
        raise ValueError("Too few elements for interval calculation. ")
    lo = int(np.argmin(width))
    return ary[[lo, lo + inc]]


def eti(draws: NDArray[np.float64], prob: float) -> NDArray[np.float64]:
    """Return the equal-tailed interval: the (1 − prob)/2 and (1 + prob)/2 quantiles.

    ``arviz_stats`` ``eti(method="linear")``: NumPy's linear quantile (Hyndman & Fan 1996,
    type 7) at (1 − prob)/2 and 1 − (1 − prob)/2.
    """
    edge = (1 - prob) / 2
    out: NDArray[np.float64] = np.quantile(draws, [edge, 1 - edge], method="linear")
    return out


def hdi_eti(comp: Comparison, prob: float = 0.95) -> Comparison:
    """Return ``comp`` with each cell's delta carrying the HDI and ETI of its replicates.

    The intervals (``hdi``, ``eti``: :class:`~specreplay.stats.compare.CredibleInterval`) are
    of the cell's Δ and Δ/R_a replicates at ``prob`` (:func:`hdi_nearest`, :func:`eti`); a null
    delta gets neither.
    """

    def credible(fn: Any, reps: NDArray[np.float64], rel: NDArray[np.float64]) -> CredibleInterval:
        lo, hi = (float(x) for x in fn(reps, prob))
        rlo, rhi = (float(x) for x in fn(rel, prob))
        return CredibleInterval(prob, lo, hi, rlo, rhi)

    cells = []
    for i, cell in enumerate(comp.cells):
        if cell.delta.null_reason is not None:
            cells.append(cell)
            continue
        reps = comp.delta_reps[:, i]
        rel = comp.rel_reps[:, i]
        ok = np.isfinite(reps) & np.isfinite(rel)
        delta = dataclasses.replace(
            cell.delta,
            hdi=credible(hdi_nearest, reps[ok], rel[ok]),
            eti=credible(eti, reps[ok], rel[ok]),
        )
        cells.append(dataclasses.replace(cell, delta=delta))
    return dataclasses.replace(comp, cells=tuple(cells))


def _arviz() -> Any:
    """Return the ``arviz`` module; one line saying how to install it when it is absent.

    ArviZ is an optional extra (``specreplay[arviz]``): only ``Result.to_arviz()`` needs it.
    """
    try:
        import arviz as az  # type: ignore[import-untyped]
    except ImportError:
        raise SpecReplayError(
            "to_arviz() needs ArviZ, an optional extra: pip install 'specreplay[arviz]' "
            "(arviz>=1.3,<2)"
        ) from None
    return az


def _cell_name(cell: Cell) -> str:
    parts = [cell.family or "", cell.bucket or ""]
    name = " × ".join(p for p in parts if p)
    return name or "pooled"


REPEATS_POOLED = "their draws are the pooled cell's (each holds every request)"
"""Why a cell is left out of a replicates tree (its attrs ``cells_left_out_because``)."""


def kept_cells(draws: Sequence[NDArray[np.float64]]) -> list[int]:
    """Return the indices of the cells whose draws are not the pooled cell's (pooled first).

    ``draws``: arrays whose last axis is the cell (index 0 the pooled cell). A cell is left out
    when, in every array, its draws equal the pooled cell's exactly (NaN equal to NaN): a cell
    holding every request (the only bucket, the only family) sums the same requests in every
    replicate, so it repeats the pooled series and adds nothing but a second name for it.
    """
    n_cells = draws[0].shape[-1]
    return [0] + [
        i
        for i in range(1, n_cells)
        if not all(np.array_equal(a[..., i], a[..., 0], equal_nan=True) for a in draws)
    ]


def _tree(
    az: Any,
    posterior: dict[str, NDArray[np.float64]],
    dims: list[str],
    coords: dict[str, list[Any]],
    level: float,
) -> Any:
    """Return the DataTree of ``posterior`` (cell last), without the cells that repeat pooled.

    The root's attrs: ``ci_prob`` (the run's interval level) and, when cells were left out,
    ``cells_left_out`` (their names, ``; ``-separated) and ``cells_left_out_because``.
    """
    names = coords["cell"]
    keep = kept_cells(list(posterior.values()))
    attrs: dict[str, Any] = {"ci_prob": float(level)}
    if len(keep) < len(names):
        attrs["cells_left_out"] = "; ".join(n for i, n in enumerate(names) if i not in keep)
        attrs["cells_left_out_because"] = REPEATS_POOLED
    return az.from_dict(
        {"posterior": {k: v[..., keep] for k, v in posterior.items()}},
        dims={k: dims for k in posterior},
        coords={**coords, "cell": [names[i] for i in keep]},
        attrs={"/": attrs},
    )


def replicates_tree(comp: Comparison) -> Any:
    """Return the replicate draws as an ArviZ ``DataTree`` (group ``posterior``).

    Variables ``delta`` (R_b − R_a), ``rel`` (Δ / R_a) and, when the comparison kept them,
    ``rb`` (R_b), dims (chain, draw, cell); the ``cell`` coordinate names each cell
    (``pooled``, a family, a bucket, ``family × bucket``), less the cells whose draws are the
    pooled cell's (:func:`kept_cells`). The attrs hold ``ci_prob``, the comparison's level
    (the pooled delta's), and the cells left out.
    """
    az = _arviz()
    names = [_cell_name(c) for c in comp.layout]
    draws = {"delta": comp.delta_reps, "rel": comp.rel_reps, "rb": comp.rb_reps}
    posterior = {k: v[None, :, :] for k, v in draws.items() if v is not None}
    return _tree(az, posterior, ["cell"], {"cell": names}, comp.pooled.delta.level)


@dataclass(frozen=True)
class ComparisonReplicates:
    """A comparison's replicates as a result keeps them in memory (``Result.replicates``).

    ``Result.to_arviz()`` calls :meth:`tree`; the pipeline that ran the comparison builds this.
    """

    comparison: Comparison

    def tree(self) -> Any:
        """Return :func:`replicates_tree` of the comparison."""
        return replicates_tree(self.comparison)


@dataclass(frozen=True)
class DepthReplicates:
    """A depth sweep's replicates as its result keeps them in memory (``Result.replicates``).

    ``comparisons`` maps each arm to its depths, each the comparison of the arm at that depth
    (b) with the arm at its reference depth (a), or the reason it is unsupported. Every
    comparison of a sweep resamples the same requests with the same seed (one joint resample),
    so the draws line up across arms and depths.
    """

    comparisons: Mapping[str, Mapping[int, Comparison | str]]

    def tree(self) -> Any:
        """Return the draws as an ArviZ ``DataTree`` (group ``posterior``).

        Variables ``R`` (R at the depth: the comparisons' R_b), ``delta`` (R at the depth − R at
        the reference depth) and ``rel`` (``delta`` / R at the reference depth), dims (chain,
        draw, arm, depth, cell); NaN at an unsupported depth. A cell is left out when its draws
        are the pooled cell's at every arm and depth (:func:`kept_cells`); the attrs hold
        ``ci_prob``, the sweep's level.
        """
        az = _arviz()
        arms = list(self.comparisons)
        depths = sorted({d for per in self.comparisons.values() for d in per})
        comps = [c for per in self.comparisons.values() for c in per.values()]
        first = next(c for c in comps if isinstance(c, Comparison))
        n_boot, n_cells = first.delta_reps.shape
        out = {k: np.full((1, n_boot, len(arms), len(depths), n_cells), np.nan) for k in _DEPTH}
        for i, arm in enumerate(arms):
            for j, d in enumerate(depths):
                c = self.comparisons[arm].get(d)
                if isinstance(c, Comparison):
                    if c.delta_reps.shape != (n_boot, n_cells) or c.rb_reps is None:
                        raise SpecReplayError(f"{arm}@{d}: its replicates do not line up")
                    for key, reps in zip(
                        _DEPTH, (c.rb_reps, c.delta_reps, c.rel_reps), strict=True
                    ):
                        out[key][0, :, i, j, :] = reps
        cells = [_cell_name(c) for c in first.layout]
        coords: dict[str, list[Any]] = {"arm": arms, "depth": depths, "cell": cells}
        return _tree(az, out, ["arm", "depth", "cell"], coords, first.pooled.delta.level)


_DEPTH = ("R", "delta", "rel")


def _netcdf_engine() -> Literal["h5netcdf", "netcdf4"] | None:
    """Return the installed engine that writes a DataTree's groups, or None.

    xarray's ``DataTree.to_netcdf`` writes netCDF4 groups, which only ``h5netcdf`` (writing
    through ``h5py``) and ``netcdf4`` do; scipy's netCDF3 has no groups.
    """
    if find_spec("h5netcdf") is not None and find_spec("h5py") is not None:
        return "h5netcdf"
    if find_spec("netCDF4") is not None:
        return "netcdf4"
    return None


def save_netcdf(tree: DataTree, path: str | PathLike[str]) -> None:
    """Write a :func:`replicates_tree` as netCDF4 (needs the extra ``specreplay[netcdf]``).

    Read it back with ``xarray.open_datatree(path)``.

    Raises
    ------
    SpecReplayError
        When no netCDF4 writer (h5netcdf with h5py, or netCDF4) is installed.
    """
    engine = _netcdf_engine()
    if engine is None:
        raise SpecReplayError(
            "netCDF export needs h5netcdf and h5py: pip install 'specreplay[netcdf]'"
        )
    tree.to_netcdf(path, engine=engine)
