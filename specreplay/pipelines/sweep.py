"""The sweep pipeline: R at every fixed depth per arm and cell, from one replay pass.

See docs/methods.md#the-sweep-cost-model-and-the-best-depth.

:func:`sweep_run` checks the options, opens the archive, replays every arm at depths
1..max(``--depths``, the arms' own depths) in one pass (the ``--by`` cells too), builds the
result (:func:`sweep_result`) and hashes ids; round traces (the inputs of ``interval``) give the
survival truncation proxy instead (:func:`proxy_result`).

Per arm, its own ``@DEPTH`` is the **reference depth**. For every depth d of ``--depths`` the
archive's replay at depth d is compared with the replay at the reference depth on the same
requests (paired bootstrap, :func:`specreplay.stats.compare.compare`): the delta (role
``depth-vs-reference``, its ``depth`` field d, no verdict) carries the interval of R(d) − R(ref),
and ``cells[].depths[]`` the R(d) itself with its own studentized interval. Depths past the
positions the archive records are UNSUPPORTED (null, with the reason), never extrapolated: in a cell
holding a round shorter than d, R(d) is null with the count and the first such round, and the delta
is null where a round is shorter than d or than the reference depth
(docs/inputs.md#position-traces-schema-v1; ``--short-rounds exclude`` leaves rounds shorter than the
deepest arm out instead, :mod:`specreplay.pipelines.shortrounds`).

Every comparison of one sweep (each depth, the fewest-bits sequence, the ``--by`` groupings) is
planned first (:func:`sweep_plan`) and resampled in one pass (:func:`resampled_sweeps`), so
replicate b resamples the same requests at every depth: with a **cost model** (milliseconds per
round at each depth) tokens/s = 1000·R(d)/ms(d) per depth (ESTIMATED), the best depth per cell
and arm, and ``p_best``, the share of replicates in which each depth has the most tokens/s (rank
stability), come from those joint replicates (:mod:`specreplay.stats.depth` computes them).

Decisions: the depth-vs-reference deltas carry no verdict (a sweep is a counterfactual check,
not a requalification); cells keep one arm figure per arm (R at its reference depth). Under
``--estimator auto`` the bits sweep's deltas follow the per-cell tail rule
(:func:`~specreplay.pipelines.importance.with_auto_diagnostics`): a pooled INCONCLUSIVE stops the
fixed-sequence walk like any verdict other than EQUIVALENT.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specreplay.errors import SpecReplayError
from specreplay.pipelines.document import excluded_entries, ignored_inputs, input_files, new_result
from specreplay.pipelines.grouping import BY_LEVELS, with_by_cells
from specreplay.pipelines.importance import (
    comparison_failure,
    with_auto_diagnostics,
    with_estimators,
)
from specreplay.pipelines.options import MARGIN_DEFAULT, SweepOptions, parse_margin
from specreplay.pipelines.policies import (
    PolicyPlan,
    compare_policies,
    policy_arms,
    policy_choice,
    policy_figures,
    policy_plan,
    proxy_policy_plan,
)
from specreplay.pipelines.requalify import Comparand, estimator_used, merge_comparisons
from specreplay.pipelines.resample import Pairing, compared, resampled
from specreplay.pipelines.shortrounds import (
    ShortRounds,
    exclude_below,
    short_rounds_assumptions,
    short_rounds_excluded,
    with_excluded_rounds,
)
from specreplay.replay.archive.importers import detect_kind, drafted_depths, read_arm
from specreplay.replay.archive.sources import archive_listing, archive_rows
from specreplay.replay.backend import Backend, BackendRun, backend_runner
from specreplay.replay.choice import AUTO, auto_passes, pass_columns, resolve_auto
from specreplay.replay.engine import OpenArchive, ReplayResult
from specreplay.replay.scan import Progress, phase
from specreplay.results.model import Cell, DepthFigure, Label, PolicyFigure, Result, Role
from specreplay.results.privacy import IdHasher, hash_result
from specreplay.sim.arms import Arm
from specreplay.stats.armdata import ArmData
from specreplay.stats.arviz_bridge import DepthReplicates
from specreplay.stats.cells import Cell as CellSpec
from specreplay.stats.compare import Comparison
from specreplay.stats.depth import CostModel, best_depth, p_best, tokens_per_s
from specreplay.stats.pairing import pair_arms

__all__ = [
    "ProxyDepths",
    "SweepOptions",
    "SweepPlan",
    "SweepPrepared",
    "expand_arms",
    "proxy_result",
    "resampled_sweeps",
    "sweep_plan",
    "sweep_prepare",
    "sweep_prepared",
    "sweep_result",
    "sweep_run",
]

NO_VERDICT = "depth sweep: Δ against the arm's own depth (a counterfactual check, no verdict)"
DEPTH_MARGIN = parse_margin(MARGIN_DEFAULT)
"""The margin of the depth-vs-reference deltas (they carry no verdict; it only fills the field)."""


def _depth_name(arm: Arm, depth: int) -> str:
    return f"{arm.canonical.rsplit('@', 1)[0]}@{depth}"


def _depth_pairings(res: ReplayResult, arm: Arm, opts: SweepOptions) -> dict[int, Pairing | str]:
    """Per depth, the pairing with the reference depth, or why the depth is UNSUPPORTED."""
    ref = res.side(arm)
    out: dict[int, Pairing | str] = {}
    for d in opts.depths:
        why = res.depth_problem(arm, d)
        if why is not None:
            out[d] = why
            continue
        name = _depth_name(arm, d) + (" (reference depth)" if d == arm.depth else "")
        other = res.side(arm, depth=d, name=name)
        support = res.support((arm, arm.depth), (arm, d))
        same = d == arm.depth  # the reference depth against itself
        out[d] = Pairing(res.paired(ref, other), ref.name, other.name, support, same=same)
    return out


@dataclass(frozen=True)
class SweepPlan:
    """A sweep's comparisons before they are made, in the order of its one resample pass.

    Attributes
    ----------
    depths : dict of str to dict of int to Pairing or str
        Per arm and depth of ``--depths``, the pairing with the reference depth, or why the
        depth is UNSUPPORTED.
    bits : tuple of (Arm, Pairing)
        The fewest-bits sequence (most bits first), each arm paired with the baseline.
    """

    depths: dict[str, dict[int, Pairing | str]]
    bits: tuple[tuple[Arm, Pairing], ...] = ()
    policies: PolicyPlan | None = None

    def pairings(self) -> list[Pairing]:
        """Every pairing: the depths (arm by arm), the sequence, then the policies."""
        out = [p for per in self.depths.values() for p in per.values() if isinstance(p, Pairing)]
        pol = self.policies.pairings() if self.policies is not None else []
        return out + [p for _, p in self.bits] + pol

    def with_pairings(self, new: Sequence[Pairing]) -> SweepPlan:
        """Return the plan with :meth:`pairings` replaced by ``new`` (same order)."""
        it = iter(new)
        depths = {
            name: {d: next(it) if isinstance(p, Pairing) else p for d, p in per.items()}
            for name, per in self.depths.items()
        }
        bits = tuple((a, next(it)) for a, _ in self.bits)
        pol = self.policies.with_pairings(it) if self.policies is not None else None
        return SweepPlan(depths, bits, pol)


def sweep_plan(
    res: ReplayResult, arms: list[Arm], opts: SweepOptions, baseline: Arm | None = None
) -> SweepPlan:
    """Return the comparisons of a sweep: every arm at every depth, then the fewest-bits walk.

    Every dyadic arm of the walk is paired with the baseline, though the walk may stop before
    it: the pairings are resampled together before the first comparison is made.
    """
    depths = {a.canonical: _depth_pairings(res, a, opts) for a in arms}
    pol = policy_plan(res, arms, opts) if opts.policies else None
    if baseline is None:
        return SweepPlan(depths, policies=pol)
    seq = sorted(
        (a for a in arms if a.sampler.kind == "dyadic" and a != baseline),
        key=lambda a: -a.sampler.bits,
    )
    base = res.side(baseline)
    bits = tuple(
        (
            a,
            Pairing(
                res.paired(base, res.side(a)),
                base.name,
                a.canonical,
                res.support((baseline, baseline.depth), (a, a.depth)),
            ),
        )
        for a in seq
    )
    return SweepPlan(depths, bits, pol)


def resampled_sweeps(plans: Sequence[SweepPlan], opts: SweepOptions, seed: int) -> list[SweepPlan]:
    """Return ``plans`` with their replicates from one resample pass over all of them.

    The first pairing of ``plans[0]`` (the run itself, before any ``--by`` grouping) gives the
    units and strata (:mod:`specreplay.pipelines.resample`).
    """
    flat = resampled([p for plan in plans for p in plan.pairings()], opts.boot, seed)
    out = []
    at = 0
    for plan in plans:
        n = len(plan.pairings())
        out.append(plan.with_pairings(flat[at : at + n]))
        at += n
    return out


def _comparisons(
    plan: dict[int, Pairing | str], opts: SweepOptions, seed: int, label: str = "SIMULATED"
) -> dict[int, Comparison | str]:
    """Per depth, the paired comparison with the reference depth, or why it is UNSUPPORTED."""
    return {
        d: p
        if isinstance(p, str)
        else compared(p, opts.boot, seed, label=label, margin=DEPTH_MARGIN)
        for d, p in plan.items()
    }


def _depth_figures(
    name: str,
    comps: dict[int, Comparison | str],
    i: int,
    cost: CostModel | None,
    level: float,
    label: Label = Label.SIMULATED,
) -> tuple[list[DepthFigure], int | None, dict[int, np.ndarray]]:
    """Return one arm's ``depths[]`` entries in cell i, its best depth and tokens/s replicates."""
    figs: list[DepthFigure] = []
    tps_reps: dict[int, np.ndarray] = {}
    for d, comp in comps.items():
        if isinstance(comp, str):
            figs.append(DepthFigure(name, d, None, None, None, label, False, comp))
            continue
        test = comp.rb_tests[i] if comp.rb_tests else None
        fig_b = comp.cells[i].arm_b
        r_b = fig_b.R
        if test is None or r_b is None:
            # a short round in the cell (docs/inputs.md#position-traces-schema-v1): this depth is
            # UNSUPPORTED here
            why = fig_b.null_reason or "no rounds in this cell"
            short = why != "no rounds in this cell"
            figs.append(DepthFigure(name, d, None, None, None, label, not short, why))
            continue
        lo, hi = test.interval(level)
        if math.isnan(lo) or math.isnan(hi):  # no depth to bound it (round traces): no interval
            figs.append(DepthFigure(name, d, float(r_b), None, None, label, True, None))
            continue
        fig = DepthFigure(name, d, float(r_b), lo, hi, label, True, None)
        if fig_b.tail_width is not None:  # bounded over a truncated law: R is the midpoint
            w = fig_b.tail_width
            lo, hi = lo - w / 2, hi + w / 2
            fig = dataclasses.replace(fig, lo=lo, hi=hi, tail_width=w, tail_limit=fig_b.tail_limit)
        ms = cost.ms(d) if cost is not None else None
        if ms is not None:
            fig = dataclasses.replace(
                fig,
                tokens_per_s=tokens_per_s(float(r_b), ms),
                tokens_per_s_lo=tokens_per_s(lo, ms),
                tokens_per_s_hi=tokens_per_s(hi, ms),
            )
            assert comp.rb_reps is not None
            tps_reps[d] = tokens_per_s(comp.rb_reps[:, i], ms)
        figs.append(fig)
    if not tps_reps:
        return figs, None, tps_reps
    shares = p_best(tps_reps)
    figs = [
        dataclasses.replace(f, p_best=shares[f.depth]) if f.depth in shares else f for f in figs
    ]
    best = best_depth({f.depth: f.tokens_per_s for f in figs if f.depth in tps_reps})
    return figs, best, tps_reps


