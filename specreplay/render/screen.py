"""The depth screen's TABLES.md (docs/methods.md#the-screens-rate-sp2).

Per cell the central rate per depth, envelope, gain and rank, from the typed ``screen`` cells
(:mod:`specreplay.pipelines.screen` builds them).
"""

from __future__ import annotations

from collections.abc import Sequence

from specreplay.render.tables import fmt, markdown_table
from specreplay.results.model import Cell, DepthFigure, Level, Result

__all__ = ["screen_tables"]


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
    header = [
        "depth",
        "rate tok/s",
        "envelope",
        f"gain vs c_B={s.cap} [envelope]",
        "1+ΣS_i",
        "round ms",
        "rank",
    ]
    return [*head, markdown_table(header, [_depth_row(d, notes) for d in c.depths]), ""]


def _presence(cells: Sequence[Cell]) -> list[str]:
    """Which (batch, context) cells each worker has; absent ones are marked, never filled."""
    out = ["## Cells present", ""]
    for worker in sorted({c.worker or "" for c in cells}):
        mine = {(c.batch, c.context) for c in cells if c.worker == worker}
        batches = sorted({b for b, _ in mine if b is not None})
        contexts = sorted({x for _, x in mine if x is not None})
        rows = [
            [f"B{b}", *("screened" if (b, x) in mine else "absent" for x in contexts)]
            for b in batches
        ]
        out += [f"Worker {worker}:", "", markdown_table(["batch", *map(str, contexts)], rows), ""]
    return out


def screen_tables(result: Result) -> str:
    """TABLES.md of a screen: per cell the central rate per depth, envelope, gain and rank."""
    notes: dict[str, int] = {}
    out = [
        '# Depth screen from run counters (SP2, docs/methods.md, "The screen\'s rate (SP2)")',
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
