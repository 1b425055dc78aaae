"""The demo's story, told from its sub-runs' typed results: the terminal text and REPORT.md.

``specreplay demo`` writes one sub-run folder per chapter, each an ordinary run with its own
results.json: ``requalify`` (dyadic24 against float64 sampling, greedy as reference),
``bits-dyadicN`` (the bits sweep, one requalification per N), ``lawtest`` (the mismatched
verifier), ``sweep`` (the depth sweep) and ``budget``; the top level holds the archive's MEASURED
result. Everything the demo says is a function of those results (:class:`DemoRuns`), so the
terminal summary and the top-level REPORT.md share one source (:func:`verdict_lines`,
:func:`chapters`), and ``specreplay report DEMO_DIR`` re-renders REPORT.md from the files on disk
alone (:func:`read_runs`). The arms, margin, cost model and price are read from the sub-runs'
options, not from the demo's constants, so a report says what the run on disk did.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specreplay.errors import SpecReplayError
from specreplay.render.console import (
    estimator_lines,
    excluded_reused,
    fold,
    folded,
    requalify_head,
)
from specreplay.render.markdown import demote, figure_block, figure_label, md_blocks, pct
from specreplay.render.plots import PLOT_CAPTIONS
from specreplay.render.policy_tables import choice_verdict, policy_sections
from specreplay.render.tables import (
    archive_summary,
    budget_tables,
    estimator_line,
    lawtest_table,
    measured_tables,
    requalify_tables,
    sweep_tables,
)
from specreplay.results.io import read_result
from specreplay.results.model import Result, Role

__all__ = [
    "BITS_PREFIX",
    "Chapter",
    "DemoRuns",
    "chapters",
    "demo_report",
    "read_runs",
    "terminal_text",
    "verdict_lines",
]

POLICY_CAVEATS = (
    "Each policy drafts with the logging arm's sampler up to the archive's 8 recorded positions "
    'and is replayed on the archived rounds (docs/methods.md, "Policies (adaptive drafting)"). '
    "Two caveats bound what it can say: the path assumption (the analytic estimator's laws at a "
    "position do not depend on the tokens drafted before; importance weights do without it), "
    "and that a policy which changes how far a round drafts also changes where later rounds "
    "start, which no replay of these archives can see. The verdict is held out: the policy and "
    "the depth are chosen on one half of the requests and compared on the other; the in-sample "
    "figure beside it is chosen and measured on the same requests (the winner's curse)."
)

BITS_PREFIX = "bits-dyadic"
"""Sub-run folders of the bits sweep are ``bits-dyadicN``."""


@dataclass(frozen=True)
class DemoRuns:
    """The demo's results: the archive's MEASURED result and each sub-run by its folder name."""

    measured: Result
    runs: dict[str, Result] = field(default_factory=dict)

    def bits(self) -> dict[int, Result]:
        """Return the bits sweep by N: the main requalification and each ``bits-dyadicN``."""
        out: dict[int, Result] = {}
        for name, r in self.runs.items():
            if name == "requalify" or name.startswith(BITS_PREFIX):
                m = re.search(r"dyadic(\d+)", str(r.options.get("candidate", "")))
                if m:
                    out[int(m.group(1))] = r
        return dict(sorted(out.items()))


def read_runs(measured: Result, folder: Path) -> DemoRuns:
    """Read every sub-run's results.json under ``folder`` (one level down)."""
    runs = {}
    for sub in sorted(p for p in folder.iterdir() if (p / "results.json").is_file()):
        runs[sub.name] = read_result(sub / "results.json")
    return DemoRuns(measured, runs)


# -- verdicts ------------------------------------------------------------------------------------


def _requalify_lines(main: Result) -> list[str]:
    lines = []
    d = main.pooled.delta(Role.CANDIDATE_VS_BASELINE)
    rq = main.requalification
    if d is not None and d.point is not None and rq is not None:
        lines.append(
            f"- requalification {d.b} vs {d.a}: {rq.verdict} "
            f"(Δ {d.point:+.2e} tokens/round, {100 * (d.rel or 0.0):+.4f}%; {rq.because})"
        )
    return lines