def fewest_bits(
    res: ReplayResult, bits: Sequence[tuple[Arm, Pairing]], baseline: Arm, opts: SweepOptions
) -> tuple[list[Comparand], dict[str, Any]]:
    """Fixed-sequence test of the dyadic arms against ``baseline``, most bits first.

    ``bits``: the arms in that order, each paired with the baseline (:func:`sweep_plan`). Each
    arm (at its own depth) is compared with the baseline (at its own); the walk stops at
    the first arm whose pooled verdict is not EQUIVALENT, and the fewest bits that stay
    EQUIVALENT is the last arm before it. Testing in a fixed order and stopping at the first
    failure keeps the family-wise false-EQUIVALENT rate at α with no adjustment (Maurer, Hothorn
    & Lehmacher 1995), where picking the fewest EQUIVALENT arm from separate tests inflates it.
    """
    parts: list[Comparand] = []
    walk: list[dict[str, Any]] = []
    fewest: str | None = None
    stopped: str | None = None
    for a, pairing in bits:
        comp = compared(pairing, opts.boot, res.seed, label="SIMULATED")
        parts.append(Comparand(comp, Role.CANDIDATE_VS_BASELINE))
        verdict = comp.pooled.delta.verdict
        if verdict is not None and opts.replay.estimator == AUTO and res.estimator == "importance":
            pooled = CellSpec(
                "pooled",
                None,
                None,
                tuple(range(len(res.families))),
                tuple(range(len(res.buckets.names))),
            )
            if comparison_failure(res, baseline, a, pooled)[0] is not None:
                verdict = "INCONCLUSIVE"  # auto's tail rule (with_auto_diagnostics says why)
        walk.append({"arm": a.canonical, "bits": a.sampler.bits, "verdict": verdict})
        if verdict != "EQUIVALENT":
            stopped = a.canonical
            break
        fewest = a.canonical
    why = (
        None
        if fewest
        else (
            "no dyadic arm to test"
            if not bits
            else f"{walk[0]['arm']} is not EQUIVALENT to the baseline"
        )
    )
    summary = {
        "baseline": baseline.canonical,
        "margin": opts.boot.margin.to_json(),
        "sequence": walk,
        "fewest_bits_equivalent": fewest,
        "stopped_at": stopped,
        "label": "SIMULATED",
        "null_reason": why,
    }
    return parts, summary


