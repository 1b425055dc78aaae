"""The title, the question and the **Verdicts** of a REPORT.md, per command (issue 7, item 1).

Each command's verdict lines are a function of its typed result alone: the pooled verdict first,
then one line per family (or per screen cell, per law-tested arm), each with its figures and its
label. A figure that cannot be computed reads ``—`` followed by its reason in parentheses. The
question is one sentence built from the result (arms, inputs, margin), so a reader knows what
was asked before reading what was found.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from specreplay.render.interval_text import (
    brief_reason,
    has_interval_fields,
    method_text,
    sign_note,
    small_sample_text,
)
from specreplay.render.markdown import num, pct
from specreplay.render.policy_tables import choice_verdict
from specreplay.results.model import Cell, Delta, LawTest, Level, Result, Role

__all__ = ["HOW_TO_READ", "QUESTIONS", "VERDICTS", "delta_text", "interval_note", "law_summary"]

_LABELS = (
    "Each figure names where it comes from: MEASURED (counted from the input), SIMULATED (a "
    "replay of it), ESTIMATED (a model on top); `—` marks a figure that cannot be computed, with "
    "the reason beside it."
)
_DELTA = (
    "Δ = R_b − R_a is the paired difference in retained tokens per round (R: 1 + the accepted "
    "drafts of a round, averaged over rounds; vLLM's mean acceptance length) with its 95% "
    "interval; Δ/R_a the same relative to the first arm."
)

HOW_TO_READ: dict[str, str] = {
    "requalify": "Pooled over every request, then per family. QUALIFIED: Δ is EQUIVALENT (its "
    "90% interval lies inside the margin) and the candidate's law test passes; NOT QUALIFIED: Δ "
    f"is DIFFERENT or the law test fails; else INCONCLUSIVE. {_DELTA} {_LABELS}",
    "interval": "Pooled over every paired request, then per family. EQUIVALENT: the 90% "
    "interval of Δ lies inside the margin; DIFFERENT: the 95% interval excludes 0 (Holm-adjusted "
    f"within each level); else INCONCLUSIVE. {_DELTA} {_LABELS}",
    "sweep": "For each arm, the fixed depth with the most tokens per second under the cost "
    "model (tokens/s ESTIMATED, with its 95% interval; P(best) is the share of bootstrap "
    "replicates in which that depth wins), pooled and then per family; without a cost model, "
    f"the depth where R (retained tokens per round) is highest. {_LABELS}",
    "screen": "For each batch × context × worker cell, the draft depth with the highest central "
    "aggregate tokens per second, its assumption envelope (not a confidence interval) and its "
    f"gain over the nominal cap. {_LABELS}",
    "budget": "For each cell, how many milliseconds per round may be added before the gain (its "
    f"lower 95% bound Δ_lo) is spent: x = T·Δ_lo/R_0, R_0 being the reference's R (retained "
    f"tokens per round) and T its price in ms per round. {_LABELS}",
    "lawtest": "Per arm: at how many archived positions its verifier's output law differs from "
    "the target's (G-test, Holm-adjusted), and the largest exact total-variation distance (TV). "
    f"A pass with too few draws to detect its TV is underpowered. {_LABELS}",
    "validate": "The retained tokens per round (R) the archive's logging arm achieved, counted "
    f"from its recorded verifier decisions, pooled then per family. {_LABELS}",
}
"""The paragraph opening each command's Verdicts section: how to read them."""


_WHERE = "the Tables section"
"""Where a REPORT.md verdict line sends the reader for ``--estimator auto``'s tail figures."""


def _name(path: Any) -> str:
    """Name a file or folder as the report does: its name, not the machine's absolute path."""
    return f"`{Path(str(path)).name}`" if path else "—"


def _margin_text(options: dict[str, Any]) -> str:
    """Return the margin as the user wrote it (``0.5%``, ``0.02``), or ``—`` if not recorded."""
    margin = options.get("margin")
    return str(margin.get("text", "—")) if isinstance(margin, dict) else "—"


