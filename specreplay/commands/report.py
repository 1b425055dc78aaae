"""``specreplay report RUN_DIR [--out DIR]``: re-render a run's files from its results.json alone.

Every folder at or below RUN_DIR that holds a ``results.json`` (a run, or the sub-runs of a demo)
is read back into its typed result and rendered again: TABLES.md, cells.parquet, the plots and
REPORT.md, exactly what the command wrote, without the archive or any other input. In place by
default (the files it renders are its own outputs); with ``--out DIR`` into DIR, keeping the
sub-folders. Deeper folders are rendered first: a demo's REPORT.md reads its sub-runs' results.json
and embeds their plots, so they must already be in place (in DIR too).

A results.json is untrusted input (docs/outputs.md#what-report-checks): every one found is read
and checked (:func:`~specreplay.results.io.read_result`) before anything is written, and a bad one
is one line naming the file and the field, with nothing written. Rendering in place goes through
a temporary folder too (``RUN_DIR/.report.tmp-…``, removed whatever happens): the files are moved
into the runs' folders only once every run has rendered, so a run that cannot be rendered leaves
every folder as it was. A renderer that fails on a result the checks admitted is a bug of the
checks; it is one line as well, saying so.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from specreplay.errors import SpecReplayError
from specreplay.render.files import write_all
from specreplay.results.io import read_result
from specreplay.results.model import Result
from specreplay.results.output import check_out, output_dir

__all__ = ["rerender", "run_report"]


def _runs(run_dir: Path) -> list[Path]:
    if not run_dir.is_dir():
        raise SpecReplayError(f"{run_dir}: not a folder (expected a run's output folder)")
    runs = sorted(
        p.parent
        for p in run_dir.rglob("results.json")
        if not any(_temporary(part) for part in p.relative_to(run_dir).parts[:-1])
    )
    if not runs:
        raise SpecReplayError(f"{run_dir}: no results.json in this folder or below it")
    return runs


def _temporary(name: str) -> bool:
    """Whether a folder is a run's temporary one (``.report.tmp-…``, ``.OUT.tmp-PID``)."""
    return name.startswith(".") and ".tmp-" in name


def _rendered(folder: Path, write: Callable[[], list[str]]) -> list[str]:
    """Run ``write``; a renderer's own error on a checked result becomes one line."""
    try:
        return write()
    except (SpecReplayError, OSError):
        raise
    except Exception as exc:  # a result the checks admitted and a renderer cannot draw
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise SpecReplayError(
            f"{folder / 'results.json'}: passed the checks but cannot be rendered ({what}); "
            "nothing written (a bug of report's checks: please report it)"
        ) from None


def _render_all(run_dir: Path, runs: list[tuple[Path, Result]], tmp: Path) -> dict[Path, list[str]]:
    """Render every run into ``tmp`` (same sub-folders), deepest first; return each run's files."""
    written: dict[Path, list[str]] = {}
    for folder, result in sorted(runs, key=lambda fr: (-len(fr[0].parts), fr[0])):
        target = tmp / folder.relative_to(run_dir)
        target.mkdir(parents=True, exist_ok=True)
        written[folder] = _rendered(folder, partial(write_all, result, target))
    return written


def _in_place(run_dir: Path, runs: list[tuple[Path, Result]]) -> dict[Path, list[str]]:
    """Render into a temporary folder inside ``run_dir``, then move the files into place.

    results.json (the input) is never replaced; the rendered files are, each by a rename.
    """
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".report.tmp-", dir=run_dir))
    except OSError as exc:
        raise SpecReplayError(f"{run_dir}: cannot be written: {exc.strerror}") from None
    try:
        written = _render_all(run_dir, runs, tmp)
        for folder, files in written.items():
            source = tmp / folder.relative_to(run_dir)
            for name in files[1:]:  # files[0] is results.json
                os.replace(source / name, folder / name)
        return {folder: files[1:] for folder, files in written.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rerender(
    run_dir: Path, *, out: Path | None = None, force: bool = False
) -> list[tuple[Path, Result, list[str]]]:
    """Re-render every run at or below ``run_dir``; return (folder written, result, files) each.

    Every results.json is checked before anything is written; the list comes back in path order.
    """
    if out is not None:  # before any work; the runs read are inputs (--out may not touch them)
        check_out(out, force=force, inputs=[run_dir])
    folders = _runs(run_dir)
    runs = [(folder, read_result(folder / "results.json")) for folder in folders]
    if out is None:
        files = _in_place(run_dir, runs)
        return [(folder, result, files[folder]) for folder, result in runs]
    with output_dir(out, force=force, inputs=[run_dir]) as tmp:
        files = _render_all(run_dir, runs, tmp)
    return [(out / folder.relative_to(run_dir), result, files[folder]) for folder, result in runs]


def run_report(run_dir: Path, *, out: Path | None = None, force: bool = False) -> str:
    """Re-render every run at or below ``run_dir``; return what was written, one line a run."""
    done = rerender(run_dir, out=out, force=force)
    if out is None:
        return "\n".join(f"{f}: {', '.join(files)} ({r.command})" for f, r, files in done)
    return "\n".join(f"{f}: {', '.join(files)}" for f, _, files in done)
