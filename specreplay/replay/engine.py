"""Streaming replay of a position-trace archive under several arms (SPEC §3.2, §5).

One pass over the archive: for each batch of whole rounds, each distinct policy's law is computed
once (:class:`~specreplay.sim.policy.LawCache`), every arm is replayed for every depth 1..D, and the
per-round values are added, in archive order, into per-(request, bucket) sums. The MEASURED
figures of the archive (its ``accepted`` column) are accumulated in the same pass, so the logging
arm's path-bias diagnostic needs no second read.

With the analytic estimator each arm quantizes its policy law row by row inside the replay
(:func:`~specreplay.replay.estimators.analytic.analytic_rounds`); Monte Carlo needs the
quantized laws and their dyadic integers as arrays, so they are computed once per distinct (policy,
quantizer)
(:meth:`~specreplay.sim.policy.LawCache.laws`) and replayed with
:func:`~specreplay.replay.estimators.montecarlo.replay_rounds`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from specreplay.errors import SpecReplayError
from specreplay.replay.accumulate import ReplayAccumulator, ReplaySums
from specreplay.replay.archive.batch import RoundBatch
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.estimators.analytic import analytic_rounds
from specreplay.replay.estimators.montecarlo import replay_rounds
from specreplay.replay.measured import MeasuredAccumulator
from specreplay.sim.arms import Arm
from specreplay.sim.policy import FLAG_K_EXCEEDS, FLAG_NO_SUPPORT, LawCache, Workspace
from specreplay.stats.armdata import ArmData
from specreplay.stats.buckets import Buckets
from specreplay.stats.measured import MeasuredArchive

__all__ = ["ReplayResult", "replay_archive"]

ESTIMATORS = ("analytic", "montecarlo")


@dataclass
class ReplayResult:
    """Everything one replay pass produced.

    Attributes
    ----------
    arms : list of Arm
        The replayed arms (canonical names are their keys).
    sums : dict of str to ReplaySums
        Per arm, per-(request, bucket) sums for depths 1..max_depth.
    measured : MeasuredArchive
        MEASURED sums and survival from the archive's ``accepted`` column.
    reader : ArchiveReader
        Request, family and bucket tables of the archive.
    flagged_rows : dict of str to int
        Per arm, position rows whose top-K exceeds the archived candidates.
    unsupported_rows : dict of str to int
        Per arm, position rows whose every draft log-probability is −inf (nothing to draft).
    estimator, replicates, seed, max_depth
        How the replay ran.
    excluded : list of dict
        Rows left out under an explicit option, per reason.
    """

    arms: list[Arm]
    sums: dict[str, ReplaySums]
    measured: MeasuredArchive
    reader: ArchiveReader
    flagged_rows: dict[str, int]
    unsupported_rows: dict[str, int]
    estimator: str
    replicates: int
    seed: int
    max_depth: int
    positions: int
    excluded: list[dict[str, Any]] = field(default_factory=list)

    @property
    def buckets(self) -> Buckets:
        """The context buckets of the replay."""
        return self.reader.buckets

    def _frame(self, keys: np.ndarray[Any, Any], n: Any, t: Any) -> pl.DataFrame:
        nb = len(self.buckets.names)
        req = keys // nb
        bkt = keys % nb
        r = self.reader
        return pl.DataFrame(
            {
                "request_id": [r.requests[int(i)] for i in req],
                "family": [r.families[r.request_family[int(i)]] for i in req],
                "bucket": [self.buckets.names[int(b)] for b in bkt],
                "n": np.asarray(n, dtype=np.int64),
                "t": np.asarray(t, dtype=np.float64),
            }
        )

    def arm_data(self, arm: Arm, depth: int | None = None) -> ArmData:
        """Return the SIMULATED per-(request, bucket) sums of ``arm`` at ``depth`` (or its own)."""
        d = depth or arm.depth
        s = self.sums[arm.canonical]
        if d > self.max_depth:
            raise SpecReplayError(f"{arm.canonical}: depth {d} was not replayed")
        short = int(s.short[:, d - 1].sum())
        if short:
            raise SpecReplayError(
                f"{arm.canonical}: depth {d} is UNSUPPORTED: {short} archived rounds record fewer "
                f"than {d} positions (depths past the recorded ones are never extrapolated)"
            )
        t = s.t_mc[:, d - 1] if self.estimator == "montecarlo" else s.t_analytic[:, d - 1]
        return ArmData(
            name=arm.canonical,
            kind="replay",
            sums=self._frame(s.keys, s.n, t),
            label="SIMULATED",
        )

    def measured_data(self, name: str = "MEASURED") -> ArmData:
        """Return the archive's MEASURED per-(request, bucket) sums (from ``accepted``)."""
        m = self.measured.sums
        nb = len(self.buckets.names)
        keys = m.request * nb + m.bucket
        return ArmData(name=name, kind="archive", sums=self._frame(keys, m.n, m.t))

    def mcse(self, arm: Arm, keys_mask: np.ndarray[Any, Any] | None = None) -> float:
        """Monte Carlo standard error of R over the selected keys (delta method; 0 if analytic)."""
        if self.estimator != "montecarlo":
            return 0.0
        s = self.sums[arm.canonical]
        sel = np.ones(s.keys.shape[0], bool) if keys_mask is None else keys_mask
        n = float(s.n[sel].sum())
        return float(np.sqrt(s.var_mc[sel, arm.depth - 1].sum()) / n) if n else 0.0


