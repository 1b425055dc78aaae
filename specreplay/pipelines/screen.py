"""The screen pipeline: run counters and vLLM scrapes in, typed figures and ``screen`` cells out.

See docs/methods.md#the-screens-rate-sp2 and docs/commands.md#screen.

:func:`screen_result` reads the run-counter files and vLLM scrapes with the config, gives every
scrape pair its MEASURED :class:`~specreplay.results.model.ScrapeFigures` (``--vs``: a
:class:`~specreplay.results.model.ScrapeDelta`), pools the runs per (batch, context, worker) and
returns the typed result (the Python API's ``screen``); :mod:`specreplay.render.screen` writes
its TABLES.md.

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

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.pipelines.document import input_files, new_result
from specreplay.pipelines.options import ScreenOptions
from specreplay.replay.archive.counters import (
    VLLM_LATENCY,
    VLLM_METRICS,
    CounterRun,
    PairCounts,
    ScrapePair,
    ScreenConfig,
    VllmEntry,
    is_prometheus_text,
    pair_counts,
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
    ScrapeDelta,
    ScrapeFigures,
    ScreenFigures,
    StepTime,
    Survival,
)
from specreplay.stats.scrapes import bucket_quantile, mean_se, round_variance
from specreplay.stats.screen import ScreenCell, ScreenParams, ScreenRun, screen_cell

__all__ = [
    "SCRAPE_ASSUMPTIONS",
    "SCREEN_ASSUMPTIONS",
    "scrape_delta",
    "scrape_figures",
    "screen_cell_result",
    "screen_inputs",
    "screen_result",
]

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

SCRAPE_ASSUMPTIONS = (
    "Scrapes: every figure is the Δ of vLLM's counters between the BEFORE and AFTER scrapes, "
    "summed over the engines kept (--engine keeps one). Mean acceptance length = 1 + "
    "Δaccepted/Δdrafts; per-position acceptance rate i = Δper_pos[i]/Δdrafts (a survival "
    "P(A ≥ i + 1)); draft acceptance rate = Δaccepted/Δdraft_tokens (not α: (R − 1)/d at a fixed "
    "depth d). MEASURED.",
    "Step time: the median of the differenced latency histogram (vllm:inter_token_latency_seconds"
    ", or vllm:time_per_output_token_seconds), interpolated within its bucket as Prometheus' "
    "histogram_quantile does: MEASURED (binned), at most one bucket's width from the true "
    "pooled median. It pools every step of every request: it is not SP2's median per-request "
    "step p50.",
    "--vs: Δ = R_B − R_A is exact from the counts; its SE √(Var_A/N_A + Var_B/N_B), Var(A) = "
    "Σ_i (2i − 1)·S_i − (Σ_i S_i)² per round, treats rounds as independent. Rounds cluster by "
    "request, so it is a LOWER BOUND of the real SE; a position trace (capture) gives a "
    "request-level interval.",
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


@dataclass(frozen=True)
class _Inputs:
    """Every input, read: counter runs, scrape pairs (with their ``[[vllm]]`` entry, if any)."""

    runs: list[CounterRun]
    files: list[tuple[Path, int]]
    pairs: list[tuple[ScrapePair, VllmEntry | None]]


def _inputs(paths: list[Path], cfg: ScreenConfig, config: Path | None) -> _Inputs:
    """Sort the command line's files into run counters and scrape pairs; match the entries.

    A scrape a ``[[vllm]]`` entry names is read from there (given on the command line too, the
    old shape, it is read once). The command line's other scrapes pair up in order (BEFORE
    AFTER), and with ``--config`` each pair takes the next entry that names no scrapes.
    """
    named = {p.resolve() for e in cfg.vllm for p in (e.before, e.after) if p is not None}
    runs: list[CounterRun] = []
    files: list[tuple[Path, int]] = []
    scrapes: list[Path] = []
    for p in paths:
        if not p.is_file():
            raise SpecReplayError(f"{p}: no such file")
        if p.resolve() in named:  # a [[vllm]] scrape, whatever its first line holds
            files.append((p, 0))
            continue
        if is_prometheus_text(p):
            scrapes.append(p)
            files.append((p, 0))
            continue
        rows = read_counter_runs(p)
        runs += rows
        files.append((p, len(rows)))
    if len(scrapes) % 2:
        raise SpecReplayError(
            f"{scrapes[-1]}: a scrape without its pair: give scrapes as BEFORE AFTER pairs "
            f"({len(scrapes)} scrapes given)"
        )
    cli = [ScrapePair(scrapes[i], scrapes[i + 1]) for i in range(0, len(scrapes), 2)]
    pairs: list[tuple[ScrapePair, VllmEntry | None]] = []
    left = list(cli)
    for e in cfg.vllm:
        if e.before is not None and e.after is not None:
            for p in (e.before, e.after):
                if not p.is_file():
                    raise SpecReplayError(f"{p}: no such file (named by {e.where})")
                if p.resolve() not in {q.resolve() for q, _ in files}:
                    files.append((p, 0))
            pairs.append((ScrapePair(e.before, e.after), e))
        elif left:
            pairs.append((left.pop(0), e))
        else:
            raise SpecReplayError(
                f"{e.where}: names no before/after, and the command line has no BEFORE AFTER "
                "scrape pair left for it"
            )
    if config is not None and left:
        raise SpecReplayError(
            f"{left[0].before}: Prometheus text not named by a [[vllm]] entry of --config: each "
            "BEFORE AFTER pair of the command line takes the next [[vllm]] entry without "
            "before/after (suite, worker, batch, context); without --config, screen gives the "
            "MEASURED figures alone"
        )
    pairs += [(p, None) for p in left]
    return _Inputs(runs, files, pairs)


def _step_time(counts: PairCounts) -> StepTime | None:
    """Return the latency histogram's binned median (MEASURED, binned); None without one."""
    if counts.latency is None:
        return None
    median = bucket_quantile(0.5, counts.latency_buckets)
    why = None
    if math.isnan(median):
        why = (
            "no observation between the scrapes"
            if counts.latency_count == 0
            else "histogram_quantile is NaN here (fewer than 2 buckets or no +Inf bucket)"
        )
    return StepTime(
        metric=counts.latency,
        observations=counts.latency_count,
        median_ms=None if why else 1000.0 * median,
        label=Label.MEASURED,
        binned=True,
        null_reason=why,
    )


