"""The SP2 depth screen from run counters (docs/methods.md#the-screens-rate-sp2): pure arithmetic.

Terms. A **run** is one benchmark run of one (batch, context, worker) **cell**: its rounds
``n_r`` (``request_rounds``, or vLLM's drafts) and its survival counts ``a_r[i]`` = rounds whose
draft at position i + 1 was accepted (A ≥ i + 1), which are already survivals (never multiplied).
Per cell (B = batch size, depth d):

- S_i = Σ_r a_r[i] / Σ_r n_r (pooled counts over repetitions), MEASURED;
- E_B(d) = B·(1 + Σ_{i≤d} S_i), the ESTIMATED truncation proxy of tokens per batch round;
- T_B = median over runs of each run's step p50 (ms), MEASURED;
- e_ref = (1 − overlap_c)·D_B + overhead_c with the central overlap and overhead (.25·D_B + .30 at
  the defaults), held at this central value inside the envelope too;
- V_B(d) = T_B − e_ref + s·B·(H[d] − H[c_B]);
- round_B(d) = V_B(d) + (1 − overlap)·D_B + overhead, so round_B(c_B) = T_B exactly at the
  central values;
- rate_B(d) = 1000·E_B(d) / round_B(d) tokens/s, ESTIMATED.

The **envelope** of a depth is the min and max of rate_B(d) over every combination of: each run's
own survival vector a_r / n_r, T_B ∈ {min, max of the runs' step p50}, overlap, overhead and
slope s from their grids (each grid joined with its central value, so the envelope holds the
central rate's assumptions). The gain of depth d over the nominal cap, rate_B(d)/rate_B(c_B) − 1,
is computed paired (same combination) for its envelope. A combination whose round time is not
positive makes the envelope unbounded: its upper end is null with the reason. This is an
assumption envelope, not a confidence interval.

Depths past the trained block, past the nominal cap c_B (never drafted there) or past the counted
positions are UNSUPPORTED: no figure, a reason.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "H_MS",
    "ScreenCell",
    "ScreenDepth",
    "ScreenParams",
    "ScreenRun",
    "pooled_survival",
    "round_ms",
    "screen_cell",
]

H_MS: tuple[float, ...] = (28.79, 31.86, 34.44, 37.76, 41.56, 43.68)
"""Historical verify time per depth (ms), indexed from depth 0 (CONFIG slope only).

See docs/methods.md#the-screens-rate-sp2.
"""


@dataclass(frozen=True)
class ScreenParams:
    """The screen's assumptions (.md#the-screens-rate-sp2 defaults); every grid is configurable.

    See docs/methods.md#the-screens-rate-sp2.
    """

    trained_block: int = 5
    depths: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    h_ms: tuple[float, ...] = H_MS
    caps: tuple[tuple[int, int], ...] = ((1, 5), (2, 5), (3, 4), (4, 4))
    draft_p50_ms: tuple[tuple[int, float], ...] = ()
    overlap: float = 0.75
    overhead_ms: float = 0.30
    slope: float = 0.5
    overlap_grid: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    overhead_grid: tuple[float, ...] = (0.0, 0.3, 0.6)
    slope_grid: tuple[float, ...] = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class ScreenRun:
    """One run's counters: rounds, survival counts per position (1..k), step p50 (ms)."""

    rounds: int
    accepted: tuple[int, ...]
    step_p50_ms: float


@dataclass(frozen=True)
class ScreenDepth:
    """Figures of one candidate depth; ``None`` with ``reason`` where they cannot be given."""

    depth: int
    supported: bool
    tokens_per_round: float | None  # 1 + Σ_{i≤d} S_i (E_B(d) / B)
    tokens_per_round_lo: float | None
    tokens_per_round_hi: float | None
    round_ms: float | None
    rate: float | None
    rate_lo: float | None
    rate_hi: float | None
    gain: float | None
    gain_lo: float | None
    gain_hi: float | None
    rank: int | None
    reason: str | None


