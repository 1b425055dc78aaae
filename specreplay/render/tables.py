"""Plain-text (Markdown) tables for people: the same figures as results.json, labelled.

Every function here takes typed results only (:mod:`specreplay.results.model`), so a saved
results.json renders to the same text. Nulls print as ``—``; a footnote lists each distinct reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specreplay.render.interval_text import (
    has_interval_fields,
    interval_method_line,
    sign_note,
    sizes_line,
    small_sample_text,
    verdict_text,
)
from specreplay.render.policy_tables import policy_plot_note, policy_sections
from specreplay.render.table_text import fmt, markdown_table
from specreplay.results.model import (
    ArchiveSummary,
    ArmFigure,
    Cell,
    Delta,
    DepthFigure,
    Excluded,
    InputIgnored,
    KeptMasses,
    LawTest,
    Level,
    Result,
    Role,
    ShortRoundCounts,
    Survival,
)

__all__ = [
    "archive_summary",
    "budget_tables",
    "capture_line",
    "comparison_tables",
    "excluded_lines",
    "fmt",
    "ignored_summary",
    "importance_table",
    "lawtest_table",
    "markdown_table",
    "measured_tables",
    "path_bias_by_arm",
    "requalify_tables",
    "short_round_lines",
    "sweep_body",
    "tail_lines",
]


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100.0 * x:+.2f}%"


def _pctp(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.2f}%"


def _num(x: float | None, digits: int = 4) -> str:
    return "—" if x is None else f"{x:+.{digits}f}"


class _Notes:
    """Footnotes: each distinct null reason gets a number, ``[k]``, in order of first use."""

    def __init__(self) -> None:
        self.reasons: dict[str, int] = {}

    def __call__(self, reason: str | None) -> str:
        key = reason or "—"
        self.reasons.setdefault(key, len(self.reasons) + 1)
        return f"[{self.reasons[key]}]"

    def lines(self) -> list[str]:
        return ["", *[f"[{k}] {r}" for r, k in self.reasons.items()]] if self.reasons else []


def _index(cells: Sequence[Cell]) -> dict[tuple[str | None, str | None], Cell]:
    return {(c.family, c.bucket): c for c in cells}


# -- MEASURED (validate, demo) ----------------------------------------------------------------


def measured_tables(result: Result) -> str:
    """Tables of MEASURED R by family × bucket and of per-position survival."""
    arm = result.arms[0]
    idx = _index(result.cells)
    families = [c.family for c in result.cells if c.level == Level.FAMILY]
    buckets = [c.bucket for c in result.cells if c.level == Level.BUCKET]
    note = _Notes()

    def r_cell(c: Cell | None) -> str:
        if c is None:
            return "—"
        v = c.arms[arm]
        if v.R is None:
            return f"— {note(v.null_reason)}"
        return f"{v.R:.4f} ({c.n_requests})"

    out = [
        f"## MEASURED R (retained tokens per round; vLLM's mean acceptance length) of {arm}, by "
        "family × context bucket",
        "",
        "Each cell: R (requests). R = Σ(1 + A) / #rounds, A = leading accepted drafts of a round.",
        "",
    ]
    rows = [
        [str(f), *[r_cell(idx.get((f, b))) for b in buckets], r_cell(idx.get((f, None)))]
        for f in families
    ]
    rows.append(
        ["all", *[r_cell(idx.get((None, b))) for b in buckets], r_cell(idx.get((None, None)))]
    )
    out.append(markdown_table(["family", *[str(b) for b in buckets], "all"], rows))
    depth = len(idx[(None, None)].survival)
    for title, keys in (
        ("family", [(f, None) for f in families]),
        ("context bucket", [(None, b) for b in buckets]),
    ):
        out += [
            "",
            f"## MEASURED survival P(A ≥ j) of {arm}, by {title} (vLLM's per-position acceptance "
            "rate at position j − 1)",
            "",
        ]
        srows = [
            [str(key[0] or key[1] or "all"), *_survival_row(idx.get(key), depth, note)]
            for key in [*keys, (None, None)]
        ]
        out.append(markdown_table([title, *[f"j={j + 1}" for j in range(depth)]], srows))
    out += note.lines()
    out += ["", "All figures MEASURED (counted from the archive's `accepted` column)."]
    return "\n".join(out) + "\n"


def _survival_row(c: Cell | None, depth: int, note: _Notes) -> list[str]:
    vals = []
    for j in range(depth):
        s: Survival | None = c.survival[j] if c is not None and j < len(c.survival) else None
        if s is None:
            vals.append("—")
        elif s.value is None:
            vals.append(f"— {note(s.null_reason)}")
        else:
            vals.append(fmt(s.value))
    return vals


def archive_summary(summary: ArchiveSummary, path: str, pooled: ArmFigure) -> str:
    """Describe the archive in a few lines: counts, columns, depth coverage, pooled R."""
    fams = ", ".join(f"{name} {k:,}" for name, k in summary.requests_by_family.items())
    bks = ", ".join(f"{name} {k:,}" for name, k in summary.rounds_by_bucket.items() if k)
    dmin, dmax = summary.min_depth, summary.max_depth
    if dmin == dmax:
        depth = (
            f"every round records positions 1..{dmax}: depths ≤ {dmax} replayable, "
            "deeper ones UNSUPPORTED"
        )
    else:
        depth = (
            f"rounds record {dmin}..{dmax} positions: depth d is supported in a cell only "
            "where every round has ≥ d positions"
        )
    optional = ", ".join(summary.optional_columns) or "none"
    carried = ", ".join(summary.carried_columns) or "none"
    lines = [
        f"archive {path}: VALID, {summary.files} file(s), {summary.rows:,} rows",
        f"requests {summary.requests:,} · rounds {summary.rounds:,} · "
        f"positions {summary.positions:,}",
        f"requests by family: {fams}",
        f"rounds by context bucket: {bks}",
        f"logging arm: {summary.logging_arm or '— (none recorded)'} · optional columns: "
        f"{optional} · carried: {carried}",
        f"depth coverage: {depth}",
        *kept_mass_lines(summary.kept_mass),
        *short_round_lines(summary.short_rounds),
        f"MEASURED R pooled: {fmt(pooled.R)} retained tokens/round"
        + (f" ({pooled.null_reason})" if pooled.R is None else ""),
    ]
    return "\n".join(lines)


def short_round_lines(c: ShortRoundCounts | None) -> list[str]:
    """Return validate's line on what a default run does with the short rounds (none if none)."""
    if c is None or c.short == 0:
        return []
    left = c.capped_marked + c.last_unmarked
    parts = []
    if c.capped_marked:
        parts.append(f"{c.capped_marked:,} marked capped")
    if c.last_unmarked:
        parts.append(f"{c.last_unmarked:,} a request's last round, unmarked")
    line = (
        f"short rounds: {c.short:,} of {c.rounds:,} record fewer than {c.depth} positions; a "
        f"default run (--short-rounds capped) leaves out {left:,} cut short by the request's end "
        f"or token limit" + (f" ({'; '.join(parts)})" if parts else "")
    )
    if c.kept_short:
        line += (
            f" and keeps {c.kept_short:,} (cells holding them are null past their length; "
            f"--short-rounds exclude leaves them out too)"
        )
    return [line]


