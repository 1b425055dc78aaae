"""The requalify pipeline: the replay pass and the typed cells it gives.

See docs/methods.md#requalification.

:func:`requalify_run` checks the options, opens the archive, replays every arm in one pass (the
``--by`` cells come from the same pass), builds the result and hashes ids;
:func:`requalify_replayed` builds a requalification from a replay already made (the demo's one
pass serves every chapter). The comparisons are planned first (:func:`requalify_plan`), then
resampled in one pass with those of the ``--by`` groupings (:func:`resampled_plan`: every figure
of a run from the same joint replicates), then made.

A requalification compares the candidate with the baseline (the verdict), with the reference (the
gain a budget uses: no verdict) and the logging arm's SIMULATED R with its MEASURED R (the
path-bias diagnostic: no verdict). :func:`merge_comparisons` lays them into one list of cells;
:func:`with_replay_figures` adds per-arm Monte Carlo errors, survival and off-path rates from the
replay sums, the archive's MEASURED survival beside them (and, for an importance replay, the tail
diagnostics: ESS and Pareto k̂);
:func:`with_support_nulls` nulls an arm's figures where it leaves the logging law's support;
under ``--estimator auto``, :func:`~specreplay.pipelines.importance.with_auto_diagnostics` makes a
verdict INCONCLUSIVE where the importance tails of its arms fail in its cell;
:func:`with_requalification` adds the verdict of each cell: **QUALIFIED** when the
candidate is EQUIVALENT and its law test passes, **NOT QUALIFIED** when it is DIFFERENT or its law
test fails, else INCONCLUSIVE. Each step returns new objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.pipelines.document import excluded_entries, ignored_inputs, input_files, new_result
from specreplay.pipelines.grouping import BY_LEVELS, with_by_cells
from specreplay.pipelines.importance import (
    auto_summary,
    cell_specs,
    importance_diagnostics,
    path_estimator,
    with_auto_diagnostics,
    with_estimators,
)
from specreplay.pipelines.options import RequalifyOptions
from specreplay.pipelines.resample import Pairing, compared, resampled
from specreplay.pipelines.shortrounds import (
    ShortRounds,
    exclude_below,
    short_rounds_assumptions,
    short_rounds_excluded,
    with_excluded_rounds,
)
from specreplay.replay.archive.sources import archive_rows
from specreplay.replay.backend import Backend, BackendRun, backend_runner
from specreplay.replay.choice import AUTO, auto_passes, pass_columns, resolve_auto
from specreplay.replay.engine import OpenArchive, ReplayResult
from specreplay.replay.paired import ArmSide
from specreplay.replay.scan import Progress, phase
from specreplay.results.from_stats import comparison_cell, law_tests
from specreplay.results.model import (
    ArmFigure,
    Cell,
    Delta,
    ImportanceDiagnostic,
    Label,
    Level,
    Offpath,
    Requalification,
    Result,
    Role,
    Survival,
)
from specreplay.results.privacy import IdHasher, hash_result
from specreplay.sim.arms import Arm
from specreplay.stats.arviz_bridge import ComparisonReplicates
from specreplay.stats.cells import Cell as CellSpec
from specreplay.stats.compare import Comparison

__all__ = [
    "ASSUMPTIONS",
    "NO_IMPORTANCE_PATH_BIAS",
    "Comparand",
    "Opened",
    "Planned",
    "RequalifyArms",
    "RequalifyOptions",
    "check_replayable",
    "comparands",
    "estimator_used",
    "measured_name",
    "merge_comparisons",
    "requalify_arms",
    "requalify_assumptions",
    "requalify_open",
    "requalify_opened",
    "requalify_plan",
    "requalify_replayed",
    "requalify_result",
    "requalify_run",
    "resampled_plan",
    "sample_requests",
    "with_replay_figures",
    "with_requalification",
    "with_support_nulls",
]

ASSUMPTIONS = [
    "Path assumption (SIMULATED figures): the archived positions are replayed as if their laws "
    "did not depend on what was drafted before; real drafts depend on their prefix, so this is "
    "biased even for the arm that produced the archive (see the path-bias diagnostic).",
    "A policy that changes depth also changes where later rounds start, which no replay of these "
    "archives can see.",
    "Common random numbers: every arm sees the same uniforms for the same (request, round, "
    "position, replicate), so paired deltas carry little Monte Carlo noise.",
    "Requests are the bootstrap unit (clusters); R is a ratio of sums pooled over rounds.",
]


@dataclass(frozen=True)
class Comparand:
    """One comparison to lay into the cells.

    Attributes
    ----------
    comparison : Comparison
        Its cells carry one delta each, of ``role``.
    role : Role
    no_verdict : str or None
        When set, the deltas carry no verdict and this is the reason (``verdict_null_reason``).
    labels : dict of str to Label
        Per-arm labels that differ from the comparison's (the MEASURED arm of the path bias).
    depth : int or None
        The fixed depth of arm b (``depth-vs-reference`` deltas of a sweep).
    """

    comparison: Comparison
    role: Role
    no_verdict: str | None = None
    labels: dict[str, Label] = dataclasses.field(default_factory=dict)
    depth: int | None = None

    def cells(self) -> tuple[Cell, ...]:
        """Return the comparison's cells with the role, verdicts and labels applied."""
        out = []
        for c in map(comparison_cell, self.comparison.cells):
            deltas = tuple(
                dataclasses.replace(d, role=self.role, depth=self.depth)
                if self.no_verdict is None
                else dataclasses.replace(
                    d,
                    role=self.role,
                    depth=self.depth,
                    verdict=None,
                    verdict_null_reason=self.no_verdict,
                    verdict_reason=None,  # no verdict: nothing for a rule to have decided
                )
                for d in c.deltas
            )
            arms = {
                k: dataclasses.replace(v, label=self.labels.get(k, v.label))
                for k, v in c.arms.items()
            }
            out.append(dataclasses.replace(c, deltas=deltas, arms=arms))
        return tuple(out)


