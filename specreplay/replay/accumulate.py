"""Per-(request, bucket) sums of replayed rounds, added in archive order (bit-identical).

Each batch's per-round values (:class:`~specreplay.replay.estimators.base.RoundValues`, the same
type for every estimator) are added one round at a time, in archive order, into arrays keyed by the
shard's request code × n_buckets + bucket, so the floating-point sums do not depend on the thread
count or on where batches were cut (docs/scale.md). :meth:`ReplayAccumulator.result` turns them into
:class:`ArmSums`, keyed by the stable request key and bucket, in canonical order (request key, then
bucket): the order every later aggregation follows, whatever the file layout.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.replay.estimators.base import RoundValues

__all__ = ["NO_ROUND", "ArmSums", "ReplayAccumulator", "canonical_order"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

NO_ROUND = np.iinfo(np.int64).max
"""``ArmSums.short_at`` where no round is short (larger than every round's place)."""


@njit(cache=True)
def _add_rounds(
    keys: NDArray[np.int64],
    depth: NDArray[np.int32],
    t: NDArray[np.float64],
    var: NDArray[np.float64],
    surv: NDArray[np.float64],
    offpath: NDArray[np.float64],
    at: NDArray[np.int64],
    n: NDArray[np.float64],
    short: NDArray[np.float64],
    short_at: NDArray[np.int64],
    a_t: NDArray[np.float64],
    a_v: NDArray[np.float64],
    a_s: NDArray[np.float64],
    a_off: NDArray[np.float64],
) -> None:
    """Add each round's values to its key's sums, sequentially in the given order.

    ``keys`` int64 (n,), ``depth`` int32 (n,), ``t``/``var``/``surv`` float64 (n, D),
    ``offpath`` float64 (n, 4), ``at`` int64 (n,) each round's place in the archive; the sums
    are float64 (cap,), (cap, D) and (cap, 4). ``n[key]`` counts rounds; ``short[key, d]``
    counts rounds replayed at fewer than d + 1 positions (depth d + 1 unsupported there) and
    ``short_at[key, d]`` (int64) keeps the smallest place of them; the others are sums over
    supported rounds.
    """
    max_depth = t.shape[1]
    for r in range(keys.shape[0]):
        k = keys[r]
        n[k] += 1.0
        for j in range(4):
            a_off[k, j] += offpath[r, j]
        for d in range(max_depth):
            if d >= depth[r]:
                short[k, d] += 1.0
                short_at[k, d] = min(short_at[k, d], at[r])
                continue
            a_t[k, d] += t[r, d]
            a_v[k, d] += var[r, d]
            a_s[k, d] += surv[r, d]


@njit(cache=True)
def _add_ratios(
    keys: NDArray[np.int64],
    depth: NDArray[np.int32],
    ratio: NDArray[np.float64],
    bound: NDArray[np.float64],
    moment: NDArray[np.float64],
    a_r: NDArray[np.float64],
    a_r2: NDArray[np.float64],
    a_min: NDArray[np.float64],
    a_max: NDArray[np.float64],
    a_bmax: NDArray[np.float64],
    a_mmax: NDArray[np.float64],
) -> None:
    """Add each round's policy ratios r_k and r_k² to its key's sums; keep their min and max.

    ``keys`` int64 (n,), ``depth`` int32 (n,), ``ratio``, ``bound`` (the exact per-round
    bound b_k of r_k) and ``moment`` (the product m_k of the positions' exact second moments)
    float64 (n, D); the sums, minima and maxima (of r_k; of b_k: ``a_bmax``; of m_k:
    ``a_mmax``) float64 (cap, D), over the rounds replayed at ≥ k positions (column k − 1).
    """
    for r in range(keys.shape[0]):
        k = keys[r]
        for d in range(depth[r]):
            x = ratio[r, d]
            a_r[k, d] += x
            a_r2[k, d] += x * x
            a_min[k, d] = min(a_min[k, d], x)
            a_max[k, d] = max(a_max[k, d], x)
            a_bmax[k, d] = max(a_bmax[k, d], bound[r, d])
            a_mmax[k, d] = max(a_mmax[k, d], moment[r, d])


@njit(cache=True)
def _add_widths(
    keys: NDArray[np.int64],
    depth: NDArray[np.int32],
    width: NDArray[np.float64],
    limit: NDArray[np.float64],
    a_w: NDArray[np.float64],
    a_l: NDArray[np.float64],
) -> None:
    """Add each round's tail width and its limit (RoundValues.width, .limit) to its key's sums.

    Over the rounds replayed at ≥ d positions (column d − 1), sequentially in the given order.
    """
    for r in range(keys.shape[0]):
        k = keys[r]
        for d in range(depth[r]):
            a_w[k, d] += width[r, d]
            a_l[k, d] += limit[r, d]


@dataclass(frozen=True)
class ArmSums:
    """Sums of one arm per (request, bucket), in canonical order (request key, then bucket).

    Attributes
    ----------
    request_key : uint64, (k,)
        Stable request key (:func:`~specreplay.sim.rng.request_key`).
    bucket : int32, (k,)
        Context-bucket code.
    request : int64, (k,)
        Index into the owner's request table (``ShardSums.requests`` /
        ``ReplayResult.requests``).
    family : int32, (k,)
        Index into the owner's family table.
    n : float64, (k,)
        Rounds (those left out by ``--short-rounds exclude`` are not among them).
    short : float64, (k, D)
        Rounds that recorded fewer than d positions (column d − 1): depth d unsupported there.
    short_at : int64, (k, D)
        The place in the archive (:data:`~specreplay.replay.archive.batch.AT_FILE_SHIFT`) of
        the first of those rounds; :data:`NO_ROUND` where there is none.
    excluded : float64, (k,)
        Rounds left out by ``--short-rounds exclude`` or ``capped`` (fewer positions than the
        run's depth): counted here, in no other sum.
    excluded_t : float64, (k,)
        Their MEASURED retained tokens, Σ (1 + A) (0 where the archive has no ``accepted``):
        MEASURED over every round is (Σ t + Σ excluded_t) / (Σ n + Σ excluded).
    t : float64, (k, D)
        Σ E[1 + A] at depth d over the supported rounds (the estimator's per-round value).
    var : float64, (k, D)
        Σ of the rounds' variances of that value (Monte Carlo: MCSE² × rounds²; 0 if exact).
    surv : float64, (k, D)
        Σ P(A ≥ k) over the supported rounds.
    offpath : float64, (k, 4)
        Σ accepted, accepted off-path, evaluated, evaluated through an off-path prefix.
    ratio_sum, ratio_sq : float64, (k, D)
        Σ r_k and Σ r_k² of the policy ratio over the supported rounds (importance estimator;
        zeros for the others): the effective sample size's sums.
    ratio_min, ratio_max : float64, (k, D)
        Smallest and largest r_k (+inf and −inf where no ratio was added).
    bound_max : float64, (k, D)
        Largest exact per-round bound b_k = Π_{j≤k} max_x q^s_j(x)/q^L_j(x) of r_k over the
        supported rounds (importance estimator; 0 where no ratio was added: b_k ≥ 0).
    moment_max : float64, (k, D)
        Largest m_k = Π_{j≤k} Σ_x q^s_j(x)²/q^L_j(x) (the positions' exact second moments of
        the ratio factor) over the supported rounds (importance; 0 where no ratio was added).
    width, width_limit : float64, (k, D)
        Σ of the rounds' tail widths and of their limits (RoundValues.width, .limit) over the
        supported rounds: zeros where the figure does not depend on the mass outside the
        candidates (``t`` then sums exact values, else the ranges' midpoints).
    """

    request_key: NDArray[np.uint64]
    bucket: NDArray[np.int32]
    request: NDArray[np.int64]
    family: NDArray[np.int32]
    n: NDArray[np.float64]
    short: NDArray[np.float64]
    short_at: NDArray[np.int64]
    excluded: NDArray[np.float64]
    excluded_t: NDArray[np.float64]
    t: NDArray[np.float64]
    var: NDArray[np.float64]
    surv: NDArray[np.float64]
    offpath: NDArray[np.float64]
    ratio_sum: NDArray[np.float64]
    ratio_sq: NDArray[np.float64]
    ratio_min: NDArray[np.float64]
    ratio_max: NDArray[np.float64]
    bound_max: NDArray[np.float64]
    moment_max: NDArray[np.float64]
    width: NDArray[np.float64]
    width_limit: NDArray[np.float64]

    def take(self, rows: NDArray[np.int64] | NDArray[np.bool_]) -> ArmSums:
        """Return the rows ``rows`` (indices or a mask), in that order."""
        return ArmSums(**{f.name: getattr(self, f.name)[rows] for f in fields(ArmSums)})

    def with_tables(self, request: NDArray[np.int64], family: NDArray[np.int32]) -> ArmSums:
        """Return the same sums with new request and family indices (another owner's tables)."""
        vals = {f.name: getattr(self, f.name) for f in fields(ArmSums)}
        return ArmSums(**{**vals, "request": request, "family": family})

    @staticmethod
    def merge(a: ArmSums, b: ArmSums) -> ArmSums:
        """Return the sums of ``a`` then ``b``, canonical order; a (request, bucket) in both: a + b.

        The request and family indices of the result are those of ``a`` or ``b`` and must be
        replaced by the caller (:meth:`with_tables`).
        """
        both = {
            f.name: np.concatenate([getattr(a, f.name), getattr(b, f.name)])
            for f in fields(ArmSums)
        }
        order = canonical_order(both["request_key"], both["bucket"])  # stable: a before b
        key, bkt = both["request_key"][order], both["bucket"][order]
        new = np.ones(order.shape[0], bool)
        new[1:] = (key[1:] != key[:-1]) | (bkt[1:] != bkt[:-1])
        starts = np.flatnonzero(new)
        out: dict[str, NDArray[np.generic]] = {}
        for name, v in both.items():
            v = v[order]
            if not v.shape[0]:
                out[name] = v
            elif name in _SUMMED:
                out[name] = np.add.reduceat(v, starts, axis=0)
            elif name in ("ratio_min", "short_at"):
                out[name] = np.minimum.reduceat(v, starts, axis=0)
            elif name in ("ratio_max", "bound_max", "moment_max"):
                out[name] = np.maximum.reduceat(v, starts, axis=0)
            else:
                out[name] = v[starts]
        return ArmSums(**out)  # type: ignore[arg-type]


_SUMMED = frozenset(
    {
        "n",
        "short",
        "excluded",
        "excluded_t",
        "t",
        "var",
        "surv",
        "offpath",
        "ratio_sum",
        "ratio_sq",
        "width",
        "width_limit",
    }
)


def canonical_order(key: NDArray[np.uint64], bucket: NDArray[np.int32]) -> NDArray[np.int64]:
    """Return the stable permutation sorting rows by (request key, bucket)."""
    return np.lexsort((bucket, key)).astype(np.int64)


class ReplayAccumulator:
    """Grow-as-needed per-key sums for one arm (D depths); key = request code × nb + bucket."""

    def __init__(self, max_depth: int) -> None:
        self.d = max_depth
        self._cap = 0
        self._arrays: dict[str, NDArray[Any]] = {}
        self._grow(1024)

    def _grow(self, size: int) -> None:
        cap = max(size, 2 * self._cap)
        shapes = {
            "n": (cap,),
            "short": (cap, self.d),
            "short_at": (cap, self.d),
            "excluded": (cap,),
            "excluded_t": (cap,),
            "t": (cap, self.d),
            "var": (cap, self.d),
            "surv": (cap, self.d),
            "offpath": (cap, 4),
            "ratio_sum": (cap, self.d),
            "ratio_sq": (cap, self.d),
            "ratio_min": (cap, self.d),
            "ratio_max": (cap, self.d),
            "bound_max": (cap, self.d),
            "moment_max": (cap, self.d),
            "width": (cap, self.d),
            "width_limit": (cap, self.d),
        }
        init = {"ratio_min": np.inf, "ratio_max": -np.inf}
        for name, shape in shapes.items():
            if name == "short_at":
                new = np.full(shape, NO_ROUND, np.int64)
            else:
                new = np.full(shape, init.get(name, 0.0))
            if name in self._arrays:
                new[: self._cap] = self._arrays[name]
            self._arrays[name] = new
        self._cap = cap

    def _fit(self, keys: NDArray[np.int64]) -> None:
        need = int(keys.max()) + 1
        if need > self._cap:
            self._grow(need)

    def add(
        self, keys: NDArray[np.int64], values: RoundValues, at: NDArray[np.int64] | None = None
    ) -> None:
        """Add a batch's rounds (``keys`` in archive order; ``at`` their places, if known)."""
        if keys.shape[0] == 0:
            return
        self._fit(keys)
        a = self._arrays
        if at is None or at.shape[0] != keys.shape[0]:
            at = np.full(keys.shape[0], NO_ROUND, np.int64)
        _add_rounds(
            keys,
            values.depth,
            values.t,
            values.var,
            values.surv,
            values.offpath,
            at,
            a["n"],
            a["short"],
            a["short_at"],
            a["t"],
            a["var"],
            a["surv"],
            a["offpath"],
        )
        if values.ratio is not None:
            bound = values.bound if values.bound is not None else values.ratio
            moment = values.moment if values.moment is not None else values.ratio**2
            _add_ratios(
                keys,
                values.depth,
                values.ratio,
                bound,
                moment,
                a["ratio_sum"],
                a["ratio_sq"],
                a["ratio_min"],
                a["ratio_max"],
                a["bound_max"],
                a["moment_max"],
            )
        if values.width is not None:
            limit = values.limit if values.limit is not None else values.width
            _add_widths(keys, values.depth, values.width, limit, a["width"], a["width_limit"])

    def exclude(self, keys: NDArray[np.int64], retained: NDArray[np.float64] | None = None) -> None:
        """Count rounds left out (``--short-rounds``) per key, with their retained tokens."""
        if keys.shape[0] == 0:
            return
        self._fit(keys)
        ex = self._arrays["excluded"]
        ex += np.bincount(keys, minlength=ex.shape[0]).astype(np.float64)
        if retained is not None:
            et = self._arrays["excluded_t"]
            et += np.bincount(keys, weights=retained, minlength=et.shape[0])

    def result(
        self,
        n_buckets: int,
        request_keys: NDArray[np.uint64],
        request_family: NDArray[np.int32],
        code_to_index: NDArray[np.int64],
    ) -> ArmSums:
        """Return the sums of every key holding a round, in canonical order.

        ``request_keys`` and ``request_family`` are indexed by request code; ``code_to_index``
        maps a request code to its index in the owner's (canonically sorted) request table.
        """
        a = self._arrays
        keys = np.flatnonzero(a["n"][: self._cap] + a["excluded"][: self._cap])
        code = keys // n_buckets
        key = request_keys[code]
        bucket = (keys % n_buckets).astype(np.int32)
        order = canonical_order(key, bucket)
        keys, code = keys[order], code[order]
        return ArmSums(
            request_key=key[order],
            bucket=bucket[order],
            request=code_to_index[code],
            family=request_family[code],
            n=a["n"][keys],
            short=a["short"][keys],
            short_at=a["short_at"][keys],
            excluded=a["excluded"][keys],
            excluded_t=a["excluded_t"][keys],
            t=a["t"][keys],
            var=a["var"][keys],
            surv=a["surv"][keys],
            offpath=a["offpath"][keys],
            ratio_sum=a["ratio_sum"][keys],
            ratio_sq=a["ratio_sq"][keys],
            ratio_min=a["ratio_min"][keys],
            ratio_max=a["ratio_max"][keys],
            bound_max=a["bound_max"][keys],
            moment_max=a["moment_max"][keys],
            width=a["width"][keys],
            width_limit=a["width_limit"][keys],
        )