def kept_mass_lines(kept: KeptMasses | None) -> list[str]:
    """Return validate's lines on the laws' kept mass (none without statistics).

    >>> from specreplay.results.model import KeptMass, KeptMasses
    >>> m = KeptMass(100, 0.5, 0.61, 0.9, 0.995, 0.25)
    >>> lines = kept_mass_lines(KeptMasses(m, None, True))
    >>> print(lines[0][:72])
    kept mass (Σ on the candidates) of the draft: min 0.5000 · 1% 0.6100 · 1
    >>> print(lines[0][72:])
    0% 0.9000 · median 0.9950 · 25.0% of positions below 0.99
    >>> print(lines[1][:52])
    tails recorded (schema v2: draft_tail, target_tail):
    """
    if kept is None:
        return []
    out = []
    for name, m in (("draft", kept.draft), ("target", kept.target)):
        if m is None:
            continue
        out.append(
            f"kept mass (Σ on the candidates) of the {name}: min {m.min:.4f} · 1% {m.p01:.4f} "
            f"· 10% {m.p10:.4f} · median {m.median:.4f} · {100 * m.below_099:.1f}% of positions "
            "below 0.99"
        )
    if kept.tails_recorded:
        out.append(
            "tails recorded (schema v2: draft_tail, target_tail): the replay knows the mass it "
            "does not see"
        )
    else:
        out.append(
            "tails not recorded (schema v1): emitted_q is taken as the whole logging law; a "
            "capture that kept fewer candidates than the vocabulary left out an unknown mass"
        )
    return out