def merge_comparisons(parts: Sequence[Comparand]) -> tuple[Cell, ...]:
    """Merge the cells of comparisons on the same requests, keyed by (level, family, bucket).

    Arms are united (a later comparison's figure of an arm replaces an earlier one, but an arm's
    interval stays the first comparison's that gave one, so that appending a comparison, e.g.
    the importance path bias, leaves the others' figures bit-identical) and deltas concatenated;
    the first comparison's cell order is kept.
    """
    merged: dict[tuple[Level, str | None, str | None], Cell] = {}
    for part in parts:
        for c in part.cells():
            key = (c.level, c.family, c.bucket)
            old = merged.get(key)
            if old is None:
                merged[key] = c
            else:
                merged[key] = dataclasses.replace(
                    old, arms=_unite_arms(old.arms, c.arms), deltas=old.deltas + c.deltas
                )
    return tuple(merged.values())


def _unite_arms(old: dict[str, ArmFigure], new: dict[str, ArmFigure]) -> dict[str, ArmFigure]:
    """Return ``old`` updated by ``new``, an arm keeping its interval from ``old`` if it has one."""
    out = dict(old)
    for k, v in new.items():
        was = old.get(k)
        if was is not None and was.lo is not None:
            v = dataclasses.replace(v, lo=was.lo, hi=was.hi, level=was.level)
        out[k] = v
    return out


def _survival(res: ReplayResult, arm: Arm, m: NDArray[np.bool_]) -> list[Survival]:
    s = res.sums[arm.canonical]
    surv = s.surv
    n = float(s.n[m].sum())
    out = []
    for j in range(1, arm.depth + 1):
        short = float(s.short[m, j - 1].sum())
        why = None if short == 0 else f"{int(short)} rounds record fewer than {j} positions"
        if n == 0:
            why = "no rounds in this cell"
        value = None if why else float(surv[m, j - 1].sum()) / n
        out.append(Survival(arm.canonical, j, value, Label.SIMULATED, why))
    return out


def measured_name(log: Arm) -> str:
    """Return the name of the archive's MEASURED figures in a requalification (``ARM (MEASURED)``).

    The path-bias diagnostic's MEASURED side and the MEASURED survival carry it, ``log`` being
    the archive's logging arm.
    """
    return f"{log.canonical} (MEASURED)"


_SAMPLED = "per-position MEASURED counts cover every request, not the --sample-requests sample"


