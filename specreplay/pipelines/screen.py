"""The screen pipeline: run counters in, typed ``screen`` cells out.

See docs/methods.md#the-screens-rate-sp2.

:func:`screen_result` reads the run-counter files and vLLM scrapes with the config, pools the runs
per (batch, context, worker) and returns the typed result (the Python API's ``screen``);
:mod:`specreplay.render.screen` writes its TABLES.md.

One ``screen`` cell per (batch, context, worker) that has runs; absent cells stay absent (never
filled). Per cell: the worker's :class:`~specreplay.results.model.ArmFigure` (R = 1 + Σ_{i≤c_B}
S_i at the nominal cap, MEASURED), the pooled survival S_i (MEASURED), the
:class:`~specreplay.results.model.ScreenFigures` (T_B MEASURED; c_B, D_B, e_ref from the config)
and one :class:`~specreplay.results.model.DepthFigure` per candidate depth: ``R`` = E_B(d)/B = 1 +
Σ_{i≤d} S_i with ``lo``/``hi`` over the runs' own survival vectors, ``tokens_per_s`` the central
rate_B(d) with the assumption envelope in ``tokens_per_s_lo``/``_hi``, ``round_ms``, ``gain`` over
the nominal cap (paired envelope in ``gain_lo``/``_hi``) and ``rank`` (1 = highest central rate).
Every rate is ESTIMATED; UNSUPPORTED depths carry ``supported: false`` and the reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.pipelines.document import input_files, new_result
from specreplay.replay.archive.counters import (
    CounterRun,
    ScreenConfig,
    is_prometheus_text,
    read_config,
    read_counter_runs,
    vllm_run,
)
from specreplay.results.model import (
    ArmFigure,
    Cell,
    DepthFigure,
    Label,
    Level,
    Result,
    ScreenFigures,
    Survival,
)
from specreplay.stats.screen import ScreenCell, ScreenParams, ScreenRun, screen_cell

__all__ = ["SCREEN_ASSUMPTIONS", "screen_cell_result", "screen_result"]

SCREEN_ASSUMPTIONS = (
    "S_i = Σ accepted_position_i / Σ request_rounds over the runs of a cell (pooled counts; "
    "vLLM: per_pos[i − 1] / drafts, already survivals, never a product). MEASURED.",
    "E_B(d) = B·(1 + Σ_{i≤d} S_i) is a truncation proxy on the old policy's rounds: censored "
    "late positions, and a policy that changes depth also changes where later rounds start "
    '(docs/methods.md, "The screen\'s rate (SP2)"); it is not a static-depth experiment. '
    "ESTIMATED.",
    "T_B = median over runs of each run's step p50 (MEASURED); e_ref = (1 − overlap)·D_B + "
    "overhead at the central values (.25·D_B + .30 by default), held fixed in the envelope; "
    "V_B(d) = T_B − e_ref + s·B·(H[d] − H[c_B]); round_B(d) = V_B(d) + (1 − overlap)·D_B + "
    "overhead; rate_B(d) = 1000·E_B(d)/round_B(d). H is a historical config slope, not a "
    "measured price. Every rate is ESTIMATED.",
    "Envelope = min and max over every run's survival vector × step-p50 extrema × overlap × "
    "overhead × slope grids: an assumption envelope, not a confidence interval; unknown "
    "counterfactual tails can fall outside it.",
    "Nominal cap anchoring: round_B(c_B) = T_B at the central values; the current policy may be "
    "dynamic, so gains over the nominal cap are not gains over production.",
)


def screen_cell_result(
    sc: ScreenCell, *, context: int, worker: str, runs: int, suites: Sequence[str]
) -> Cell:
    """Return the typed ``screen`` cell of one (batch, context, worker) screen."""
    cap_depth = min(sc.cap, len(sc.survival))
    depths = tuple(
        DepthFigure(
            arm=worker,
            depth=d.depth,
            R=d.tokens_per_round,
            lo=d.tokens_per_round_lo,
            hi=d.tokens_per_round_hi,
            label=Label.ESTIMATED,
            supported=d.supported,
            null_reason=d.reason,
            tokens_per_s=d.rate,
            tokens_per_s_lo=d.rate_lo,
            tokens_per_s_hi=d.rate_hi,
            round_ms=d.round_ms,
            rank=d.rank,
            gain=d.gain,
            gain_lo=d.gain_lo,
            gain_hi=d.gain_hi,
        )
        for d in sc.depths
    )
    return Cell(
        level=Level.SCREEN,
        family=None,
        bucket=None,
        n_requests=0,
        arms={
            worker: ArmFigure(
                R=1.0 + sum(sc.survival[:cap_depth]),
                n_rounds=sc.rounds,
                label=Label.MEASURED,
                mcse=None,
                null_reason=None,
                estimator="counters",
            )
        },
        depths=depths,
        survival=tuple(
            Survival(
                arm=worker,
                position=i + 1,
                value=v,
                label=Label.MEASURED,
                null_reason=None,
                rounds=sc.rounds,
            )
            for i, v in enumerate(sc.survival)
        ),
        batch=sc.batch,
        context=context,
        worker=worker,
        screen=ScreenFigures(
            cap=sc.cap,
            draft_p50_ms=sc.draft_p50_ms,
            e_ref_ms=sc.e_ref_ms,
            step_p50_ms=sc.step_p50_ms,
            step_p50_min_ms=sc.step_p50_min_ms,
            step_p50_max_ms=sc.step_p50_max_ms,
            runs=runs,
            rounds=sc.rounds,
            suites=tuple(sorted(set(suites))),
            label=Label.MEASURED,
        ),
    )


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
            batch=batch,
            cap=caps[batch],
            draft_ms=draft[batch],
            params=params,
        )
        cells.append(
            screen_cell_result(
                sc, context=context, worker=worker, runs=len(rs), suites=[r.suite for r in rs]
            )
        )
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