def capture_line(capture: dict[str, Any] | None) -> str:
    """One line from a recorder's counts (validate's ``extra["capture"]``); empty when None.

    Incomplete requests are those a full queue stopped (docs/api.md#recorder).

    >>> print(capture_line({"writers": 2, "sample": [1.0], "requests_seen": 4,
    ...     "requests_sampled": 4, "requests_incomplete": 1, "rounds_offered": 9,
    ...     "rounds_recorded": 8, "rounds_dropped_queue_full": 1, "rows": 30}).strip())
    recorded 4 of 4 requests (sample 1, 2 writers) · 1 incomplete · 8 of 9 rounds · 30 rows
    >>> print(capture_line({"writers": 1, "sample": [1.0], "requests_seen": 4,
    ...     "requests_sampled": 4, "requests_incomplete": 0, "rounds_offered": 9,
    ...     "rounds_recorded": 9, "rounds_dropped_queue_full": 0, "rows": 30,
    ...     "writers_open": 1}).splitlines()[-1][:47])
    1 writer is not closed (still recording, or its
    """
    if not capture:
        return ""
    sample = ", ".join(f"{x:g}" for x in capture["sample"])
    writers = capture["writers"]
    line = (
        f"\nrecorded {capture['requests_sampled']:,} of {capture['requests_seen']:,} requests "
        f"(sample {sample}, {writers} writer{'s' if writers != 1 else ''}) · "
        f"{capture['requests_incomplete']:,} incomplete · "
        f"{capture['rounds_recorded']:,} of {capture['rounds_offered']:,} rounds · "
        f"{capture['rows']:,} rows"
    )
    outside = capture.get("draft_mass_outside")
    if isinstance(outside, dict) and outside.get("positions") and outside.get("renormalised"):
        line += (
            f"\nthe capture renormalised emitted_q on its candidates: the engine's draft mass "
            f"outside them was {outside['mean']:.3g} on average, {outside['max']:.3g} at most, "
            f"over {outside['positions']:,} positions; the replay takes the candidates as the "
            "whole law (raise SPECREPLAY_CAPTURE_TOP_K if this is not small)"
        )
    line += _dropped_line(capture)
    n_open, n_failed = capture.get("writers_open", 0), capture.get("writers_failed", 0)
    if n_open:
        line += (
            f"\n{n_open} writer{'s are' if n_open != 1 else ' is'} not closed (still recording, "
            "or its process ended without closing): its rounds up to its last commit are read"
        )
    if n_failed:
        line += (
            f"\n{n_failed} writer{'s' if n_failed != 1 else ''} failed after committing "
            "(CAPTURE.json says why): its committed rounds are read, the rest was lost"
        )
    return line