def _bits_line(bits: dict[int, Result], margin: str) -> list[str]:
    parts = []
    for n, r in bits.items():
        db = r.pooled.delta(Role.CANDIDATE_VS_BASELINE)
        rqb = r.requalification
        if db is not None and db.point is not None and rqb is not None:
            lo, hi, rel = (100 * (x or 0.0) for x in (db.rel_lo, db.rel_hi, db.rel))
            parts.append(f"dyadic{n} {rqb.verdict} ({rel:+.3f}% [{lo:+.3f}%, {hi:+.3f}%])")
    return [f"- bits sweep at margin {margin}: " + "; ".join(parts)] if parts else []


def _law_line(law: Result | None, candidate: str) -> list[str]:
    if law is None:
        return []
    lines = []
    for arm in law.arms:
        mine = [t for t in law.law_tests if t.arm == arm and t.passed is not None]
        if arm == candidate or not mine:
            continue
        failed = sum(1 for t in mine if not t.passed)
        tv = max(t.tv or 0.0 for t in mine)
        what = f"FAILED at {failed} of" if failed else "passed at all"
        lines.append(
            f"- mismatched verifier {arm}: law test {what} {len(mine)} archive "
            f"positions (exact TV up to {tv:.3g})"
        )
    return lines


def _diagnostic_lines(main: Result) -> list[str]:
    lines = []
    g = main.pooled.delta(Role.CANDIDATE_VS_REFERENCE)
    if g is not None and g.point is not None:
        lines.append(
            f"- gain of {g.b} over {g.a}: {g.point:+.4f} tokens/round "
            f"[{g.lo or 0.0:+.4f}, {g.hi or 0.0:+.4f}] ({100 * (g.rel or 0.0):+.2f}%)"
        )
    pb = main.pooled.delta(Role.PATH_BIAS)
    if pb is not None and pb.point is not None:
        by = f" by {pb.estimator}" if pb.estimator else ""
        lines.append(
            f"- path bias of the logging arm (SIMULATED{by} − MEASURED R): {pb.point:+.4f} "
            f"[{pb.lo or 0.0:+.4f}, {pb.hi or 0.0:+.4f}] tokens/round"
        )
    base = str(main.options.get("baseline"))
    cost = [
        d for d in main.pooled.deltas if d.role is Role.PATH_BIAS_IMPORTANCE and base in (d.a, d.b)
    ]
    if cost and cost[0].point is not None:
        d = cost[0]  # Δ = b − a = analytic − importance, whichever estimator the run used
        lines.append(
            f"- the path assumption's cost for the logging arm (analytic − importance R): "
            f"{d.point:+.4f} [{d.lo or 0.0:+.4f}, {d.hi or 0.0:+.4f}] tokens/round"
        )
    return lines


def _depth_line(sweep: Result | None) -> list[str]:
    """Return the depth chapter's verdict: the swept arm's best depth under the cost model."""
    if sweep is None or not sweep.arms:
        return []
    arm = sweep.arms[0]
    fig = sweep.pooled.best_depth_figure(arm)
    if fig is None or fig.tokens_per_s is None:
        return []
    depths = sweep.options.get("depths") or [fig.depth]
    return [
        f"- depth sweep of {arm} at {sweep.options.get('cost')} ms per round: best depth "
        f"{fig.depth} of {min(depths)}..{max(depths)}, {fig.tokens_per_s:.0f} tokens/s "
        f"(ESTIMATED), P(best) {fig.p_best or 0.0:.2f}"
    ]


def _policy_line(policies: Result | None) -> list[str]:
    """Return the policy chapter's verdict: the held-out choice beside the in-sample figure."""
    if policies is None or not policies.arms:
        return []
    line = choice_verdict(policies, policies.arms[0])
    return [f"- adaptive drafting: {line}"] if line else []


def _budget_line(budget: Result | None, main: Result) -> list[str]:
    """Return the budget chapter's verdict: the break-even added cost of the gain."""
    b = budget.pooled.budget if budget is not None and budget.cells else None
    if budget is None or b is None or b.break_even_ms is None:
        return []
    o = main.options
    return [
        f"- budget of {o.get('candidate')}'s gain over {o.get('reference')} (lower bound) at "
        f"{b.price_ms:g} ms per round: it pays for up to {b.break_even_ms:.4f} ms more per "
        "round (ESTIMATED)"
    ]


