"""``specreplay screen``: the SP2 depth screen from run counters (SPEC §3.6, seed 001_*).

Inputs are run-counter JSON Lines files and vLLM Prometheus scrapes (paired by the config's
``[[vllm]]`` entries); the config (TOML) holds what is not a counter: D_B, caps, H, the central
values and the envelope grids. Decisions: runs are pooled per (batch, context, worker) across
suites and repetitions (the cell records its suites); a cell's counted positions are the fewest
any of its runs has; a batch size without a cap or a D_B in the config is an error (D_B is a
deployment's measurement, so it has no default); a scrape not named by a ``[[vllm]]`` entry, or an
entry whose scrapes are not inputs, is an error; a file a ``[[vllm]]`` entry names is read as a
scrape whatever its first line; a scrape with two ``model_name`` values needs ``--model-name``
(:mod:`specreplay.replay.archive.counters` lists every refused scrape). results.json records
every input's path and SHA-256 (the config too) and only aggregate counts: no prompt, token or
tensor.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.counters import (
    CounterRun,
    ScreenConfig,
    is_prometheus_text,
    read_config,
    read_counter_runs,
    vllm_run,
)
from specreplay.results.document import input_files, new_result
from specreplay.results.model import Cell, Result
from specreplay.results.output import check_out, output_dir
from specreplay.results.render import outputs_line, write_all
from specreplay.results.screen import SCREEN_ASSUMPTIONS, screen_cell_result
from specreplay.results.tables import fmt
from specreplay.stats.screen import ScreenParams, ScreenRun, screen_cell

__all__ = ["run_screen", "screen_result"]


def _runs(
    paths: list[Path], cfg: ScreenConfig, model_name: str | None
) -> tuple[list[CounterRun], list[tuple[Path, int]]]:
    """Read every input; return the runs and (file, rows) for ``inputs``."""
    named = {e.before.resolve() for e in cfg.vllm} | {e.after.resolve() for e in cfg.vllm}
    given = {p.resolve() for p in paths}
    for e in cfg.vllm:
        for p in (e.before, e.after):
            if p.resolve() not in given:
                raise SpecReplayError(f"{p}: named by a [[vllm]] entry but not given as an input")
    runs: list[CounterRun] = []
    files: list[tuple[Path, int]] = []
    for p in paths:
        if not p.is_file():
            raise SpecReplayError(f"{p}: no such file")
        if p.resolve() in named:  # a [[vllm]] scrape, whatever its first line holds
            files.append((p, 0))
            continue
        if is_prometheus_text(p):
            raise SpecReplayError(
                f"{p}: Prometheus text not named by a [[vllm]] entry of --config "
                "(before/after scrapes, with batch and step_p50_ms)"
            )
        rows = read_counter_runs(p)
        runs += rows
        files.append((p, len(rows)))
    runs += [vllm_run(e, model_name) for e in cfg.vllm]
    return runs, files


def screen_result(paths: list[Path], config: Path | None, model_name: str | None = None) -> Result:
    """Screen every (batch, context, worker) cell of the inputs; return the typed result.

    ``model_name`` picks one model's series in every vLLM scrape (``--model-name``).
    """
    cfg = read_config(config)
    runs, files = _runs(paths, cfg, model_name)
    params = cfg.params
    caps, draft = dict(params.caps), dict(params.draft_p50_ms)
    groups: dict[tuple[int, int, str], list[CounterRun]] = defaultdict(list)
    for r in runs:
        groups[(r.batch, r.context, r.worker)].append(r)
    cells: list[Cell] = []
    for (batch, context, worker), rs in sorted(groups.items()):
        if batch not in caps:
            raise SpecReplayError(f"{rs[0].where}: no nominal cap for batch {batch}: set [caps]")
        if batch not in draft:
            raise SpecReplayError(
                f"{rs[0].where}: no D_B for batch {batch}: set [draft_p50_ms] in --config "
                "(the measured draft graph p50, ms)"
            )
        sc = screen_cell(
            [ScreenRun(r.request_rounds, r.accepted_position, r.step_p50_ms) for r in rs],
            batch=batch, cap=caps[batch], draft_ms=draft[batch], params=params,
        )  # fmt: skip
        cells.append(screen_cell_result(sc, context=context, worker=worker, runs=len(rs),
                                        suites=[r.suite for r in rs]))  # fmt: skip
    if config is not None:
        files.append((config, 0))
    return new_result(
        command="screen",
        seed=0,
        inputs=tuple(x for x in input_files([(p, n or None) for p, n in files])),
        options=_options(paths, config, params, model_name),
        assumptions=SCREEN_ASSUMPTIONS,
        arms=sorted({r.worker for r in runs}),
        cells=tuple(cells),
    )


def _options(
    paths: list[Path], config: Path | None, p: ScreenParams, model_name: str | None
) -> dict[str, Any]:
    return {
        "counters": [str(x) for x in paths],
        "config": str(config) if config is not None else None,
        "model_name": model_name,
        "trained_block": p.trained_block,
        "depths": list(p.depths),
        "h_ms": list(p.h_ms),
        "caps": {str(b): c for b, c in p.caps},
        "draft_p50_ms": {str(b): d for b, d in p.draft_p50_ms},
        "central": {"overlap": p.overlap, "overhead_ms": p.overhead_ms, "slope": p.slope},
        "envelope": {
            "overlap": list(p.overlap_grid),
            "overhead_ms": list(p.overhead_grid),
            "slope": list(p.slope_grid),
        },
    }


def run_screen(
    paths: list[Path],
    *,
    config: Path | None,
    out: Path,
    force: bool,
    model_name: str | None = None,
) -> str:
    """Run the screen and write results.json and TABLES.md into ``out``; return terminal text."""
    inputs = [*paths, *([config] if config is not None else [])]
    check_out(out, force=force, inputs=inputs)
    result = screen_result(
        paths, config, model_name
    )  # every input is read and checked before any write
    with output_dir(out, force=force, inputs=inputs) as tmp:
        files = write_all(result, tmp)
    lines = []
    for c in result.cells:
        best = min((d for d in c.depths if d.rank is not None), key=lambda d: d.rank or 0,
                   default=None)  # fmt: skip
        what = (
            f"depth {best.depth}: {fmt(best.tokens_per_s, 1)} tok/s "
            f"[{fmt(best.tokens_per_s_lo, 1)}, {fmt(best.tokens_per_s_hi, 1)}]"
            if best is not None
            else "no supported depth"
        )
        lines.append(f"{c.name}: best central {what} (ESTIMATED)")
    return "\n".join([*lines, outputs_line(out, files)])