def _measured_survival(res: ReplayResult, name: str, spec: CellSpec, depth: int) -> list[Survival]:
    """Return the archive's MEASURED P(A ≥ j), j = 1..``depth``, in one cell.

    docs/methods.md#survival-by-position: S_j = #(rounds with A ≥ j) / #rounds, pooled counts
    over the cell's families and buckets, A the round's leading accepted positions; the rounds are
    those the MEASURED R counts (``--short-rounds exclude``/``capped`` leave theirs out of both).
    As for the SIMULATED arms (:func:`_survival`), S_j is null where a round of the cell records
    fewer than j positions, and so past the most positions a round of the archive records.

    The per-position counts (``MeasuredArchive.survival_hits``) are kept per family and bucket,
    over every request read: the families a selection leaves out are left out here, but a
    ``--sample-requests`` sample cannot be, and its cells' MEASURED survival is null. ``rounds``:
    the rounds counted.
    """
    m = res.measured
    n = int(m.sums.n[spec.mask(m.sums.family, m.sums.bucket)].sum())
    kept = set(np.unique(res.request_family[res.selected]).tolist())
    fams = np.array(
        [f for f in spec.fam_idx if f in kept and f < m.survival_hits.shape[0]], np.int64
    )
    at = np.ix_(fams, np.array(spec.bucket_idx, np.int64))
    recorded = int(m.survival_hits.shape[2]) - 1  # the most positions a round of the archive holds
    hits, cover = m.survival_hits[at].sum(axis=(0, 1)), m.survival_rounds[at].sum(axis=(0, 1))
    out = []
    for j in range(1, depth + 1):
        why = None
        if n == 0:
            why = "no rounds in this cell"
        elif int(cover[1]) != n:  # n > 0: the counts hold position 1
            why = _SAMPLED
        elif j > recorded:
            why = f"the archive records at most {recorded} positions per round"
        elif int(cover[j]) < n:
            why = f"{n - int(cover[j])} rounds record fewer than {j} positions"
        value = None if why else float(hits[j]) / n
        out.append(Survival(name, j, value, Label.MEASURED, why, rounds=n))
    return out


def _offpath(res: ReplayResult, arm: Arm, m: NDArray[np.bool_]) -> Offpath:
    """Return the off-path rates of the path-assumption replay.

    For an importance run, the path-assumption estimator's replayed beside it: how far that
    replay strays from the archived path is what the path-bias diagnostic weighs.
    """
    path = path_estimator(res) if res.estimator == "importance" else None
    used = res.estimator if path is None else path
    off = res.replays[used].arms[arm.canonical].offpath[m].sum(axis=0)
    why = None if "drafted_id" in res.columns else "archive has no drafted_id column"
    if why is None and used == "importance":
        why = "the importance estimator follows the archived tokens: no off-path draw"
    if why is None and (off[0] == 0 or off[2] == 0):
        why = "no accepted or evaluated position in this cell"
    return Offpath(
        arm=arm.canonical,
        accepted_offpath_share=None if why else float(off[1] / off[0]),
        evaluated_offpath_share=None if why else float(off[3] / off[2]),
        label=Label.SIMULATED,
        null_reason=why,
    )