def sweep_result(
    res: ReplayResult,
    arms: list[Arm],
    opts: SweepOptions,
    archive: Path,
    baseline: Arm | None = None,
    plan: SweepPlan | None = None,
) -> Result:
    """Return the typed result of a sweep of ``arms`` over ``opts.depths`` (module docstring).

    ``plan``: its comparisons planned and resampled with the rest of the run
    (:func:`resampled_sweeps`); else resampled here.
    """
    cost = opts.cost
    if plan is None:
        (plan,) = resampled_sweeps([sweep_plan(res, arms, opts, baseline)], opts, res.seed)
    per_arm = {a.canonical: _comparisons(plan.depths[a.canonical], opts, res.seed) for a in arms}
    parts = []
    for a in arms:
        for d, comp in per_arm[a.canonical].items():
            if isinstance(comp, Comparison):
                parts.append(Comparand(comp, Role.DEPTH_VS_REFERENCE, NO_VERDICT, depth=d))
    if not parts:
        raise SpecReplayError(
            f"{archive}: no depth of {', '.join(map(str, opts.depths))} is supported by the "
            "archive's recorded positions"
        )
    extra: dict[str, Any] = {}
    if baseline is not None:
        bits_parts, extra["fewest_bits"] = fewest_bits(res, plan.bits, baseline, opts)
        parts += bits_parts
    names = [a.canonical for a in arms]
    pols = compare_policies(plan.policies) if plan.policies is not None else None
    cells = _with_depths(merge_comparisons(parts), names, per_arm, cost, opts.boot.level, pols=pols)
    if opts.replay.estimator == AUTO:
        cells = with_auto_diagnostics(cells, res, res.arms)
    cells = with_estimators(with_excluded_rounds(cells, res), res)
    return new_result(
        command="sweep",
        seed=res.seed,
        inputs=input_files([(f.path, f.rows) for f in res.files]),
        options={
            **opts.to_json(archive),
            "replicates": res.replicates,
            **estimator_used(res, cells),
        },
        assumptions=_assumptions(cost)
        + short_rounds_assumptions(opts.replay.short_rounds, res.exclude_below),
        excluded=excluded_entries([*res.excluded, *short_rounds_excluded(res)]),
        arms=[a.canonical for a in arms],
        cells=cells,
        columns_not_read=res.unread or None,
        extra=extra,
        inputs_ignored=ignored_inputs((e.path, e.glob) for e in res.ignored),
        replicates=DepthReplicates(per_arm),
    )


