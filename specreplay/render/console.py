"""The console text of the verbs that give verdicts: the verdict first (issue 16, item 5).

``requalify``, ``interval`` and ``sweep`` print (the demo's terminal text follows the same order,
:mod:`specreplay.render.demo_story`):

1. **line 1**: the pooled verdict, in at most :data:`WIDTH` characters but for the arm names the
   user gave; its figures follow line 2;
2. **line 2**: what the run excluded or reused (rounds ``--short-rounds`` left out with the
   MEASURED R kept and over every round, rows ``--families`` or ``--sample-requests`` left out,
   what ``--cache`` reused), ``Excluded: nothing`` when nothing was;
3. the pooled Δ with its intervals (absolute and relative; where the two disagree in sign, the
   reason beside them, :func:`~specreplay.render.interval_text.sign_note`), its small-sample mark
   and the reason a rule gave its verdict;
4. a compact table of the pooled and family cells (every other cell is in TABLES.md);
5. the estimator's diagnostics, one line per arm (:func:`estimator_lines`: the estimator, the
   worst Pareto k̂ and the smallest ESS share over its depths; the table by depth is in
   TABLES.md), then the rest of the verb's short figures and where the details are.

No line is longer than :data:`WIDTH` characters unless a name the user gave makes it so:
:func:`fold` breaks a longer line of prose at its ``; `` into indented continuation lines, and
``--estimator auto``'s tail figures, which can run to thousands of characters per cell, stay in
TABLES.md (:func:`~specreplay.render.interval_text.brief_reason`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specreplay.render.interval_text import (
    brief_reason,
    method_text,
    sign_note,
    small_sample_text,
)
from specreplay.render.markdown import num, pct
from specreplay.render.policy_tables import choice_verdict
from specreplay.render.table_text import fmt, markdown_table
from specreplay.render.tables import measured_r_note, sweep_body, tail_lines
from specreplay.render.verdicts import law_summary
from specreplay.results.backend import backend_note
from specreplay.results.model import Cell, Delta, Level, Result, Role

__all__ = [
    "WIDTH",
    "cell_table",
    "delta_lines",
    "estimator_lines",
    "excluded_reused",
    "fold",
    "folded",
    "interval_console",
    "path_bias_line",
    "requalify_console",
    "requalify_head",
    "sweep_console",
    "sweep_head",
]

WIDTH = 160
"""The longest console line, in characters (a user-given name may make one longer)."""


def _split_outside(text: str, sep: str) -> list[str]:
    """Split ``text`` at ``sep`` where it is outside brackets and parentheses."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        depth += (ch in "([") - (ch in ")]")
        if depth <= 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i = i + len(sep)
            continue
        i += 1
    return [*parts, text[start:]]


def _pieces(line: str, width: int) -> list[str]:
    """Split ``line`` into pieces that each keep their separator.

    At ``; `` first; in a piece still longer than ``width``, at ``, `` and then at spaces, both
    outside brackets and parentheses.
    """
    out: list[tuple[str, str]] = []
    for piece in line.split("; "):
        if len(piece) <= width:
            out.append((piece, "; "))
            continue
        commas = _split_outside(piece, ", ")
        for k, c in enumerate(commas):
            last = k == len(commas) - 1
            words = _split_outside(c, " ") if len(c) > width else [c]
            out += [(w, " ") for w in words[:-1]] + [(words[-1], "; " if last else ", ")]
    return [p + sep for p, sep in out[:-1]] + [out[-1][0]]