def with_replay_figures(
    cells: Sequence[Cell], res: ReplayResult, arms: Sequence[Arm], measured: str | None = None
) -> tuple[Cell, ...]:
    """Add each arm's MCSE and estimator, SIMULATED survival and off-path rates to the cells.

    ``measured``: the name of the archive's MEASURED figures (:func:`measured_name`); given, the
    cells also get the archive's MEASURED survival at positions 1 to the deepest arm's depth
    (:func:`_measured_survival`), after the arms'. An importance replay also adds each arm's
    tail diagnostics (ESS, Pareto k̂) per depth.
    """
    surv: list[list[Survival]] = [[] for _ in cells]
    offs: list[list[Offpath]] = [[] for _ in cells]
    diag: list[list[ImportanceDiagnostic]] = [[] for _ in cells]
    figures = [dict(c.arms) for c in cells]
    specs = cell_specs(res, cells)
    for arm in arms:
        s = res.sums[arm.canonical]
        for i, spec in enumerate(specs):
            m = spec.mask(s.family, s.bucket)
            entry = figures[i].get(arm.canonical)
            if entry is not None:
                mcse = res.mcse(arm, m) if entry.R is not None else None
                figures[i][arm.canonical] = dataclasses.replace(
                    entry, mcse=mcse, estimator=res.estimator
                )
            surv[i] += _survival(res, arm, m)
            offs[i].append(_offpath(res, arm, m))
            diag[i] += importance_diagnostics(res, arm, m, spec.fam_idx, spec.bucket_idx)
    if measured is not None:
        deepest = max(a.depth for a in arms)
        for i, spec in enumerate(specs):
            surv[i] += _measured_survival(res, measured, spec, deepest)
    return tuple(
        dataclasses.replace(
            c,
            arms=figures[i],
            survival=c.survival + tuple(surv[i]),
            offpath=tuple(offs[i]),
            importance=c.importance + tuple(diag[i]),
        )
        for i, c in enumerate(cells)
    )


_KEEP_IN_NULL_DELTA = frozenset(
    {"a", "b", "role", "method", "level", "adjusted", "n_boot", "label", "depth"}
)


def _null_delta(d: Delta, why: str) -> Delta:
    """Return ``d`` with every figure null, its verdict null and ``why`` as both reasons."""
    nulls: dict[str, Any] = {
        f.name: None for f in dataclasses.fields(Delta) if f.name not in _KEEP_IN_NULL_DELTA
    }
    nulls |= {
        "null_reason": why,
        "verdict_null_reason": why,
        "requests_for_margin_null_reason": why,
    }
    return dataclasses.replace(d, **nulls)


def _unlogged_reasons(res: ReplayResult, spec: CellSpec) -> dict[str, str]:
    """Per arm with rows outside the logging law's support in the cell, why its figures are null.

    The reason counts the position rows and the requests of the cell that hold them
    (:meth:`~specreplay.replay.engine.ReplayResult.unlogged_reason`).
    """
    out = {}
    for arm in res.arms:
        s = res.sums.get(arm.canonical)
        if s is None or arm.canonical in out:
            continue
        why = res.unlogged_reason(arm, spec.mask(s.family, s.bucket))
        if why is not None:
            out[arm.canonical] = why
    return out


def with_support_nulls(cells: Sequence[Cell], res: ReplayResult) -> tuple[Cell, ...]:
    """Null, per cell, the figures of an arm with rows outside the logging law's support.

    Importance estimator (docs/methods.md#the-importance-estimator-and-its-weight): where an arm's
    requests in a cell hold position rows with a candidate the arm can accept but the logging law
    never drafts, its R (and MCSE), its survival and every delta it enters (verdict included) are
    null, each with the reason and the count; the cell's requalification then follows its null
    verdict.

    The rows are counted per request (``ReplayResult.unlogged``): a request of a bucket cell
    counts with all its rows, in whichever bucket.
    """
    out = []
    for c, spec in zip(cells, cell_specs(res, cells), strict=True):
        why = _unlogged_reasons(res, spec)
        if not why:
            out.append(c)
            continue
        arms = {
            k: dataclasses.replace(
                v, R=None, mcse=None, lo=None, hi=None, level=None, null_reason=why[k]
            )
            if k in why
            else v
            for k, v in c.arms.items()
        }
        deltas = tuple(
            _null_delta(d, why.get(d.a) or why[d.b]) if d.a in why or d.b in why else d
            for d in c.deltas
        )
        surv = tuple(
            dataclasses.replace(v, value=None, null_reason=why[v.arm]) if v.arm in why else v
            for v in c.survival
        )
        out.append(dataclasses.replace(c, arms=arms, deltas=deltas, survival=surv))
    return tuple(out)


