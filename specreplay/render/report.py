"""REPORT.md: one run's findings for a person, rendered from its typed result (issue 7, item 1).

Sections, in this order, each opening with one short paragraph on how to read it (but the
verdicts, which come first and are followed by theirs):

1. ``# title`` and the question in one sentence, built from the result (arms, inputs, margin);
2. **Verdicts**: the pooled verdict first, then per family (per cell for a screen), each with its
   figures and label (:mod:`specreplay.render.verdicts`); a reason ``--estimator auto``'s tail
   rule gave names its rule only, its figures are in the tables and the diagnostics, once;
3. **Tables**: the TABLES.md text of the run, produced by the same renderers (never a copy of
   them), headings moved under this section, its closing assumption list moved to section 4;
4. **Assumptions and choices**: the estimator used and why, the path assumption, the interval
   method and its calibration, the margin and verdict rule, seed and bootstrap replicates, the
   command's stated assumptions, what was excluded, the inputs;
5. **Diagnostics**: path bias, the importance weights' ESS and Pareto k̂, cells whose interval
   may undercover, underpowered or skipped law tests;
6. **Figures**: every PNG the run wrote, embedded by its relative file name (the folder can be
   moved) with its label and the one-line caption of :func:`~specreplay.render.plots.plot_caption`
   (a fallback caption for a name it lacks).

Nulls read ``—`` with their reason. The text is a function of the result and of the names of the
PNGs written beside it, so ``specreplay report`` re-renders it byte for byte. The demo's top-level
REPORT.md tells the whole story from its sub-runs (:mod:`specreplay.render.demo_story`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from specreplay.render import demo_story
from specreplay.render.interval_text import (
    brief_reason,
    has_interval_fields,
    small_sample_text,
)
from specreplay.render.markdown import (
    bullets,
    demote,
    figure_block,
    figure_label,
    main_delta,
    md_blocks,
    num,
    split_assumptions,
)
from specreplay.render.screen import screen_tables
from specreplay.render.tables import TABLES, estimator_line, unread_lines
from specreplay.render.verdicts import HOW_TO_READ, QUESTIONS, VERDICTS, delta_text
from specreplay.results.model import Result, Role

__all__ = ["REPORT_NAME", "report_markdown", "report_text"]

REPORT_NAME = "REPORT.md"

_READ = {
    "tables": "The same tables as TABLES.md, for every cell the run has (pooled, family, "
    "context bucket, family × bucket where they apply). Footnote numbers [k] point to the "
    "reason for a `—`.",
    "choices": "What this run assumed and chose, and why: read it before trusting a verdict.",
    "diagnostics": "Checks of the method on this data. A diagnostic that fails does not change "
    "a verdict; it says where the verdict may be wrong.",
    "figures": "The plots written beside this file (links are relative: keep them together).",
}

_PATH = {
    "importance": "importance weights: each replayed round is reweighted by the policy ratio of "
    "its archived drafts, which removes the path assumption's bias where the archive records "
    "the drafted token and its logging law "
    '(docs/methods.md, "The importance estimator and its weight").',
    "analytic": "the path assumption: archived positions are replayed as if their laws did not "
    "depend on what was drafted before (exact expectations, no Monte Carlo noise); biased even "
    "for the logging arm — see the path-bias diagnostic.",
    "montecarlo": "the path assumption, replayed by Monte Carlo draws: archived positions are "
    "replayed as if their laws did not depend on what was drafted before.",
    "survival-proxy": "the survival truncation proxy: R at depth d = 1 + Σ_{j≤d} P(A ≥ j) of "
    "the archived rounds (ESTIMATED; no replay).",
}


def _section(title: str, read: str, body: str) -> str:
    return f"## {title}\n\n{read}\n\n{body.strip()}\n"


def _verdicts_section(result: Result) -> str:
    """Return the Verdicts section: the verdicts first, then how to read them (issue 16, item 5)."""
    verdicts = bullets(VERDICTS[result.command](result))
    return f"## Verdicts\n\n{verdicts}\n\n{HOW_TO_READ[result.command]}\n"


def _tables(result: Result) -> str:
    render = {**TABLES, "screen": screen_tables}[result.command]
    return demote(md_blocks(split_assumptions(render(result))), 3)


def _interval_choice(result: Result) -> list[str]:
    d = main_delta(result)
    if d is None:
        return []
    o = result.options
    valid = f" ({d.n_boot_valid:,} valid)" if d.n_boot_valid is not None else ""
    m = result.interval_method
    out = (
        [_method_choice(result, valid)]
        if m is not None
        else [  # a results.json written before interval_method existed
            f"Intervals: {d.method} at {d.level:.0%}, {d.n_boot:,} bootstrap replicates{valid}, "
            f"requests as clusters, stratified by {o.get('stratify', '—')}."
        ]
    )
    if "margin" in o and d.verdict is not None:
        m = o["margin"]
        out.append(
            f"Margin ±{m['text']} ({m['kind']}). Verdict at test level 0.05: EQUIVALENT iff the "
            "90% interval (TOST) lies inside ±margin, else DIFFERENT iff the 95% interval "
            "excludes 0, else INCONCLUSIVE; p-values Holm-adjusted within each level (families, "
            "buckets, family × bucket)."
        )
    if o.get("min_requests") is not None:
        out.append(
            f"Reporting minimum (`--min-requests`) {o['min_requests']}: a cell with fewer "
            "requests gets no Δ (`—`, with the reason)."
        )
    return out


def _method_choice(result: Result, valid: str) -> str:
    """Return the interval method, its thresholds and its study in prose."""
    m = result.interval_method
    d = main_delta(result)
    assert m is not None and d is not None
    return (
        f"Intervals: {m.method}, {m.description}, at {d.level:.0%}; {d.n_boot:,} bootstrap "
        f"replicates{valid}, requests resampled as clusters, stratified by "
        f"{result.options.get('stratify', '—')}. The calibration study ({m.study}) set the "
        f"thresholds: below the verdict minimum of {m.min_requests:,} requests a cell is never "
        "EQUIVALENT, and DIFFERENT only where the CR2 and sign-flip tests both reject at α/2 "
        f"(the hull of their intervals is printed); with fewer than {m.min_differing:,} "
        "requests whose (n, t) differ between the arms it is decided by its conservative hull "
        "(EQUIVALENT only inside the margin, never DIFFERENT); the reason is written beside "
        "its verdict. A cell "
        "below the nominal-coverage size is marked small sample, with what the study's 95% "
        "intervals covered at its size in the study's hardest setting."
    )


def _choices(result: Result) -> str:
    o = result.options
    items = []
    if o.get("estimator_used"):
        items.append(estimator_line(result))
        items.append("Replay: " + _PATH.get(str(o["estimator_used"]), str(o["estimator_used"])))
    items += _interval_choice(result)
    items += unread_lines(result)
    backend = result.backend_line
    if backend is not None:
        items.append(backend)
    screened = result.command != "screen" or bool(result.cells)
    if screened and isinstance(o.get("central"), dict) and isinstance(o.get("envelope"), dict):
        c, e = o["central"], o["envelope"]
        items.append(
            f"Central values: overlap {c.get('overlap')}, overhead {c.get('overhead_ms')} ms, "
            f"slope {c.get('slope')}; envelope grids: overlap {e.get('overlap')}, overhead "
            f"{e.get('overhead_ms')} ms, slope {e.get('slope')} (config "
            f"{Path(str(o.get('config'))).name if o.get('config') else '— (defaults)'})."
        )
    reps = o.get("replicates")
    if result.command not in ("screen", "budget"):  # the only commands that draw nothing
        items.append(
            f"Seed {result.seed}"
            + (f"; {reps} Monte Carlo replicates per round" if reps else "")
            + "."
        )
    text = bullets(items)
    text += "\n\nAssumptions the command states:\n\n" + bullets(list(result.assumptions) or ["—"])
    excl = [
        f"{e.reason}: "
        + ", ".join(
            f"{v:,} {k}" for k in ("rows", "rounds", "requests") if (v := getattr(e, k)) is not None
        )
        for e in result.excluded
    ]
    text += "\n\nExcluded: " + ("nothing." if not excl else "\n\n" + bullets(excl))
    files = [
        f"`{Path(f.path).name}` ({f.bytes:,} bytes, SHA-256 {f.sha256[:12]}…)"
        for f in result.inputs
    ]
    text += (
        f"\n\nInputs ({len(files)} file(s)), specreplay {result.version}, "
        f"{result.created_utc}:\n\n" + bullets(files[:12])
    )
    if len(files) > 12:
        text += f"\n- … and {len(files) - 12} more (results.json lists every one)"
    return text


def _path_bias(result: Result) -> list[str]:
    if not result.cells:
        return []
    out = []
    pb = result.pooled.delta(Role.PATH_BIAS)
    if pb is not None:
        if pb.point is None or pb.lo is None or pb.hi is None:
            out.append(f"Path bias of the logging arm: — ({pb.null_reason})")
        else:
            inside = pb.lo <= 0.0 <= pb.hi
            by = f" by {pb.estimator}" if pb.estimator else ""
            out.append(
                f"Path bias of the logging arm {pb.b} (SIMULATED{by} − MEASURED R): "
                f"{num(pb.point)} "
                f"[{num(pb.lo)}, {num(pb.hi)}] tokens/round: "
                + (
                    "the interval holds 0, the replay reproduces the MEASURED R."
                    if inside
                    else "the interval excludes 0, the replay is biased even for the "
                    "arm that wrote the archive; deltas may carry part of that bias."
                )
            )
    for d in result.pooled.deltas:
        if d.role is Role.PATH_BIAS_IMPORTANCE:
            sides = f"R {d.estimator}" if d.estimator else f"{d.b} − {d.a}"
            out.append(
                f"Path assumption's cost for {d.b.split(' (')[0]} ({sides}): "
                + delta_text(d).replace(", Δ/R_a", "; relative")
            )
    return out


def _importance(result: Result) -> list[str]:
    imp = [d for d in result.pooled.importance if d.ess_share is not None] if result.cells else []
    if not imp:
        return []
    low = min(imp, key=lambda d: d.ess_share or 0.0)
    ks = [d for d in imp if d.pareto_k is not None]
    high = max(ks, key=lambda d: d.pareto_k or 0.0) if ks else None
    k_text = (
        f"; largest Pareto k̂ {high.pareto_k:.2f} ({high.arm} at depth {high.depth}, "
        f"threshold {num(high.khat_threshold, 2).lstrip('+')})"
        if high
        else ""
    )
    warned = sorted({f"{d.arm} at depth {d.depth}: {d.warning}" for d in imp if d.warning})
    return [
        f"Importance weights (pooled): lowest ESS share {100 * (low.ess_share or 0.0):.1f}% "
        f"({low.arm} at depth {low.depth}){k_text}. "
        + ("No tail warning." if not warned else f"{len(warned)} warning(s): " + "; ".join(warned))
    ]


def _undercover(result: Result) -> list[str]:
    cells: dict[str, list[str]] = {}
    for c in result.cells:
        for d in c.deltas:
            if d.warning:
                cells.setdefault(d.warning.split(":")[0], []).append(c.name)
    out = []
    for warning, names in cells.items():
        names = list(dict.fromkeys(names))
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        out.append(f'{len(names)} cell(s) warn "{warning}": {shown}.')
    return out + _small_samples(result) + _forced(result)


def _listed(names: list[str]) -> str:
    names = list(dict.fromkeys(names))
    return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def _small_samples(result: Result) -> list[str]:
    """Return the small-sample cells, grouped by what the study measured at their size."""
    deltas = [(c, d) for c in result.cells for d in c.deltas]
    if not has_interval_fields(d for _, d in deltas):
        return []
    by: dict[str, list[str]] = {}
    for c, d in deltas:
        if (text := small_sample_text(d)) is not None:
            by.setdefault(text.removeprefix("small sample: "), []).append(c.name)
    if not by:
        return [
            "No cell is a small sample: every cell with a delta is at or above the "
            "nominal-coverage size."
        ]
    return [
        f"{len(set(names))} small-sample cell(s) (below the nominal-coverage size), {cov}: "
        f"{_listed(names)}."
        for cov, names in by.items()
    ]


def _forced(result: Result) -> list[str]:
    """Return the cells whose verdict a rule forced, grouped by the reason."""
    by: dict[str, list[str]] = {}
    for c in result.cells:
        for d in c.deltas:
            if d.verdict_reason:  # auto's tail figures are in the Tables section, once
                why = brief_reason(d.verdict_reason, "the Tables section")
                by.setdefault(f"{d.verdict} by rule ({why})", []).append(c.name)
    return [f"{len(set(names))} cell(s) {why}: {_listed(names)}." for why, names in by.items()]


def _law_diag(result: Result) -> list[str]:
    law = result.law_tests
    under = [t for t in law if t.passed and t.underpowered]
    skipped = [t for t in law if t.passed is None]
    out = []
    if under:
        out.append(
            f"{len(under)} law test(s) passed with too few draws to detect their exact "
            "TV (underpowered): a pass there says little."
        )
    if skipped:
        why = "; ".join(sorted({t.null_reason or "—" for t in skipped}))
        out.append(f"{len(skipped)} law test(s) could not run: — ({why}).")
    return out


def _null_cells(result: Result) -> list[str]:
    """Count the cells whose main Δ is null, with their distinct reasons (most frequent first)."""
    main = main_delta(result)
    if main is None:
        return []
    why: dict[str, int] = {}
    for c in result.cells:
        d = c.delta(main.role)
        if d is None or d.point is None:
            reason = (d.null_reason if d is not None else None) or c.null_reason or "—"
            key = re.sub(r"^\d+ requests", "k requests", reason)
            why[key] = why.get(key, 0) + 1
    if not why:
        return []
    reasons = "; ".join(f"{k} ({n})" for k, n in sorted(why.items(), key=lambda kv: -kv[1]))
    return [f"{sum(why.values())} of {len(result.cells)} cells have no Δ (`—`): {reasons}."]


def _diagnostics(result: Result) -> str:
    items = _path_bias(result) + _importance(result) + _undercover(result) + _law_diag(result)
    if result.command == "screen" and result.cells:
        items.append(
            "Envelopes are assumption envelopes (grids of overlap, overhead and slope × "
            "every run's survivals), not confidence intervals."
        )
    items += _null_cells(result)
    return bullets(items or ["No diagnostic applies to this run."])


def _figures(result: Result, pngs: Sequence[str]) -> str:
    if not pngs:
        return "This run wrote no plot."
    return "\n\n".join(figure_block(p, figure_label(result, p), result=result) for p in pngs)


def report_markdown(result: Result, pngs: Sequence[str]) -> str:
    """Return the REPORT.md text of a run that has tables (see the module docstring)."""
    try:
        title, question = QUESTIONS[result.command](result)
    except KeyError:  # a hand-built result without the options the question names
        title, question = f"specreplay {result.command}", f"A `{result.command}` run."
    parts = [
        f"# {title}\n\n{question}\n",
        _verdicts_section(result),
        _section("Tables", _READ["tables"], _tables(result)),
        _section("Assumptions and choices", _READ["choices"], _choices(result)),
        _section("Diagnostics", _READ["diagnostics"], _diagnostics(result)),
        _section("Figures", _READ["figures"], _figures(result, pngs)),
    ]
    return "\n".join(parts)


def report_text(result: Result, folder: Path, pngs: Sequence[str]) -> str | None:
    """Return the REPORT.md of ``result`` written in ``folder``, or None if it has none.

    A demo's REPORT.md is the whole story: it reads the sub-runs' results.json in ``folder``
    (:func:`specreplay.render.demo_story.demo_report`).
    """
    if result.command == "demo":
        return demo_story.demo_report(result, folder, pngs)
    if result.command not in VERDICTS:
        return None
    return report_markdown(result, pngs)