def fold(line: str, width: int = WIDTH) -> list[str]:
    """Break ``line`` into lines of at most ``width`` characters where it can.

    The breaks are at ``; `` first and, in a piece still too long, at ``, `` then at spaces
    outside brackets (an interval ``[lo, hi]`` stays on one line); a continuation line is
    indented by two spaces. A piece that still cannot be split stays whole (a long name).

    Examples
    --------
    >>> fold("a" * 10 + "; " + "b" * 10, width=12)
    ['aaaaaaaaaa;', '  bbbbbbbbbb']
    >>> fold("aaaa, bbbb, cccc; dd", width=11)
    ['aaaa, bbbb,', '  cccc; dd']
    >>> fold("short")
    ['short']
    """
    if len(line) <= width:
        return [line]
    out: list[str] = []
    current = ""
    for piece in _pieces(line, width):
        limit = width - (2 if out else 0)
        if current and len(current + piece.rstrip()) > limit:
            out.append(current.rstrip())
            current = piece
        else:
            current += piece
    out.append(current.rstrip())
    return [out[0], *[f"  {x}" for x in out[1:]]]


def folded(lines: list[str]) -> list[str]:
    """Return ``lines`` with each one :func:`fold` ed."""
    return [x for line in lines for x in fold(line)]


# -- line 2 --------------------------------------------------------------------------------------


def validated_earlier(result: Result) -> str | None:
    """Return the files whose rows were validated earlier (None when none was).

    See docs/scale.md#rows-validated-earlier: a file unchanged since a full check under this
    validator is not checked row by row again; ``--revalidate`` checks every row.
    """
    v = result.validation
    if v is None or v.validated_earlier == 0:
        return None
    return (
        f"rows validated earlier: {v.validated_earlier:,} of {v.files:,} "
        f"file{'s' if v.files != 1 else ''} unchanged since a full check "
        f"(validator {v.validator[:8]}); --revalidate checks every row"
    )


def excluded_reused(result: Result) -> list[str]:
    """Return what the run excluded or reused: one line per kind, ``Excluded: nothing`` if neither.

    The rounds ``--short-rounds`` left out carry the MEASURED R over the rounds kept and over
    every round; the cache line is ``--cache``'s (:func:`~specreplay.results.backend.backend_note`).
    """
    out = []
    for e in result.excluded:
        counts = [
            f"{v:,} {k if v != 1 else k[:-1]}"
            for k in ("rows", "rounds", "requests")
            if (v := getattr(e, k)) is not None
        ]
        what = " in ".join(counts[-2:]) if counts else "some"
        out.append(f"Excluded: {what} ({e.reason}){measured_r_note(e)}")
    reused = [] if (v := validated_earlier(result)) is None else [v]
    if (note := backend_note(result.extra.get("replay_backend"))) is not None:
        reused.append(note)
    for i, what in enumerate(reused):
        out.append(f"Reused: {what}" + ("; nothing excluded" if i == 0 and not out else ""))
    return folded(out or ["Excluded: nothing"])


# -- the pooled Δ and the cells ------------------------------------------------------------------


def delta_lines(d: Delta) -> list[str]:
    """Return the pooled Δ: intervals (with the sign note), small-sample mark, the rule's reason."""
    if d.point is None:
        return fold(f"Δ: — ({d.null_reason or 'no figure'})")
    lines = [
        f"Δ = {num(d.point)} tokens/round [{num(d.lo)}, {num(d.hi)}], Δ/R_a {pct(d.rel)} "
        f"[{pct(d.rel_lo)}, {pct(d.rel_hi)}] ({d.label.value}; {d.level:.0%} {method_text(d)})"
    ]
    note = sign_note(d)
    if note is not None:
        lines.append(f"({note})")
    small = small_sample_text(d, setting=False)
    if small is not None:
        lines.append(small)
    if d.verdict_reason:
        lines.append(f"Why {d.verdict}: {brief_reason(d.verdict_reason)}")
    if d.warning:
        lines.append(f"Warning: {d.warning}")
    return folded(lines)


class _Notes:
    """Footnotes of the compact table: each distinct reason a number ``[k]``."""

    def __init__(self) -> None:
        self.reasons: dict[str, int] = {}

    def __call__(self, reason: str) -> str:
        self.reasons.setdefault(reason, len(self.reasons) + 1)
        return f"[{self.reasons[reason]}]"

    def lines(self) -> list[str]:
        return folded([f"[{k}] {r}" for r, k in self.reasons.items()])


