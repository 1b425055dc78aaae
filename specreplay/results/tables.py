"""Plain-text (Markdown) tables for people: the same figures as results.json, labelled.

Nulls print as ``—``; a footnote lists each distinct reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from specreplay.results.output import fmt

if TYPE_CHECKING:
    from specreplay.replay.scan import ArchiveScan

__all__ = [
    "archive_summary",
    "comparison_tables",
    "lawtest_table",
    "markdown_table",
    "measured_tables",
    "requalify_tables",
]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """Render a Markdown table (first column left-aligned, the others right-aligned)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = (c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells))
        return "| " + " | ".join(padded) + " |"

    sep = (
        "|"
        + "|".join(
            ("-" * (w + 2)) if i == 0 else ("-" * (w + 1) + ":") for i, w in enumerate(widths)
        )
        + "|"
    )
    return "\n".join([line(header), sep, *[line(r) for r in rows]])


def _index(cells: list[dict[str, Any]]) -> dict[tuple[str | None, str | None], dict[str, Any]]:
    return {(c["family"], c["bucket"]): c for c in cells}


def measured_tables(cells: list[dict[str, Any]], scan: ArchiveScan) -> str:
    """Tables of MEASURED R by family × bucket and of per-position survival."""
    arm = scan.arm
    idx = _index(cells)
    families = [c["family"] for c in cells if c["level"] == "family"]
    buckets = [c["bucket"] for c in cells if c["level"] == "bucket"]
    reasons: dict[str, int] = {}

    def r_cell(c: dict[str, Any] | None) -> str:
        if c is None:
            return "—"
        v = c["arms"][arm]
        if v["R"] is None:
            reasons.setdefault(v["null_reason"], len(reasons) + 1)
            return f"— [{reasons[v['null_reason']]}]"
        return f"{v['R']:.4f} ({c['n_requests']})"

    out = [
        f"## MEASURED R (retained tokens per round) of {arm}, by family × context bucket",
        "",
        "Each cell: R (requests). R = Σ(1 + A) / #rounds, A = leading accepted drafts of a round.",
        "",
    ]
    rows = [
        [f, *[r_cell(idx.get((f, b))) for b in buckets], r_cell(idx.get((f, None)))]
        for f in families
    ]
    rows.append(
        ["all", *[r_cell(idx.get((None, b))) for b in buckets], r_cell(idx.get((None, None)))]
    )
    out.append(markdown_table(["family", *buckets, "all"], rows))
    for title, keys in (
        ("family", [(f, None) for f in families]),
        ("context bucket", [(None, b) for b in buckets]),
    ):
        pooled = idx[(None, None)]["survival"]
        depth = len(pooled)
        out += [
            "",
            f"## MEASURED per-position survival P(A ≥ j) of {arm}, by {title}",
            "",
        ]
        srows: list[list[str]] = []
        for key in [*keys, (None, None)]:
            c = idx.get(key)
            label = (key[0] or key[1] or "all") if key != (None, None) else "all"
            vals = []
            for j in range(depth):
                s = c["survival"][j] if c is not None and j < len(c["survival"]) else None
                if s is None or s["value"] is None:
                    if s is not None:
                        reasons.setdefault(s["null_reason"], len(reasons) + 1)
                        vals.append(f"— [{reasons[s['null_reason']]}]")
                    else:
                        vals.append("—")
                else:
                    vals.append(fmt(s["value"]))
            srows.append([label, *vals])
        out.append(markdown_table([title, *[f"j={j + 1}" for j in range(depth)]], srows))
    if reasons:
        out += ["", *[f"[{k}] {r}" for r, k in reasons.items()]]
    out += ["", "All figures MEASURED (counted from the archive's `accepted` column)."]
    return "\n".join(out) + "\n"