def requalification(cell: Cell, law_pass: bool | None) -> Requalification:
    """Return the requalification verdict of one cell (see the module docstring).

    An INCONCLUSIVE Δ verdict (``--estimator auto``'s tail rule among others) gives an
    INCONCLUSIVE requalification whatever the law test says, unless the law test failed.
    """
    d = cell.delta(Role.CANDIDATE_VS_BASELINE)
    if d is None or d.verdict is None:
        why = d.null_reason if d is not None else "no candidate-vs-baseline delta"
        return Requalification(None, None, Label.SIMULATED, why)
    if d.verdict == "DIFFERENT" or law_pass is False:
        verdict = "NOT QUALIFIED"
    elif d.verdict == "EQUIVALENT" and law_pass:
        verdict = "QUALIFIED"
    else:
        verdict = "INCONCLUSIVE"
    law = {True: "passed", False: "FAILED", None: "not run (no testable position)"}[law_pass]
    return Requalification(verdict, f"Δ verdict {d.verdict}; law test {law}", Label.SIMULATED, None)


def with_requalification(cells: Sequence[Cell], law_pass: bool | None) -> tuple[Cell, ...]:
    """Add the requalification verdict to every cell."""
    return tuple(
        dataclasses.replace(c, requalification=requalification(c, law_pass)) for c in cells
    )


@dataclass(frozen=True)
class RequalifyArms:
    """The arms of a requalification by role (``all``: every distinct arm replayed)."""

    base: Arm
    cand: Arm
    ref: Arm | None
    log: Arm | None
    all: dict[str, Arm]


def check_replayable(res: ReplayResult, arms: RequalifyArms) -> None:
    """Raise when an arm cannot be replayed on some rows, with the count.

    Top-K larger than the candidates, or no candidate to draft. Rows where the arm can accept a
    candidate outside the logging law's support (importance estimator) are no error: the cells
    holding them are null (:func:`with_support_nulls`).
    """
    for a in arms.all.values():
        if res.flagged_rows[a.canonical]:
            raise SpecReplayError(
                f"{a.canonical}: top-K larger than the archived candidates in "
                f"{res.flagged_rows[a.canonical]} position rows (never clamped silently)"
            )
        if res.unsupported_rows[a.canonical]:
            raise SpecReplayError(
                f"{a.canonical}: {res.unsupported_rows[a.canonical]} position rows have no "
                "candidate with a finite draft log-probability: nothing to draft"
            )


@dataclass(frozen=True)
class Planned:
    """One comparison of a requalification before it is made (its :class:`Comparand` to be).

    Attributes
    ----------
    pairing : Pairing
        The paired sums of its two arms (with the run's replicates once :func:`resampled_plan`
        drew them).
    role, no_verdict, labels
        As :class:`Comparand`'s.
    """

    pairing: Pairing
    role: Role
    no_verdict: str | None = None
    labels: dict[str, Label] = dataclasses.field(default_factory=dict)


def requalify_plan(res: ReplayResult, arms: RequalifyArms) -> list[Planned]:
    """Return the comparisons of a requalification: verdict, reference gain, path bias.

    The candidate against the baseline comes first: its requests and families are the units and
    strata of the run's one resample pass (:func:`resampled_plan`).
    """
    data = {k: res.side(a) for k, a in arms.all.items()}

    def pair(a: ArmSide, b: ArmSide, arm_a: Arm | None, arm_b: Arm) -> Pairing:
        side_a = (arm_a, arm_a.depth) if arm_a is not None else None
        support = res.support(side_a, (arm_b, arm_b.depth))
        # one arm against itself, from one replay: one computation by construction
        same = arm_a == arm_b and a.name == b.name
        return Pairing(res.paired(a, b), a.name, b.name, support, same=same)

    c = arms.cand
    plan = [
        Planned(
            pair(data[arms.base.canonical], data[c.canonical], arms.base, c),
            Role.CANDIDATE_VS_BASELINE,
        )
    ]
    if arms.ref is not None:
        why = "reference comparison (the gain a budget uses): no verdict"
        plan.append(
            Planned(
                pair(data[arms.ref.canonical], data[c.canonical], arms.ref, c),
                Role.CANDIDATE_VS_REFERENCE,
                why,
            )
        )
    if arms.log is not None and "accepted" in res.columns:
        meas = res.measured_side(measured_name(arms.log))
        why = "diagnostic: SIMULATED − MEASURED R of the logging arm"
        plan.append(
            Planned(
                pair(meas, data[arms.log.canonical], None, arms.log),
                Role.PATH_BIAS,
                why,
                {meas.name: Label.MEASURED},
            )
        )
    return plan + _importance_path_bias(res, arms, pair)