def _shown_cells(result: Result) -> list[Cell]:
    return [c for c in result.cells if c.level in (Level.POOLED, Level.FAMILY)]


def _cell_row(c: Cell, d: Delta | None, note: _Notes, extra: list[str]) -> list[str]:
    if d is None or d.point is None:
        why = (d.null_reason if d is not None else None) or c.null_reason or "no Δ"
        return [c.name, f"{c.n_requests:,}", f"— {note(why)}", "—", "—", "—", "—", *extra]
    verdict = str(d.verdict or "—")
    if d.verdict_reason:
        verdict += " " + note(brief_reason(d.verdict_reason))
    if d.warning:
        verdict += " " + note(d.warning)
    return [
        c.name,
        f"{c.n_requests:,}",
        num(d.point),
        f"[{num(d.lo)}, {num(d.hi)}]",
        pct(d.rel, 2),
        f"[{pct(d.rel_lo, 2)}, {pct(d.rel_hi, 2)}]"
        + (f" {note(sn)}" if (sn := sign_note(d)) else ""),
        verdict,
        *extra,
    ]


def cell_table(
    result: Result, role: Role, out: Path, *, requalification: bool = False
) -> list[str]:
    """Return the compact table of the pooled and family cells, its footnotes, what is left out."""
    note = _Notes()
    rows = []
    for c in _shown_cells(result):
        rq = c.requalification
        extra = [str((rq.verdict if rq is not None else None) or "—")] if requalification else []
        rows.append(_cell_row(c, c.delta(role), note, extra))
    header = ["cell", "requests", "Δ", "95% CI", "Δ/R_a", "95% CI (rel)", "verdict"]
    header += ["requalification"] if requalification else []
    buckets = sum(1 for c in result.cells if c.level in (Level.BUCKET, Level.FAMILY_BUCKET))
    groups = sum(1 for c in result.cells if c.level in (Level.BY, Level.FAMILY_BUCKET_BY))
    where = f"{out}/TABLES.md and cells.parquet"
    more = [f"{buckets:,} bucket and family × bucket cells are in {where}"] if buckets else []
    more += [f"{groups:,} --by cells are in {where}"] if groups else []
    return ["", markdown_table(header, rows), *note.lines(), *more]


# -- estimator diagnostics -----------------------------------------------------------------------


def estimator_lines(result: Result) -> list[str]:
    """Return the estimator and why (its first reason), then one line per arm on its weights.

    An arm's line: the estimator used, the worst Pareto k̂ and the smallest ESS share of the
    pooled cell's importance diagnostics over the arm's depths (the table by depth is in
    TABLES.md). A run whose ``auto`` estimator fell back from importance gives one WARNING line
    with the whole reason instead; a run without a replay estimator gives none.
    """
    used = result.options.get("estimator_used")
    if used is None or not result.cells:
        return []
    asked = result.options.get("estimator")
    why = str(result.options.get("estimator_reason", ""))
    if asked == "auto" and used != "importance":
        return fold(f"WARNING: estimator {used} (auto: {why})")
    auto = "auto: " if asked == "auto" else ""
    first = why.split("; ")[0]
    rest = "; the rest of why in TABLES.md" if first != why else ""
    out = [*fold(f"Estimator {used} ({auto}{first}{rest})")]
    for arm in result.arms:
        diags = [d for d in result.pooled.importance if d.arm == arm]
        if not diags:
            out.append(f"Estimator {used} for {arm}: no weight diagnostics in this run")
            continue
        ks = [d for d in diags if d.pareto_k is not None]
        worst = max(ks, key=lambda d: d.pareto_k or 0.0) if ks else None
        k_text = (
            f"worst k̂ {worst.pareto_k:.2f} at depth {worst.depth} (threshold "
            f"{fmt(worst.khat_threshold, 2)})"
            if worst is not None and worst.pareto_k is not None
            else f"k̂ — ({diags[0].null_reason or 'not computed'})"
        )
        shares = [d for d in diags if d.ess_share is not None]
        low = min(shares, key=lambda d: d.ess_share or 0.0) if shares else None
        ess = (
            f"smallest ESS share {100 * (low.ess_share or 0.0):.1f}% at depth {low.depth}"
            if low is not None
            else "ESS share —"
        )
        warned = sum(1 for d in diags if d.warning)
        warn = f"; {warned} depth(s) warn" if warned else ""
        out.append(f"Estimator {used} for {arm}: {k_text}, {ess}{warn}")
    return out