def archive_summary(scan: ArchiveScan, display: object = None) -> str:
    """Describe the archive in a few lines: counts, columns, depth coverage, pooled R.

    ``display`` replaces the archive path shown (e.g. the final path of a temporary folder).
    """
    r = scan.reader
    m = scan.measured
    rows = sum(f.rows for f in r.files)
    n_rounds = int(m.sums.n.sum())
    fam_req = np.bincount(np.asarray(r.request_family, dtype=np.int64), minlength=len(r.families))
    fams = ", ".join(f"{name} {int(k):,}" for name, k in zip(r.families, fam_req, strict=True))
    bucket_rounds = np.bincount(m.sums.bucket, weights=m.sums.n, minlength=len(r.buckets.names))
    bks = ", ".join(
        f"{name} {int(k):,}" for name, k in zip(r.buckets.names, bucket_rounds, strict=True) if k
    )
    filled = m.max_depth > 0
    dmin = int(m.min_depth[filled].min()) if filled.any() else 0
    dmax = int(m.max_depth[filled].max()) if filled.any() else 0
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
    optional = ", ".join(sorted(r.columns)) or "none"
    carried = ", ".join(r.extra_columns) or "none"
    pooled = scan.cells()[0]["arms"][scan.arm]
    lines = [
        f"archive {display or r.path}: VALID, {len(r.files)} file(s), {rows:,} rows",
        f"requests {len(r.requests):,} · rounds {n_rounds:,} · positions {m.positions:,}",
        f"requests by family: {fams}",
        f"rounds by context bucket: {bks}",
        f"logging arm: {r.logging_arm or '— (none recorded)'} · optional columns: {optional} · "
        f"carried: {carried}",
        f"depth coverage: {depth}",
        f"MEASURED R pooled: {fmt(pooled['R'])} retained tokens/round"
        + (f" ({pooled['null_reason']})" if pooled["R"] is None else ""),
    ]
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100.0 * x:+.2f}%"


def _num(x: float | None, digits: int = 4) -> str:
    return "—" if x is None else f"{x:+.{digits}f}"


def _cell_name(c: dict[str, Any]) -> str:
    if c["level"] == "pooled":
        return "pooled"
    if c["level"] == "family":
        return str(c["family"])
    if c["level"] == "bucket":
        return f"bucket {c['bucket']}"
    return f"{c['family']} × {c['bucket']}"