def verdict_lines(runs: DemoRuns) -> list[str]:
    """Return the demo's verdicts: the terminal's VERDICTS block, one ``- `` line each.

    Verdicts only: the estimator's choice and its diagnostics follow them, once
    (:func:`terminal_text`, :func:`demo_report`).
    """
    main = runs.runs.get("requalify")
    if main is None:
        return ["- — (requalify/results.json not found: the demo's sub-runs are incomplete)"]
    margin = str(main.options.get("margin", {}).get("text"))
    return [
        *_requalify_lines(main),
        *_bits_line(runs.bits(), margin),
        *_law_line(runs.runs.get("lawtest"), str(main.options.get("candidate"))),
        *_diagnostic_lines(main),
        *_depth_line(runs.runs.get("sweep")),
        *_policy_line(runs.runs.get("policies")),
        *_budget_line(runs.runs.get("budget"), main),
    ]


# -- chapters ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chapter:
    """One chapter of the story: its title, the sub-run folder it comes from, its text."""

    title: str
    folder: str | None
    body: str


def chapters(runs: DemoRuns, archive: str) -> list[Chapter]:
    """Return the story's chapters (those whose sub-run exists), each with the sub-run's tables.

    ``archive`` is the archive folder as the text should name it.
    """
    m = runs.measured
    assert m.archive is not None  # the demo's MEASURED result always describes the archive
    summary = archive_summary(m.archive, archive, m.pooled.arms[m.arms[0]])
    out = [Chapter("The archive (MEASURED)", None, f"{summary}\n\n{measured_tables(m)}")]
    r = runs.runs
    if "requalify" in r:
        o = r["requalify"].options
        out.append(
            Chapter(
                f"Requalification of {o['candidate']} against {o['baseline']}",
                "requalify",
                requalify_tables(r["requalify"]),
            )
        )
    if "lawtest" in r:
        cand = r["requalify"].options.get("candidate") if "requalify" in r else None
        arms = ", ".join(a for a in r["lawtest"].arms if a != cand)
        out.append(Chapter(f"Mismatched verifier {arms}", "lawtest", lawtest_table(r["lawtest"])))
    if "sweep" in r:
        s = r["sweep"]
        out.append(
            Chapter(
                f"Depth sweep of {', '.join(s.arms)}, cost {s.options.get('cost')} ms per round",
                "sweep",
                sweep_tables(s),
            )
        )
    if "policies" in r:
        p = r["policies"]
        body = "\n".join([POLICY_CAVEATS, *[x for a in p.arms for x in policy_sections(p, a)]])
        out.append(Chapter("Would adaptive drafting pay?", "policies", body))
    if "budget" in r and "requalify" in r:
        ref = r["requalify"].options.get("reference")
        price = r["budget"].options.get("price_ms")
        out.append(
            Chapter(
                f"Budget of the gain over {ref} at {price:g} ms per round",
                "budget",
                budget_tables(r["budget"]),
            )
        )
    return out


def terminal_text(runs: DemoRuns, out: Path, outputs: dict[str, list[str]]) -> str:
    """Return the demo's terminal text: the verdict first (issue 16, item 5).

    Line 1 is the requalification's pooled verdict, line 2 what it excluded or reused (as every
    verb that gives verdicts: :mod:`specreplay.render.console`); then the VERDICTS block, one
    line per arm on the estimator's weights, and each chapter with the files it wrote (its tables
    are in the chapter's TABLES.md, the whole story in REPORT.md). No line is longer than
    :data:`~specreplay.render.console.WIDTH` characters but for the folder's own name.
    """
    m = runs.measured
    main = runs.runs.get("requalify")
    lines = (
        [*fold(requalify_head(main)), *excluded_reused(main)]
        if main is not None
        else ["REQUALIFICATION (pooled): — (requalify/results.json not found)"]
    )
    lines += [
        "",
        f"specreplay demo: built-in synthetic archive, {m.options['requests']:,} requests, "
        f"seed {m.seed} (written to {out}/archive)",
        "",
        "VERDICTS (pooled; SIMULATED replays of the MEASURED archive)",
        *folded([x.replace("**", "") for x in verdict_lines(runs)]),
    ]
    if main is not None and main.options.get("estimator_used"):
        lines += ["", *estimator_lines(main)]
    lines.append("")
    for i, ch in enumerate(chapters(runs, f"{out}/archive"), 1):
        where = f" ({out}/{ch.folder})" if ch.folder else ""
        lines.append(f"# {i}. {ch.title}{where}")
        if ch.folder is None:  # the archive: its summary, the tables in TABLES.md
            lines += folded(ch.body.split("\n\n", 1)[0].split("\n"))
        else:
            files = outputs.get(ch.folder, [])
            lines.append(f"Outputs: {out}/{ch.folder}/ ({', '.join(files)})")
    return "\n".join([*lines, f"Outputs: {out}/ (REPORT.md: the story with its plots)"])


