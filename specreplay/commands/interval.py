"""``specreplay interval``: paired bootstrap interval between two observed arms."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.replay.scan import Progress, no_progress
from specreplay.results.builders import comparison_cells
from specreplay.results.document import excluded_entries, input_files, new_result
from specreplay.results.gates import fail_on_code
from specreplay.results.model import Delta, Level, Result, Role
from specreplay.results.output import check_out, output_dir
from specreplay.results.render import write_all
from specreplay.results.tables import comparison_tables
from specreplay.stats.armdata import ArmData
from specreplay.stats.buckets import Buckets
from specreplay.stats.compare import Comparison, Margin

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
    from specreplay.stats.arviz_bridge import hdi_eti
    from specreplay.stats.buckets import DEFAULT_BUCKETS
    from specreplay.stats.compare import compare, parse_margin
    from specreplay.stats.pairing import pair_arms

    inputs = [p for p in (path_a, path_b, question_file) if p is not None]
    check_out(out, force=force, inputs=inputs)
    mg = parse_margin(margin)
    bk = Buckets.parse(buckets or DEFAULT_BUCKETS)
    kinds = (detect_kind(path_a), detect_kind(path_b))
    _check_flags(kinds, question_file=question_file, choice=choice, drafted=drafted)

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
            comp = compare(ps, arm_a=arm_a.name, arm_b=arm_b.name, n_boot=n_boot, seed=seed,
                           stratify=stratify, level=level, margin=mg,
                           min_requests=min_requests, label=arm_a.label)  # fmt: skip
        options = {
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
        }
        result = _interval_result(
            comp, hdi_eti(comp, prob=level), arm_a, arm_b, excluded, options, seed
        )
        write_all(result, tmp)
    return _interval_text(result, mg, out), _exit_code(result, fail_on)


def _check_flags(
    kinds: tuple[str, str], *, question_file: Path | None, choice: int, drafted: int | None
) -> None:
    """Refuse an input option that neither input kind uses (it would be silently ignored)."""
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


def _interval_result(
    comp: Comparison,
    intervals: list[dict[str, Any]],
    arm_a: ArmData,
    arm_b: ArmData,
    excluded: list[dict[str, Any]],
    options: dict[str, Any],
    seed: int,
) -> Result:
    files = list(dict.fromkeys([*arm_a.files, *arm_b.files]))
    notes = list(dict.fromkeys([*arm_a.notes, *arm_b.notes]))
    return new_result(
        command="interval",
        seed=seed,
        inputs=input_files(files),
        options=options,
        assumptions=[
            "Requests are the bootstrap unit (clusters): all rounds of a request are "
            "resampled together; strata = " + str(options["stratify"]) + ".",
            "R = Σ retained tokens / Σ rounds over the cell (ratio of sums, pooled); "
            "each arm keeps its own round counts.",
            *notes,
        ],
        excluded=excluded_entries([*arm_a.excluded, *arm_b.excluded, *excluded]),
        arms=[arm_a.name, arm_b.name],
        cells=comparison_cells(comp.cells, intervals),
        sources={arm_a.name: arm_a.kind, arm_b.name: arm_b.kind},
    )


def _exit_code(result: Result, fail_on: frozenset[str]) -> int:
    d = result.pooled.delta(Role.B_VS_A)
    return fail_on_code(d.verdict if d is not None else None, fail_on)


def _interval_text(result: Result, mg: Margin, out: Path) -> str:
    pooled = result.pooled.delta(Role.B_VS_A)
    assert pooled is not None  # every interval result has its b-vs-a delta
    head = _verdict_line(pooled, mg.text)
    short = comparison_tables(result, levels=(Level.POOLED, Level.FAMILY))
    return (
        f"{head}\n\n{short}\nOutputs: {out}/ (results.json, TABLES.md, cells.parquet, forest.png)"
    )


def _verdict_line(d: Delta, margin: str) -> str:
    if d.null_reason is not None:
        return f"VERDICT (pooled): — ({d.null_reason})"
    return (
        f"VERDICT (pooled, {d.label}): {d.verdict} at margin {margin} — "
        f"{d.b} vs {d.a}: Δ = {d.point:+.4f} tokens/round "
        f"[{d.lo:+.4f}, {d.hi:+.4f}] ({100 * (d.rel or 0.0):+.2f}% "
        f"[{100 * (d.rel_lo or 0.0):+.2f}%, {100 * (d.rel_hi or 0.0):+.2f}%]), 95% percentile"
    )