def path_bias_line(pooled: Cell) -> list[str]:
    """Return the logging arm's path-bias line, naming the estimator of its SIMULATED R."""
    pb = pooled.delta(Role.PATH_BIAS)
    if pb is None:
        return []
    if pb.point is None:
        return fold(f"Path bias of the logging arm: — ({pb.null_reason})")
    by = f" by {pb.estimator}" if pb.estimator else ""
    return fold(
        f"Path bias of the logging arm {pb.b} (SIMULATED{by} − MEASURED R): {num(pb.point)} "
        f"[{num(pb.lo)}, {num(pb.hi)}] tokens/round (95% paired interval)"
    )


def _path_bias_by_arm(pooled: Cell) -> list[str]:
    rows = [
        [d.b.split(" (")[0], num(d.point), f"[{num(d.lo)}, {num(d.hi)}]"]
        for d in pooled.deltas
        if d.role is Role.PATH_BIAS_IMPORTANCE and d.point is not None
    ]
    if not rows:
        return []
    return [
        "Path assumption's cost by arm (R analytic − R importance, SIMULATED):",
        markdown_table(["arm", "Δ", "95% paired CI"], rows),
    ]


def _tail(out: Path, files: list[str], what: str) -> list[str]:
    return [
        "",
        f"Details ({what}): {out}/TABLES.md; the report: {out}/REPORT.md",
        f"Outputs: {out}/ ({', '.join(files)})",
    ]


# -- requalify -----------------------------------------------------------------------------------


def requalify_head(result: Result) -> str:
    """Return line 1 of a requalification: the pooled verdict, the Δ verdict and the law test."""
    rq = result.requalification
    main = result.pooled.delta(Role.CANDIDATE_VS_BASELINE) if result.cells else None
    if rq is None or rq.verdict is None or main is None or main.point is None:
        why = (rq.null_reason if rq is not None else None) or "no requalification"
        return f"REQUALIFICATION (pooled): — ({why})"
    margin = str(result.options["margin"]["text"])
    parts = (rq.because or "").split("; ")
    law = parts[1] if len(parts) > 1 else ""
    return (
        f"REQUALIFICATION (pooled, {main.label.value}): {rq.verdict} — {main.b} vs {main.a}: "
        f"Δ {main.verdict} at margin {margin}" + (f"; {law}" if law else "")
    )


def requalify_console(result: Result, out: Path, files: list[str]) -> str:
    """Return the console text of a requalification (module docstring)."""
    pooled = result.pooled
    main = pooled.delta(Role.CANDIDATE_VS_BASELINE) if result.cells else None
    lines = [*fold(requalify_head(result)), *excluded_reused(result)]
    if main is not None:
        lines += delta_lines(main)
        lines += cell_table(result, Role.CANDIDATE_VS_BASELINE, out, requalification=True)
    lines += [""] if result.cells else []
    g = pooled.delta(Role.CANDIDATE_VS_REFERENCE) if result.cells else None
    if g is not None and g.point is not None:
        lines += fold(
            f"Gain of {g.b} over the reference {g.a} (no verdict): {num(g.point)} "
            f"[{num(g.lo)}, {num(g.hi)}] tokens/round, {pct(g.rel, 2)} ({g.label.value})"
        )
    if result.cells:
        lines += path_bias_line(pooled)
        lines += _path_bias_by_arm(pooled)
    lines += estimator_lines(result)
    arms = list(dict.fromkeys(t.arm for t in result.law_tests))
    lines += folded([law_summary(result.law_tests, a) for a in arms])
    what = "every cell, survival, off-path rates, weights by depth, law tests, assumptions"
    return "\n".join(lines + _tail(out, files, what)) + "\n"


