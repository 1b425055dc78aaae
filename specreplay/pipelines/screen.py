"""The depth screen's typed cells (SPEC §3.6, seed 001_*); TABLES.md is in render.screen.

One ``screen`` cell per (batch, context, worker) that has runs; absent cells stay absent (never
filled). Per cell: the worker's :class:`~specreplay.results.model.ArmFigure` (R = 1 + Σ_{i≤c_B}
S_i at the nominal cap, MEASURED), the pooled survival S_i (MEASURED), the
:class:`~specreplay.results.model.ScreenFigures` (T_B MEASURED; c_B, D_B, e_ref from the config)
and one :class:`~specreplay.results.model.DepthFigure` per candidate depth: ``R`` = E_B(d)/B = 1 +
Σ_{i≤d} S_i with ``lo``/``hi`` over the runs' own survival vectors, ``tokens_per_s`` the central
rate_B(d) with the assumption envelope in ``tokens_per_s_lo``/``_hi``, ``round_ms``, ``gain`` over
the nominal cap (paired envelope in ``gain_lo``/``_hi``) and ``rank`` (1 = highest central rate).
Every rate is ESTIMATED; UNSUPPORTED depths carry ``supported: false`` and the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from specreplay.results.model import (
    ArmFigure,
    Cell,
    DepthFigure,
    Label,
    Level,
    ScreenFigures,
    Survival,
)
from specreplay.stats.screen import ScreenCell

__all__ = ["SCREEN_ASSUMPTIONS", "screen_cell_result"]

SCREEN_ASSUMPTIONS = (
    "S_i = Σ accepted_position_i / Σ request_rounds over the runs of a cell (pooled counts; "
    "vLLM: per_pos[i − 1] / drafts, already survivals, never a product). MEASURED.",
    "E_B(d) = B·(1 + Σ_{i≤d} S_i) is a truncation proxy on the old policy's rounds: censored "
    "late positions, and a policy that changes depth also changes where later rounds start "
    "(seed 001_*); it is not a static-depth experiment. ESTIMATED.",
    "T_B = median over runs of each run's step p50 (MEASURED); e_ref = (1 − overlap)·D_B + "
    "overhead at the central values (.25·D_B + .30 by default), held fixed in the envelope; "
    "V_B(d) = T_B − e_ref + s·B·(H[d] − H[c_B]); round_B(d) = V_B(d) + (1 − overlap)·D_B + "
    "overhead; rate_B(d) = 1000·E_B(d)/round_B(d). H is a historical config slope, not a "
    "measured price. Every rate is ESTIMATED.",
    "Envelope = min and max over every run's survival vector × step-p50 extrema × overlap × "
    "overhead × slope grids: an assumption envelope, not a confidence interval; unknown "
    "counterfactual tails can fall outside it.",
    "Nominal cap anchoring: round_B(c_B) = T_B at the central values; the current policy may be "
    "dynamic, so gains over the nominal cap are not gains over production.",
)


def screen_cell_result(
    sc: ScreenCell, *, context: int, worker: str, runs: int, suites: Sequence[str]
) -> Cell:
    """Return the typed ``screen`` cell of one (batch, context, worker) screen."""
    cap_depth = min(sc.cap, len(sc.survival))
    depths = tuple(
        DepthFigure(
            arm=worker,
            depth=d.depth,
            R=d.tokens_per_round,
            lo=d.tokens_per_round_lo,
            hi=d.tokens_per_round_hi,
            label=Label.ESTIMATED,
            supported=d.supported,
            null_reason=d.reason,
            tokens_per_s=d.rate,
            tokens_per_s_lo=d.rate_lo,
            tokens_per_s_hi=d.rate_hi,
            round_ms=d.round_ms,
            rank=d.rank,
            gain=d.gain,
            gain_lo=d.gain_lo,
            gain_hi=d.gain_hi,
        )
        for d in sc.depths
    )
    return Cell(
        level=Level.SCREEN,
        family=None,
        bucket=None,
        n_requests=0,
        arms={
            worker: ArmFigure(
                R=1.0 + sum(sc.survival[:cap_depth]),
                n_rounds=sc.rounds,
                label=Label.MEASURED,
                mcse=None,
                null_reason=None,
                estimator="counters",
            )
        },
        depths=depths,
        survival=tuple(
            Survival(
                arm=worker,
                position=i + 1,
                value=v,
                label=Label.MEASURED,
                null_reason=None,
                rounds=sc.rounds,
            )
            for i, v in enumerate(sc.survival)
        ),
        batch=sc.batch,
        context=context,
        worker=worker,
        screen=ScreenFigures(
            cap=sc.cap,
            draft_p50_ms=sc.draft_p50_ms,
            e_ref_ms=sc.e_ref_ms,
            step_p50_ms=sc.step_p50_ms,
            step_p50_min_ms=sc.step_p50_min_ms,
            step_p50_max_ms=sc.step_p50_max_ms,
            runs=runs,
            rounds=sc.rounds,
            suites=tuple(sorted(set(suites))),
            label=Label.MEASURED,
        ),
    )