def resampled_plan(
    plans: Sequence[Sequence[Planned]], opts: RequalifyOptions, seed: int
) -> list[list[Planned]]:
    """Return ``plans`` with their replicates from one resample pass over all of them.

    ``plans[0][0]`` (the candidate against the baseline of the run itself, before any ``--by``
    grouping) gives the units and strata (:mod:`specreplay.pipelines.resample`).
    """
    flat = resampled([p.pairing for plan in plans for p in plan], opts.boot, seed)
    out: list[list[Planned]] = []
    at = 0
    for plan in plans:
        out.append([dataclasses.replace(p, pairing=flat[at + i]) for i, p in enumerate(plan)])
        at += len(plan)
    return out


def comparands(
    res: ReplayResult,
    arms: RequalifyArms,
    opts: RequalifyOptions,
    plan: Sequence[Planned] | None = None,
) -> list[Comparand]:
    """Return the comparisons of a requalification, made (``plan``: planned and resampled).

    Without ``plan`` they are planned and resampled here, in one pass of their own.
    """
    if plan is None:
        (plan,) = resampled_plan([requalify_plan(res, arms)], opts, res.seed)
    return [
        Comparand(
            compared(p.pairing, opts.boot, res.seed, label="SIMULATED"),
            p.role,
            p.no_verdict,
            p.labels,
        )
        for p in plan
    ]


NO_IMPORTANCE_PATH_BIAS = (
    "No path-bias-importance diagnostic (analytic − importance R per arm): the archive lacks "
    "drafted_id or a logging law (emitted_q or a logging arm)."
)


def _importance_path_bias(res: ReplayResult, arms: RequalifyArms, pair: Any) -> list[Planned]:
    """Per arm, Δ = path-assumption R − importance R (role path-bias-importance, no verdict).

    The importance replay is named ``ARM (importance)`` unless it is the run's own estimator
    (then the path-assumption replay is ``ARM (analytic)``). Arms whose importance replay
    has rows outside the logging law's support (selected requests) are left out.
    """
    path = path_estimator(res)
    if path is None:
        return []
    imp = "importance"
    why = f"diagnostic: {path} − importance R of the arm"
    unlogged = res.replays[imp].unlogged
    plan = []
    for c, arm in arms.all.items():
        if int(unlogged[c][res.selected].sum()):
            continue
        a = res.side(arm, estimator=imp, name=None if res.estimator == imp else f"{c} ({imp})")
        b = res.side(arm, estimator=path, name=None if res.estimator == path else f"{c} ({path})")
        plan.append(Planned(pair(a, b, arm, arm), Role.PATH_BIAS_IMPORTANCE, why))
    return plan


def estimator_used(res: ReplayResult, cells: Sequence[Cell] = ()) -> dict[str, str]:
    """Return ``options.estimator_used`` and ``options.estimator_reason`` of a replay.

    An ``auto`` run that chose importance adds what its per-cell tail rule did in ``cells``
    (:func:`~specreplay.pipelines.importance.auto_summary`).
    """
    reason = res.estimator_reason or f"named by --estimator {res.estimator}"
    if res.estimator_reason is not None and res.estimator == "importance" and cells:
        reason += "; " + auto_summary(cells)
    return {"estimator_used": res.estimator, "estimator_reason": reason}


def requalify_assumptions(res: ReplayResult) -> list[str]:
    """Return the assumptions of a requalification (a line when no importance path bias ran)."""
    return ASSUMPTIONS + ([] if path_estimator(res) is not None else [NO_IMPORTANCE_PATH_BIAS])