# -- REPORT.md -----------------------------------------------------------------------------------

_HOW = {
    None: "The archive the story replays: 2,000 requests of a synthetic draft/target pair, "
    "logged by the arm named below. Every figure here is MEASURED: counted from the archived "
    "verifier decisions. R is the retained tokens per round (1 + the accepted drafts; vLLM's "
    "mean acceptance length); the survival P(A ≥ j) is the share of rounds whose first j drafts "
    "were all accepted (vLLM's per-position acceptance rate at position j − 1).",
    "requalify": "Can the candidate verifier replace the baseline? The replay runs both arms on "
    "the same archived rounds (SIMULATED), pairs them request by request, and calls the "
    "difference Δ EQUIVALENT when its 90% interval lies inside the margin; QUALIFIED also needs "
    "the candidate's law test to pass. The reference arm (greedy) gives the gain a budget uses; "
    "the path-bias rows say how far the replay is from what the archive measured.",
    "lawtest": "A verifier whose arithmetic does not match its sampler changes the output law. "
    "Each row tests one archived position: the exact total-variation distance (TV) between the "
    "verifier's output law and the target's, and a G-test of sampled outputs (Holm-adjusted). "
    "FAIL means the law differs; a requalification with such a verifier is NOT QUALIFIED.",
    "sweep": "What if the logging arm drafted a fixed number of positions d per round? R by "
    "depth is SIMULATED from the recorded positions (depths past them are UNSUPPORTED); with the "
    "linear cost model each depth's tokens/s is ESTIMATED, and the best depth is the one with "
    "the most tokens/s.",
    "budget": "How much slower per round may the candidate be before its gain over greedy is "
    "spent? The break-even added cost uses the lower end of the gain's 95% interval, so it is "
    "conservative; ESTIMATED.",
}

_BITS = (
    "The same requalification with fewer bits in the dyadic verifier: Δ/R_a against the "
    "float64 baseline with its 95% interval; each row links to that sub-run's own report. The "
    "forest plot of each run that is not QUALIFIED follows: its intervals lie outside the "
    "shaded margin."
)


