"""Truncated laws (schema v2's tails): which replays stay exact, and the logging law's rest.

See docs/inputs.md#position-traces-schema-v1. A v2 archive records, per position, the mass its
candidates leave out: ``draft_tail`` (of the logging law; ``emitted_q`` is then the engine's law on
the candidates, never renormalised) and ``target_tail``. Every estimator reads a row's candidates;
with a tail, what it computes on them is exact in three cases and unknown otherwise:

- **a truncated arm**: greedy, or top-k with k below the candidates of every row with a tail.
  Its law lives on the k most probable candidates, which a capture keeps (it keeps each
  position's most probable ids), so its law, its acceptance and the target's probabilities it
  meets are all in the row: every estimator is exact.
- **the logging arm's own sampler, under importance**: an arm whose policy and quantizers are the
  logging arm's drafts from ``emitted_q`` itself, and the importance weight reads only the
  drafted token's q and p. :func:`with_rest` appends each row's rest (1 − Σ ``emitted_q``) as one
  more candidate that is never drafted, so a renormalising quantizer (float64, dyadic) sees the
  whole law and leaves ``emitted_q`` unchanged: the weights are min(1, p/q) exactly, at any depth.
- **the logging arm's own sampler, under the analytic estimator**: its law on the candidates is
  ``emitted_q`` and its law outside them has mass 1 − Σ ``emitted_q``, but the acceptance α_j =
  Σ_x min(q_j(x), p_j(x)) sums over ids the capture did not keep. Their part lies in [0,
  min(q tail, p tail)] (for a verifier quantizer other than the sampler's, [0, q tail]), and
  E[1 + A] = 1 + Σ_k Π_{j≤k} α_j grows with every α_j, so the two ends bound the round's value
  whatever the tail does (:func:`~specreplay.replay.estimators.analytic.bounded_rounds`). Since
  Π(a_j + δ_j) − Π a_j ≤ Σ δ_j for factors in [0, 1], the range of a round at depth d is at
  most Σ_{j≤d} (d − j + 1)·min(1 − Σp_j, 1 − Σq_j) (:func:`round_limits`). The replay carries
  the range's midpoint and width; the statistics widen every interval by half the width, and a
  cell whose mean width exceeds ``--tail-width-limit`` is null with the kept mass as the reason.
- otherwise (another temperature, quantizer or top-k/top-p on an untruncated law: its law on the
  candidates depends on how the unseen mass is spread over ids, not only on its size; the Monte
  Carlo estimator on an untruncated arm; an adaptive policy): :func:`tail_problem` names it and
  the replay refuses in one line.

A tail at most :data:`TAIL_NEGLIGIBLE` counts as none: float32 softmax rounding leaves about
1e-7 outside a capture that keeps the whole vocabulary.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from specreplay.replay.archive.batch import RoundBatch
from specreplay.sim.arms import Arm

__all__ = [
    "TAIL_NEGLIGIBLE",
    "round_limits",
    "same_sampler",
    "tail_problem",
    "tail_rows",
    "target_rest",
    "with_rest",
]

TAIL_NEGLIGIBLE: Final[float] = 1e-6
"""A tail at most this is rounding, not truncation (the validation tolerance of a law's sum)."""


def tail_rows(batch: RoundBatch) -> NDArray[np.int64]:
    """Return the position rows whose draft or target tail exceeds :data:`TAIL_NEGLIGIBLE`."""
    if not (batch.draft_tail.shape[0] or batch.target_tail.shape[0]):  # schema v1
        return np.zeros(0, dtype=np.int64)
    hit = np.zeros(batch.n_positions, dtype=bool)
    for tail in (batch.draft_tail, batch.target_tail):
        if tail.shape[0]:
            hit |= tail > TAIL_NEGLIGIBLE  # NaN (unknown) compares False
    return np.flatnonzero(hit)


def same_sampler(arm: Arm, logging: Arm | None) -> bool:
    """Whether ``arm`` drafts and verifies with the logging arm's law (depth aside)."""
    return (
        logging is not None
        and arm.rule is None
        and (arm.policy, arm.sampler, arm.verifier)
        == (logging.policy, logging.sampler, logging.verifier)
    )


def tail_problem(
    arm: Arm, estimator: str, logging: Arm | None, width: int, batch: RoundBatch
) -> str | None:
    """Return why ``estimator`` cannot replay ``arm`` exactly on rows with tails (None: it can).

    ``width``: the fewest candidates of a row with a tail.
    """
    if arm.rule is not None:
        return f"the policy {arm.canonical} is not replayed on truncated laws yet"
    policy = arm.policy
    truncated = policy.greedy or (policy.top_k is not None and policy.top_k < width)
    has_law = batch.emitted_q.shape[0] == batch.target_probs.shape[0]
    if estimator == "importance":
        if not has_law and not (logging is not None and _truncated(logging, width)):
            return (
                "the logging law on the candidates is not archived (no emitted_q) and the "
                "logging arm's is not truncated"
            )
        if truncated or same_sampler(arm, logging):
            return None
        return (
            f"arm {arm.canonical}: its law on the candidates depends on the mass outside them "
            f"(only the logging arm's sampler {logging.canonical.split('@')[0] if logging else ''}"
            ", greedy and top-k arms are exact under importance)"
        )
    if truncated or (estimator == "analytic" and has_law and same_sampler(arm, logging)):
        return None  # exact, or bounded (module docstring)
    if estimator == "analytic":
        return (
            f"arm {arm.canonical}: its law on the candidates depends on how the mass outside "
            "them is spread over ids, not only on its size (the analytic replay bounds the "
            "logging arm's sampler, and replays greedy and top-k arms exactly)"
        )
    return (
        f"arm {arm.canonical} under the {estimator} estimator: its acceptance sums over the "
        "candidates it does not see (--estimator analytic bounds it for the logging arm's "
        "sampler; --estimator importance replays that sampler exactly)"
    )


def _truncated(arm: Arm, width: int) -> bool:
    p = arm.policy
    return p.greedy or (p.top_k is not None and p.top_k < width)


def with_rest(
    batch: RoundBatch,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Return (offsets, target_probs, emitted_q) with each row's rest appended as a candidate.

    The rest is 1 − Σ ``emitted_q`` (≥ 0): the logging law's mass outside the candidates, whether
    ``draft_tail`` recorded it or not (validation ties the two). Its target probability is 0 and
    it is never drafted (``drafted_idx`` is unchanged: the rest comes last), so importance weights
    are those of the candidates; what it changes is the quantizers' renormalisation, which now
    sees the whole law.
    """
    lens = np.diff(batch.offsets)
    starts = batch.offsets[:-1]
    kept = np.add.reduceat(batch.emitted_q, starts) if batch.n_positions else np.zeros(0)
    rest = np.clip(1.0 - kept, 0.0, 1.0)
    offsets = np.zeros(batch.n_positions + 1, np.int64)
    np.cumsum(lens + 1, out=offsets[1:])
    at = offsets[1:] - 1  # each row's last slot: the rest
    mask = np.ones(int(offsets[-1]), dtype=bool)
    mask[at] = False
    q = np.empty(int(offsets[-1]), np.float64)
    q[mask] = batch.emitted_q
    q[at] = rest
    p = np.zeros(int(offsets[-1]), np.float64)
    p[mask] = batch.target_probs
    return offsets, p, q


def target_rest(batch: RoundBatch) -> NDArray[np.float64]:
    """Return each row's target mass outside the candidates, 1 − Σ ``target_probs`` (≥ 0).

    From the kept sum, as :func:`with_rest` takes the logging law's rest (validation ties it
    to ``target_tail`` within its tolerance).
    """
    if batch.n_positions == 0:
        return np.zeros(0)
    kept = np.add.reduceat(batch.target_probs, batch.offsets[:-1])
    return np.clip(1.0 - kept, 0.0, 1.0)


def round_limits(
    per_row: NDArray[np.float64],
    round_offsets: NDArray[np.int64],
    depth: NDArray[np.int32],
    max_depth: int,
) -> NDArray[np.float64]:
    """Return L (n_rounds, D): L[r, d − 1] = Σ_{j≤d} (d − j + 1)·m_j over round r's rows.

    ``per_row`` m: one value per position row (min(1 − Σp_j, 1 − Σq_j) for the width limit);
    ``depth``: positions replayed per round; NaN past them. Σ_{k≤d} Σ_{j≤k} m_j is the same sum.
    """
    n = round_offsets.shape[0] - 1
    d = depth.astype(np.int64)
    m = np.zeros((n, max_depth))
    rnd = np.repeat(np.arange(n), d)
    col = np.arange(int(d.sum())) - np.repeat(np.cumsum(d) - d, d)
    m[rnd, col] = per_row[round_offsets[:-1][rnd] + col]
    out = np.cumsum(np.cumsum(m, axis=1), axis=1)
    out[np.arange(max_depth)[None, :] >= d[:, None]] = np.nan
    return out