def scrape_figures(name: str, counts: PairCounts, opts: ScreenOptions) -> ScrapeFigures:
    """Return what one scrape pair measures alone (:mod:`specreplay.stats.scrapes`)."""
    why: str | None = None
    if counts.per_pos is None:
        why = f"the scrapes hold no {VLLM_METRICS['per_pos']} series"
    elif counts.short:
        k = len(counts.per_pos)
        why = (
            f"short proposals: Δdraft_tokens = {counts.draft_tokens} < Δdrafts × {k} positions "
            f"= {counts.drafts * k} (an n-gram drafter?): a per-position count is not a "
            "survival of the drafts that proposed the position"
        )
    per_pos = tuple(
        Survival(
            arm=name,
            position=i + 1,
            value=None if why else c / counts.drafts,  # S_{i+1} = per_pos[i] / drafts
            label=Label.MEASURED,
            null_reason=why,
            rounds=counts.drafts,
        )
        for i, c in enumerate(counts.per_pos or ())
    )
    return ScrapeFigures(
        name=name,
        before=str(counts.pair.before),
        after=str(counts.pair.after),
        model_name=opts.model_name or next(iter(counts.models), None) or None,
        engine=opts.engine,
        engines=counts.engines,
        drafts=counts.drafts,
        draft_tokens=counts.draft_tokens,
        accepted_tokens=counts.accepted,
        mean_acceptance_length=1.0 + counts.accepted / counts.drafts,
        draft_acceptance_rate=(
            counts.accepted / counts.draft_tokens if counts.draft_tokens > 0 else None
        ),
        per_position=per_pos,
        per_position_null_reason=why,
        label=Label.MEASURED,
        step=_step_time(counts),
    )


def scrape_delta(a: ScrapeFigures, b: ScrapeFigures) -> ScrapeDelta:
    """Δ of the mean acceptance length (b − a) and its round-independent SE, a lower bound."""
    sides: list[tuple[float | None, float | None]] = []
    why = None
    for x in (a, b):
        values = [s.value for s in x.per_position]
        if not values or any(v is None for v in values):
            reason = x.per_position_null_reason or "no per-position counter"
            why = why or f"{x.name}: no survivals ({reason})"
            sides.append((None, None))
        else:
            surv = [float(v) for v in values if v is not None]
            sides.append((round_variance(surv), mean_se(surv, x.drafts)))
    (var_a, se_a), (var_b, se_b) = sides
    se = math.hypot(se_a, se_b) if se_a is not None and se_b is not None else None
    return ScrapeDelta(
        a=a.name,
        b=b.name,
        point=b.mean_acceptance_length - a.mean_acceptance_length,
        se=se,
        se_a=se_a,
        se_b=se_b,
        var_a=var_a,
        var_b=var_b,
        se_is_lower_bound=True,
        label=Label.MEASURED,
        se_null_reason=why,
    )