def requalify_result(
    res: ReplayResult,
    arms: RequalifyArms,
    opts: RequalifyOptions,
    archive: Path,
    plan: Sequence[Planned] | None = None,
) -> Result:
    """Return the typed result of a requalification from one replay of its arms.

    The law tests run on the archive positions the replay pass sampled by hash
    (``replay_archive(..., law_positions=k)``), so they need no second read. ``plan``: the
    comparisons planned and resampled with the rest of the run (:func:`resampled_plan`); else
    resampled here.
    """
    from specreplay.replay.lawcases import run_cases, sample_cases

    parts = comparands(res, arms, opts, plan)
    cells = merge_comparisons(parts)
    measured = measured_name(arms.log) if arms.log and "accepted" in res.columns else None
    cells = with_replay_figures(cells, res, list(arms.all.values()), measured)
    cells = with_support_nulls(cells, res)
    if opts.replay.estimator == AUTO:
        cells = with_auto_diagnostics(cells, res, list(arms.all.values()))
    cells = with_estimators(with_excluded_rounds(cells, res), res)
    cases, skipped = sample_cases(res.law_sample, [arms.cand, arms.base], res.requests)
    law = law_tests(run_cases(cases, skipped, seed=res.seed))
    ran = [t.passed for t in law if t.arm == arms.cand.canonical and t.passed is not None]
    cells = with_requalification(cells, all(ran) if ran else None)
    return new_result(
        command="requalify",
        seed=res.seed,
        inputs=input_files([(f.path, f.rows) for f in res.files]),
        options={
            **opts.to_json(archive),
            "replicates": res.replicates,
            **estimator_used(res, cells),
        },
        assumptions=requalify_assumptions(res)
        + short_rounds_assumptions(opts.replay.short_rounds, res.exclude_below),
        excluded=excluded_entries([*res.excluded, *short_rounds_excluded(res)]),
        arms=list(arms.all),
        cells=cells,
        law_tests=law,
        requalification=cells[0].requalification,
        logging_arm=arms.log.canonical if arms.log else None,
        path_bias=cells[0].delta(Role.PATH_BIAS),
        columns_not_read=res.unread or None,
        inputs_ignored=ignored_inputs((e.path, e.glob) for e in res.ignored),
        replicates=ComparisonReplicates(
            next(p.comparison for p in parts if p.role == Role.CANDIDATE_VS_BASELINE)
        ),
    )


# -------------------------------------------------------------------------------------------------
# The run: options checked, archive opened, one pass (and the ``--by`` cells), ids hashed

Opened = tuple[OpenArchive, RequalifyArms]
"""A requalification's checked inputs: the archive opened (its first batch read) and its arms."""


def sample_requests(ids: list[str], n: int, seed: int) -> set[str]:
    """Choose ``n`` request ids deterministically: the n smallest seeded hashes of their keys."""
    from specreplay.sim.rng import STREAM_REQUALIFY_SAMPLE, request_key, uniform_py

    ranked = sorted(
        ids,
        key=lambda r: (uniform_py(seed, int(request_key(r)), 0, 0, STREAM_REQUALIFY_SAMPLE), r),
    )
    return set(ranked[:n])


def requalify_arms(base: Arm, cand: Arm, ref: Arm | None, log: Arm | None) -> RequalifyArms:
    """Return the arms of a requalification by role (``log``: the archive's logging arm).

    ``all`` holds every distinct arm, in the order baseline, candidate, reference, logging arm.

    Raises
    ------
    SpecReplayError
        A candidate that is the baseline.
    """
    if base.canonical == cand.canonical:
        raise SpecReplayError(f"baseline and candidate are the same arm ({base.canonical})")
    every: dict[str, Arm] = {}
    for a in (base, cand, ref, log):
        if a is not None:
            every.setdefault(a.canonical, a)
    return RequalifyArms(base, cand, ref, log, every)


def requalify_replayed(
    res: ReplayResult, arms: RequalifyArms, opts: RequalifyOptions, archive: Path
) -> Result:
    """Return the requalification of ``arms`` from a replay that holds them (checked first)."""
    check_replayable(res, arms)
    return requalify_result(res, arms, opts, archive)


def requalify_open(archive: Path, opts: RequalifyOptions) -> Opened:
    """Check the options and open the archive (its first batch read): errors before any work."""
    if opts.replay.by is not None and opts.families is not None:
        raise SpecReplayError("--by and --families: give one of them (--by cells span families)")
    # the first batch is read here, through the validating reader: the logging arm is known
    # before the pass, which then goes on from the same reader (one read of every file)
    opened = OpenArchive(
        archive,
        buckets=opts.replay.buckets,
        logging_arm=opts.replay.logging_arm,
        by=opts.replay.by,
        columns=pass_columns(opts.replay.estimator, opts.replay.by),
        ignore=opts.replay.ignore,
        max_dropped=opts.replay.max_dropped,
    )
    # the option, parsed once; else the archive's column, parsed where the reader read it
    log = opened.parsed_logging_arm
    return opened, requalify_arms(opts.baseline, opts.candidate, opts.reference, log)