def _pngs(folder: Path) -> list[str]:
    """Return the PNGs in ``folder``: captioned ones in PLOT_CAPTIONS' order, then the rest."""
    names = sorted(p.name for p in folder.glob("*.png")) if folder.is_dir() else []
    order = {n: i for i, n in enumerate(PLOT_CAPTIONS)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def _figures(pngs: Sequence[str], sub: str, result: Result) -> str:
    prefix = f"{sub}/" if sub else ""
    return "\n\n".join(
        figure_block(p, figure_label(result, p), folder=prefix, result=result) for p in pngs
    )


def _bits_table(runs: DemoRuns) -> str:
    names = {id(r): n for n, r in runs.runs.items()}
    rows = ["| verifier | verdict | Δ/R_a [95% CI] (SIMULATED) | sub-run |", "|---|---|---:|---|"]
    for bits, r in runs.bits().items():
        d = r.pooled.delta(Role.CANDIDATE_VS_BASELINE)
        rq = r.requalification
        verdict = (rq.verdict if rq is not None else None) or f"— ({rq.null_reason if rq else ''})"
        fig = (
            "—"
            if d is None or d.rel is None
            else (f"{pct(d.rel)} [{pct(d.rel_lo)}, {pct(d.rel_hi)}]")
        )
        sub = names[id(r)]
        rows.append(f"| dyadic{bits} | {verdict} | {fig} | [{sub}/REPORT.md]({sub}/REPORT.md) |")
    return "\n".join(rows)


def _failing_bits(runs: DemoRuns, folder: Path) -> list[str]:
    """Return the forest plots of the bits runs that are not QUALIFIED (where the story turns)."""
    out = []
    for name, r in runs.runs.items():
        rq = r.requalification
        if name.startswith(BITS_PREFIX) and rq is not None and rq.verdict != "QUALIFIED":
            out += [
                figure_block(p, figure_label(r, p), folder=f"{name}/", result=r)
                for p in _pngs(folder / name)
                if p == "forest.png"
            ]
    return out


def _chapter_md(i: int, ch: Chapter, runs: DemoRuns, pngs: Sequence[str], folder: Path) -> str:
    sub = ch.folder or ""
    if ch.folder is None:
        body = md_blocks("\n".join(f"- {ln}" for ln in ch.body.split("\n\n", 1)[0].split("\n")))
        body += "\n\n" + demote(md_blocks(ch.body.split("\n\n", 1)[1]), 3)
        links = "Files: [results.json](results.json), [TABLES.md](TABLES.md), archive/ (Parquet)."
    else:
        body = demote(md_blocks(ch.body), 3)
        links = (
            f"Its own report, with every assumption and diagnostic: [{sub}/REPORT.md]"
            f"({sub}/REPORT.md); data: [{sub}/results.json]({sub}/results.json)."
        )
    result = runs.runs[sub] if ch.folder is not None else runs.measured
    parts = [f"## {i}. {ch.title}", _HOW.get(ch.folder, ""), links, body]
    if ch.folder == "requalify" and len(runs.bits()) > 1:
        parts += ["### The bits sweep", _BITS, _bits_table(runs), *_failing_bits(runs, folder)]
    figures = _figures(pngs, sub, result)
    if figures:
        parts += ["### Figures", figures]
    return "\n\n".join(p for p in parts if p) + "\n"


def demo_report(measured: Result, folder: Path, pngs: Sequence[str]) -> str:
    """Return the demo's top-level REPORT.md: the verdicts, then every chapter with its plots.

    The sub-runs are read from ``folder`` (their results.json), the plots found beside them;
    ``pngs`` are the top-level plots (written by :func:`~specreplay.render.files.render`),
    shown in the archive chapter.
    """
    try:
        runs = read_runs(measured, folder)
    except SpecReplayError as exc:
        raise SpecReplayError(f"{folder}: a demo sub-run cannot be read: {exc}") from None
    main = runs.runs.get("requalify")
    what = (
        f"Can `{main.options['candidate']}` (a verifier in 24-bit dyadic arithmetic) replace "
        f"`{main.options['baseline']}` (float64 sampling) without losing retained tokens "
        "per round or changing the output law"
        if main
        else "What does the built-in archive show"
    )
    head = [
        "# specreplay demo: the built-in archive's story",
        f"{what}, on the built-in synthetic archive ({measured.options['requests']:,} requests, "
        f"seed {measured.seed})? The chapters then ask how many bits the verifier needs, what a "
        "mismatched verifier does, which depth is fastest, and how much slower a round "
        "may get before the gain over greedy is spent.",
        "Read the verdicts first; each chapter below starts with what it asks and how to read "
        "it, and links to the sub-run's own REPORT.md (assumptions, diagnostics, every cell). "
        "Figures are labelled MEASURED (counted from the archive), SIMULATED (a replay of it) "
        "or ESTIMATED (a model on top); `—` marks a figure that cannot be computed, with why.",
        "## Verdicts",
        "\n".join(verdict_lines(runs)),
        f"Pooled over all {measured.pooled.n_requests:,} requests; SIMULATED replays of the "
        "MEASURED archive unless marked ESTIMATED. Δ is the candidate's change in retained tokens "
        "per round (R) against the baseline, with its 95% interval; QUALIFIED means Δ is "
        "EQUIVALENT (inside the margin) and the verifier's law test passed.",
    ]
    if main is not None and main.options.get("estimator_used"):  # after the verdicts, once
        weights = "\n".join(f"- {x}" for x in estimator_lines(main)[1:])
        head.append(f"{estimator_line(main)}\n\n{weights}".strip())
    text = "\n\n".join(head) + "\n"
    for i, ch in enumerate(chapters(runs, "`archive/`"), 1):
        here = pngs if ch.folder is None else _pngs(folder / ch.folder)
        text += "\n" + _chapter_md(i, ch, runs, here, folder)
    return text