def comparison_tables(
    cells: list[dict[str, Any]],
    *,
    arm_a: str,
    arm_b: str,
    margin_text: str,
    levels: tuple[str, ...] = ("pooled", "family", "bucket", "family×bucket"),
) -> str:
    """Tables of a paired comparison: R per arm, Δ with intervals and the verdict, per cell."""
    reasons: dict[str, int] = {}

    def note(reason: str) -> str:
        reasons.setdefault(reason, len(reasons) + 1)
        return f"[{reasons[reason]}]"

    header = [
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
    rows: list[list[str]] = []
    for c in cells:
        if c["level"] not in levels:
            continue
        d = c["deltas"][0]
        ra, rb = c["arms"][arm_a]["R"], c["arms"][arm_b]["R"]
        row = [_cell_name(c), str(c["n_requests"]), fmt(ra), fmt(rb)]
        if d["null_reason"] is not None:
            row += ["— " + note(d["null_reason"])] + ["—"] * 6
        else:
            bca = d["bca"]
            bca_txt = (
                f"[{_num(bca['lo'])}, {_num(bca['hi'])}]"
                if bca["null_reason"] is None
                else "— " + note(bca["null_reason"])
            )
            sm = d["smallest_equivalent_margin"]
            sm_txt = f"{100 * sm:.2f}%" if d["tost"]["kind"] == "relative" else f"{sm:.4f}"
            verdict = d["verdict"] + (" " + note(d["warning"]) if d["warning"] else "")
            row += [
                _num(d["point"]),
                f"[{_num(d['lo'])}, {_num(d['hi'])}]",
                bca_txt,
                _pct(d["rel"]),
                f"[{_pct(d['rel_lo'])}, {_pct(d['rel_hi'])}]",
                verdict,
                sm_txt,
            ]
        rows.append(row)
    out = [
        f"## Paired comparison: {arm_b} vs {arm_a} (Δ = R_b − R_a, retained tokens per round)",
        "",
        f"a = {arm_a}, b = {arm_b}; every figure {cells[0]['arms'][arm_a]['label']}.",
        "",
        markdown_table(header, rows),
        "",
        f"Verdicts at margin {margin_text} (test level 0.05): EQUIVALENT iff the 90% interval lies "
        "inside ±margin, else DIFFERENT iff the 95% interval excludes 0, else INCONCLUSIVE; "
        "Holm-adjusted within each level (families, buckets, family × bucket). Intervals shown "
        "are unadjusted percentile intervals; Bonferroni intervals are in results.json.",
    ]
    if reasons:
        out += ["", *[f"[{k}] {r}" for r, k in reasons.items()]]
    return "\n".join(out) + "\n"


def requalify_tables(doc: dict[str, Any], base: str, cand: str, margin_text: str) -> str:
    """Verdict first, then deltas by cell, the reference gain, path bias, survival, law tests."""
    cells = doc["cells"]
    pooled = cells[0]
    rq = doc["requalification"]

    def delta(c: dict[str, Any], role: str) -> dict[str, Any] | None:
        return next((d for d in c["deltas"] if d["role"] == role), None)

    main = delta(pooled, "candidate-vs-baseline")
    lines: list[str] = []
    if rq["verdict"] is None or main is None or main["point"] is None:
        lines.append(f"REQUALIFICATION (pooled): — ({rq.get('null_reason')})")
    else:
        lines.append(
            f"REQUALIFICATION (pooled, SIMULATED): {rq['verdict']} — {cand} vs {base}: "
            f"Δ = {main['point']:+.4f} tokens/round [{main['lo']:+.4f}, {main['hi']:+.4f}] "
            f"({100 * main['rel']:+.3f}% [{100 * main['rel_lo']:+.3f}%, "
            f"{100 * main['rel_hi']:+.3f}%]), verdict {main['verdict']} at margin {margin_text}; "
            f"{rq['because'].split('; ')[1]}"
        )
    lines += ["", f"## Requalification by cell: {cand} (b) vs {base} (a), SIMULATED", ""]
    rows = []
    for c in cells:
        d = delta(c, "candidate-vs-baseline")
        if d is None:
            continue
        name = _cell_name(c)
        ra = c["arms"][base]["R"]
        rb = c["arms"][cand]["R"]
        if d["point"] is None:
            rows.append([name, str(c["n_requests"]), fmt(ra), fmt(rb), "—", "—", "—", "—",
                         d["null_reason"] or "—"])  # fmt: skip
            continue
        rows.append(
            [
                name,
                str(c["n_requests"]),
                fmt(ra),
                fmt(rb),
                _num(d["point"]),
                f"[{_num(d['lo'])}, {_num(d['hi'])}]",
                f"{100 * d['rel']:+.3f}%",
                str(d["verdict"]),
                str((c.get("requalification") or {}).get("verdict") or "—"),
            ]
        )
    lines.append(
        markdown_table(
            [
                "cell",
                "requests",
                "R_a",
                "R_b",
                "Δ",
                "95% CI",
                "Δ/R_a",
                "verdict",
                "requalification",
            ],
            rows,
        )
    )
    ref_rows = []
    for c in cells:
        d = delta(c, "candidate-vs-reference")
        if d is None or d["point"] is None:
            continue
        ref_rows.append(
            [
                _cell_name(c),
                fmt(c["arms"][d["a"]]["R"]),
                fmt(c["arms"][cand]["R"]),
                _num(d["point"]),
                f"[{_num(d['lo'])}, {_num(d['hi'])}]",
                f"{100 * d['rel']:+.2f}%",
            ]
        )
    if ref_rows:
        ref_name = next(d["a"] for d in pooled["deltas"] if d["role"] == "candidate-vs-reference")
        lines += [
            "",
            f"## Gain of {cand} over the reference {ref_name} (SIMULATED; no verdict)",
            "",
            markdown_table(["cell", "R ref", "R cand", "Δ", "95% CI", "Δ/R ref"], ref_rows),
        ]
    pb = delta(pooled, "path-bias")
    if pb is not None and pb["point"] is not None:
        lines += [
            "",
            "## Path-bias diagnostic of the logging arm",
            "",
            f"{pb['b']}: MEASURED R {fmt(pooled['arms'][pb['a']]['R'])} (archived `accepted`), "
            f"SIMULATED R {fmt(pooled['arms'][pb['b']]['R'])} (replay under the path "
            f"assumption); gap SIMULATED − MEASURED {_num(pb['point'])} "
            f"[{_num(pb['lo'])}, {_num(pb['hi'])}] tokens/round (95% paired interval).",
        ]
    surv = pooled.get("survival", [])
    if surv:
        arms = list(dict.fromkeys(s["arm"] for s in surv))
        depth = max(s["position"] for s in surv)
        srows = []
        for a in arms:
            vals = {s["position"]: s for s in surv if s["arm"] == a}
            srows.append(
                [a, *[fmt(vals[j]["value"]) if j in vals else "—" for j in range(1, depth + 1)]]
            )
        lines += [
            "",
            "## Per-position survival P(A ≥ j), pooled (SIMULATED)",
            "",
            markdown_table(["arm", *[f"j={j}" for j in range(1, depth + 1)]], srows),
        ]
    offs = pooled.get("offpath", [])
    if offs:
        orows = [
            [o["arm"], _pctp(o["accepted_offpath_share"]), _pctp(o["evaluated_offpath_share"])]
            for o in offs
        ]
        lines += [
            "",
            "## Off-path rates, pooled (SIMULATED)",
            "",
            markdown_table(
                ["arm", "accepted ≠ archived token", "evaluated after an off-path prefix"], orows
            ),
        ]
    law = doc.get("law_tests", [])
    if law:
        lrows = [
            [
                t["arm"],
                str(t["position"]),
                f"{t['tv']:.3g}",
                str(t.get("draws", "—")),
                f"{t['p_adj']:.3g}",
                "pass" if t["passed"] else "FAIL",
            ]
            for t in law
        ]
        lines += [
            "",
            "## Law tests on archive positions (SIMULATED; Holm over all, family-wise α = 1e-5)",
            "",
            markdown_table(["arm", "position", "exact TV", "draws", "p (Holm)", "result"], lrows),
        ]
    lines += ["", "Assumptions:", *[f"- {a}" for a in doc["assumptions"]]]
    return "\n".join(lines) + "\n"


def _pctp(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.2f}%"


def lawtest_table(law: list[dict[str, Any]], family_alpha: float) -> str:
    """Table of law tests: exact TV, draws, power, Holm-adjusted p-value, result."""
    rows = []
    reasons: dict[str, int] = {}
    for t in law:
        if t["passed"] is None:
            reasons.setdefault(t["null_reason"], len(reasons) + 1)
            rows.append([t["arm"], str(t["position"]), "—", "—", "—", "—",
                         f"— [{reasons[t['null_reason']]}]"])  # fmt: skip
            continue
        power = t.get("power")
        rows.append(
            [
                t["arm"],
                str(t["position"]),
                f"{t['tv']:.3g}",
                f"{t['draws']:,}",
                "—"
                if power is None
                else f"{power:.3f}" + (" (underpowered)" if t.get("underpowered") else ""),
                f"{t['p_adj']:.3g}",
                "pass" if t["passed"] else "FAIL (law differs from the target's)",
            ]
        )
    n_fail = sum(1 for t in law if t["passed"] is False)
    n_ran = sum(1 for t in law if t["passed"] is not None)
    head = (
        f"LAW TESTS: {n_ran} ran, {n_fail} failed "
        f"(G-test, Holm over all {len(law)} at family-wise α = {family_alpha:g}; SIMULATED)"
    )
    out = [
        head,
        "",
        markdown_table(
            ["arm", "position", "exact TV", "draws", "power", "p (Holm)", "result"], rows
        ),
    ]
    if reasons:
        out += ["", *[f"[{k}] {r}" for r, k in reasons.items()]]
    return "\n".join(out) + "\n"
