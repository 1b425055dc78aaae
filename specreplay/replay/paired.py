"""Two arms of one replay paired on the replay's own request codes.

See docs/inputs.md#round-traces-and-per-request-sums.

Every arm of a replay pass, and the archive's MEASURED figures, are sums per (request code,
bucket) on the pass's one request table (:class:`~specreplay.replay.engine.ReplayResult`), so
pairing them needs no request ids: an :class:`ArmSide` is an arm's (request, bucket) rows as
codes, and :func:`pair_sides` lays two of them onto one
:class:`~specreplay.stats.bootstrap.PairedSums` with numpy alone (no join, no hashing: the
request keys are the table's).

Order. The figures of a comparison are sums over requests and pieces taken in
``PairedSums`` order, and the bootstrap's strata are numbered by family code. The order is the
one :func:`specreplay.stats.pairing.pair_arms` gives to arms read from files: requests by id
(``rank``, the rank of each code's id among the table's ids), a request's pieces by bucket
name, families by name and numbered among the paired requests' families only; so a comparison
of replay arms is bit-identical to pairing the same sums by id.
:func:`~specreplay.stats.pairing.pair_arms` stays for arms read from files (``interval``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.stats.bootstrap import PairedSums
from specreplay.stats.buckets import Buckets

__all__ = ["ArmSide", "RequestCodes", "pair_sides"]


@dataclass(frozen=True)
class ArmSide:
    """One side of a comparison: an arm's sums per (request code, bucket) of a replay.

    Attributes
    ----------
    name : str
        The arm's name in outputs (``ARM``, ``ARM (MEASURED)``, ``ARM (importance)``, …).
    request : int64, (k,)
        Index into the replay's request table, one row per (request, bucket) holding rounds.
    bucket : int32, (k,)
        Bucket code.
    n, t : float64, (k,)
        Rounds and retained tokens.
    depth : int or None
        The arm's depth (the most tokens a round can accept beyond the first); None unknown.
    width, limit : float64, (k,), or None
        Σ of the rounds' tail widths and their limits (a figure bounded over a truncated law:
        :mod:`specreplay.replay.truncation`; ``t`` then sums midpoints); None: exact.
    """

    name: str
    request: NDArray[np.int64]
    bucket: NDArray[np.int32]
    n: NDArray[np.float64]
    t: NDArray[np.float64]
    depth: int | None
    width: NDArray[np.float64] | None = None
    limit: NDArray[np.float64] | None = None


@dataclass(frozen=True)
class RequestCodes:
    """The replay's request table as pairing reads it.

    Attributes
    ----------
    ids : list of str
        Request ids by code.
    keys : uint64, (r,)
        Stable request keys by code.
    family : int32, (r,)
        Family code of each request (index into ``families``, sorted by name).
    families : list of str
    rank : int64, (r,)
        Rank of each code's id among the ids (string order).
    """

    ids: list[str]
    keys: NDArray[np.uint64]
    family: NDArray[np.int32]
    families: list[str]
    rank: NDArray[np.int64]


def _unpaired(a: ArmSide, b: ArmSide, table: RequestCodes) -> SpecReplayError:
    """Return the error of sides not holding the same requests (``pair_arms``'s words)."""
    ra, rb = np.unique(a.request), np.unique(b.request)
    only_a = sorted(table.ids[int(i)] for i in np.setdiff1d(ra, rb))
    only_b = sorted(table.ids[int(i)] for i in np.setdiff1d(rb, ra))
    shown = [f"{r!r} (only in {a.name})" for r in only_a[:5]]
    shown += [f"{r!r} (only in {b.name})" for r in only_b[:5]]
    total = len(only_a) + len(only_b)
    return SpecReplayError(
        f"{total} unpaired request(s): {', '.join(shown)}"
        + (", …" if total > len(shown) else "")
        + "; pass --drop-unpaired to leave them out (they are then counted in the output)"
    )


def pair_sides(a: ArmSide, b: ArmSide, table: RequestCodes, buckets: Buckets) -> PairedSums:
    """Return the paired sums of sides ``a`` and ``b`` (see the module docstring).

    Raises
    ------
    SpecReplayError
        When the sides do not hold the same requests, or hold none.
    """
    req_a, req_b = np.unique(a.request), np.unique(b.request)
    if not np.array_equal(req_a, req_b):
        raise _unpaired(a, b, table)
    if req_a.shape[0] == 0:
        raise SpecReplayError(f"arms {a.name} and {b.name} share no request id")
    nb = len(buckets.names)
    bucket_rank = np.empty(nb, np.int64)
    bucket_rank[np.argsort(np.array(buckets.names, dtype=object), kind="stable")] = np.arange(nb)
    # requests by id; a request's pieces by bucket name (the order of a sort on the strings)
    order = req_a[np.argsort(table.rank[req_a], kind="stable")]
    position = np.zeros(len(table.ids), np.int64)
    position[order] = np.arange(order.shape[0])
    key_a = position[a.request] * nb + bucket_rank[a.bucket]
    key_b = position[b.request] * nb + bucket_rank[b.bucket]
    pieces = np.union1d(key_a, key_b)
    vals = np.zeros((4, pieces.shape[0]))
    at_a, at_b = np.searchsorted(pieces, key_a), np.searchsorted(pieces, key_b)
    vals[0, at_a], vals[1, at_a] = a.n, a.t
    vals[2, at_b], vals[3, at_b] = b.n, b.t
    tails = None
    if a.width is not None or b.width is not None:
        tails = np.zeros((4, pieces.shape[0]))
        for i, (side, at) in enumerate(((a, at_a), (b, at_b))):
            if side.width is not None:
                tails[2 * i, at] = side.width
                tails[2 * i + 1, at] = side.limit if side.limit is not None else side.width
    by_rank = np.empty(nb, np.int64)
    by_rank[bucket_rank] = np.arange(nb)
    present = np.unique(table.family[order])  # families of the paired requests, by name
    fam_code = np.full(len(table.families), -1, np.int64)
    fam_code[present] = np.arange(present.shape[0])
    return PairedSums(
        request_ids=tuple(table.ids[int(i)] for i in order),
        request_keys=table.keys[order],
        family=fam_code[table.family[order]].astype(np.int32),
        piece_request=(pieces // nb).astype(np.int64),
        piece_bucket=by_rank[pieces % nb].astype(np.int32),
        n_a=vals[0].copy(),
        t_a=vals[1].copy(),
        n_b=vals[2].copy(),
        t_b=vals[3].copy(),
        families=tuple(table.families[int(f)] for f in present),
        buckets=tuple(buckets.names),
        unbucketed=buckets.unbucketed_code,
        depths=(a.depth, b.depth) if a.depth is not None and b.depth is not None else None,
        tails=tails,
    )
