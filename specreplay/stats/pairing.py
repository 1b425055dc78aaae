"""Pairing two arms by request id into :class:`~specreplay.stats.bootstrap.PairedSums`.

See docs/inputs.md#round-traces-and-per-request-sums.

For arms read from files (``interval``): the arms of a replay pass share its request table and
are paired on its codes instead (:mod:`specreplay.replay.paired`, bit-identical to this). Requests
present in only one arm are an error that lists them, unless ``drop_unpaired`` (then they
are counted under ``excluded``). Each arm keeps its own round counts; a request may spread over
several context buckets, and a bucket may hold rounds of one arm only (the other's are 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from specreplay.errors import SpecReplayError
from specreplay.sim.rng import request_key
from specreplay.stats.armdata import ArmData
from specreplay.stats.bootstrap import PairedSums
from specreplay.stats.buckets import Buckets

__all__ = ["pair_arms"]


def pair_arms(
    a: ArmData, b: ArmData, *, buckets: Buckets, drop_unpaired: bool = False
) -> tuple[PairedSums, list[dict[str, Any]]]:
    """Pair arms a and b by request id; return the paired sums and the ``excluded`` entries."""
    excluded: list[dict[str, Any]] = []
    ra = set(a.sums.get_column("request_id").unique().to_list())
    rb = set(b.sums.get_column("request_id").unique().to_list())
    only_a, only_b = sorted(ra - rb), sorted(rb - ra)
    if only_a or only_b:
        if not drop_unpaired:
            shown = [f"{r!r} (only in {a.name})" for r in only_a[:5]]
            shown += [f"{r!r} (only in {b.name})" for r in only_b[:5]]
            total = len(only_a) + len(only_b)
            raise SpecReplayError(
                f"{total} unpaired request(s): {', '.join(shown)}"
                + (", …" if total > len(shown) else "")
                + "; pass --drop-unpaired to leave them out (they are then counted in the output)"
            )
        for arm, ids in ((a, only_a), (b, only_b)):
            if ids:
                rounds = int(arm.sums.filter(pl.col("request_id").is_in(ids)).get_column("n").sum())
                excluded.append(
                    {
                        "reason": f"unpaired: request only in arm {arm.name} (--drop-unpaired)",
                        "requests": len(ids),
                        "rounds": rounds,
                    }
                )
    keep = sorted(ra & rb)
    if not keep:
        raise SpecReplayError(f"arms {a.name} and {b.name} share no request id")
    fa = a.sums.group_by("request_id").agg(pl.col("family").first().alias("fa"))
    fb = b.sums.group_by("request_id").agg(pl.col("family").first().alias("fb"))
    fam = fa.join(fb, on="request_id", how="inner").sort("request_id")
    clash = fam.filter(pl.col("fa") != pl.col("fb"))
    if clash.height:
        r = clash.row(0, named=True)
        raise SpecReplayError(
            f"request {r['request_id']!r} has family {r['fa']!r} in {a.name} "
            f"but {r['fb']!r} in {b.name}"
        )
    families = sorted(set(fam.get_column("fa").to_list()))
    fam_code = {f: i for i, f in enumerate(families)}
    req_code = {r: i for i, r in enumerate(fam.get_column("request_id").to_list())}
    bucket_code = {name: i for i, name in enumerate(buckets.names)}
    sa = a.sums.filter(pl.col("request_id").is_in(keep)).select(
        "request_id", "bucket", pl.col("n").alias("n_a"), pl.col("t").alias("t_a")
    )
    sb = b.sums.filter(pl.col("request_id").is_in(keep)).select(
        "request_id", "bucket", pl.col("n").alias("n_b"), pl.col("t").alias("t_b")
    )
    pieces = (
        sa.join(sb, on=["request_id", "bucket"], how="full", coalesce=True)
        .fill_null(0)
        .sort("request_id", "bucket")
    )
    unknown = set(pieces.get_column("bucket").unique().to_list()) - set(bucket_code)
    if unknown:
        raise SpecReplayError(f"bucket(s) {sorted(unknown)} are not in --buckets")
    rid = pieces.get_column("request_id").to_list()
    family_of = dict(zip(fam.get_column("request_id"), fam.get_column("fa"), strict=True))
    ps = PairedSums(
        request_ids=tuple(req_code),
        request_keys=np.array([request_key(r) for r in req_code], dtype=np.uint64),
        family=np.array([fam_code[family_of[r]] for r in req_code], dtype=np.int32),
        piece_request=np.array([req_code[r] for r in rid], dtype=np.int64),
        piece_bucket=np.array(
            [bucket_code[x] for x in pieces.get_column("bucket").to_list()], dtype=np.int32
        ),
        n_a=pieces.get_column("n_a").cast(pl.Float64).to_numpy(),
        t_a=pieces.get_column("t_a").cast(pl.Float64).to_numpy(),
        n_b=pieces.get_column("n_b").cast(pl.Float64).to_numpy(),
        t_b=pieces.get_column("t_b").cast(pl.Float64).to_numpy(),
        families=tuple(families),
        buckets=tuple(buckets.names),
        unbucketed=buckets.unbucketed_code,
        depths=(a.depth, b.depth) if a.depth is not None and b.depth is not None else None,
    )
    return ps, excluded
