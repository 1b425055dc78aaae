"""The counterfactual fixed-depth sweep (SPEC §3.5): R at every depth per arm and cell, one pass.

Per arm, its own ``@DEPTH`` is the **reference depth**. For every depth d of ``--depths`` the
archive's replay at depth d is compared with the replay at the reference depth on the same
requests (paired bootstrap, :func:`specreplay.stats.compare.compare`): the delta (role
``depth-vs-reference``, its ``depth`` field d, no verdict) carries the interval of R(d) − R(ref),
and ``cells[].depths[]`` the R(d) itself with its own studentized interval. Depths past the
positions the archive records are UNSUPPORTED (null, with the reason), never extrapolated: in a
cell holding a round shorter than d, R(d) is null with the count and the first such round, and
the delta is null where a round is shorter than d or than the reference depth (SPEC §2.1;
``--short-rounds exclude`` leaves rounds shorter than the deepest arm out instead,
:mod:`specreplay.results.shortrounds`).

Every comparison of one sweep uses the same seed on the same requests, so replicate b resamples
the same requests at every depth: with a **cost model** (milliseconds per round at each depth,
:class:`CostModel`) tokens/s = 1000·R(d)/ms(d) per depth (ESTIMATED), the best depth per cell and
arm, and ``p_best``, the share of replicates in which each depth has the most tokens/s (rank
stability), come from those joint replicates.

Decisions: the depth-vs-reference deltas carry no verdict (a sweep is a counterfactual check,
not a requalification); cells keep one arm figure per arm (R at its reference depth). Under
``--estimator auto`` the bits sweep's deltas follow the per-cell tail rule
(:func:`~specreplay.results.importance.with_auto_diagnostics`): a pooled INCONCLUSIVE stops the
fixed-sequence walk like any verdict other than EQUIVALENT.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specreplay.errors import SpecReplayError
from specreplay.replay.choice import AUTO
from specreplay.replay.engine import ReplayResult
from specreplay.results.document import excluded_entries, ignored_inputs, input_files, new_result
from specreplay.results.importance import (
    comparison_failure,
    with_auto_diagnostics,
    with_estimators,
)
from specreplay.results.model import Cell, DepthFigure, Label, Result, Role
from specreplay.results.requalification import Comparand, estimator_used, merge_comparisons
from specreplay.results.shortrounds import (
    short_rounds_assumptions,
    short_rounds_excluded,
    with_excluded_rounds,
)
from specreplay.sim.arms import Arm
from specreplay.stats.armdata import ArmData
from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets
from specreplay.stats.cells import Cell as CellSpec
from specreplay.stats.compare import Comparison, compare, parse_margin
from specreplay.stats.pairing import pair_arms
from specreplay.stats.support import ShortRounds

__all__ = [
    "CostModel",
    "SweepOptions",
    "expand_braces",
    "parse_depths",
    "proxy_result",
    "sweep_result",
]

NO_VERDICT = "depth sweep: Δ against the arm's own depth (a counterfactual check, no verdict)"


def expand_braces(text: str) -> list[str]:
    """Expand ``{a,b,…}`` groups (cartesian product, left to right).

    Examples
    --------
    >>> expand_braces("top32:t0.7:dyadic{8,16}@5")
    ['top32:t0.7:dyadic8@5', 'top32:t0.7:dyadic16@5']
    """
    m = re.search(r"\{([^{}]*)\}", text)
    if m is None:
        if "{" in text or "}" in text:
            raise SpecReplayError(f"--arm {text!r}: unbalanced brace")
        return [text]
    parts = m.group(1).split(",")
    if any(not p for p in parts):
        raise SpecReplayError(f"--arm {text!r}: empty alternative in {{{m.group(1)}}}")
    out: list[str] = []
    for p in parts:
        out += expand_braces(text[: m.start()] + p + text[m.end() :])
    return out


def _cost_table(text: str) -> dict[int, float]:
    """Read ``--cost FILE.toml``: ``ms_per_round`` maps depths ≥ 1 to finite ms > 0."""
    try:
        doc = tomllib.loads(Path(text).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise SpecReplayError(f"--cost {text}: not valid UTF-8") from None
    except (OSError, tomllib.TOMLDecodeError, ValueError) as e:
        raise SpecReplayError(f"--cost {text}: {e}") from None
    raw = doc.get("ms_per_round")
    if not isinstance(raw, dict) or not raw:
        raise SpecReplayError(f"--cost {text}: expected a table ms_per_round = {{1 = 2.1, …}}")
    table: dict[int, float] = {}
    for k, v in raw.items():
        depth_ok = k.isdigit() and k.isascii() and len(k) <= 3 and 1 <= int(k) <= 127
        ms_ok = type(v) in (int, float) and math.isfinite(v) and v > 0
        if not (depth_ok and ms_ok):
            raise SpecReplayError(
                f"--cost {text}: ms_per_round.{k} = {v!r}: depth 1..127 → finite ms > 0"
            )
        table[int(k)] = float(v)
    return table


def _small_int(digits: str) -> int:
    """Return ASCII ``digits`` as an int, 10⁵ for more than 4 significant digits.

    Such a number is out of range anyway, and ``int()`` refuses more than 4,300 digits.
    """
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 4 else 10**5


def parse_depths(text: str) -> tuple[int, ...]:
    """Parse ``1..8`` or ``1,2,4`` (or a mix, ``1..3,6``) into sorted distinct depths ≥ 1."""
    depths: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*([0-9]+)\s*(?:\.\.\s*([0-9]+)\s*)?", part)
        if m is None:
            raise SpecReplayError(f"--depths {text!r}: expected 1..8 or 1,2,4")
        lo = _small_int(m.group(1))
        hi = _small_int(m.group(2)) if m.group(2) else lo
        if lo < 1 or hi < lo or hi > 127:
            raise SpecReplayError(f"--depths {text!r}: depths are 1..127, low to high")
        depths.update(range(lo, hi + 1))
    return tuple(sorted(depths))


@dataclass(frozen=True)
class CostModel:
    """Milliseconds per round at each depth: linear T0 + C·d, or a table (TOML)."""

    text: str
    t0: float | None = None
    slope: float | None = None
    table: dict[int, float] | None = None

    @staticmethod
    def parse(text: str) -> CostModel:
        """``linear:T0:C`` or a TOML file with ``ms_per_round = {1 = 2.1, 2 = 2.4, …}``."""
        if text.startswith("linear:"):
            try:
                t0, c = (float(x) for x in text.split(":")[1:])
            except ValueError:
                raise SpecReplayError(f"--cost {text!r}: expected linear:T0:C (ms)") from None
            if not (math.isfinite(t0 + c) and t0 >= 0 and c >= 0 and t0 + c > 0):
                raise SpecReplayError(f"--cost {text!r}: T0 and C are finite ms ≥ 0, not both 0")
            return CostModel(text, t0=t0, slope=c)
        return CostModel(text, table=_cost_table(text))

    def ms(self, depth: int) -> float | None:
        """Milliseconds per round at ``depth`` (None where the table has no entry)."""
        if self.table is not None:
            return self.table.get(depth)
        assert self.t0 is not None and self.slope is not None
        return self.t0 + self.slope * depth


@dataclass(frozen=True)
class SweepOptions:
    """Every option of a sweep (``specreplay sweep``); ``ignore``: ``--ignore`` globs."""

    arms: tuple[str, ...]
    depths: tuple[int, ...] = tuple(range(1, 9))
    baseline: str | None = None
    margin: str = "0.5%"
    estimator: str = "auto"
    replicates: int = 16
    cost: str | None = None
    n_boot: int = 2000
    seed: int = 0
    stratify: str = "family"
    level: float = 0.95
    min_requests: int = 10
    buckets: str = DEFAULT_BUCKETS
    logging_arm: str | None = None
    ignore: tuple[str, ...] = ()
    by: str | None = None
    hash_ids: bool = False
    short_rounds: ShortRounds = ShortRounds.NULL

    def to_json(self, archive: Path) -> dict[str, Any]:
        """Return the ``options`` entry of results.json."""
        return {
            "short_rounds": self.short_rounds.value,
            "archive": str(archive), "arms": list(self.arms), "depths": list(self.depths),
            "baseline": self.baseline, "margin": parse_margin(self.margin).to_json(),
            "estimator": self.estimator, "replicates": self.replicates, "cost": self.cost,
            "n_boot": self.n_boot, "stratify": self.stratify, "level": self.level,
            "min_requests": self.min_requests, "buckets": Buckets.parse(self.buckets).spec,
            "logging_arm": self.logging_arm, "by": self.by, "hash_ids": self.hash_ids,
        }  # fmt: skip


def _depth_name(arm: Arm, depth: int) -> str:
    return f"{arm.canonical.rsplit('@', 1)[0]}@{depth}"


def _comparisons(res: ReplayResult, arm: Arm, opts: SweepOptions) -> dict[int, Comparison | str]:
    """Per depth, the paired comparison with the reference depth, or why it is UNSUPPORTED."""
    ref = res.side(arm)
    out: dict[int, Comparison | str] = {}
    for d in opts.depths:
        why = res.depth_problem(arm, d)
        if why is not None:
            out[d] = why
            continue
        name = _depth_name(arm, d) + (" (reference depth)" if d == arm.depth else "")
        other = res.side(arm, depth=d, name=name)
        ps = res.paired(ref, other)
        out[d] = compare(ps, arm_a=ref.name, arm_b=other.name, n_boot=opts.n_boot, seed=res.seed,
                         stratify=opts.stratify, level=opts.level, margin=parse_margin("0.5%"),
                         min_requests=opts.min_requests, label="SIMULATED",
                         support=res.support((arm, arm.depth), (arm, d)))  # fmt: skip
    return out


def _depth_figures(
    name: str,
    comps: dict[int, Comparison | str],
    i: int,
    cost: CostModel | None,
    level: float,
    label: Label = Label.SIMULATED,
) -> tuple[list[DepthFigure], int | None]:
    """Return the ``depths[]`` entries of one arm in cell i and its best depth (cost model)."""
    figs: list[DepthFigure] = []
    tps_reps: dict[int, np.ndarray] = {}
    for d, comp in comps.items():
        if isinstance(comp, str):
            figs.append(DepthFigure(name, d, None, None, None, label, False, comp))
            continue
        test = comp.rb_tests[i] if comp.rb_tests else None
        fig_b = comp.cells[i]["arms"][comp.cells[i]["deltas"][0]["b"]]
        r_b = fig_b["R"]
        if test is None or r_b is None:
            # a short round in the cell (SPEC §2.1): this depth is UNSUPPORTED here
            why = fig_b["null_reason"] or "no rounds in this cell"
            short = why != "no rounds in this cell"
            figs.append(DepthFigure(name, d, None, None, None, label, not short, why))
            continue
        lo, hi = test.interval(level)
        if math.isnan(lo) or math.isnan(hi):  # no depth to bound it (round traces): no interval
            figs.append(DepthFigure(name, d, float(r_b), None, None, label, True, None))
            continue
        fig = DepthFigure(name, d, float(r_b), lo, hi, label, True, None)
        ms = cost.ms(d) if cost is not None else None
        if ms is not None:
            fig = dataclasses.replace(
                fig, tokens_per_s=1000.0 * r_b / ms, tokens_per_s_lo=1000.0 * lo / ms,
                tokens_per_s_hi=1000.0 * hi / ms,
            )  # fmt: skip
            assert comp.rb_reps is not None
            tps_reps[d] = 1000.0 * comp.rb_reps[:, i] / ms
        figs.append(fig)
    if not tps_reps:
        return figs, None
    ds = sorted(tps_reps)
    mat = np.stack([tps_reps[d] for d in ds], axis=1)
    ok = np.all(np.isfinite(mat), axis=1)
    wins = np.bincount(np.argmax(mat[ok], axis=1), minlength=len(ds)) / max(int(ok.sum()), 1)
    p_best = dict(zip(ds, wins.tolist(), strict=True))
    figs = [dataclasses.replace(f, p_best=p_best.get(f.depth)) if f.depth in p_best else f
            for f in figs]  # fmt: skip
    best = max(ds, key=lambda d: next(f.tokens_per_s or -math.inf for f in figs if f.depth == d))
    return figs, best


def fewest_bits(
    res: ReplayResult, arms: list[Arm], baseline: Arm, opts: SweepOptions
) -> tuple[list[Comparand], dict[str, Any]]:
    """Fixed-sequence test of the dyadic arms against ``baseline``, most bits first.

    Each arm (at its own depth) is compared with the baseline (at its own); the walk stops at
    the first arm whose pooled verdict is not EQUIVALENT, and the fewest bits that stay
    EQUIVALENT is the last arm before it. Testing in a fixed order and stopping at the first
    failure keeps the family-wise false-EQUIVALENT rate at α with no adjustment (Maurer, Hothorn
    & Lehmacher 1995), where picking the fewest EQUIVALENT arm from separate tests inflates it.
    """
    seq = sorted((a for a in arms if a.sampler.kind == "dyadic" and a != baseline),
                 key=lambda a: -a.sampler.bits)  # fmt: skip
    base = res.side(baseline)
    parts: list[Comparand] = []
    walk: list[dict[str, Any]] = []
    fewest: str | None = None
    stopped: str | None = None
    for a in seq:
        ps = res.paired(base, res.side(a))
        comp = compare(ps, arm_a=base.name, arm_b=a.canonical, n_boot=opts.n_boot, seed=res.seed,
                       stratify=opts.stratify, level=opts.level, margin=parse_margin(opts.margin),
                       min_requests=opts.min_requests, label="SIMULATED",
                       support=res.support((baseline, baseline.depth), (a, a.depth)))  # fmt: skip
        parts.append(Comparand(comp, Role.CANDIDATE_VS_BASELINE))
        verdict = comp.cells[0]["deltas"][0]["verdict"]
        if verdict is not None and opts.estimator == AUTO and res.estimator == "importance":
            pooled = CellSpec("pooled", None, None, tuple(range(len(res.families))),
                              tuple(range(len(res.buckets.names))))  # fmt: skip
            if comparison_failure(res, baseline, a, pooled)[0] is not None:
                verdict = "INCONCLUSIVE"  # auto's tail rule (with_auto_diagnostics says why)
        walk.append({"arm": a.canonical, "bits": a.sampler.bits, "verdict": verdict})
        if verdict != "EQUIVALENT":
            stopped = a.canonical
            break
        fewest = a.canonical
    why = None if fewest else ("no dyadic arm to test" if not seq else f"{walk[0]['arm']} is not "
                               "EQUIVALENT to the baseline")  # fmt: skip
    summary = {
        "baseline": baseline.canonical, "margin": parse_margin(opts.margin).to_json(),
        "sequence": walk, "fewest_bits_equivalent": fewest, "stopped_at": stopped,
        "label": "SIMULATED", "null_reason": why,
    }  # fmt: skip
    return parts, summary


def sweep_result(
    res: ReplayResult,
    arms: list[Arm],
    opts: SweepOptions,
    archive: Path,
    baseline: Arm | None = None,
) -> Result:
    """Return the typed result of a sweep of ``arms`` over ``opts.depths`` (module docstring)."""
    cost = CostModel.parse(opts.cost) if opts.cost else None
    per_arm = {a.canonical: _comparisons(res, a, opts) for a in arms}
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
        bits_parts, extra["fewest_bits"] = fewest_bits(res, arms, baseline, opts)
        parts += bits_parts
    names = [a.canonical for a in arms]
    cells = _with_depths(merge_comparisons(parts), names, per_arm, cost, opts.level)
    if opts.estimator == AUTO:
        cells = with_auto_diagnostics(cells, res, res.arms)
    cells = with_estimators(with_excluded_rounds(cells, res), res)
    return new_result(
        command="sweep", seed=res.seed,
        inputs=input_files([(f.path, f.rows) for f in res.files]),
        options={**opts.to_json(archive), "replicates": res.replicates,
                 **estimator_used(res, cells)},
        assumptions=_assumptions(cost)
        + short_rounds_assumptions(opts.short_rounds, res.exclude_below),
        excluded=excluded_entries([*res.excluded, *short_rounds_excluded(res)]),
        arms=[a.canonical for a in arms], cells=cells,
        columns_not_read=res.unread or None, extra=extra,
        inputs_ignored=ignored_inputs((e.path, e.glob) for e in res.ignored),
    )  # fmt: skip


def _with_depths(
    cells: tuple[Cell, ...],
    names: list[str],
    per_arm: dict[str, dict[int, Comparison | str]],
    cost: CostModel | None,
    level: float,
    label: Label = Label.SIMULATED,
) -> tuple[Cell, ...]:
    """Add every arm's depth figures and best depth; keep one arm figure per arm; set depths."""
    out = []
    for i, c in enumerate(cells):
        depths: list[DepthFigure] = []
        best: dict[str, int] = {}
        for name in names:
            figs, b = _depth_figures(name, per_arm[name], i, cost, level, label)
            depths += figs
            if b is not None:
                best[name] = b
        keep = set(names) | {d.a for d in c.deltas if d.role is not Role.DEPTH_VS_REFERENCE}
        arms_fig = {k: v for k, v in c.arms.items() if k in keep}
        out.append(dataclasses.replace(c, arms=arms_fig, depths=tuple(depths),
                                       best_depth=best or None))  # fmt: skip
    return tuple(out)


