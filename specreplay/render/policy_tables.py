"""TABLES.md sections of ``sweep --policy``: each arm's policies and the held-out choice.

See docs/methods.md#policies-adaptive-drafting, docs/outputs.md#policies-in-a-sweep.

Per arm, two sections follow its depth table:

- **policies, pooled**: one row per policy (``Cell.policies``, in ``--policy`` order) with E[L]
  (positions drafted per round) and R (retained tokens per round), both SIMULATED, R's interval as
  the depths' (studentized, requests as clusters); with ``--cost``, tokens/s (ESTIMATED) with R's
  default interval (cr2-eff-hall, each request's cost in the place of its rounds), and P(best)
  over the arm's depths and policies together. A last row repeats the best fixed depth, the line
  a policy has to beat. A policy that cannot be computed reads ``UNSUPPORTED`` or ``—`` with its
  reason in the note column, as a depth does.
- **held-out choice** (``extra["policy_choice"]``, ESTIMATED): the policy and the fixed depth
  chosen on the selection half, Δ tokens/s = policy − depth on the held-out half with its default
  interval, the margin in tokens/s and the verdict (PAYS / DOES NOT PAY / INCONCLUSIVE, with the
  rule that forced an INCONCLUSIVE); beside it the
  in-sample row (chosen and measured on every request), labelled in-sample, with no verdict.

Per-cell policy figures are in results.json (``cells[].policies``) and
``Result.to_polars("policies")``; the tables show the pooled cell, as the depth tables do.
"""

from __future__ import annotations

from typing import Any

from specreplay.render.policy_plot import policy_series
from specreplay.render.table_text import fmt, markdown_table
from specreplay.results.model import Cell, PolicyFigure, Result

__all__ = [
    "CHOICE_HEADER",
    "POLICY_HEADER",
    "WINNERS_CURSE",
    "choice_entry",
    "choice_verdict",
    "policy_plot_note",
    "policy_sections",
]

POLICY_HEADER = ["policy", "E[L]", "R [95% CI]", "tokens/s [95% CI]", "P(best)", "label", "note"]
"""Columns of an arm's policy table."""

CHOICE_HEADER = [
    "figure",
    "policy",
    "depth",
    "requests",
    "tokens/s policy",
    "tokens/s depth",
    "Δ tokens/s [95% CI]",
    "margin m",
    "verdict",
    "label",
]
"""Columns of an arm's held-out choice table (one held-out row, one in-sample row)."""

WINNERS_CURSE = (
    "The in-sample row chooses the best policy and the best depth and measures them on the same "
    "requests: the best of several noisy candidates looks better than it is (the winner's curse), "
    "more so on the side with more candidates, so only the held-out row, measured on requests "
    "that played no part in the choice, carries a verdict."
)
"""The sentence under each choice table."""


def _signed(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x:+.{digits}f}"


def _interval(x: float | None, lo: float | None, hi: float | None, digits: int) -> str:
    """``x [lo, hi]`` at ``digits`` places, unsigned; the interval's ends ``—`` where null."""
    if x is None:
        return "—"
    return f"{x:.{digits}f} [{fmt(lo, digits)}, {fmt(hi, digits)}]"


def _policy_row(f: PolicyFigure, cost: bool) -> list[str]:
    """One policy's row (module docstring); nulls read as a depth's do, the reason in the note."""
    if not f.supported or f.R is None:
        unsupported = "UNSUPPORTED" if not f.supported else "—"
        return [f.policy, "—", unsupported, "—", "—", f.label.value, f.null_reason or "—"]
    r = f"{f.R:.4f} [{_signed(f.lo, 4)}, {_signed(f.hi, 4)}]"
    label = f.label.value
    if f.tokens_per_s is not None:
        tps = _interval(f.tokens_per_s, f.tokens_per_s_lo, f.tokens_per_s_hi, 1)
        label += "; tokens/s ESTIMATED"
        note = ""
    else:
        tps = "—"
        note = f.tokens_per_s_null_reason or ("" if not cost else "—")
    p_best = fmt(f.p_best, 3)
    return [f.policy, fmt(f.E_L), r, tps, p_best, label, note]


def _best_depth_row(cell: Cell, arm: str) -> list[str] | None:
    """Return the arm's best fixed depth as a last row of its policy table (None without one)."""
    f = cell.best_depth_figure(arm)
    if f is None or f.R is None or f.tokens_per_s is None:
        return None
    return [
        f"fixed depth {f.depth} (the best depth)",
        fmt(float(f.depth)),
        f"{f.R:.4f} [{_signed(f.lo, 4)}, {_signed(f.hi, 4)}]",
        _interval(f.tokens_per_s, f.tokens_per_s_lo, f.tokens_per_s_hi, 1),
        fmt(f.p_best, 3),
        f"{f.label.value}; tokens/s ESTIMATED",
        "",
    ]


def _policy_table(result: Result, arm: str) -> list[str]:
    pooled = result.pooled
    figs = [f for f in pooled.policies if f.arm == arm]
    if not figs:
        return []
    cost = result.options.get("cost") is not None
    rows = [_policy_row(f, cost) for f in figs]
    if (ref := _best_depth_row(pooled, arm)) is not None:
        rows.append(ref)
    how = (
        "R and E[L] SIMULATED; tokens/s ESTIMATED (default interval, cost in the place of rounds); "
        "P(best) over depths and policies together"
        if cost
        else "R and E[L] SIMULATED; no tokens/s without a cost model (--cost)"
    )
    return [
        "",
        f"## {arm}: policies, pooled ({how})",
        "",
        "E[L]: positions drafted per round; R: retained tokens per round "
        '(docs/methods.md, "Policies (adaptive drafting)").',
        "",
        markdown_table(POLICY_HEADER, rows),
    ]