@dataclass(frozen=True)
class ScreenCell:
    """The screen of one (batch, context, worker) cell."""

    batch: int
    cap: int
    draft_p50_ms: float
    e_ref_ms: float
    step_p50_ms: float  # T_B
    step_p50_min_ms: float
    step_p50_max_ms: float
    rounds: int
    survival: tuple[float, ...]  # pooled S_1..S_k
    depths: tuple[ScreenDepth, ...]


def pooled_survival(runs: Sequence[ScreenRun], k: int) -> npt.NDArray[np.float64]:
    """S_i = Σ_r a_r[i] / Σ_r n_r for i = 1..k (: pooled counts, never products).

    See docs/methods.md#the-screens-rate-sp2.
    """
    acc = np.array([r.accepted[:k] for r in runs], dtype=np.float64).reshape(len(runs), k)
    return acc.sum(axis=0) / float(sum(r.rounds for r in runs))


def round_ms(
    *,
    t_ms: float,
    e_ref: float,
    batch: int,
    depth: int,
    cap: int,
    h_ms: Sequence[float],
    draft_ms: float,
    overlap: float,
    overhead: float,
    slope: float,
) -> float:
    """round_B(d) = T_B − e_ref + s·B·(H[d] − H[c_B]) + (1 − overlap)·D_B + overhead.

    See docs/methods.md#the-screens-rate-sp2.
    """
    v = t_ms - e_ref + slope * batch * (h_ms[depth] - h_ms[cap])
    return v + (1.0 - overlap) * draft_ms + overhead


def _grid(central: float, grid: Sequence[float]) -> list[float]:
    return sorted({*grid, central})


def screen_cell(
    runs: Sequence[ScreenRun], *, batch: int, cap: int, draft_ms: float, params: ScreenParams
) -> ScreenCell:
    """Screen one cell: central figures, envelope and rank of every candidate depth."""
    k = min(len(r.accepted) for r in runs)
    s_pooled = pooled_survival(runs, k)
    steps = np.array([r.step_p50_ms for r in runs], dtype=np.float64)
    t_b = float(np.median(steps))
    e_ref = (1.0 - params.overlap) * draft_ms + params.overhead_ms
    per_run = [np.asarray(r.accepted[:k], dtype=np.float64) / r.rounds for r in runs]
    combos = list(
        itertools.product(
            per_run,
            sorted({float(steps.min()), float(steps.max())}),
            _grid(params.overlap, params.overlap_grid),
            _grid(params.overhead_ms, params.overhead_grid),
            _grid(params.slope, params.slope_grid),
        )
    )

    def rate(
        s: npt.NDArray[np.float64], d: int, t: float, ov: float, oh: float, sl: float
    ) -> float:
        rnd = round_ms(
            t_ms=t,
            e_ref=e_ref,
            batch=batch,
            depth=d,
            cap=cap,
            h_ms=params.h_ms,
            draft_ms=draft_ms,
            overlap=ov,
            overhead=oh,
            slope=sl,
        )
        numer = batch * (1.0 + float(s[:d].sum()))  # E_B(d)
        return 1000.0 * numer / rnd if rnd > 0 else float("nan")

    cap_ok = cap <= min(k, params.trained_block)
    depths: list[ScreenDepth] = []
    for d in params.depths:
        why = _unsupported(d, k=k, cap=cap, block=params.trained_block, n_h=len(params.h_ms))
        if why is not None:
            depths.append(ScreenDepth(d, False, **dict.fromkeys(_FIGURES), reason=why))
            continue
        central = rate(s_pooled, d, t_b, params.overlap, params.overhead_ms, params.slope)
        rates = np.array([rate(s, d, *c) for s, *c in combos])
        base = np.array([rate(s, cap, *c) for s, *c in combos]) if cap_ok else None
        depths.append(
            _depth_figures(
                d, s_pooled, per_run, t_b, e_ref, batch, cap, draft_ms, params, central, rates, base
            )
        )
    central_cap = next((x.rate for x in depths if x.depth == cap and x.supported), None)
    depths = _with_gain_and_rank(depths, central_cap)
    return ScreenCell(
        batch=batch,
        cap=cap,
        draft_p50_ms=draft_ms,
        e_ref_ms=e_ref,
        step_p50_ms=t_b,
        step_p50_min_ms=float(steps.min()),
        step_p50_max_ms=float(steps.max()),
        rounds=sum(r.rounds for r in runs),
        survival=tuple(float(x) for x in s_pooled),
        depths=tuple(depths),
    )