def _dropped_line(capture: dict[str, Any]) -> str:
    r"""Return the line on the bad rounds a capture's recorders dropped; empty when none.

    >>> line = _dropped_line({"rounds_recorded": 990, "rounds_dropped_bad": 10,
    ...     "rounds_dropped_after_bad": 4, "dropped_reasons": {"bad law": 10}})
    >>> print(line.strip().replace("; ", ";\n"))
    10 bad rounds dropped by the recorders (1.0% of 1,000 checked;
    bad law: 10);
    their requests' 4 later rounds too: the replay sees each request up to its first bad round
    """
    bad = capture.get("rounds_dropped_bad", 0)
    if not bad:
        return ""
    checked = bad + capture["rounds_recorded"]
    reasons = capture.get("dropped_reasons") or {}
    said = "; ".join(f"{r}: {n:,}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])[:3])
    return (
        f"\n{bad:,} bad round{'s' if bad != 1 else ''} dropped by the recorders "
        f"({bad / checked:.1%} of {checked:,} checked; {said}); their requests' "
        f"{capture.get('rounds_dropped_after_bad', 0):,} later rounds too: the replay sees each "
        "request up to its first bad round"
    )


def ignored_summary(ignored: Sequence[InputIgnored]) -> str:
    """Lines naming the folder entries ``--ignore`` skipped (empty text when none was).

    >>> print(ignored_summary([InputIgnored("a/_SUCCESS", "_SUCCESS")]).strip())
    skipped by --ignore '_SUCCESS': a/_SUCCESS (not read, counted nowhere)
    """
    return "".join(
        f"\nskipped by --ignore {e.glob!r}: {e.path} (not read, counted nowhere)" for e in ignored
    )


# -- paired comparison (interval) ---------------------------------------------------------------


_COMPARISON_HEADER = [
    "cell",
    "requests",
    "R_a",
    "R_b",
    "Δ",
    "95% CI",
    "BCa 95% CI",
    "Δ/R_a",
    "95% CI (rel)",
    "verdict",
    "smallest eq. margin",
]


_INTERVAL_HEADER = ["method", "df", "requests differing", "small sample"]


def _interval_cells(d: Delta) -> list[str]:
    """Return the method, df, differing requests and small-sample mark (``—`` where null)."""
    return [
        d.method if d.point is not None else "—",
        fmt(d.df, 1),
        "—" if d.n_differing is None else f"{d.n_differing:,}",
        small_sample_text(d) or ("no" if d.small_sample is False else "—"),
    ]


def _verdict_cell(d: Delta, note: _Notes | None = None) -> str:
    """Return the verdict with the reason a rule gave beside it.

    In a table (``note`` given) the reason is a footnote, ``EQUIVALENT [2]``: reasons can be long
    (``--estimator auto``'s tail figures). In a headline it is written out only where it explains
    an INCONCLUSIVE verdict.
    """
    if not d.verdict_reason:
        return str(d.verdict)
    if note is not None:
        return f"{d.verdict} {note(d.verdict_reason)}"
    return verdict_text(d) if d.verdict == "INCONCLUSIVE" else str(d.verdict)


def _comparison_row(c: Cell, d: Delta, note: _Notes) -> list[str]:
    row = [c.name, str(c.n_requests), fmt(c.arms[d.a].R), fmt(c.arms[d.b].R)]
    if d.null_reason is not None:
        return [*row, "— " + note(d.null_reason), *["—"] * 6]
    bca = d.bca
    bca_txt = (
        f"[{_num(bca.lo)}, {_num(bca.hi)}]"
        if bca is not None and bca.null_reason is None
        else "— " + note(bca.null_reason if bca is not None else "no BCa interval")
    )
    sm = d.smallest_equivalent_margin
    relative = d.tost is not None and d.tost.kind == "relative"
    sm_txt = "—" if sm is None else (f"{100 * sm:.2f}%" if relative else f"{sm:.4f}")
    verdict = _verdict_cell(d, note) + (" " + note(d.warning) if d.warning else "")
    return [
        *row,
        _num(d.point),
        f"[{_num(d.lo)}, {_num(d.hi)}]",
        bca_txt,
        _pct(d.rel),
        f"[{_pct(d.rel_lo)}, {_pct(d.rel_hi)}]" + (f" {note(sn)}" if (sn := sign_note(d)) else ""),
        verdict,
        sm_txt,
    ]


def comparison_tables(
    result: Result,
    *,
    role: Role = Role.B_VS_A,
    levels: tuple[Level, ...] = (Level.POOLED, Level.FAMILY, Level.BUCKET, Level.FAMILY_BUCKET),
) -> str:
    """Tables of a paired comparison: R per arm, Δ with intervals and the verdict, per cell."""
    note = _Notes()
    first = result.pooled.delta(role)
    if first is None:
        raise ValueError(f"result has no {role.value} delta")
    pairs = [(c, d) for c in result.cells if c.level in levels and (d := c.delta(role)) is not None]
    wide = has_interval_fields(d for _, d in pairs)
    rows = [_comparison_row(c, d, note) + (_interval_cells(d) if wide else []) for c, d in pairs]
    margin = str(result.options["margin"]["text"])
    method = interval_method_line(result)
    shown = (
        "studentized (bootstrap-t)"
        if result.interval_method is None
        else result.interval_method.method
    )
    out = [
        f"## Paired comparison: {first.b} vs {first.a} (Δ = R_b − R_a, retained tokens per round)",
        "",
        f"a = {first.a}, b = {first.b}; every figure {result.pooled.arms[first.a].label}.",
        *([method] if method else []),
        *([sizes] if (sizes := sizes_line(result)) else []),
        "",
        markdown_table(_COMPARISON_HEADER + (_INTERVAL_HEADER if wide else []), rows),
        "",
        f"Verdicts at margin {margin} (test level 0.05): EQUIVALENT iff the 90% interval lies "
        "inside ±margin, else DIFFERENT iff the 95% interval excludes 0, else INCONCLUSIVE; "
        "Holm-adjusted within each level (families, buckets, family × bucket). Intervals shown "
        f"are unadjusted {shown} intervals; Bonferroni "
        "intervals are in results.json.",
    ]
    return "\n".join(out + note.lines()) + "\n"


# -- requalify -----------------------------------------------------------------------------------


def _requalify_head(result: Result, main: Delta | None) -> str:
    rq = result.requalification
    margin = str(result.options["margin"]["text"])
    if rq is None or rq.verdict is None or main is None or main.point is None:
        why = rq.null_reason if rq is not None else "no requalification"
        return f"REQUALIFICATION (pooled): — ({why})"
    law = (rq.because or "").split("; ")[1]
    return (
        f"REQUALIFICATION (pooled, SIMULATED): {rq.verdict} — {main.b} vs {main.a}: "
        f"Δ = {main.point:+.4f} tokens/round [{_num(main.lo)}, {_num(main.hi)}] "
        f"({100 * (main.rel or 0.0):+.3f}% [{100 * (main.rel_lo or 0.0):+.3f}%, "
        f"{100 * (main.rel_hi or 0.0):+.3f}%])"
        + (f" ({sign})" if (sign := sign_note(main)) else "")
        + f", verdict {_verdict_cell(main)} at margin {margin}"
        + (f" ({small})" if (small := small_sample_text(main)) else "")
        + f"; {law}"
    )


def estimator_line(result: Result) -> str:
    """One line: the estimator of the run's SIMULATED figures and why (a warning on fallback)."""
    used = result.options.get("estimator_used")
    if used is None:
        return ""
    why = result.options.get("estimator_reason", "")
    asked = result.options.get("estimator")
    head = "WARNING: estimator" if asked == "auto" and used != "importance" else "Estimator"
    return f"{head} {used} ({'auto: ' if asked == 'auto' else ''}{why})"


def unread_lines(result: Result) -> list[str]:
    """Return a line naming the columns the run did not read (so did not validate), if any."""
    if not result.columns_not_read:
        return []
    return [
        "Columns not read (neither decoded nor validated; no pass used them): "
        + ", ".join(result.columns_not_read)
    ]


def _requalify_by_cell(result: Result, main: Delta) -> list[str]:
    pairs = [(c, d) for c in result.cells if (d := c.delta(Role.CANDIDATE_VS_BASELINE)) is not None]
    wide = has_interval_fields(d for _, d in pairs)
    rows = []
    note = _Notes()
    for c, d in pairs:
        head = [c.name, str(c.n_requests), fmt(c.arms[d.a].R), fmt(c.arms[d.b].R)]
        more = _interval_cells(d) if wide else []
        if d.point is None:
            rows.append([*head, "—", "—", "—", "—", d.null_reason or "—", *more])
            continue
        rq = c.requalification
        rows.append(
            [
                *head,
                _num(d.point),
                f"[{_num(d.lo)}, {_num(d.hi)}]",
                f"{100 * (d.rel or 0.0):+.3f}%",
                _verdict_cell(d, note),
                str((rq.verdict if rq is not None else None) or "—"),
                *more,
            ]
        )
    header = ["cell", "requests", "R_a", "R_b", "Δ", "95% CI", "Δ/R_a", "verdict"]
    return [
        "",
        f"## Requalification by cell: {main.b} (b) vs {main.a} (a), SIMULATED R (retained tokens "
        "per round) and Δ = R_b − R_a",
        "",
        markdown_table([*header, "requalification", *(_INTERVAL_HEADER if wide else [])], rows),
        *note.lines(),
        *_inconclusive_reasons(result),
    ]


def _inconclusive_reasons(result: Result) -> list[str]:
    """One line per cell whose candidate-vs-baseline verdict is INCONCLUSIVE with a reason."""
    out = [
        f"- {c.name}: {d.verdict_reason}"
        for c in result.cells
        if (d := c.delta(Role.CANDIDATE_VS_BASELINE)) is not None
        and d.verdict == "INCONCLUSIVE"
        and d.verdict_reason
    ]
    return ["", "Why INCONCLUSIVE:", *out] if out else []


def _reference_gain(result: Result, cand: str) -> list[str]:
    rows = []
    for c in result.cells:
        d = c.delta(Role.CANDIDATE_VS_REFERENCE)
        if d is None or d.point is None:
            continue
        rows.append(
            [
                c.name,
                fmt(c.arms[d.a].R),
                fmt(c.arms[cand].R),
                _num(d.point),
                f"[{_num(d.lo)}, {_num(d.hi)}]",
                f"{100 * (d.rel or 0.0):+.2f}%",
            ]
        )
    ref = result.pooled.delta(Role.CANDIDATE_VS_REFERENCE)
    if not rows or ref is None:
        return []
    return [
        "",
        f"## Gain of {cand} over the reference {ref.a} (SIMULATED; no verdict)",
        "",
        markdown_table(
            ["cell", "R reference", "R candidate", "Δ", "95% CI", "Δ/R reference"], rows
        ),
    ]


def _path_bias(pooled: Cell) -> list[str]:
    pb = pooled.delta(Role.PATH_BIAS)
    if pb is None or pb.point is None:
        return []
    return [
        "",
        "## Path-bias diagnostic of the logging arm",
        "",
        f"{pb.b}: MEASURED R {fmt(pooled.arms[pb.a].R)} (archived `accepted`), "
        f"SIMULATED R {fmt(pooled.arms[pb.b].R)} (replay by the {pb.estimator or 'run'}'s "
        f"estimator); gap SIMULATED − MEASURED {_num(pb.point)} "
        f"[{_num(pb.lo)}, {_num(pb.hi)}] tokens/round (95% paired interval).",
    ]


def path_bias_by_arm(pooled: Cell) -> list[str]:
    """Return the pooled path-bias-importance deltas, one row per arm (or none)."""
    rows = [
        [
            d.b.split(" (")[0],
            fmt(pooled.arms[d.b].R),
            fmt(pooled.arms[d.a].R),
            _num(d.point),
            f"[{_num(d.lo)}, {_num(d.hi)}]",
        ]
        for d in pooled.deltas
        if d.role is Role.PATH_BIAS_IMPORTANCE and d.point is not None
    ]
    if not rows:
        return []
    return [
        "",
        "## Path bias by arm (analytic − importance)",
        "",
        markdown_table(["arm", "R analytic", "R importance", "Δ", "95% paired CI"], rows),
    ]


def _survival_and_offpath(pooled: Cell) -> list[str]:
    out: list[str] = []
    if pooled.survival:
        arms = list(dict.fromkeys(s.arm for s in pooled.survival))
        depth = max(s.position for s in pooled.survival)
        srows = []
        for a in arms:
            vals = {s.position: s for s in pooled.survival if s.arm == a}
            srows.append(
                [a, *[fmt(vals[j].value) if j in vals else "—" for j in range(1, depth + 1)]]
            )
        out += [
            "",
            "## Per-position survival P(A ≥ j), pooled ("
            + " and ".join(sorted({s.label.value for s in pooled.survival}, reverse=True))
            + ")",
            "",
            markdown_table(["arm", *[f"j={j}" for j in range(1, depth + 1)]], srows),
        ]
    if pooled.offpath:
        orows = [
            [o.arm, _pctp(o.accepted_offpath_share), _pctp(o.evaluated_offpath_share)]
            for o in pooled.offpath
        ]
        header = ["arm", "accepted ≠ archived token", "evaluated after an off-path prefix"]
        title = "## Off-path rates of the path-assumption replay, pooled (SIMULATED)"
        out += ["", title, "", markdown_table(header, orows)]
    return out


def importance_table(pooled: Cell) -> list[str]:
    """Return the pooled tail diagnostics of an importance replay per arm and depth (or none)."""
    if not pooled.importance:
        return []
    note = _Notes()
    rows = []
    for d in pooled.importance:
        k = fmt(d.pareto_k, 2) if d.pareto_k is not None else f"— {note(d.null_reason)}"
        rows.append(
            [
                d.arm,
                str(d.depth),
                str(d.rounds),
                fmt(d.ess, 1),
                _pctp(d.ess_share),
                k,
                fmt(d.khat_threshold, 2),
                d.warning or "",
            ]
        )
    header = ["arm", "depth", "rounds", "ESS", "ESS share", "Pareto k̂", "k̂ threshold", "warning"]
    return [
        "",
        "## Importance tail diagnostics of the policy ratio, pooled (SIMULATED)",
        "",
        "ESS = (Σr)²/Σr² and Pareto k̂ (PSIS, right tail) of r_k = Π_{j≤k} q^s_j/q^L_j; "
        "warnings at k̂ > 0.7, k̂ > min(1 − 1/log10 S, 0.7) and ESS share < 10%.",
        "",
        markdown_table(header, rows),
        *note.lines(),
    ]


def law_where(t: LawTest) -> str:
    """Return a law test's position, with its request and round for an archive position."""
    if t.request is None and t.round is None:
        return str(t.position)
    return f"{t.position} (request {t.request or '?'}, round {t.round})"


def _law_rows(law: Sequence[LawTest]) -> list[str]:
    if not law:
        return []
    rows = [
        [
            t.arm,
            law_where(t),
            "—" if t.tv is None else f"{t.tv:.3g}",
            "—" if t.draws is None else str(t.draws),
            "—" if t.p_adj is None else f"{t.p_adj:.3g}",
            "pass" if t.passed else "FAIL",
        ]
        for t in law
    ]
    return [
        "",
        "## Law tests on archive positions (SIMULATED; Holm over those that ran, family-wise "
        "α = 1e-5)",
        "",
        markdown_table(["arm", "position", "exact TV", "draws", "p (Holm)", "result"], rows),
    ]


def excluded_lines(result: Result) -> list[str]:
    """One line per kind of rounds the run left out, with MEASURED R kept and over every round."""
    out = []
    for e in result.excluded:
        if e.rounds is None:
            continue
        what = f"{e.rounds:,} {'round' if e.rounds == 1 else 'rounds'}"
        if e.requests is not None:
            what += f" in {e.requests:,} {'request' if e.requests == 1 else 'requests'}"
        out.append(f"Excluded: {what} ({e.reason}){measured_r_note(e)}")
    return out


def measured_r_note(e: Excluded) -> str:
    """Return ``; MEASURED R … over the rounds kept, … over every round`` (empty without both)."""
    if e.measured_R_kept is None or e.measured_R_all is None:
        return ""
    return (
        f"; MEASURED R {e.measured_R_kept:.4f} over the rounds kept, "
        f"{e.measured_R_all:.4f} over every round"
    )


def tail_lines(result: Result) -> list[str]:
    """Lines naming the pooled figures that are ranges over the unseen mass (schema v2).

    See docs/methods.md#truncated-laws-schema-v2: R is the range's midpoint, and its intervals
    and verdicts include the range.
    """
    pooled = result.pooled
    figs: list[tuple[str, float | None, float, float | None]] = []
    for name, f in pooled.arms.items():
        if f.tail_width is not None:
            figs.append((name, f.R, f.tail_width, f.tail_limit))
    for d in pooled.depths:
        if d.tail_width is not None:
            figs.append((f"{d.arm} at depth {d.depth}", d.R, d.tail_width, d.tail_limit))
    if not figs:
        return []
    out = [
        "",
        "RANGES over the mass outside the kept candidates (schema v2): the unseen ids' "
        "acceptance is not recorded; R is the midpoint of the range that holds whatever it is, "
        "and every interval and verdict includes the range:",
    ]
    for name, r, w, lim in figs:
        where = "no figure" if r is None else f"[{r - w / 2:.4f}, {r + w / 2:.4f}]"
        bound = "" if lim is None else f", at most {lim:.3g}"
        out.append(f"- {name} (pooled): {where}, width {w:.3g} tokens/round{bound}")
    return out


def requalify_tables(result: Result) -> str:
    """Verdict first, then deltas by cell, the reference gain, path bias, survival, law tests."""
    pooled = result.pooled
    main = pooled.delta(Role.CANDIDATE_VS_BASELINE)
    lines = [_requalify_head(result, main), *excluded_lines(result), estimator_line(result)]
    lines += [*unread_lines(result), *tail_lines(result)]
    method = interval_method_line(result)
    lines += [method] if method else []
    lines += [sizes] if (sizes := sizes_line(result)) else []
    if main is not None:
        lines += _requalify_by_cell(result, main)
        lines += _reference_gain(result, main.b)
    lines += _path_bias(pooled)
    lines += path_bias_by_arm(pooled)
    lines += _survival_and_offpath(pooled)
    lines += importance_table(pooled)
    lines += _law_rows(result.law_tests)
    lines += ["", "Assumptions:", *[f"- {a}" for a in result.assumptions]]
    return "\n".join(lines) + "\n"


# -- lawtest -------------------------------------------------------------------------------------


def _power_text(t: LawTest) -> str:
    if t.power is None:
        return "—"
    return f"{t.power:.3f}" + (" (underpowered)" if t.underpowered else "")


def _law_result(t: LawTest) -> str:
    """``pass``, ``FAIL …``, or ``underpowered`` for a pass the test could not have failed."""
    if not t.passed:
        return "FAIL (law differs from the target's)"
    if t.underpowered:
        return "underpowered (no failure seen; too few draws to detect this TV)"
    return "pass"


def lawtest_table(result: Result) -> str:
    """Table of law tests: exact TV, draws, power, Holm-adjusted p-value, result."""
    law = result.law_tests
    family_alpha = float(result.options["family_alpha"])
    note = _Notes()
    rows = []
    for t in law:
        if t.passed is None:
            rows.append([t.arm, law_where(t), "—", "—", "—", "—", f"— {note(t.null_reason)}"])
            continue
        rows.append(
            [
                t.arm,
                law_where(t),
                f"{t.tv:.3g}" if t.tv is not None else "—",
                f"{t.draws:,}" if t.draws is not None else "—",
                _power_text(t),
                f"{t.p_adj:.3g}" if t.p_adj is not None else "—",
                _law_result(t),
            ]
        )
    n_fail = sum(1 for t in law if t.passed is False)
    n_ran = sum(1 for t in law if t.passed is not None)
    skipped = len(law) - n_ran
    head = (
        f"LAW TESTS: {n_ran} ran, {n_fail} failed (G-test, Holm at family-wise α = "
        f"{family_alpha:g} over the {n_ran} that ran"
        + (
            f"; {skipped} of the {len(law)} listed could not run, see their notes"
            if skipped
            else ""
        )
        + "; SIMULATED)"
    )
    header = ["arm", "position", "exact TV", "draws", "power", "p (Holm)", "result"]
    out = [head, "", markdown_table(header, rows)]
    return "\n".join(out + note.lines()) + "\n"


# -- sweep ---------------------------------------------------------------------------------------


def sweep_tables(result: Result) -> str:
    """Return the sweep's tables: per arm, R by depth (pooled); the best depth per cell.

    With a cost model the depth rows carry tokens/s and P(best). With ``--policy`` each arm's
    depth table is followed by its policies and the held-out choice
    (:mod:`specreplay.render.policy_tables`).
    """
    used = result.options.get("estimator_used")
    cost = result.options.get("cost")
    lines = [
        f"SWEEP (SIMULATED R, retained tokens per round, by fixed depth; estimator {used}"
        + (f"; cost {cost}, tokens/s ESTIMATED" if cost else "")
        + ")",
        *excluded_lines(result),
        estimator_line(result),
        *unread_lines(result),
        *tail_lines(result),
    ]
    method = interval_method_line(result)
    lines += [method] if method else []
    lines += [sizes] if (sizes := sizes_line(result)) else []
    lines += sweep_body(result)
    lines += ["", "Assumptions:", *[f"- {a}" for a in result.assumptions]]
    return "\n".join(lines) + "\n"


def sweep_body(result: Result) -> list[str]:
    """Return the sweep's tables (the console prints them too).

    Per arm R by depth and its policies, the best depth per cell, the ``--by`` cells and the
    fewest bits.
    """
    lines: list[str] = []
    for arm in result.arms:
        lines += _sweep_arm_table(result, arm)
        lines += policy_sections(result, arm)
    lines += policy_plot_note(result)
    best_rows = [
        [c.name, *[str((c.best_depth or {}).get(a, "—")) for a in result.arms]]
        for c in result.cells
        if c.best_depth
    ]
    if best_rows:
        lines += [
            "",
            "## Best depth per cell (most tokens/s, ESTIMATED)",
            "",
            markdown_table(["cell", *result.arms], best_rows),
        ]
    lines += _sweep_by_cells(result)
    bits = result.extra.get("fewest_bits")
    if isinstance(bits, dict):
        seq = "; ".join(f"{s['arm']} {s['verdict']}" for s in bits["sequence"])
        lines += [
            "",
            f"FEWEST BITS EQUIVALENT to {bits['baseline']} (fixed-sequence, most bits "
            f"first, margin {bits['margin']['text']}; SIMULATED): "
            f"{bits['fewest_bits_equivalent'] or '— (' + str(bits['null_reason']) + ')'}",
            f"sequence: {seq}",
        ]
    return lines


_SWEEP_HEADER = [
    "depth",
    "R [95% CI]",
    "Δ vs own depth [95% CI]",
    "tokens/s [95% CI]",
    "P(best)",
    "note",
]


def _sweep_row(result: Result, arm: str, f: DepthFigure) -> list[str]:
    """Return one depth's row of an arm's sweep table (pooled)."""
    if not f.supported or f.R is None:
        unsupported = "UNSUPPORTED" if not f.supported else "—"
        return [str(f.depth), unsupported, "—", "—", "—", f.null_reason or "—"]
    pooled = result.pooled
    own = [x for x in pooled.deltas if x.role is Role.DEPTH_VS_REFERENCE and x.a == arm]
    d = next((x for x in own if x.depth == f.depth and x.point is not None), None)
    delta = f"{d.point:+.4f} [{_num(d.lo)}, {_num(d.hi)}]" if d is not None else "—"
    tps = (
        f"{f.tokens_per_s:.1f} [{f.tokens_per_s_lo:.1f}, {f.tokens_per_s_hi:.1f}]"
        if f.tokens_per_s is not None
        and f.tokens_per_s_lo is not None
        and f.tokens_per_s_hi is not None
        else "—"
    )
    p_best = f"{f.p_best:.3f}" if f.p_best is not None else "—"
    note = "" if f.tail_width is None else f"range ±{f.tail_width / 2:.2g} (unseen mass)"
    return [str(f.depth), f"{f.R:.4f} [{_num(f.lo)}, {_num(f.hi)}]", delta, tps, p_best, note]


def _sweep_arm_table(result: Result, arm: str) -> list[str]:
    """Return an arm's pooled R by depth, with its best depth in the heading."""
    pooled = result.pooled
    rows = [_sweep_row(result, arm, f) for f in pooled.depths if f.arm == arm]
    best = (pooled.best_depth or {}).get(arm)
    ref = arm.rsplit("@", 1)[1] if "@" in arm else result.options.get("reference_depth")
    return [
        "",
        f"## {arm}: pooled, reference depth {ref}"
        + (f"; best depth {best}" if best is not None else ""),
        "",
        markdown_table(_SWEEP_HEADER, rows),
    ]


def _sweep_by_cells(result: Result) -> list[str]:
    """R of each arm at its reference depth in the ``--by`` cells (empty without ``--by``)."""
    grouped = [c for c in result.cells if c.group is not None]
    if not grouped:
        return []

    def r_at(c: Cell, arm: str) -> str:
        ref = int(arm.rsplit("@", 1)[1]) if "@" in arm else None
        f = next((f for f in c.depths if f.arm == arm and f.depth == ref), None)
        return fmt(f.R) if f is not None else "—"

    rows = [[c.name, str(c.n_requests), *[r_at(c, a) for a in result.arms]] for c in grouped]
    return [
        "",
        f"## R at each arm's reference depth by {result.options.get('by')} (SIMULATED)",
        "",
        markdown_table(["cell", "requests", *result.arms], rows),
    ]


# -- ESTIMATED (budget) -----------------------------------------------------------------------


def budget_tables(result: Result) -> str:
    """Tables of the break-even added cost per cell and of the sensitivity rows.

    See docs/methods.md#the-budget-break-even-cost.
    """
    note = _Notes()
    rows = []
    for c in result.cells:
        b = c.budget
        if b is None:
            continue
        why = "" if b.null_reason is None else " " + note(b.null_reason)
        rows.append(
            [
                c.name,
                fmt(b.r0, 6),
                fmt(b.delta_lo, 6),
                fmt(b.price_ms, 2),
                fmt(b.known_ms, 6),
                fmt(b.break_even_ms, 6) + why,
                fmt(b.remaining_ms, 6) + why,
            ]
        )
    out = [
        "## Budget: break-even added cost per round, ESTIMATED "
        '(docs/methods.md, "The budget: break-even cost")',
        "",
        "R_0: the reference's R (retained tokens per round); Δ_lo: the lower 95% bound of the "
        "gain Δ over it; T: the price, ms per round. x = T·Δ_lo/R_0 (from (R_0 + Δ_lo)/(T + x) "
        "= R_0/T); remaining = x − Σ known costs.",
        "",
        markdown_table(
            ["cell", "R_0", "Δ_lo", "T ms", "known ms", "break-even ms", "remaining ms"], rows
        ),
        *note.lines(),
    ]
    if result.sensitivity:
        s0 = result.sensitivity[0]
        srows = [
            [f"{s.extra_ms:g}", fmt(s.rate_with_extra, 2), _pct(s.rel_change)]
            for s in result.sensitivity
        ]
        out += [
            "",
            f"## Sensitivity, ESTIMATED: r_0 = {s0.rate:g} tokens/s, τ = {s0.tau_ms:g} ms per "
            f"round, g = {100 * s0.gain:+.2f}%",
            "",
            "Conditional rate r_0·(1 + g)·τ/(τ + x) with extra cost x: a sensitivity, not a "
            "forecast.",
            "",
            markdown_table(["extra x ms", "tokens/s", "vs r_0"], srows),
        ]
    return "\n".join(out) + "\n"


TABLES: dict[str, Callable[[Result], str]] = {
    "sweep": sweep_tables,
    "budget": budget_tables,
    "validate": measured_tables,
    "demo": measured_tables,
    "interval": comparison_tables,
    "requalify": requalify_tables,
    "lawtest": lawtest_table,
}
"""The TABLES.md renderer of each command's result."""
