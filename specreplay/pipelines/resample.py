"""The run's one resample pass: every comparison of a run from the same joint replicates.

See docs/methods.md#the-paired-bootstrap.

A command plans its comparisons first (a :class:`Pairing`: two arms' paired sums, no replicate
yet), draws the resampling randomness once for all of them (:func:`resampled`: each replicate's
request multiplicities, drawn once per stratum, weight every pairing's pieces), then compares each
(:func:`compared`). The candidate, the reference, the path biases, every depth of a sweep and the
``--by`` groupings of a run therefore share their replicates, and the draws, the costly part of
the bootstrap, are made once per run instead of once per comparison.

The resampling units and strata are the first pairing's requests and families: the run's main
comparison, planned first. A ``--by`` grouping of the same requests is resampled with them (a
``by`` cell's replicates are the run's multiplicities summed over its value's requests), not
within its own groups; every other comparison of a run already holds the same requests under the
same families, so its replicates are those it drew on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from specreplay.pipelines.options import BootstrapOptions
from specreplay.stats.bootstrap import PairedSums, resample_sums, resampling
from specreplay.stats.compare import CellSupport, Comparison, Margin, compare

__all__ = ["Pairing", "compared", "resampled"]


@dataclass(frozen=True)
class Pairing:
    """One comparison of a run, planned: two arms' paired sums and, once drawn, their replicates.

    Attributes
    ----------
    ps : PairedSums
        The paired sums of arms a and b.
    arm_a, arm_b : str
        Their names (a is the reference of Δ = R_b − R_a).
    support : CellSupport or None
        Per cell, why an arm's figures there are unsupported
        (:func:`~specreplay.stats.compare.compare`).
    replicates : float64, (n_boot, n_families, n_buckets, 4), or None
        The resampled sums of ``ps`` from the run's one pass (:func:`resampled`).
    same : bool
        The two sides are one computation by construction (an arm against itself):
        "identical inputs" (:func:`~specreplay.stats.compare.compare`'s ``same``).
    """

    ps: PairedSums
    arm_a: str
    arm_b: str
    support: CellSupport | None = None
    replicates: NDArray[np.float64] | None = None
    same: bool = False


def resampled(pairings: Sequence[Pairing], boot: BootstrapOptions, seed: int) -> list[Pairing]:
    """Return ``pairings`` with their replicates, all from one draw per replicate.

    The units and strata (``boot.stratify``) are those of the first pairing; every other
    pairing's requests must be among its requests.
    """
    if not pairings:
        return []
    rs = resampling(pairings[0].ps, n_boot=boot.n_boot, seed=seed, stratify=boot.stratify)
    sums = resample_sums(rs, [p.ps for p in pairings])
    return [replace(p, replicates=s) for p, s in zip(pairings, sums, strict=True)]


def compared(
    p: Pairing,
    boot: BootstrapOptions,
    seed: int,
    *,
    label: str,
    margin: Margin | None = None,
) -> Comparison:
    """Compare a pairing under ``boot`` (``margin`` overrides its margin) with its replicates.

    A pairing not yet resampled draws its own (the same as a run of this comparison alone).
    """
    return compare(
        p.ps,
        arm_a=p.arm_a,
        arm_b=p.arm_b,
        n_boot=boot.n_boot,
        seed=seed,
        stratify=boot.stratify,
        level=boot.level,
        margin=boot.margin if margin is None else margin,
        min_requests=boot.min_requests,
        label=label,
        support=p.support,
        replicates=p.replicates,
        same=p.same,
    )