def _with_depths(
    cells: tuple[Cell, ...],
    names: list[str],
    per_arm: dict[str, dict[int, Comparison | str]],
    cost: CostModel | None,
    level: float,
    label: Label = Label.SIMULATED,
    pols: dict[str, dict[str, Any]] | None = None,
) -> tuple[Cell, ...]:
    """Add every arm's depth (and policy) figures and best depth; one arm figure per arm."""
    out = []
    for i, c in enumerate(cells):
        depths: list[DepthFigure] = []
        policies: list[PolicyFigure] = []
        best: dict[str, int] = {}
        for name in names:
            figs, b, reps = _depth_figures(name, per_arm[name], i, cost, level, label)
            if pols is not None:
                figs, pfigs = policy_figures(name, pols[name], figs, reps, i, level, label)
                policies += pfigs
            depths += figs
            if b is not None:
                best[name] = b
        keep = set(names) | {d.a for d in c.deltas if d.role is not Role.DEPTH_VS_REFERENCE}
        arms_fig = {k: v for k, v in c.arms.items() if k in keep}
        out.append(
            dataclasses.replace(
                c,
                arms=arms_fig,
                depths=tuple(depths),
                policies=tuple(policies),
                best_depth=best or None,
            )
        )
    return tuple(out)


def _assumptions(cost: CostModel | None) -> list[str]:
    out = [
        "Path assumption or importance weights as the estimator line says (docs/methods.md, "
        '"The path assumption"); a fixed depth d replays the first d archived positions of every '
        "round that recorded them.",
        "A policy that changes depth also changes where later rounds start, which no replay of "
        "these archives can see.",
        "Depths past the recorded positions are UNSUPPORTED, never extrapolated.",
    ]
    if cost is not None:
        out.append(f"Cost model {cost.text} (ms per round by depth): tokens/s are ESTIMATED.")
    return out