def _letter(i: int) -> str:
    """Name the i-th scrape pair (from 0): A, B, …, Z, then AA, AB and so on."""
    return (_letter(i // 26 - 1) if i >= 26 else "") + chr(ord("A") + i % 26)


def _vs_counts(opts: ScreenOptions, main: list[PairCounts]) -> PairCounts | None:
    if opts.vs is None:
        return None
    if len(main) != 1:
        raise SpecReplayError(
            f"--vs {opts.vs[0]} {opts.vs[1]}: compares one BEFORE AFTER pair with another; "
            f"{len(main)} pairs given besides it"
        )
    for p in opts.vs:
        if not p.is_file():
            raise SpecReplayError(f"{p}: no such file")
    return pair_counts(ScrapePair(*opts.vs), opts.model_name, opts.engine)


def _vllm_runs(
    pairs: list[tuple[ScrapePair, VllmEntry | None]],
    counts: list[PairCounts],
    scrapes: list[ScrapeFigures],
) -> list[CounterRun]:
    """Return the depth screen's runs of the pairs a ``[[vllm]]`` entry describes.

    The entry's ``step_p50_ms`` wins; without it the latency histogram's binned median.
    """
    runs = []
    for (_, entry), c, fig in zip(pairs, counts, scrapes, strict=True):
        if entry is None:
            continue
        step = entry.step_p50_ms
        if step is None:
            step = fig.step.median_ms if fig.step is not None else None
        if step is None:
            why = fig.step.null_reason if fig.step is not None else "no latency histogram"
            raise SpecReplayError(
                f"{entry.where}: no step_p50_ms, and the scrapes give no step time ({why}: "
                f"{' or '.join(VLLM_LATENCY)}): set step_p50_ms"
            )
        runs.append(vllm_run(entry, c, step))
    return runs


def _cells(runs: list[CounterRun], params: ScreenParams) -> list[Cell]:
    """Return the screen cell of every (batch, context, worker) group of runs."""
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
    return cells


def screen_inputs(paths: list[Path], config: Path | None, opts: ScreenOptions) -> list[Path]:
    """Return every file the run reads: the arguments, the config, its scrapes and ``--vs``'s.

    ``--out`` may be none of them nor hold one (:func:`~specreplay.results.output.check_out`); a
    scrape named only by a ``[[vllm]]`` entry is an input too.
    """
    named = [p for e in read_config(config).vllm for p in (e.before, e.after) if p is not None]
    return [*paths, *([config] if config is not None else []), *named, *(opts.vs or ())]


def screen_result(
    paths: list[Path],
    config: Path | None,
    model_name: str | None = None,
    opts: ScreenOptions | None = None,
) -> Result:
    """Screen every (batch, context, worker) cell of the inputs; return the typed result.

    ``model_name`` picks one model's series in every vLLM scrape (``--model-name``); ``opts``
    (:class:`~specreplay.pipelines.options.ScreenOptions`) carries it with ``--engine`` and
    ``--vs``. Every scrape pair gives its MEASURED figures (``Result.scrapes``); the depth screen
    needs ``--config``.
    """
    if opts is None:
        opts = ScreenOptions.build(model_name=model_name)
    cfg = read_config(config)
    got = _inputs(paths, cfg, config)
    runs, files = got.runs, got.files
    counts = [pair_counts(p, opts.model_name, opts.engine) for p, _ in got.pairs]
    vs = _vs_counts(opts, counts)
    if not got.runs and not got.pairs:
        raise SpecReplayError("screen: no input: give run counters or BEFORE AFTER scrape pairs")
    names = [_letter(i) for i in range(len(got.pairs))]
    scrapes = [scrape_figures(n, c, opts) for n, c in zip(names, counts, strict=True)]
    runs += _vllm_runs(got.pairs, counts, scrapes)
    delta = None
    if vs is not None:
        b = scrape_figures(_letter(1), vs, opts)
        delta = scrape_delta(scrapes[0], b)
        scrapes.append(b)
        files += [(p, 0) for p in opts.vs or ()]
    params = cfg.params
    cells = _cells(runs, params)
    if config is not None:
        files.append((config, 0))
    assumptions = (
        (SCREEN_ASSUMPTIONS if cells else ())
        + (SCRAPE_ASSUMPTIONS[:1] if scrapes else ())
        + (SCRAPE_ASSUMPTIONS[1:2] if any(f.step is not None for f in scrapes) else ())
        + (SCRAPE_ASSUMPTIONS[2:] if delta is not None else ())
    )
    return new_result(
        command="screen",
        seed=0,
        inputs=tuple(x for x in input_files([(p, n or None) for p, n in files])),
        options=_options(paths, config, params, opts),
        assumptions=assumptions,
        arms=sorted({r.worker for r in runs}),
        cells=tuple(cells),
        scrapes=tuple(scrapes) or None,
        scrape_delta=delta,
    )


def _options(
    paths: list[Path], config: Path | None, p: ScreenParams, opts: ScreenOptions
) -> dict[str, Any]:
    """results.json's ``options``; ``engine`` and ``vs`` only when given.

    A run without them writes the same options as before they existed.
    """
    return {
        "counters": [str(x) for x in paths],
        "config": str(config) if config is not None else None,
        "model_name": opts.model_name,
        **({"engine": opts.engine} if opts.engine is not None else {}),
        **({"vs": [str(x) for x in opts.vs]} if opts.vs is not None else {}),
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