def _unsupported(d: int, *, k: int, cap: int, block: int, n_h: int) -> str | None:
    if d > block:
        return f"UNSUPPORTED: past the trained block ({block})"
    if d > cap:
        return f"UNSUPPORTED: past the nominal cap c_B = {cap} (never drafted there)"
    if d > k:
        return f"UNSUPPORTED: the counters cover positions 1..{k}"
    if d >= n_h:
        return f"UNSUPPORTED: the H table covers depths 0..{n_h - 1}"
    return None


_FIGURES = [f.name for f in dataclasses.fields(ScreenDepth)][2:-1]
_UNBOUNDED = "envelope unbounded: round time ≤ 0 at some envelope corner"


def _depth_figures(
    d: int,
    s_pooled: npt.NDArray[np.float64],
    per_run: list[npt.NDArray[np.float64]],
    t_b: float,
    e_ref: float,
    batch: int,
    cap: int,
    draft_ms: float,
    params: ScreenParams,
    central: float,
    rates: npt.NDArray[np.float64],
    base: npt.NDArray[np.float64] | None,
) -> ScreenDepth:
    rnd = round_ms(
        t_ms=t_b,
        e_ref=e_ref,
        batch=batch,
        depth=d,
        cap=cap,
        h_ms=params.h_ms,
        draft_ms=draft_ms,
        overlap=params.overlap,
        overhead=params.overhead_ms,
        slope=params.slope,
    )
    per_run_tpr = [1.0 + float(s[:d].sum()) for s in per_run]
    bad = bool(np.isnan(rates).any())
    gains = rates / base - 1.0 if base is not None else None
    reason = None
    if np.isnan(central):
        reason = "central round time ≤ 0 (s·B·(H[d] − H[c_B]) exceeds T_B − e_ref)"
    elif bad:
        reason = _UNBOUNDED
    bad_gain = gains is None or bool(np.isnan(gains).any())
    return ScreenDepth(
        depth=d,
        supported=True,
        tokens_per_round=1.0 + float(s_pooled[:d].sum()),
        tokens_per_round_lo=min(per_run_tpr),
        tokens_per_round_hi=max(per_run_tpr),
        round_ms=rnd,
        rate=None if np.isnan(central) else central,
        rate_lo=None if bad else float(rates.min()),
        rate_hi=None if bad else float(rates.max()),
        gain=None,
        gain_lo=None if bad_gain or gains is None else float(gains.min()),
        gain_hi=None if bad_gain or gains is None else float(gains.max()),
        rank=None,
        reason=reason,
    )


def _with_gain_and_rank(depths: list[ScreenDepth], central_cap: float | None) -> list[ScreenDepth]:
    """Central gain over the nominal cap; rank 1 = highest central rate (ties: shallower first)."""
    ranked = sorted(
        (x for x in depths if x.rate is not None), key=lambda x: (-(x.rate or 0.0), x.depth)
    )
    rank = {x.depth: i + 1 for i, x in enumerate(ranked)}
    return [
        dataclasses.replace(
            x,
            gain=x.rate / central_cap - 1.0 if x.rate is not None and central_cap else None,
            rank=rank.get(x.depth),
        )
        for x in depths
    ]