PROXY = (
    'Survival truncation proxy (round traces, docs/methods.md, "The survival truncation proxy"): '
    "E(d) = 1 + Σ_{i≤d} S_i with S_i = "
    "#(rounds with A ≥ i) / #rounds from pooled counts, i.e. each round's retained tokens "
    "1 + min(A, d): what the observed rounds would have kept had drafting stopped at d, assuming "
    "the first d positions are accepted as they were (ESTIMATED). Valid only up to the depth every "
    "round drafted; deeper depths are UNSUPPORTED."
)


def proxy_result(
    by_depth: dict[int, ArmData],
    reference: int,
    valid: tuple[int | None, int],
    opts: SweepOptions,
    path: Path,
) -> Result:
    """Return the sweep of a round-trace arm: the survival truncation proxy at every depth.

    ``by_depth`` holds the arm read at each supported depth d (retained 1 + min(A, d)) and at
    ``reference`` (the depth every round drafted); ``valid`` is (that depth, rounds without a
    recorded depth).
    """
    cost = opts.cost
    ref = by_depth[reference]
    name = ref.name
    lowest, unknown = valid
    pairings: dict[int, Pairing | str] = {}
    for d in opts.depths:
        if d not in by_depth:
            pairings[d] = (
                f"{unknown} rounds record no drafted depth: the proxy is valid only up to the "
                "depth every round drafted"
                if unknown
                else f"UNSUPPORTED: some rounds drafted only {lowest} positions "
                "(the proxy is valid only up to the depth every round drafted, never extrapolated)"
            )
            continue
        other = dataclasses.replace(by_depth[d], name=f"{name}@{d}")
        ps, _ = pair_arms(ref, other, buckets=opts.replay.buckets)
        pairings[d] = Pairing(ps, name, other.name, same=d == reference)
    # one resample pass: every depth's (and policy's) replicates from the same draws
    pol = proxy_policy_plan(path, ref, opts) if opts.policies else None
    (plan,) = resampled_sweeps([SweepPlan({name: pairings}, policies=pol)], opts, opts.replay.seed)
    comps = _comparisons(plan.depths[name], opts, opts.replay.seed, label="ESTIMATED")
    pols = compare_policies(plan.policies) if plan.policies is not None else None
    parts = [
        Comparand(c, Role.DEPTH_VS_REFERENCE, NO_VERDICT, depth=d)
        for d, c in comps.items()
        if isinstance(c, Comparison)
    ]
    if not parts:
        raise SpecReplayError(
            f"{path}: no depth of {list(opts.depths)} is within the proxy's range"
        )
    cells = _with_depths(
        merge_comparisons(parts),
        [name],
        {name: comps},
        cost,
        opts.boot.level,
        Label.ESTIMATED,
        pols=pols,
    )
    cells = tuple(
        dataclasses.replace(
            c, deltas=tuple(dataclasses.replace(d, estimator="survival-proxy") for d in c.deltas)
        )
        for c in cells
    )
    return new_result(
        command="sweep",
        seed=opts.replay.seed,
        inputs=input_files(ref.files),
        options={
            **opts.to_json(path),
            "reference_depth": reference,
            "estimator_used": "survival-proxy",
            "estimator_reason": "round traces: the survival truncation proxy",
        },
        assumptions=[PROXY, *ref.notes],
        arms=[name],
        cells=cells,
        inputs_ignored=ignored_inputs(ref.ignored),
        replicates=DepthReplicates({name: comps}),
    )


