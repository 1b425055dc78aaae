"""Render a result's files for people and programs: TABLES.md, cells.parquet, plots, REPORT.md.

:func:`render` is the one place that decides which files a command's result has; commands call it
after writing results.json, and ``specreplay report`` calls it on a results.json read back, so
both write the same bytes (the inputs are not needed). REPORT.md comes last, since it embeds the
plots; a demo's REPORT.md also reads its sub-runs' results.json, so they are rendered first. Files
are written under a temporary name and renamed, so a killed run never leaves a half-written file,
and a full disk or a file-size limit is one line naming the file (:mod:`specreplay.diskfull`)
with the temporary name removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from specreplay.diskfull import writing
from specreplay.render.plots import (
    context_plot,
    context_series,
    depth_plot,
    forest_plot,
    policy_plot,
    screen_plot,
    survival_plot,
    survival_series,
)
from specreplay.render.policy_plot import policy_series
from specreplay.render.report import REPORT_NAME, report_text
from specreplay.render.screen import screen_tables
from specreplay.render.tables import TABLES
from specreplay.results.cells_table import cells_frame
from specreplay.results.io import result_json
from specreplay.results.model import Result, Role
from specreplay.results.output import check_out, output_dir

__all__ = ["FOREST_ROLE", "render", "write_all", "write_run"]

FOREST_ROLE: dict[str, Role] = {"interval": Role.B_VS_A, "requalify": Role.CANDIDATE_VS_BASELINE}
"""The delta each command's forest plot draws."""


def _swap(path: Path, write: Callable[[Path], object]) -> None:
    """Write ``path`` whole: ``write`` fills a temporary name beside it, then it is renamed in."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with writing(path, tmp):  # a full disk: one line naming path; the temporary name removed
        write(tmp)
        os.replace(tmp, path)


def _replace(path: Path, text: str) -> None:
    _swap(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def render(result: Result, folder: Path) -> list[str]:
    """Write the rendered files of ``result`` into ``folder``; return their names."""
    written: list[str] = []

    def put(name: str, write: Callable[[Path], object]) -> None:
        _swap(folder / name, write)
        written.append(name)

    tables = {**TABLES, "screen": screen_tables}.get(result.command)
    if tables is not None:
        put("TABLES.md", lambda tmp: tmp.write_text(tables(result), encoding="utf-8"))
    if result.cells:
        put("cells.parquet", lambda tmp: cells_frame(result).write_parquet(tmp))
    role = FOREST_ROLE.get(result.command)
    main = result.pooled.delta(role) if role is not None and result.cells else None
    if role is not None and main is not None:
        margin = result.options["margin"]
        put(
            "forest.png",
            lambda tmp: forest_plot(
                result.cells,
                tmp,
                role=role,
                relative=margin["kind"] == "relative",
                margin=float(margin["margin"]),
                title=f"{main.b} vs {main.a} ({main.label.value})",
                buckets=result.options.get("buckets"),
            ),
        )
    if result.command == "screen" and any(c.screen is not None for c in result.cells):
        put("screen.png", lambda tmp: screen_plot(result, tmp))
    if result.command == "sweep" and result.cells and result.pooled.depths:
        put("depths.png", lambda tmp: depth_plot(result, tmp))
    if policy_series(result):  # a sweep with a policy priced in tokens/s (--policy, --cost)
        put("policies.png", lambda tmp: policy_plot(result, tmp))
    if result.command in FOREST_ROLE and context_series(result):
        put("context.png", lambda tmp: context_plot(result, tmp))
    if result.command in FOREST_ROLE and survival_series(result):
        put("survival.png", lambda tmp: survival_plot(result, tmp))
    # REPORT.md last: it embeds every PNG written above (a demo's also reads its sub-runs)
    report = report_text(result, folder, [n for n in written if n.endswith(".png")])
    if report is not None:
        put(REPORT_NAME, lambda tmp: tmp.write_text(report, encoding="utf-8"))
    return written


def outputs_line(out: Path, files: Sequence[str]) -> str:
    """Return the terminal's last line: the output folder and the files written into it."""
    return f"Outputs: {out}/ ({', '.join(files)})"


def write_all(result: Result, folder: Path) -> list[str]:
    """Write results.json and every rendered file of ``result`` into ``folder``."""
    _replace(folder / "results.json", result_json(result))
    return ["results.json", *render(result, folder)]


def write_run(result: Result, out: Path, *, force: bool, inputs: Sequence[Path] = ()) -> list[str]:
    """Write ``result``'s output folder ``out`` atomically (:func:`output_dir`); return its files.

    ``inputs`` are the run's inputs, which ``out`` may not be, contain or lie inside.
    """
    check_out(out, force=force, inputs=inputs)
    with output_dir(out, force=force, inputs=inputs) as tmp:
        return write_all(result, tmp)