def replay_archive(
    path: Path,
    arms: Sequence[Arm],
    *,
    estimator: str = "analytic",
    replicates: int = 16,
    seed: int = 0,
    buckets: Buckets | None = None,
    max_depth: int | None = None,
    batch_rows: int = 262_144,
    families: set[str] | None = None,
    requests: set[str] | None = None,
    logging_arm: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Replay ``arms`` over the archive at ``path`` in one streaming pass.

    Parameters
    ----------
    path : Path
        Position-trace archive (file or shard folder).
    arms : sequence of Arm
        Distinct arms (by canonical form).
    estimator : {"analytic", "montecarlo"}
        Which per-round value the sums report as R (both are computed with ``montecarlo``).
    replicates : int
        Monte Carlo replicates M per round.
    seed : int
        Seed of every draw (common to all arms: common random numbers).
    buckets : Buckets, optional
        Context buckets (default SPEC's).
    max_depth : int, optional
        Depths 1..D replayed (default: the deepest arm).
    batch_rows : int
        Position rows per batch.
    families, requests : set of str, optional
        Replay only these families / request ids (the rest is counted in ``excluded``).
    logging_arm : str, optional
        ``--logging-arm`` for archives without a logging_arm column.
    progress : callable, optional
        Called with the number of positions of each batch.
    """
    if estimator not in ESTIMATORS:
        raise SpecReplayError(f"--estimator: {estimator!r} should be analytic or montecarlo")
    if estimator == "montecarlo" and replicates < 2:
        raise SpecReplayError("--replicates: Monte Carlo needs at least 2 replicates")
    reader = ArchiveReader(path, buckets=buckets, batch_rows=batch_rows, logging_arm=logging_arm)
    depth = max_depth or max(a.depth for a in arms)
    nb = len(reader.buckets.names)
    accs = {a.canonical: ReplayAccumulator(depth) for a in arms}
    flagged = {a.canonical: 0 for a in arms}
    no_support = {a.canonical: 0 for a in arms}
    measured = MeasuredAccumulator(nb)
    reps = replicates if estimator == "montecarlo" else 0
    dropped_fam = dropped_req = 0
    positions = 0
    workspace = Workspace()  # law buffers reused batch after batch
    for batch in reader:
        keep = np.ones(batch.n_rounds, bool)
        if families is not None:
            fam_ok = np.array([f in families for f in reader.families])
            m = fam_ok[batch.round_family]
            dropped_fam += int(batch.round_depth[~m].sum())
            keep &= m
        if requests is not None:
            req_ok = np.array([r in requests for r in reader.requests])
            m = req_ok[batch.round_request]
            dropped_req += int(batch.round_depth[keep & ~m].sum())
            keep &= m
        if not keep.all():
            batch = _select_rounds(batch, keep)
        if batch.n_rounds == 0:
            continue
        positions += batch.n_positions
        measured.add(batch)
        cache = LawCache(batch.offsets, batch.draft_logprobs, workspace)
        keys = batch.round_request * nb + batch.round_bucket
        for arm in arms:
            if reps == 0:  # analytic: quantization fused into the replay, no law arrays
                law = cache.policy(arm.policy)
                flag = law.flag
                values = analytic_rounds(
                    offsets=batch.offsets,
                    target_probs=batch.target_probs,
                    q_policy=law.q,
                    sampler=arm.sampler,
                    verifier=arm.verifier,
                    drafted_idx=batch.drafted_idx,
                    round_offsets=batch.round_offsets,
                    max_depth=depth,
                )
            else:
                laws = cache.laws(arm)
                flag = laws.flag
                values = replay_rounds(
                    offsets=batch.offsets,
                    target_probs=batch.target_probs,
                    q_sampler=laws.q_sampler,
                    m_sampler=laws.m_sampler,
                    bits=laws.sampler_bits,
                    q_verifier=laws.q_verifier,
                    drafted_idx=batch.drafted_idx,
                    round_offsets=batch.round_offsets,
                    round_key=batch.round_key,
                    round_index=batch.round_index,
                    seed=seed,
                    replicates=reps,
                    max_depth=depth,
                )
            flagged[arm.canonical] += int(np.count_nonzero(flag & FLAG_K_EXCEEDS))
            no_support[arm.canonical] += int(np.count_nonzero(flag & FLAG_NO_SUPPORT))
            accs[arm.canonical].add(keys, values, reps > 0)
        if progress is not None:
            progress(batch.n_positions)
    excluded: list[dict[str, Any]] = []
    if dropped_fam:
        excluded.append({"reason": "family not in --families", "rows": dropped_fam})
    if dropped_req:
        excluded.append(
            {"reason": "request not in the --sample-requests sample", "rows": dropped_req}
        )
    if positions == 0:
        raise SpecReplayError(f"{path}: no round left to replay after the filters")
    return ReplayResult(
        arms=list(arms),
        sums={k: a.result() for k, a in accs.items()},
        measured=measured.result(),
        reader=reader,
        flagged_rows=flagged,
        unsupported_rows=no_support,
        estimator=estimator,
        replicates=reps,
        seed=seed,
        max_depth=depth,
        positions=positions,
        excluded=excluded,
    )


def _ranges(starts: np.ndarray[Any, Any], lens: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Return the concatenation of ``arange(s, s + n)`` for each (s, n), without a Python loop."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    firsts = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return (firsts + np.arange(total)).astype(np.int64)


def _select_rounds(batch: RoundBatch, keep: np.ndarray[Any, Any]) -> RoundBatch:
    """Return the batch restricted to the rounds where ``keep`` is True (CSR rebuilt)."""
    rows = _ranges(batch.round_offsets[:-1][keep], batch.round_depth[keep].astype(np.int64))
    lens = np.diff(batch.offsets)[rows]
    offsets = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    cand_idx = _ranges(batch.offsets[:-1][rows], lens)
    depth = batch.round_depth[keep]
    round_offsets = np.zeros(depth.shape[0] + 1, np.int64)
    np.cumsum(depth, out=round_offsets[1:])
    eq = batch.emitted_q[cand_idx] if batch.emitted_q.shape[0] else batch.emitted_q
    return RoundBatch(
        offsets=offsets,
        cand_ids=batch.cand_ids[cand_idx],
        draft_logprobs=batch.draft_logprobs[cand_idx],
        target_probs=batch.target_probs[cand_idx],
        emitted_q=eq,
        position=batch.position[rows],
        drafted_idx=batch.drafted_idx[rows],
        accepted=batch.accepted[rows],
        round_offsets=round_offsets,
        round_request=batch.round_request[keep],
        round_key=batch.round_key[keep],
        round_index=batch.round_index[keep],
        round_family=batch.round_family[keep],
        round_bucket=batch.round_bucket[keep],
        round_context=batch.round_context[keep],
        round_depth=depth,
        measured_accepted=batch.measured_accepted[keep],
        extras=batch.extras[rows.tolist()] if batch.extras.width else batch.extras,
    )