# -------------------------------------------------------------------------------------------------
# The run: options checked, archive opened, one pass (and the ``--by`` cells), ids hashed; round
# traces give the survival truncation proxy instead


def expand_arms(arms: tuple[Arm, ...]) -> list[Arm]:
    """Return the ``--arm`` values (parsed and brace-expanded by the options); refuse none."""
    if not arms:
        raise SpecReplayError("sweep: give at least one --arm")
    return list(arms)


@dataclass(frozen=True)
class SweepPrepared:
    """A sweep's checked inputs: the archive opened (its first batch read) and the arms."""

    opened: OpenArchive
    arms: list[Arm]
    baseline: Arm | None
    replayed: list[Arm]


ProxyDepths = tuple[int, int | None, int]
"""A proxy's checked depths: (top supported depth, lowest drafted, rounds that record none)."""


def sweep_run(
    archive: Path,
    opts: SweepOptions,
    *,
    progress: Progress | None = None,
    backend: Backend | None = None,
) -> Result:
    """Sweep ``opts.arms`` over ``opts.depths``; return the typed result.

    Round traces (the inputs of ``interval``) give the survival truncation proxy instead.
    ``backend``: who replays the shards (Dask, the per-shard cache; default this process).
    """
    prepared = sweep_prepare(archive, opts, backend)
    return sweep_prepared(prepared, archive, opts, progress=progress, backend=backend)


