"""The depth screen's TABLES.md (docs/methods.md#the-screens-rate-sp2) and the scrapes' lines.

Per cell the central rate per depth, envelope, gain and rank, from the typed ``screen`` cells
(:mod:`specreplay.pipelines.screen` builds them); per scrape pair the MEASURED figures in vLLM's
own names ("Mean acceptance length", "Per-position acceptance rate", "Avg Draft acceptance
rate", drafts) beside the glossary's terms (docs/glossary.md), for TABLES.md and for stdout
(:func:`scrape_lines`). Decimals: 4 for the mean acceptance length and each rate, 3 for a time
in ms; vLLM's log line prints 2, 3 and 1 (a percentage).
"""

from __future__ import annotations

from collections.abc import Sequence

from specreplay.render.tables import fmt, markdown_table
from specreplay.results.model import (
    Cell,
    DepthFigure,
    Level,
    Result,
    ScrapeDelta,
    ScrapeFigures,
    StepTime,
)

__all__ = ["scrape_lines", "screen_tables"]

NOT_SP2 = "pooled over every step of every request: not SP2's median per-request step p50"
LOWER_BOUND = (
    "round-independent, a LOWER BOUND: rounds cluster by request; record position traces "
    "(docs/tour.md) for a request-level interval"
)


def _rates(f: ScrapeFigures) -> str:
    if f.per_position_null_reason is not None:
        return f"null ({f.per_position_null_reason})"
    return ", ".join(fmt(s.value, 4) for s in f.per_position)


def _step(step: StepTime | None) -> str:
    if step is None:
        return "— (no vllm:inter_token_latency_seconds or vllm:time_per_output_token_seconds)"
    head = f"{step.metric}, {step.observations:,} steps"
    if step.median_ms is None:
        return f"null ({head}: {step.null_reason})"
    return f"{step.median_ms:.3f} ms, MEASURED (binned) ({head}; {NOT_SP2})"


def _pair_line(f: ScrapeFigures) -> str:
    sel = [
        f"model_name {f.model_name!r}" if f.model_name is not None else None,
        f"engine {f.engine!r}" if f.engine is not None else None,
        f"engines {', '.join(f.engines)}" if f.engine is None else None,
    ]
    return f"{f.before} → {f.after} ({'; '.join(x for x in sel if x)})"


def _draft_rate(f: ScrapeFigures) -> str:
    x = f.draft_acceptance_rate
    return "—" if x is None else f"{x:.4f} ({100.0 * x:.1f}%)"


def _delta_text(d: ScrapeDelta) -> str:
    se = f"SE ≥ {d.se:.4f} ({LOWER_BOUND})" if d.se is not None else f"SE null ({d.se_null_reason})"
    return f"Δ mean acceptance length R_{d.b} − R_{d.a} = {d.point:+.4f} (MEASURED), {se}"


def scrape_lines(result: Result) -> list[str]:
    """Return the scrapes' MEASURED figures and the ``--vs`` Δ, as stdout prints them."""
    out: list[str] = []
    for f in result.scrapes or ():
        k = len(f.per_position)
        out += [
            f"Scrapes {f.name}: {_pair_line(f)}, MEASURED:",
            f"  Mean acceptance length (R, retained tokens per round): "
            f"{f.mean_acceptance_length:.4f}",
            f"  Per-position acceptance rate (survival P(A ≥ j), j = 1..{k}): {_rates(f)}",
            f"  Avg Draft acceptance rate (accepted/draft tokens; not α): {_draft_rate(f)}",
            f"  Drafts (rounds): {f.drafts:,}; draft tokens {f.draft_tokens:,}; accepted tokens "
            f"{f.accepted_tokens:,}",
            f"  Step time (median): {_step(f.step)}",
        ]
    if result.scrape_delta is not None:
        out.append(_delta_text(result.scrape_delta))
    return out


def _scrape_section(result: Result) -> list[str]:
    figs = result.scrapes or ()
    if not figs:
        return []
    header = ["figure (vLLM's name; glossary term)", *(f.name for f in figs)]
    k = max((len(f.per_position) for f in figs), default=0)
    rows = [
        ["before → after", *(f"{f.before} → {f.after}" for f in figs)],
        ["engines summed", *(", ".join(f.engines) for f in figs)],
        ["Mean acceptance length; R", *(f"{f.mean_acceptance_length:.4f}" for f in figs)],
    ]
    for j in range(1, k + 1):
        rows.append(
            [
                f"Per-position acceptance rate, position {j - 1}; survival P(A ≥ {j})",
                *(
                    (fmt(f.per_position[j - 1].value, 4) if j <= len(f.per_position) else "—")
                    + (" [null: see below]" if f.per_position_null_reason else "")
                    for f in figs
                ),
            ]
        )
    rows += [
        ["Avg Draft acceptance rate (not α)", *(_draft_rate(f) for f in figs)],
        ["drafts; rounds", *(f"{f.drafts:,}" for f in figs)],
        ["draft tokens", *(f"{f.draft_tokens:,}" for f in figs)],
        ["accepted tokens", *(f"{f.accepted_tokens:,}" for f in figs)],
        [
            "step time median, ms (MEASURED (binned))",
            *(fmt(f.step.median_ms, 3) if f.step is not None else "—" for f in figs),
        ],
    ]
    out = [
        "## Measured from the vLLM scrapes",
        "",
        "Δ of vLLM's counters between each BEFORE and AFTER scrape, MEASURED "
        "(docs/glossary.md: vLLM's names and specreplay's terms).",
        "",
        markdown_table(header, rows),
        "",
    ]
    out += [
        f"- {f.name}: per-position acceptance rates null: {f.per_position_null_reason}"
        for f in figs
        if f.per_position_null_reason
    ]
    out += [f"- {f.name}: step time: {_step(f.step)}" for f in figs if f.step is not None]
    if result.scrape_delta is not None:
        out.append(f"- {_delta_text(result.scrape_delta)}")
    return [*out, ""]


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
        + (f", {fmt(best.tokens_per_s, 1)} tokens/s." if best else "."),
        "",
    ]
    header = [
        "depth",
        "rate tokens/s",
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
    cells = [c for c in result.cells if c.level == Level.SCREEN]
    if not cells:
        out = ["# vLLM scrapes: MEASURED figures", "", *_scrape_section(result)]
        out += ["Assumptions:", "", *[f"- {a}" for a in result.assumptions]]
        return "\n".join(out) + "\n"
    out = [
        '# Depth screen from run counters (SP2, docs/methods.md, "The screen\'s rate (SP2)")',
        "",
        "Rates are aggregate tokens/s per batch, ESTIMATED; survivals and step p50 MEASURED. "
        "Envelopes are assumption envelopes (every run's survival vector × step-p50 extrema × "
        "overlap × overhead × slope grids), not confidence intervals. Gains are over the nominal "
        "cap c_B, not over an adaptive production policy.",
        "",
    ]
    out += _scrape_section(result)
    out += _presence(cells)
    for c in cells:
        out += _cell_section(c, notes)
    out += [f"[{k}] {r}" for r, k in notes.items()]
    out += ["", "Assumptions:", "", *[f"- {a}" for a in result.assumptions]]
    return "\n".join(out) + "\n"