def choice_entry(result: Result, arm: str) -> dict[str, Any] | None:
    """Return ``arm``'s entry of ``extra["policy_choice"]`` (None when the run has none)."""
    entries = result.extra.get("policy_choice")
    if not isinstance(entries, list):
        return None
    return next((e for e in entries if isinstance(e, dict) and e.get("arm") == arm), None)


def _choice_row(name: str, fig: dict[str, Any], verdict: str, label: str) -> list[str]:
    delta = fig.get("delta_tokens_per_s")
    return [
        name,
        str(fig.get("policy", "—")),
        str(fig.get("depth", "—")),
        f"{fig['n_requests']:,}" if fig.get("n_requests") is not None else "—",
        fmt(fig.get("tokens_per_s_policy"), 1),
        fmt(fig.get("tokens_per_s_depth"), 1),
        "—"
        if delta is None
        else f"{delta:+.1f} [{_signed(fig.get('lo'))}, {_signed(fig.get('hi'))}]",
        fmt(fig.get("margin_tokens_per_s"), 1),
        verdict,
        label,
    ]


def _verdict_text(held: dict[str, Any]) -> str:
    """Return the held-out verdict, with the rule that forced an INCONCLUSIVE in brackets."""
    verdict, why = str(held.get("verdict", "—")), held.get("verdict_reason")
    return f"{verdict} ({why})" if why else verdict


def _choice_table(result: Result, arm: str) -> list[str]:
    entry = choice_entry(result, arm)
    if entry is None:
        return []
    head = f"## {arm}: does a policy pay? The held-out choice (ESTIMATED)"
    held, ins = entry.get("held_out"), entry.get("in_sample")
    if entry.get("null_reason") is not None or not held or not ins:
        return ["", head, "", f"— ({entry.get('null_reason') or 'no held-out figure'})"]
    label = str(entry.get("label", "ESTIMATED"))
    rows = [
        _choice_row("held-out", held, _verdict_text(held), label),
        _choice_row("in-sample", ins, "— (no verdict in-sample)", str(ins.get("label", "—"))),
    ]
    return [
        "",
        head,
        "",
        f"Chosen on the selection half of the requests (split by a hash of the request key): "
        f"policy {entry.get('selected_policy')} against fixed depth {entry.get('selected_depth')}, "
        "the most tokens/s of each kind there; the held-out half measures Δ tokens/s = policy − "
        "depth with its 95% default interval (cr2-eff-hall, requests as clusters). Verdict at "
        "margin m (tokens/s): PAYS when Δ_lo > +m against every supported fixed depth, DOES NOT "
        "PAY when Δ_hi < +m against the chosen one, else INCONCLUSIVE; INCONCLUSIVE by rule "
        "under 50 held-out requests or 3 requests where the policy and the depth differ.",
        "",
        markdown_table(CHOICE_HEADER, rows),
        "",
        WINNERS_CURSE,
    ]


def choice_verdict(result: Result, arm: str) -> str | None:
    """One line for REPORT.md's verdicts: the held-out verdict with the in-sample Δ beside it."""
    entry = choice_entry(result, arm)
    if entry is None:
        return None
    held, ins = entry.get("held_out"), entry.get("in_sample")
    if entry.get("null_reason") is not None or not held or not ins:
        why = entry.get("null_reason") or "no held-out figure"
        return f"pooled, {arm}, best policy against best fixed depth: — ({why})"
    return (
        f"pooled, {arm}, best policy against best fixed depth on {held['n_requests']:,} held-out "
        f"requests: **{_verdict_text(held)}** ({held['policy']} against depth {held['depth']}), Δ "
        f"{_signed(held['delta_tokens_per_s'])} tokens/s [{_signed(held['lo'])}, "
        f"{_signed(held['hi'])}] at margin {fmt(held['margin_tokens_per_s'], 1)} tokens/s "
        f"({entry.get('label', 'ESTIMATED')}); in-sample Δ {_signed(ins['delta_tokens_per_s'])} "
        f"[{_signed(ins['lo'])}, {_signed(ins['hi'])}] tokens/s ({ins['policy']} against depth "
        f"{ins['depth']}), labelled {ins.get('label', 'in-sample')}"
    )


def policy_sections(result: Result, arm: str) -> list[str]:
    """Return ``arm``'s policy table and held-out choice (none when the run has no policies)."""
    if not result.cells or not any(f.arm == arm for f in result.pooled.policies):
        return []
    return _policy_table(result, arm) + _choice_table(result, arm)


def policy_plot_note(result: Result) -> list[str]:
    """Say why a run with policies has no policies.png (nothing when it has one or no policy)."""
    if not result.cells or not result.pooled.policies or policy_series(result):
        return []
    why = "none could be priced" if result.options.get("cost") else "no cost model, --cost"
    return ["", f"policies.png: not written (no policy has tokens/s: {why})."]