def sweep_prepare(
    archive: Path, opts: SweepOptions, backend: Backend | None
) -> SweepPrepared | ProxyDepths:
    """Check every option and open the archive (errors before any work); round traces: depths."""
    if _is_round_traces(archive, opts.replay.ignore):
        _no_backend(archive, backend)
        return _proxy_depths(archive, opts)
    return _prepare(archive, opts)


def sweep_prepared(
    prepared: SweepPrepared | ProxyDepths,
    archive: Path,
    opts: SweepOptions,
    *,
    progress: Progress | None = None,
    backend: Backend | None = None,
) -> Result:
    """Run the sweep (or the proxy) on what :func:`sweep_prepare` checked; return the result."""
    if isinstance(prepared, SweepPrepared):
        return _swept(archive, opts, prepared, progress, backend)
    return _proxy(archive, opts, prepared)


def _no_backend(archive: Path, backend: Backend | None) -> None:
    """Refuse Dask and cache options for round traces (nothing is replayed)."""
    if backend is not None and not backend.default:
        raise SpecReplayError(
            f"{archive}: round traces are not replayed: --scheduler, --workers and --cache "
            "apply to position traces"
        )


def _prepare(archive: Path, opts: SweepOptions) -> SweepPrepared:
    """Check the arms and the cost model and open the archive: errors before any work."""
    arms = expand_arms(opts.arms)
    baseline = opts.baseline
    if opts.policies and opts.replay.estimator == "montecarlo":
        raise SpecReplayError(
            "--policy: policies are replayed by the analytic and importance estimators "
            "(--estimator analytic, importance or auto)"
        )
    every = [*arms, *([baseline] if baseline else []), *policy_arms(arms, opts.policies)]
    replayed = list({a.canonical: a for a in every}.values())
    opened = OpenArchive(
        archive,
        buckets=opts.replay.buckets,
        logging_arm=opts.replay.logging_arm,
        ignore=opts.replay.ignore,
        max_dropped=opts.replay.max_dropped,
        by=opts.replay.by,
        columns=pass_columns(opts.replay.estimator, opts.replay.by),
    )
    return SweepPrepared(opened, arms, baseline, replayed)


def _swept(
    archive: Path,
    opts: SweepOptions,
    prep: SweepPrepared,
    progress: Progress | None,
    backend: Backend | None = None,
) -> Result:
    filters: dict[str, object] = {"families": None, "sample_requests": None}
    with backend_runner(backend, filters, inputs=[archive]) as run:
        result, requests = _swept_passes(archive, opts, prep, progress, run)
        entry = run.to_json()
    if entry is not None:
        result = dataclasses.replace(result, extra={**result.extra, "replay_backend": entry})
    return hash_result(result, IdHasher(requests) if opts.replay.hash_ids else None)


