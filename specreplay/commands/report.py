"""``specreplay report RUN_DIR [--out DIR]``: re-render a run's files from its results.json alone.

Every folder at or below RUN_DIR that holds a ``results.json`` (a run, or the sub-runs of a demo)
is read back into its typed result and rendered again: TABLES.md, cells.parquet, the plots and
REPORT.md, exactly what the command wrote, without the archive or any other input. In place by
default (the files it renders are its own outputs); with ``--out DIR`` into DIR, keeping the
sub-folders. Deeper folders are rendered first: a demo's REPORT.md reads its sub-runs' results.json
and embeds their plots, so they must already be in place (in DIR too).
"""

from __future__ import annotations

from pathlib import Path

from specreplay.errors import SpecReplayError
from specreplay.render.files import render, write_all
from specreplay.results.io import read_result
from specreplay.results.model import Result
from specreplay.results.output import check_out, output_dir

__all__ = ["rerender", "run_report"]


def _runs(run_dir: Path) -> list[Path]:
    if not run_dir.is_dir():
        raise SpecReplayError(f"{run_dir}: not a folder (expected a run's output folder)")
    runs = sorted(p.parent for p in run_dir.rglob("results.json"))
    if not runs:
        raise SpecReplayError(f"{run_dir}: no results.json in this folder or below it")
    return runs


def rerender(
    run_dir: Path, *, out: Path | None = None, force: bool = False
) -> list[tuple[Path, Result, list[str]]]:
    """Re-render every run at or below ``run_dir``; return (folder written, result, files) each.

    Deeper folders are rendered first (a demo's REPORT.md reads its sub-runs' files); the list
    comes back in path order.
    """
    if out is not None:  # before any work; the runs read are inputs (--out may not touch them)
        check_out(out, force=force, inputs=[run_dir])
    runs = _runs(run_dir)
    results = [(folder, read_result(folder / "results.json")) for folder in runs]
    deepest_first = sorted(results, key=lambda fr: (-len(fr[0].parts), fr[0]))
    done: dict[Path, tuple[Path, Result, list[str]]] = {}
    if out is None:
        for folder, result in deepest_first:
            done[folder] = (folder, result, render(result, folder))
        return [done[folder] for folder in runs]
    with output_dir(out, force=force, inputs=[run_dir]) as tmp:
        for folder, result in deepest_first:
            target = tmp / folder.relative_to(run_dir)
            target.mkdir(parents=True, exist_ok=True)
            done[folder] = (out / folder.relative_to(run_dir), result, write_all(result, target))
    return [done[folder] for folder in runs]


def run_report(run_dir: Path, *, out: Path | None = None, force: bool = False) -> str:
    """Re-render every run at or below ``run_dir``; return what was written, one line a run."""
    done = rerender(run_dir, out=out, force=force)
    if out is None:
        return "\n".join(f"{f}: {', '.join(files)} ({r.command})" for f, r, files in done)
    return "\n".join(f"{f}: {', '.join(files)}" for f, _, files in done)