# -- interval ------------------------------------------------------------------------------------


def _interval_head(d: Delta, margin: str) -> str:
    if d.point is None:
        return f"VERDICT (pooled): — ({d.null_reason})"
    return f"VERDICT (pooled, {d.label.value}): {d.verdict} at margin {margin} — {d.b} vs {d.a}"


def interval_console(result: Result, out: Path, files: list[str]) -> str:
    """Return the console text of a paired interval (module docstring)."""
    d = result.pooled.delta(Role.B_VS_A)
    assert d is not None  # every interval result has its b-vs-a delta
    margin: dict[str, Any] = result.options["margin"]
    lines = [*fold(_interval_head(d, str(margin["text"]))), *excluded_reused(result)]
    lines += delta_lines(d)
    lines += cell_table(result, Role.B_VS_A, out)
    return "\n".join(lines + _tail(out, files, "every cell, BCa intervals, method")) + "\n"


# -- sweep ---------------------------------------------------------------------------------------


def sweep_head(result: Result) -> str:
    """Return line 1 of a sweep: each arm's best depth (with a cost model) or highest-R depth."""
    if not result.cells:
        return "SWEEP (pooled): — (no cell)"
    pooled = result.pooled
    best = []
    for arm in result.arms:
        fig = pooled.best_depth_figure(arm)
        if fig is not None and fig.tokens_per_s is not None:
            p = f", P(best) {fig.p_best:.2f}" if fig.p_best is not None else ""
            best.append(f"{fig.depth} for {arm} ({fig.tokens_per_s:.1f} tokens/s{p})")
    cost = result.options.get("cost")
    if best:
        head = f"SWEEP (pooled, tokens/s ESTIMATED, cost {cost}): best depth " + ", ".join(best)
    else:
        top = []
        for arm in result.arms:
            figs = [f for f in pooled.depths if f.arm == arm and f.supported and f.R is not None]
            if figs:
                top.append(f"{arm} {max(figs, key=lambda f: f.R or 0.0).depth}")
        head = (
            "SWEEP (pooled, SIMULATED): no best depth without a cost model (--cost); R is "
            "highest at depth " + (", ".join(top) or "— (no supported depth)")
        )
    bits = result.extra.get("fewest_bits")
    if isinstance(bits, dict):
        fewest = bits.get("fewest_bits_equivalent") or "—"
        head += f"; fewest bits EQUIVALENT to {bits.get('baseline')}: {fewest}"
    return head


def _short_body(body: list[str]) -> list[str]:
    """Return the sweep's tables for the console: prose folded, held-out choices left out.

    Each held-out choice's verdict is on the lines after line 2; its table and caveats are in
    TABLES.md.
    """
    out: list[str] = []
    skipping = False
    for line in body:
        if line.startswith("## "):
            skipping = "does a policy pay? The held-out choice" in line
            if skipping:
                out += [f"{line.removeprefix('## ')}: its table and caveats are in TABLES.md", ""]
                continue
        if not skipping:
            out += [line] if line.startswith("|") else fold(line)
    return out


def sweep_console(result: Result, out: Path, files: list[str]) -> str:
    """Return the console text of a sweep: line 1 and 2 as every verdict verb, then its tables."""
    lines = [*fold(sweep_head(result)), *excluded_reused(result)]
    lines += folded(
        [line.replace("**", "") for a in result.arms if (line := choice_verdict(result, a))]
    )
    lines += estimator_lines(result)
    lines += folded(tail_lines(result))
    lines += _short_body(sweep_body(result))
    what = "estimator choice, interval method, assumptions"
    return "\n".join(lines + _tail(out, files, what)) + "\n"