def _swept_passes(
    archive: Path,
    opts: SweepOptions,
    prep: SweepPrepared,
    progress: Progress | None,
    run: BackendRun,
) -> tuple[Result, list[str]]:
    """Run the one pass (shards replayed by ``run``); build the result and its ``--by`` cells."""
    ro = opts.replay
    estimator, companion = auto_passes(ro.estimator)
    depth = max([*opts.depths, *(a.depth for a in prep.replayed)])
    below = exclude_below(ro.short_rounds, prep.replayed)
    rows = archive_rows(archive, ro.ignore)
    with phase(progress, "replaying", rows) as advance:
        res = prep.opened.replay(
            prep.replayed,
            estimator=estimator,
            replicates=ro.replicates,
            seed=ro.seed,
            max_depth=depth,
            progress=advance,
            companion=companion,
            runner=run.runner,
            exclude_below=below,
            auto=ro.estimator == AUTO,
            capped_only=ro.short_rounds is ShortRounds.CAPPED,
        )
    if ro.estimator == AUTO:
        with phase(progress, "tail check (auto)"):
            res, _ = resolve_auto(res, prep.replayed)
    # one resample pass for the run: its comparisons and those of its --by groupings
    runs = [res, *([res.grouped(level) for level in BY_LEVELS] if ro.by is not None else [])]
    with phase(progress, "resampling"):
        plans = resampled_sweeps(
            [sweep_plan(r, prep.arms, opts, prep.baseline) for r in runs], opts, res.seed
        )
    with phase(progress, "comparisons and law tests"):
        result = sweep_result(res, prep.arms, opts, archive, prep.baseline, plans[0])
        if ro.by is not None:
            at = {level: i + 1 for i, level in enumerate(BY_LEVELS)}
            result = with_by_cells(
                result,
                ro.by,
                lambda level: sweep_result(
                    runs[at[level]], prep.arms, opts, archive, prep.baseline, plans[at[level]]
                ),
            )
    if opts.policies:
        with phase(progress, "policies: the held-out choice"):
            choice = policy_choice(res, prep.arms, opts)
        result = dataclasses.replace(result, extra={**result.extra, "policy_choice": choice})
    return result, res.requests


def _is_round_traces(path: Path, ignore: tuple[str, ...]) -> bool:
    """Whether ``path`` holds round traces (anything else is read as a position archive).

    A folder's entries are judged first, so a bad entry is reported as itself whichever kind
    the folder holds (not hidden behind a position-archive option error).
    """
    if path.is_dir():
        archive_listing(path, ignore)
    try:
        return detect_kind(path, ignore) == "round-traces"
    except SpecReplayError:  # not an observed-arm format: the position-archive reader decides
        return False


def _proxy_depths(archive: Path, opts: SweepOptions) -> ProxyDepths:
    """Check a proxy's options; return (top supported depth, lowest drafted, rounds unknown)."""
    if opts.replay.by is not None:
        raise SpecReplayError(
            f"--by {opts.replay.by!r}: round traces carry no grouping columns (position traces "
            "only)"
        )
    if opts.arms or opts.baseline:
        raise SpecReplayError(
            f"{archive}: round traces hold observed rounds, not archived laws: --arm and "
            "--baseline apply to position traces (the proxy needs neither)"
        )
    lowest, unknown = drafted_depths(archive, opts.replay.ignore)
    top = 0 if unknown or lowest is None else lowest
    return top, lowest, unknown


def _proxy(archive: Path, opts: SweepOptions, depths: ProxyDepths) -> Result:
    """Return the survival truncation proxy of a round-trace arm at every depth.

    See docs/methods.md#the-survival-truncation-proxy.
    """
    top, lowest, unknown = depths
    buckets = opts.replay.buckets
    supported = [d for d in opts.depths if d <= top]
    reference = top if top else max(opts.depths)
    by_depth = {
        d: read_arm(archive, buckets=buckets, truncate=d, ignore=opts.replay.ignore)
        for d in sorted({*supported, *([reference] if top else [])})
    }
    if not by_depth:
        raise SpecReplayError(
            f"{archive}: the proxy is valid only up to the depth every round drafted "
            + (f"({unknown} rounds record none)" if unknown else f"({lowest})")
            + f"; --depths {list(opts.depths)} lies beyond it"
        )
    result = proxy_result(by_depth, reference, (lowest, unknown), opts, archive)
    ids = {r for a in by_depth.values() for r in a.sums.get_column("request_id").to_list()}
    return hash_result(result, IdHasher(ids) if opts.replay.hash_ids else None)