def requalify_run(
    archive: Path,
    opts: RequalifyOptions,
    *,
    progress: Progress | None = None,
    backend: Backend | None = None,
) -> Result:
    """Replay ``archive`` under the arms of ``opts``, requalify the candidate; return the result.

    ``backend``: who replays the shards (Dask, the per-shard cache; default this process).
    """
    opened = requalify_open(archive, opts)
    return requalify_opened(opened, archive, opts, progress=progress, backend=backend)


def requalify_opened(
    opened: Opened,
    archive: Path,
    opts: RequalifyOptions,
    *,
    progress: Progress | None = None,
    backend: Backend | None = None,
) -> Result:
    """Run the pass, the ``--by`` cells and ``--hash-ids`` on what :func:`requalify_open` opened.

    The command opens the archive (every option checked) before it makes its output folder.
    """
    filters = {
        "families": sorted(opts.families) if opts.families else None,
        "sample_requests": opts.sample_requests,
    }
    with backend_runner(backend, filters, inputs=[archive]) as run:
        result, res = _passes(opened, archive, opts, progress, run)
        entry = run.to_json()
    if entry is not None:
        result = dataclasses.replace(result, extra={**result.extra, "replay_backend": entry})
    return hash_result(result, IdHasher(res.requests) if opts.replay.hash_ids else None)


def _passes(
    opened: Opened,
    archive: Path,
    opts: RequalifyOptions,
    progress: Progress | None,
    run: BackendRun,
) -> tuple[Result, ReplayResult]:
    """Run the one pass (shards replayed by ``run``); build the result and its ``--by`` cells."""
    reader, arms = opened
    rows = archive_rows(archive, opts.replay.ignore)
    estimator, companion = auto_passes(opts.replay.estimator)
    with phase(progress, "replaying", rows) as advance:
        res = _replay(reader, arms, opts, estimator, companion, advance, run)
    if opts.replay.estimator == AUTO:
        with phase(progress, "tail check (auto)"):
            res, _ = resolve_auto(res, list(arms.all.values()))
    by = opts.replay.by
    # one resample pass for the run: its comparisons and those of its --by groupings
    runs = [res, *([res.grouped(level) for level in BY_LEVELS] if by is not None else [])]
    with phase(progress, "resampling"):
        plans = resampled_plan([requalify_plan(r, arms) for r in runs], opts, res.seed)
    with phase(progress, "comparisons and law tests"):
        result = requalify_result(res, arms, opts, archive, plans[0])
        if by is not None:
            at = {level: i + 1 for i, level in enumerate(BY_LEVELS)}
            result = with_by_cells(
                result,
                by,
                lambda lv: requalify_result(runs[at[lv]], arms, opts, archive, plans[at[lv]]),
            )
    return result, res


def _replay(
    opened: OpenArchive,
    arms: RequalifyArms,
    opts: RequalifyOptions,
    estimator: str,
    companion: str | None,
    advance: Callable[[int], None] | None,
    run: BackendRun,
) -> ReplayResult:
    """Replay the arms once and select requests (``--families``, ``--sample-requests``)."""
    res = opened.replay(
        list(arms.all.values()),
        estimator=estimator,
        replicates=opts.replay.replicates,
        seed=opts.replay.seed,
        law_positions=opts.law_positions,
        progress=advance,
        companion=companion,
        runner=run.runner,
        exclude_below=exclude_below(opts.replay.short_rounds, arms.all.values()),
        auto=opts.replay.estimator == AUTO,
        capped_only=opts.replay.short_rounds is ShortRounds.CAPPED,
    )
    n = opts.sample_requests
    wanted = sample_requests(res.requests, n, opts.replay.seed) if n else None
    if opts.families is not None or wanted is not None:
        res = res.select(set(opts.families) if opts.families else None, wanted)
    check_replayable(res, arms)
    return res
