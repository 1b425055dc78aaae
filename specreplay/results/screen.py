"""The depth screen's typed cells and its TABLES.md (SPEC §3.6, seed 001_*).

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
    Result,
    ScreenFigures,
    Survival,
)
from specreplay.results.tables import fmt, markdown_table
from specreplay.stats.screen import ScreenCell

__all__ = ["SCREEN_ASSUMPTIONS", "screen_cell_result", "screen_tables"]

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


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100.0 * x:+.1f}%"


def _depth_row(d: DepthFigure, notes: dict[str, int]) -> list[str]:
    if not d.supported or d.tokens_per_s is None:
        key = d.null_reason or "—"
        notes.setdefault(key, len(notes) + 1)
        mark = "UNSUPPORTED" if not d.supported else "—"
        return [str(d.depth), f"{mark} [{notes[key]}]", "", "", "", "", ""]
    env = f"[{fmt(d.tokens_per_s_lo, 1)}, {fmt(d.tokens_per_s_hi, 1)}]"
    if d.null_reason:
        notes.setdefault(d.null_reason, len(notes) + 1)
        env += f" [{notes[d.null_reason]}]"
    return [
        str(d.depth),
        fmt(d.tokens_per_s, 1),
        env,
        f"{_pct(d.gain)} [{_pct(d.gain_lo)}, {_pct(d.gain_hi)}]",
        fmt(d.R, 4),
        fmt(d.round_ms, 3),
        "—" if d.rank is None else str(d.rank),
    ]


def _cell_section(c: Cell, notes: dict[str, int]) -> list[str]:
    s = c.screen
    assert s is not None  # every screen cell carries its figures
    best = min((d for d in c.depths if d.rank is not None), key=lambda d: d.rank or 0, default=None)
    surv = ", ".join(f"S{x.position} {fmt(x.value, 4)}" for x in c.survival)
    head = [
        f"## {c.name}",
        "",
        f"{s.runs} run(s) ({', '.join(s.suites)}), {s.rounds:,} rounds. MEASURED: {surv}; "
        f"T_B {s.step_p50_ms:.3f} ms (runs {s.step_p50_min_ms:.3f}–{s.step_p50_max_ms:.3f}). "
        f"Config: c_B {s.cap}, D_B {s.draft_p50_ms:.4f} ms, e_ref {s.e_ref_ms:.4f} ms.",
        "",
        f"Best central depth (ESTIMATED): {best.depth if best else '—'}"
        + (f", {fmt(best.tokens_per_s, 1)} tok/s." if best else "."),
        "",
    ]
    header = ["depth", "rate tok/s", "envelope", f"gain vs c_B={s.cap} [envelope]",
              "1+ΣS_i", "round ms", "rank"]  # fmt: skip
    return [*head, markdown_table(header, [_depth_row(d, notes) for d in c.depths]), ""]


def _presence(cells: Sequence[Cell]) -> list[str]:
    """Which (batch, context) cells each worker has; absent ones are marked, never filled."""
    out = ["## Cells present", ""]
    for worker in sorted({c.worker or "" for c in cells}):
        mine = {(c.batch, c.context) for c in cells if c.worker == worker}
        batches = sorted({b for b, _ in mine if b is not None})
        contexts = sorted({x for _, x in mine if x is not None})
        rows = [[f"B{b}", *("screened" if (b, x) in mine else "absent" for x in contexts)]
                for b in batches]  # fmt: skip
        out += [f"Worker {worker}:", "", markdown_table(["batch", *map(str, contexts)], rows), ""]
    return out


def screen_tables(result: Result) -> str:
    """TABLES.md of a screen: per cell the central rate per depth, envelope, gain and rank."""
    notes: dict[str, int] = {}
    out = [
        "# Depth screen from run counters (SP2, SPEC §3.6)",
        "",
        "Rates are aggregate tokens/s per batch, ESTIMATED; survivals and step p50 MEASURED. "
        "Envelopes are assumption envelopes (every run's survival vector × step-p50 extrema × "
        "overlap × overhead × slope grids), not confidence intervals. Gains are over the nominal "
        "cap c_B, not over an adaptive production policy.",
        "",
    ]
    cells = [c for c in result.cells if c.level == Level.SCREEN]
    out += _presence(cells)
    for c in cells:
        out += _cell_section(c, notes)
    out += [f"[{k}] {r}" for r, k in notes.items()]
    out += ["", "Assumptions:", "", *[f"- {a}" for a in result.assumptions]]
    return "\n".join(out) + "\n"
