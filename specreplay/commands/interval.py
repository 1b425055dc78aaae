"""``specreplay interval``: paired bootstrap interval between two observed arms."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.replay.scan import Progress, no_progress
from specreplay.results.gates import fail_on_code
from specreplay.results.output import (
    cells_frame,
    check_out,
    input_records,
    output_dir,
    results_document,
    write_json,
)
from specreplay.stats.buckets import Buckets

__all__ = ["run_interval"]


def run_interval(
    path_a: Path,
    path_b: Path,
    *,
    out: Path,
    force: bool,
    question_file: Path | None = None,
    margin: str = "0.5%",
    fail_on: frozenset[str] = frozenset(),
    n_boot: int = 10_000,
    seed: int = 0,
    stratify: str = "family",
    level: float = 0.95,
    min_requests: int = 10,
    drop_unpaired: bool = False,
    buckets: str = "",
    choice: int = 0,
    drafted: int | None = None,
    names: tuple[str | None, str | None] = (None, None),
    progress: Progress = no_progress,
) -> tuple[str, int]:
    """Paired interval between two observed arms; return (terminal text, exit code).

    The exit code is 1 when the pooled verdict is in ``fail_on`` (a null verdict counts as
    INCONCLUSIVE), else 0.
    """
    from specreplay.replay.archive.importers import detect_kind, read_arm
    from specreplay.results.plots import forest_plot
    from specreplay.results.tables import comparison_tables
    from specreplay.stats.armdata import ArmData
    from specreplay.stats.arviz_bridge import add_hdi_eti
    from specreplay.stats.buckets import DEFAULT_BUCKETS
    from specreplay.stats.compare import compare, parse_margin
    from specreplay.stats.pairing import pair_arms

    inputs = [p for p in (path_a, path_b, question_file) if p is not None]
    check_out(out, force=force, inputs=inputs)
    mg = parse_margin(margin)
    bk = Buckets.parse(buckets or DEFAULT_BUCKETS)
    kinds = (detect_kind(path_a), detect_kind(path_b))
    for flag, used_by, given in (
        ("--question-file", ("medusa",), question_file is not None),
        ("--choice", ("spec-bench", "medusa"), choice != 0),
        ("--drafted", ("spec-bench",), drafted is not None),
    ):
        if given and not set(kinds) & set(used_by):
            raise SpecReplayError(
                f"{flag} applies to {' and '.join(used_by)} inputs; A is {kinds[0]}, "
                f"B is {kinds[1]}"
            )

    def load(path: Path, kind: str, name: str | None) -> ArmData:
        return read_arm(
            path,
            buckets=bk,
            question_file=question_file if kind == "medusa" else None,
            choice=choice if kind in ("spec-bench", "medusa") else 0,
            drafted=drafted if kind == "spec-bench" else None,
            name=name,
        )

    with output_dir(out, force=force, inputs=inputs) as tmp:
        arm_a = load(path_a, kinds[0], names[0])
        arm_b = load(path_b, kinds[1], names[1])
        if arm_a.name == arm_b.name:
            arm_b = dataclasses.replace(arm_b, name=arm_b.name + " (B)")
        ps, excluded = pair_arms(arm_a, arm_b, buckets=bk, drop_unpaired=drop_unpaired)
        with progress(f"bootstrap ({n_boot:,} resamples)", None):
            comp = compare(
                ps,
                arm_a=arm_a.name,
                arm_b=arm_b.name,
                n_boot=n_boot,
                seed=seed,
                stratify=stratify,
                level=level,
                margin=mg,
                min_requests=min_requests,
                label=arm_a.label,
            )
        add_hdi_eti(comp, prob=level)
        files = list(dict.fromkeys([*arm_a.files, *arm_b.files]))
        notes = list(dict.fromkeys([*arm_a.notes, *arm_b.notes]))
        doc = results_document(
            command="interval",
            seed=seed,
            inputs=input_records(files),
            options={
                "a": str(path_a),
                "b": str(path_b),
                "question_file": str(question_file) if question_file else None,
                "margin": mg.to_json(),
                "fail_on": sorted(fail_on),
                "n_boot": n_boot,
                "stratify": stratify,
                "level": level,
                "min_requests": min_requests,
                "drop_unpaired": drop_unpaired,
                "buckets": bk.spec,
                "choice": choice,
                "drafted": drafted,
            },
            assumptions=[
                "Requests are the bootstrap unit (clusters): all rounds of a request are "
                "resampled together; strata = " + stratify + ".",
                "R = Σ retained tokens / Σ rounds over the cell (ratio of sums, pooled); "
                "each arm keeps its own round counts.",
                *notes,
            ],
            excluded=[*arm_a.excluded, *arm_b.excluded, *excluded],
            arms=[arm_a.name, arm_b.name],
            cells=comp.cells,
            sources={arm_a.name: arm_a.kind, arm_b.name: arm_b.kind},
        )
        write_json(tmp / "results.json", doc)
        cells_frame(comp.cells).write_parquet(tmp / "cells.parquet")
        tables = comparison_tables(
            comp.cells, arm_a=arm_a.name, arm_b=arm_b.name, margin_text=mg.text
        )
        (tmp / "TABLES.md").write_text(tables)
        forest_plot(
            comp.cells,
            tmp / "forest.png",
            relative=mg.relative,
            margin=mg.value,
            title=f"{arm_b.name} vs {arm_a.name} ({arm_a.label})",
        )
    pooled = comp.cells[0]["deltas"][0]
    verdict = pooled["verdict"]
    head = _verdict_line(pooled, arm_a.name, arm_b.name, mg.text)
    short = comparison_tables(
        comp.cells, arm_a=arm_a.name, arm_b=arm_b.name, margin_text=mg.text,
        levels=("pooled", "family"),
    )  # fmt: skip
    text = (
        f"{head}\n\n{short}\nOutputs: {out}/ (results.json, TABLES.md, cells.parquet, forest.png)"
    )
    return text, fail_on_code(verdict, fail_on)


def _verdict_line(d: dict[str, Any], a: str, b: str, margin: str) -> str:
    if d["null_reason"] is not None:
        return f"VERDICT (pooled): — ({d['null_reason']})"
    return (
        f"VERDICT (pooled, {d['label']}): {d['verdict']} at margin {margin} — "
        f"{b} vs {a}: Δ = {d['point']:+.4f} tokens/round "
        f"[{d['lo']:+.4f}, {d['hi']:+.4f}] ({100 * d['rel']:+.2f}% "
        f"[{100 * d['rel_lo']:+.2f}%, {100 * d['rel_hi']:+.2f}%]), 95% percentile"
    )