def _assumptions(cost: CostModel | None) -> list[str]:
    out = [
        "Path assumption or importance weights as the estimator line says (SPEC §3.2); a fixed "
        "depth d replays the first d archived positions of every round that recorded them.",
        "A policy that changes depth also changes where later rounds start, which no replay of "
        "these archives can see.",
        "Depths past the recorded positions are UNSUPPORTED, never extrapolated.",
    ]
    if cost is not None:
        out.append(f"Cost model {cost.text} (ms per round by depth): tokens/s are ESTIMATED.")
    return out


PROXY = (
    "Survival truncation proxy (round traces, SPEC §3.5): E(d) = 1 + Σ_{i≤d} S_i with S_i = "
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
    cost = CostModel.parse(opts.cost) if opts.cost else None
    ref = by_depth[reference]
    name = ref.name
    lowest, unknown = valid
    comps: dict[int, Comparison | str] = {}
    for d in opts.depths:
        if d not in by_depth:
            comps[d] = (
                f"{unknown} rounds record no drafted depth: the proxy is valid only up to the "
                "depth every round drafted" if unknown else
                f"UNSUPPORTED: some rounds drafted only {lowest} positions (the proxy is valid "
                "only up to the depth every round drafted, never extrapolated)"
            )  # fmt: skip
            continue
        other = dataclasses.replace(by_depth[d], name=f"{name}@{d}")
        ps, _ = pair_arms(ref, other, buckets=Buckets.parse(opts.buckets))
        comps[d] = compare(ps, arm_a=name, arm_b=other.name,
                           n_boot=opts.n_boot, seed=opts.seed, stratify=opts.stratify,
                           level=opts.level, margin=parse_margin("0.5%"),
                           min_requests=opts.min_requests, label="ESTIMATED")  # fmt: skip
    parts = [Comparand(c, Role.DEPTH_VS_REFERENCE, NO_VERDICT, depth=d)
             for d, c in comps.items() if isinstance(c, Comparison)]  # fmt: skip
    if not parts:
        raise SpecReplayError(
            f"{path}: no depth of {list(opts.depths)} is within the proxy's range"
        )
    cells = _with_depths(merge_comparisons(parts), [name], {name: comps}, cost, opts.level,
                         Label.ESTIMATED)  # fmt: skip
    cells = tuple(
        dataclasses.replace(c, deltas=tuple(
            dataclasses.replace(d, estimator="survival-proxy") for d in c.deltas))
        for c in cells
    )  # fmt: skip
    return new_result(
        command="sweep", seed=opts.seed, inputs=input_files(ref.files),
        options={**opts.to_json(path), "reference_depth": reference,
                 "estimator_used": "survival-proxy",
                 "estimator_reason": "round traces: the survival truncation proxy"},
        assumptions=[PROXY, *ref.notes], arms=[name], cells=cells,
        inputs_ignored=ignored_inputs(ref.ignored),
    )  # fmt: skip