def delta_text(d: Delta) -> str:
    """Δ with its 95% interval, absolute and relative, and its label; ``—`` with the reason.

    Where the two intervals disagree in sign, the reason follows in parentheses
    (:func:`~specreplay.render.interval_text.sign_note`).
    """
    if d.point is None:
        return f"— ({d.null_reason or 'no figure'})"
    note = sign_note(d)
    return (
        f"Δ {num(d.point)} tokens/round [{num(d.lo)}, {num(d.hi)}], Δ/R_a {pct(d.rel)} "
        f"[{pct(d.rel_lo)}, {pct(d.rel_hi)}] ({d.label.value})" + (f" ({note})" if note else "")
    )


def _plain(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def _families(result: Result) -> list[Cell]:
    return [c for c in result.cells if c.level == Level.FAMILY]


def _who(c: Cell) -> str:
    return f"{c.name} ({c.n_requests:,} requests)"


def _delta_verdict(c: Cell, role: Role) -> str:
    d = c.delta(role)
    if d is None:
        return f"{_who(c)}: — ({c.null_reason or 'no comparison in this cell'})"
    if d.point is None or d.verdict is None:
        why = d.null_reason or d.verdict_null_reason or "no verdict"
        return f"{_who(c)}: — ({why})"
    warn = f"; warning: {d.warning}" if d.warning else ""
    reason = f" ({brief_reason(d.verdict_reason, _WHERE)})" if d.verdict_reason else ""
    return f"{_who(c)}: **{d.verdict}**{reason}, {delta_text(d)}{interval_note(d)}{warn}"


def interval_note(d: Delta) -> str:
    """Return ``; interval <method, df, differing>; small sample: …`` (empty without the fields)."""
    parts = [f"interval {method_text(d)}"] if has_interval_fields([d]) else []
    small = small_sample_text(d)
    parts += [small] if small else []
    return "".join(f"; {p}" for p in parts)


# -- requalify, interval -------------------------------------------------------------------------


def _rq_line(c: Cell) -> str:
    rq = c.requalification
    d = c.delta(Role.CANDIDATE_VS_BASELINE)
    if rq is None or rq.verdict is None:
        why = (rq.null_reason if rq is not None else None) or c.null_reason
        if why is None and d is not None:
            why = d.null_reason
        return f"{_who(c)}: — ({why or 'no requalification in this cell'})"
    figures = f" ({rq.label.value})"
    if d is not None:
        forced = (
            f"; Δ {d.verdict} ({brief_reason(d.verdict_reason, _WHERE)})"
            if d.verdict_reason
            else ""
        )
        figures = f"; {delta_text(d)}{interval_note(d)}{forced}"
    return f"{_who(c)}: **{rq.verdict}** ({rq.because}){figures}"


def requalify_verdicts(result: Result) -> list[str]:
    """Pooled requalification, then per family; the reference gain (no verdict) last."""
    lines = [_rq_line(result.pooled)]
    lines += [_rq_line(c) for c in _families(result)]
    g = result.pooled.delta(Role.CANDIDATE_VS_REFERENCE)
    if g is not None:
        lines.append(f"gain of {g.b} over the reference {g.a} (no verdict): {delta_text(g)}")
    return lines


def interval_verdicts(result: Result) -> list[str]:
    """Pooled verdict of b vs a, then per family."""
    role = Role.B_VS_A
    return [_delta_verdict(result.pooled, role)] + [
        _delta_verdict(c, role) for c in _families(result)
    ]


# -- sweep, screen -------------------------------------------------------------------------------


def _sweep_arm(result: Result, c: Cell, arm: str) -> str:
    figs = [f for f in c.depths if f.arm == arm and f.supported and f.R is not None]
    if not figs:
        reasons = {f.null_reason for f in c.depths if f.arm == arm} - {None}
        return f"{arm}: — ({'; '.join(sorted(str(r) for r in reasons)) or 'no supported depth'})"
    best = (c.best_depth or {}).get(arm)
    fig = next((f for f in figs if f.depth == best), None)
    if fig is not None and fig.tokens_per_s is not None:
        p = f", P(best) {fig.p_best:.2f}" if fig.p_best is not None else ""
        return (
            f"{arm}: **best depth {best}**, {fig.tokens_per_s:.1f} tokens/s "
            f"[{_plain(fig.tokens_per_s_lo)}, {_plain(fig.tokens_per_s_hi)}] (ESTIMATED){p}; "
            f"R {fig.R:.4f} ({fig.label.value})"
        )
    top = max(figs, key=lambda f: f.R or 0.0)
    return (
        f"{arm}: no best depth without a cost model (`--cost`); R is highest at depth "
        f"{top.depth}: {top.R:.4f} [{num(top.lo)}, {num(top.hi)}] ({top.label.value})"
    )


def sweep_verdicts(result: Result) -> list[str]:
    """Per arm the pooled best depth (with a cost model) or highest R; per family the best depth.

    With ``--policy``, per arm the held-out verdict of the best policy against the best fixed
    depth, the in-sample Δ beside it (:func:`~specreplay.render.policy_tables.choice_verdict`).
    """
    lines = [f"pooled, {_sweep_arm(result, result.pooled, arm)}" for arm in result.arms]
    lines += [line for arm in result.arms if (line := choice_verdict(result, arm)) is not None]
    for c in _families(result):
        best = c.best_depth or {}
        if best and len(result.arms) == 1:
            lines.append(f"{_who(c)}: best depth {best.get(result.arms[0], '—')} (ESTIMATED)")
        elif best:
            each = ", ".join(f"{a} {best.get(a, '—')}" for a in result.arms)
            lines.append(f"{_who(c)}: best depth by arm: {each} (ESTIMATED)")
    bits = result.extra.get("fewest_bits")
    if isinstance(bits, dict):
        fewest = bits.get("fewest_bits_equivalent") or f"— ({bits.get('null_reason')})"
        lines.append(
            f"fewest bits EQUIVALENT to {bits.get('baseline')} at margin "
            f"{bits.get('margin', {}).get('text')}: **{fewest}** (SIMULATED)"
        )
    return lines


def _scrape_verdicts(result: Result) -> list[str]:
    """Per scrape pair: the mean acceptance length and vLLM's other figures (MEASURED)."""
    lines = []
    for f in result.scrapes or ():
        rates = (
            ", ".join("—" if s.value is None else f"{s.value:.4f}" for s in f.per_position)
            if f.per_position_null_reason is None
            else f"null ({f.per_position_null_reason})"
        )
        x = f.draft_acceptance_rate
        draft = "—" if x is None else f"{x:.4f}"
        lines.append(
            f"Scrapes {f.name}: **mean acceptance length {f.mean_acceptance_length:.4f}** "
            f"(R), per-position acceptance rate {rates}, Avg Draft acceptance rate {draft}, "
            f"{f.drafts:,} drafts ({f.label.value})"
        )
    d = result.scrape_delta
    if d is not None:
        se = f"SE ≥ {d.se:.4f}, a lower bound" if d.se is not None else "SE null"
        lines.append(
            f"Δ mean acceptance length R_{d.b} − R_{d.a} = **{d.point:+.4f}** ({se}: rounds "
            f"cluster by request) ({d.label.value})"
        )
    return lines


def screen_verdicts(result: Result) -> list[str]:
    """Per scrape pair its MEASURED figures; per cell the best central depth, rate and gain."""
    lines = _scrape_verdicts(result)
    for c in result.cells:
        if c.screen is None:
            continue
        best = min(
            (d for d in c.depths if d.rank is not None), key=lambda d: d.rank or 0, default=None
        )
        if best is None or best.tokens_per_s is None:
            lines.append(f"{c.name}: — (no supported depth)")
            continue
        gain = (
            f"; gain over the nominal cap {c.screen.cap}: {pct(best.gain, 2)} (envelope "
            f"{pct(best.gain_lo, 2)} to {pct(best.gain_hi, 2)})"
            if best.gain is not None
            else ""
        )
        lines.append(
            f"{c.name}: **best depth {best.depth}**, {best.tokens_per_s:.1f} tokens/s "
            f"(envelope {_plain(best.tokens_per_s_lo)} to {_plain(best.tokens_per_s_hi)}){gain} "
            f"({best.label.value})"
        )
    return lines or ["— (no screened cell)"]  # the scrapes alone have lines above


# -- budget, lawtest, validate --------------------------------------------------------------------


def budget_verdicts(result: Result) -> list[str]:
    """Per cell the break-even added cost per round (ESTIMATED), or ``—`` with the reason."""
    lines = []
    for c in result.cells:
        b = c.budget
        if b is None:
            continue
        if b.break_even_ms is None:
            lines.append(f"{c.name}: — ({b.null_reason})")
            continue
        left = f"; {b.remaining_ms:.6f} ms left after known costs" if b.known_ms else ""
        lines.append(
            f"{c.name}: pays for up to **{b.break_even_ms:.6f} ms** more per round at "
            f"{b.price_ms:g} ms per round{left} ({b.label.value})"
        )
    return lines


def law_summary(law: tuple[LawTest, ...], arm: str) -> str:
    """One arm's law tests in one line: failures, tests run, the largest exact TV."""
    mine = [t for t in law if t.arm == arm]
    ran = [t for t in mine if t.passed is not None]
    if not ran:
        why = "; ".join(sorted({t.null_reason or "—" for t in mine})) or "no test"
        return f"{arm}: — ({why})"
    failed = sum(1 for t in ran if not t.passed)
    tv = max(t.tv or 0.0 for t in ran)
    under = sum(1 for t in ran if t.passed and t.underpowered)
    every = "the" if len(ran) == 1 else "all"
    what = f"**FAILED** at {failed} of {len(ran)}" if failed else f"passed at {every} {len(ran)}"
    extra = f"; {under} pass(es) underpowered" if under else ""
    skipped = len(mine) - len(ran)
    extra += f"; {skipped} could not run" if skipped else ""
    where = "position" if len(ran) == 1 else "positions"
    return f"{arm}: law test {what} {where} (exact TV up to {tv:.3g}){extra} ({ran[0].label.value})"


def lawtest_verdicts(result: Result) -> list[str]:
    """Per arm: failed or passed, at how many positions."""
    arms = list(dict.fromkeys([*result.arms, *(t.arm for t in result.law_tests)]))
    return [law_summary(result.law_tests, a) for a in arms] or ["— (no law test)"]


def measured_verdicts(result: Result) -> list[str]:
    """Pooled MEASURED R of the logging arm, then per family."""
    arm = result.arms[0]

    def line(c: Cell) -> str:
        f = c.arms.get(arm)
        if f is None or f.R is None:
            return f"{_who(c)}: — ({(f.null_reason if f else None) or c.null_reason})"
        return f"{_who(c)}: R {f.R:.4f} retained tokens per round ({f.label.value})"

    return [line(c) for c in [result.pooled, *_families(result)]]


VERDICTS: dict[str, Callable[[Result], list[str]]] = {
    "requalify": requalify_verdicts,
    "interval": interval_verdicts,
    "sweep": sweep_verdicts,
    "screen": screen_verdicts,
    "budget": budget_verdicts,
    "lawtest": lawtest_verdicts,
    "validate": measured_verdicts,
}
"""The verdict lines of each command that has a REPORT.md."""


# -- the question ---------------------------------------------------------------------------------


def _n(result: Result) -> str:
    return f"{result.pooled.n_requests:,} requests" if result.cells else "no requests"


def _requalify_q(r: Result) -> tuple[str, str]:
    o = r.options
    ref = (
        f" (`{o['reference']}` is the reference its gain is measured against.)"
        if o.get("reference")
        else ""
    )
    return (
        f"Requalification of {o['candidate']} against {o['baseline']}",
        f"Can `{o['candidate']}` replace `{o['baseline']}`: on the archive "
        f"{_name(o.get('archive'))} "
        f"({_n(r)}), is its retained tokens per round within ±{_margin_text(o)} of the "
        f"baseline's, pooled and in every family, and does its verifier keep the target's output "
        f"law?{ref}",
    )


def _interval_q(r: Result) -> tuple[str, str]:
    o, (a, b) = r.options, r.arms
    return (
        f"Paired comparison of {b} against {a}",
        f"Do `{b}` ({_name(o.get('b'))}) and `{a}` ({_name(o.get('a'))}) retain the same "
        f"tokens per round within ±{_margin_text(o)} on the same {_n(r)}, or does one retain more?",
    )


def _sweep_q(r: Result) -> tuple[str, str]:
    o = r.options
    depths = o.get("depths") or []
    span = f"{min(depths)}..{max(depths)}" if depths else "the recorded depths"
    cost = f", and the most tokens/s under the cost model `{o['cost']}`" if o.get("cost") else ""
    n = len(o.get("policies") or [])
    policies = (
        f" And does any of the {n} drafting {'policy' if n == 1 else 'policies'} (`--policy`) "
        "beat the best fixed depth on requests it was not chosen on?"
        if n
        else ""
    )
    return (
        f"Depth sweep of {', '.join(r.arms)}",
        f"At which fixed depth in {span} does each arm ({', '.join(f'`{a}`' for a in r.arms)}"
        f") retain the most tokens per round{cost}, on the archive {_name(o.get('archive'))} "
        f"({_n(r)})?{policies}",
    )


def _screen_q(r: Result) -> tuple[str, str]:
    files = ", ".join(_name(p) for p in r.options.get("counters", []))
    if not r.cells:
        return (
            "vLLM scrapes: acceptance measured",
            f"What mean acceptance length, per-position and draft acceptance rates do the vLLM "
            f"scrapes {files} measure?",
        )
    return (
        "Depth screen from run counters",
        f"Which draft depth gives the highest aggregate tokens per second in each batch × "
        f"context cell, judged from the run counters in {files}?",
    )


def _budget_q(r: Result) -> tuple[str, str]:
    o = r.options
    src = f"the gain in {_name(Path(str(o['from'])).parent)}" if o.get("from") else "the gain"
    return (
        "Budget of a gain",
        f"How many milliseconds of added cost per round can {src} (its lower 95% bound Δ_lo) pay "
        f"for, at {o['price_ms']:g} ms per round, before the speed-up is spent?",
    )


def _lawtest_q(r: Result) -> tuple[str, str]:
    o = r.options
    where = (
        f"at {o['positions']} positions of the archive {_name(o.get('archive'))}"
        if o.get("archive")
        else "on the built-in toy suite"
    )
    return (
        f"Law tests of {', '.join(r.arms) if len(r.arms) <= 3 else f'{len(r.arms)} arms'}",
        f"Does each arm's verifier ({', '.join(f'`{a}`' for a in r.arms)}) emit tokens with "
        f"the target model's law, tested {where}?",
    )


def _validate_q(r: Result) -> tuple[str, str]:
    path = r.options.get("path")
    return (
        f"Archive {Path(str(path)).name}",
        f"Is the archive {_name(path)} valid, and how many tokens per round did its logging arm "
        f"`{r.arms[0]}` retain (MEASURED, {_n(r)})?",
    )


QUESTIONS: dict[str, Callable[[Result], tuple[str, str]]] = {
    "requalify": _requalify_q,
    "interval": _interval_q,
    "sweep": _sweep_q,
    "screen": _screen_q,
    "budget": _budget_q,
    "lawtest": _lawtest_q,
    "validate": _validate_q,
}
"""The title and the one-sentence question of each command's REPORT.md."""
