"""Law-test cases for arms: on the toy laws and on sampled archive positions.

See docs/methods.md#law-tests.

An arm's sampler and verifier laws come from its policy and quantizers
(:class:`~specreplay.sim.policy.LawCache`); the toy laws' draft law is used as the candidates'
draft probabilities (log q), so ``top32:t0.7:dyadic8/float64@5`` on a toy position is exactly what
that arm would do there. Archive positions come from the replay pass
(:class:`~specreplay.replay.lawsample.LawSample`). A position where an arm's top-K exceeds the
candidates is not tested and says so (never clamped): a :class:`SkippedLawTest` beside the
:class:`~specreplay.stats.lawtest.LawTestResult` of the tested ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specreplay.replay.lawsample import LawSample
from specreplay.sim.arms import Arm
from specreplay.sim.policy import FLAG_K_EXCEEDS, FLAG_NO_SUPPORT, LawCache
from specreplay.sim.rng import request_key
from specreplay.stats.lawtest import (
    DEFAULT_MIN_DRAWS,
    LawCase,
    LawTestResult,
    run_law_tests,
    toy_laws,
)

__all__ = ["SkippedLawTest", "run_cases", "sample_cases", "toy_arm_cases"]


@dataclass(frozen=True)
class SkippedLawTest:
    """An (arm, position) that was not law-tested, with the reason (its figures are null).

    Attributes
    ----------
    arm : str
    position : int
    null_reason : str
        Why it was not tested (top-K larger than the candidates, nothing to draft).
    request, round : str or None, int or None
        Where in the archive the position is (None for a toy position).
    label : str
        ``SIMULATED``.
    """

    arm: str
    position: int
    null_reason: str
    request: str | None = None
    round: int | None = None
    label: str = "SIMULATED"


def _cases_from_rows(
    arms: list[Arm],
    offsets: np.ndarray[Any, Any],
    lp: np.ndarray[Any, Any],
    tp: np.ndarray[Any, Any],
    p_other: list[float],
    positions: list[int],
    rows: list[int],
    where: Sequence[tuple[str | None, int | None]] | None = None,
) -> tuple[list[LawCase], list[SkippedLawTest]]:
    """Cases of every arm at ``rows``; ``where`` names each row's (request, round) if known."""
    where = where or [(None, None)] * len(rows)
    cache = LawCache(offsets, lp)
    cases: list[LawCase] = []
    skipped: list[SkippedLawTest] = []
    for arm in arms:
        laws = cache.laws(arm)
        for r, pos, (request, rnd) in zip(rows, positions, where, strict=True):
            a, b = int(offsets[r]), int(offsets[r + 1])
            flag = int(laws.flag[r])
            if flag & (FLAG_K_EXCEEDS | FLAG_NO_SUPPORT):
                why = (
                    "top-K larger than the position's candidates: not tested"
                    if flag & FLAG_K_EXCEEDS
                    else "no candidate with a finite draft log-probability"
                )
                skipped.append(SkippedLawTest(arm.canonical, pos, why, request, rnd))
                continue
            bits = laws.sampler_bits
            cases.append(
                LawCase(
                    arm.canonical,
                    pos,
                    laws.q_sampler[a:b].copy(),
                    laws.q_verifier[a:b].copy(),
                    tp[a:b].copy(),
                    p_other[rows.index(r)],
                    laws.m_sampler[a:b].copy() if bits else None,
                    bits if bits else None,
                    request,
                    rnd,
                )
            )
    return cases, skipped


def toy_arm_cases(arms: list[Arm]) -> tuple[list[LawCase], list[SkippedLawTest]]:
    """Cases of each arm on the toy positions (position j = toy law j)."""
    laws = toy_laws()
    offsets = np.zeros(len(laws) + 1, np.int64)
    np.cumsum([len(p) for _, p, _, _ in laws], out=offsets[1:])
    with np.errstate(divide="ignore"):
        lp = np.concatenate([np.log(q) for _, _, q, _ in laws])
    tp = np.concatenate([p for _, p, _, _ in laws])
    rows = list(range(len(laws)))
    return _cases_from_rows(
        arms, offsets, lp, tp, [po for *_, po in laws], [r + 1 for r in rows], rows
    )


def sample_cases(
    sample: LawSample, arms: list[Arm], requests: Sequence[str] = ()
) -> tuple[list[LawCase], list[SkippedLawTest]]:
    """Cases of each arm on the archive positions of ``sample`` (chosen by hash in the pass).

    The positions are the rows with the smallest seeded hashes of (request key, round,
    position) over the whole archive (:mod:`~specreplay.replay.lawsample`), so they do not
    depend on files, shards or batches. ``requests`` (the replay's request ids) name each
    position's request: the sample holds only its stable key, which is matched to the id here.
    """
    rows = list(range(sample.size))
    off, tp = sample.offsets, sample.target_probs
    p_other = [max(0.0, 1.0 - float(tp[off[r] : off[r + 1]].sum())) for r in rows]
    wanted = {int(k) for k in sample.request_key}
    ids = {k: r for r in requests if (k := int(request_key(r))) in wanted}
    keys_rounds = zip(sample.request_key, sample.round, strict=True)
    where = [(ids.get(int(k)), int(n)) for k, n in keys_rounds]
    return _cases_from_rows(
        arms,
        off,
        sample.draft_logprobs,
        tp,
        p_other,
        [int(p) for p in sample.position],
        rows,
        where,
    )


def run_cases(
    cases: list[LawCase],
    skipped: list[SkippedLawTest],
    *,
    seed: int,
    family_alpha: float = 1e-5,
    max_draws: int | None = None,
) -> list[LawTestResult | SkippedLawTest]:
    """Run the law tests (Holm over all of them); return them, then the skipped positions."""
    kw: dict[str, Any] = {"seed": seed, "family_alpha": family_alpha}
    if max_draws is not None:  # a cap below the default floor lowers the floor with it
        kw["max_draws"] = max_draws
        kw["min_draws"] = min(DEFAULT_MIN_DRAWS, max_draws)
    results: list[LawTestResult | SkippedLawTest] = []
    if cases:
        results += run_law_tests(cases, **kw)
    return results + list(skipped)
