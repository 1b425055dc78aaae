"""MEASURED acceptance of an archive: per-(request, bucket) sums and per-position survival.

The archived verifier's decisions (``accepted``) give, per round, A = the number of leading True
values, hence retained tokens 1 + A. Summed per (request, context bucket) they are the sufficient
statistics every later estimator also produces
(docs/methods.md#the-paired-comparison-cells-and-sums: rounds n and retained tokens t per request ×
bucket), so the bootstrap and the cell aggregation take MEASURED and SIMULATED figures alike. Per
(family, bucket) the accumulator also counts rounds with A ≥ j and rounds that recorded position j,
the MEASURED survival P(A ≥ j).

The accumulator that fills these from archive batches is
:class:`specreplay.replay.measured.MeasuredAccumulator`. This module depends on numpy and polars
only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from numpy.typing import NDArray

__all__ = ["MeasuredArchive", "RequestSums"]


@dataclass(frozen=True)
class RequestSums:
    """Per (request, bucket) sufficient statistics of one arm.

    Attributes
    ----------
    request : int64, (k,)
        Request code.
    bucket : int32, (k,)
        Bucket code.
    family : int32, (k,)
        Family code of the request.
    n : int64, (k,)
        Rounds.
    t : float64, (k,)
        Retained tokens Σ (1 + A).
    """

    request: NDArray[np.int64]
    bucket: NDArray[np.int32]
    family: NDArray[np.int32]
    n: NDArray[np.int64]
    t: NDArray[np.float64]

    def frame(self) -> pl.DataFrame:
        """Return the sums as a polars frame with columns request, bucket, family, n, t."""
        return pl.DataFrame(
            {
                "request": self.request,
                "bucket": self.bucket,
                "family": self.family,
                "n": self.n,
                "t": self.t,
            }
        )


@dataclass(frozen=True)
class MeasuredArchive:
    """Everything MEASURED from an archive's ``accepted`` column and its shape.

    Attributes
    ----------
    sums : RequestSums
        Per (request, bucket) rounds and retained tokens.
    survival_hits : int64, (n_families, n_buckets, max_depth + 1)
        ``[f, b, j]`` = rounds of family f in bucket b with A ≥ j (index 0 unused).
    survival_rounds : int64, same shape
        ``[f, b, j]`` = rounds of family f in bucket b that recorded position j.
    positions : int
        Position rows read.
    min_depth, max_depth : int64, (n_families, n_buckets)
        Fewest / most positions recorded in a round of the cell (0 where the cell is empty).
    """

    sums: RequestSums
    survival_hits: NDArray[np.int64]
    survival_rounds: NDArray[np.int64]
    positions: int
    min_depth: NDArray[np.int64]
    max_depth: NDArray[np.int64]
