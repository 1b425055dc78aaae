"""Policies in a sweep: R, E[L] and tokens/s of each drafting policy, and the honest choice.

See docs/methods.md#policies-adaptive-drafting.

Every ``--policy`` is replayed for every ``--arm``'s sampler in the sweep's one pass, as two arms
(:meth:`~specreplay.sim.arms.Arm.with_rule`): the policy's retained tokens and its **length arm**
(the positions it drafts, :mod:`specreplay.replay.estimators.policies`). Each is paired with the
arm's reference depth and resampled in the run's one pass with the depths, so replicate b of a
policy and of every fixed depth resamples the same requests:

- R of the policy with its studentized interval (as a fixed depth's), E[L] per round;
- with ``--cost``, the cost of a round is random for a policy (it depends on L): a third side sums
  each round's expected cost (``linear:T0:C``: T0 + C·E[L]; a table: Σ_l P(L = l)·T(l), written
  T(1) + Σ_{k≥2} (T(k) − T(k−1))·P(L ≥ k), linear in the length arm's sums), and tokens/s =
  1000·Σ retained / Σ cost with R's interval, each request's cost in the place of its rounds
  (:func:`rate_tests`; ESTIMATED);
- ``p_best`` over the arm's depths and policies together, from the joint replicates of
  1000·Σ retained / Σ cost (so a depth's ``p_best`` changes when ``--policy`` is given).

**Choosing honestly** (:func:`policy_choice`, :func:`held_out_choice`). Requests are split in two
by a hash of their key. On the selection half, the policy and the fixed depth with the most
tokens/s are chosen; the held-out half gives Δ tokens/s = policy − depth and Δ/tokens/s_depth,
each request one unit, with the default interval of a paired ratio of sums (CR2, effective df,
Hall: each request's cost in ms in the place of its rounds), against the chosen depth and
against every other supported depth, and the verdict at margin m (relative: on Δ/tokens/s_depth;
absolute: the margin's tokens/round at that depth's ms per round): **PAYS** when the lower bound
clears +m against every depth, **DOES NOT PAY** when the upper bound against the chosen depth is
below +m, else INCONCLUSIVE (ESTIMATED); INCONCLUSIVE by rule with fewer than 50 held-out
requests, fewer than 3 of them differing between the policy and the chosen depth, or no
variation among them (:func:`_verdict`). The in-sample figure (both chosen and measured on every
request) is reported beside it, labelled so: their gap is the winner's curse. The policy study
measured these rules (docs/calibration.md#policies-the-tokenss-interval-and-the-held-out-verdict).

No policy is MEASURED: archives record fixed-depth logging arms.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.pipelines.options import BootstrapOptions, SweepOptions
from specreplay.pipelines.resample import Pairing
from specreplay.replay.archive.importers import read_arm, table_proxy_problem
from specreplay.replay.engine import ReplayResult
from specreplay.replay.paired import ArmSide
from specreplay.results.model import DepthFigure, Label, PolicyFigure
from specreplay.sim.arms import Arm
from specreplay.sim.drafting import DepthByBucket, DraftRule
from specreplay.sim.rng import stream_bits_each
from specreplay.stats.armdata import ArmData
from specreplay.stats.bootstrap import PairedSums, point_sums
from specreplay.stats.cells import Cell as StatsCell
from specreplay.stats.cells import cell_layout
from specreplay.stats.compare import CellSupport, Margin
from specreplay.stats.cr2 import (
    METHOD,
    MIN_DIFFERING,
    MIN_REQUESTS,
    TTest,
    paired_tests,
    ratio_test,
)
from specreplay.stats.depth import CostModel
from specreplay.stats.pairing import pair_arms

__all__ = [
    "Candidates",
    "PolicyPlan",
    "compare_policies",
    "held_out_choice",
    "p_best_joint",
    "policy_arms",
    "policy_choice",
    "policy_figures",
    "policy_plan",
    "proxy_policy_plan",
    "rate_tests",
]


def p_best_joint[K: Hashable](replicates: Mapping[K, NDArray[np.float64]]) -> dict[K, float]:
    """Return each key's share of the joint replicates in which it has the most tokens/s.

    Keys in the given order (ties go to the first); a replicate not finite for some key is
    left out of every share.
    """
    keys = list(replicates)
    mat = np.stack([replicates[k] for k in keys], axis=1)
    ok = np.all(np.isfinite(mat), axis=1)
    wins = np.bincount(np.argmax(mat[ok], axis=1), minlength=len(keys)) / max(int(ok.sum()), 1)
    return dict(zip(keys, wins.tolist(), strict=True))


@dataclass(frozen=True)
class PolicySides:
    """One policy of one arm, planned: its pairings with the reference depth.

    ``retained``, ``length``: the policy's R and E[L] sides; ``cost``: its ms per round (with
    ``--cost``; None without, or with the reason the table cannot price it).
    """

    retained: Pairing
    length: Pairing
    cost: Pairing | str | None

    def pairings(self) -> list[Pairing]:
        """Return the pairings in resample order."""
        return [
            self.retained,
            self.length,
            *([self.cost] if isinstance(self.cost, Pairing) else []),
        ]

    def with_pairings(self, it: Any) -> PolicySides:
        """Return the sides with the next pairings of ``it`` (same order as :meth:`pairings`)."""
        ret, length = next(it), next(it)
        cost = next(it) if isinstance(self.cost, Pairing) else self.cost
        return PolicySides(ret, length, cost)


@dataclass(frozen=True)
class PolicyPlan:
    """Per arm (canonical) and policy (canonical): its sides, or why it is UNSUPPORTED."""

    per_arm: dict[str, dict[str, PolicySides | str]]

    def pairings(self) -> list[Pairing]:
        """Every pairing, arm by arm and policy by policy."""
        return [
            p
            for per in self.per_arm.values()
            for s in per.values()
            if isinstance(s, PolicySides)
            for p in s.pairings()
        ]

    def with_pairings(self, it: Any) -> PolicyPlan:
        """Return the plan with its pairings taken from the iterator ``it`` (same order)."""
        return PolicyPlan(
            {
                a: {
                    k: s.with_pairings(it) if isinstance(s, PolicySides) else s
                    for k, s in per.items()
                }
                for a, per in self.per_arm.items()
            }
        )


def _cost_side(res: ReplayResult, length_arm: Arm, cost: CostModel, name: str) -> ArmSide | str:
    """Sum each round's expected cost in ms (module docstring), or why the cost model cannot."""
    rule = length_arm.rule
    assert rule is not None
    d_max = rule.max_depth
    ms = [cost.ms(k) for k in range(1, d_max + 1)]
    if isinstance(rule, DepthByBucket):
        used = sorted({d for _, _, d in rule.entries})
        ms = [cost.ms(k) if k in used or k == 1 else 0.0 for k in range(1, d_max + 1)]
    missing = [k + 1 for k, m in enumerate(ms) if m is None]
    if missing:
        return (
            f"--cost {cost.text} has no ms per round at depth {missing[0]}, which the policy drafts"
        )
    s = res.replays[res.estimator].arms[length_arm.canonical]
    s = s.take(s.n > 0)
    if s.width.any():
        raise SpecReplayError(
            f"--cost: {length_arm.canonical}'s round lengths depend on the mass outside the "
            "candidates of this truncated capture (schema v2); a cost is priced on exact "
            "lengths only: re-capture keeping the whole vocabulary to price it"
        )
    # t[:, k − 1] sums E[min(L, k)]; P(L ≥ k) sums are its first differences
    if cost.table is None:
        assert cost.t0 is not None and cost.slope is not None
        t = cost.t0 * s.n + cost.slope * s.t[:, d_max - 1]
    else:
        surv = np.diff(np.concatenate([np.zeros((s.t.shape[0], 1)), s.t[:, :d_max]], axis=1))
        t = float(ms[0] or 0.0) * s.n
        for k in range(2, d_max + 1):
            t = t + (float(ms[k - 1] or 0.0) - float(ms[k - 2] or 0.0)) * surv[:, k - 1]
    return ArmSide(name, s.request, s.bucket, s.n, np.ascontiguousarray(t), d_max)


def _table_support(support: CellSupport, rule: DraftRule) -> CellSupport:
    """Reword a table's short-round reasons: its rounds need their own depth, not D."""
    if not isinstance(rule, DepthByBucket):
        return support
    d = rule.max_depth

    def reasons(cell: Any) -> tuple[str | None, str | None]:
        a, b = support(cell)
        if b is not None:
            b = b.replace(
                f"depth {d} is UNSUPPORTED in this cell",
                "UNSUPPORTED in this cell",
            ).replace(
                f"fewer than {d} positions",
                "fewer positions than the policy drafts at their context (or no context)",
            )
        return a, b

    return reasons


def _one_policy(
    res: ReplayResult, arm: Arm, rule: DraftRule, opts: SweepOptions
) -> PolicySides | str:
    pa, la = arm.with_rule(rule), arm.with_rule(rule, length=True)
    why = res.depth_problem(pa, rule.max_depth)
    if why is not None:
        return why.replace(f"depth {rule.max_depth} is UNSUPPORTED", "UNSUPPORTED")
    ref = res.side(arm)
    name = pa.canonical
    support = _table_support(res.support((arm, arm.depth), (pa, rule.max_depth)), rule)
    ret = Pairing(res.paired(ref, res.side(pa, name=name)), ref.name, name, support)
    lside = res.side(la, name=f"{name} (L)")
    length = Pairing(res.paired(ref, lside), ref.name, lside.name, support)
    cost: Pairing | str | None = None
    if opts.cost is not None:
        cside = _cost_side(res, la, opts.cost, f"{name} (ms)")
        cost = (
            cside
            if isinstance(cside, str)
            else Pairing(res.paired(ref, cside), ref.name, cside.name, support)
        )
    return PolicySides(ret, length, cost)


def policy_arms(arms: Sequence[Arm], rules: Sequence[DraftRule]) -> list[Arm]:
    """Return the arms a pass replays for ``rules``: per arm and rule, retained and length.

    Each is :meth:`~specreplay.sim.arms.Arm.with_rule` of the arm (module docstring).
    """
    return [a.with_rule(r, length=length) for a in arms for r in rules for length in (False, True)]


def policy_plan(res: ReplayResult, arms: Sequence[Arm], opts: SweepOptions) -> PolicyPlan:
    """Return every arm's policies planned (nothing resampled yet)."""
    return PolicyPlan(
        {
            a.canonical: {r.canonical: _one_policy(res, a, r, opts) for r in opts.policies}
            for a in arms
        }
    )


STOP_ON_ROUND_TRACES = (
    "stop rules need position traces: round traces hold no draft probabilities to stop on "
    "(docs/methods.md#policies-adaptive-drafting)"
)


def _proxy_policy(
    path: Path, ref: ArmData, rule: DraftRule, opts: SweepOptions
) -> PolicySides | str:
    """Plan a table by the survival proxy on round traces (each round cut at its depth)."""
    if not isinstance(rule, DepthByBucket):
        return STOP_ON_ROUND_TRACES
    ro = opts.replay
    why = table_proxy_problem(path, rule, ro.ignore)
    if why is not None:
        return why
    depths = sorted({d for _, _, d in rule.entries})

    def arm(name: str, per_round: dict[int, float] | None) -> Pairing:
        other = read_arm(
            path, buckets=ro.buckets, truncate=rule, ignore=ro.ignore, per_round=per_round
        )
        other = dataclasses.replace(other, name=name)
        ps, _ = pair_arms(ref, other, buckets=ro.buckets)
        return Pairing(ps, ref.name, name)

    name = f"{ref.name} {rule.canonical}"
    cost: Pairing | str | None = None
    if opts.cost is not None:
        ms = {d: opts.cost.ms(d) for d in depths}
        missing = [d for d, v in ms.items() if v is None]
        cost = (
            f"--cost {opts.cost.text} has no ms per round at depth {missing[0]}, which the "
            "policy drafts"
            if missing
            else arm(f"{name} (ms)", {d: float(v or 0.0) for d, v in ms.items()})
        )
    return PolicySides(arm(name, None), arm(f"{name} (L)", {d: float(d) for d in depths}), cost)


def proxy_policy_plan(path: Path, ref: ArmData, opts: SweepOptions) -> PolicyPlan:
    """Return the policies of a round-trace sweep planned (tables only: the proxy)."""
    return PolicyPlan(
        {ref.name: {r.canonical: _proxy_policy(path, ref, r, opts) for r in opts.policies}}
    )


@dataclass(frozen=True)
class _Side:
    """A side's R per cell and its replicates (n_boot, n_cells): the length or cost side.

    Only R_b of those pairings is read (E[L], ms per round), so no Δ, test or interval is
    computed for them: the same sums :func:`~specreplay.stats.compare.compare` forms for R_b.
    """

    R: list[float | None]
    reps: NDArray[np.float64]


def _membership(ps: PairedSums, layout: Sequence[Any]) -> NDArray[np.float64]:
    """Return (families × buckets, cells): 1 where the (family, bucket) block is in the cell."""
    n_b = len(ps.buckets)
    m = np.zeros((len(ps.families), n_b, len(layout)))
    for ci, cell in enumerate(layout):
        m[np.ix_(np.asarray(cell.fam_idx), np.asarray(cell.bucket_idx), [ci])] = 1.0
    return m.reshape(-1, len(layout))


def _piece_cells(ps: PairedSums, layout: Sequence[Any]) -> NDArray[np.bool_]:
    """Return (cells, pieces): whether each piece (request × bucket) lies in each cell."""
    m = _membership(ps, layout).reshape(len(ps.families), len(ps.buckets), len(layout))
    fam = ps.family[ps.piece_request].astype(np.int64)
    return np.ascontiguousarray(m[fam, ps.piece_bucket].T > 0)


def _per_request(
    ps: PairedSums, values: NDArray[np.float64], inside: NDArray[np.bool_]
) -> NDArray[np.float64]:
    """Return each request's sum of ``values`` (one per piece) over its pieces ``inside``."""
    return np.bincount(ps.piece_request[inside], weights=values[inside], minlength=ps.n_requests)


def _side(p: Pairing, layout: Sequence[Any]) -> _Side:
    """Return side b's R and replicates in each cell of ``layout`` (the retained comparison's).

    Each cell's sums are one product with the membership of its (family, bucket) blocks: one
    matrix product for every cell and replicate.
    """
    reps = p.replicates
    assert reps is not None
    m = _membership(p.ps, layout)
    n, t = point_sums(p.ps)[..., 2:].reshape(-1, 2).T @ m
    out_r = [float(ti / ni) if ni > 0 else None for ni, ti in zip(n, t, strict=True)]
    n_boot = reps.shape[0]
    s = np.einsum("nkc,kj->cnj", reps[..., 2:].reshape(n_boot, -1, 2), m)
    with np.errstate(divide="ignore", invalid="ignore"):
        out_reps = np.where(s[0] > 0, s[1] / s[0], np.nan)
    return _Side(out_r, out_reps)


@dataclass(frozen=True)
class _Retained:
    """The policy's R per cell: point, studentized test, why null, replicates (n_boot, cells).

    Side b of the pairing with the reference depth, as :func:`~specreplay.stats.compare.compare`
    forms its R_b figure and test (the same cells, sums and
    :func:`~specreplay.stats.cr2.ratio_test`), without the Δ nobody reads.
    """

    layout: list[StatsCell]
    R: list[float | None]
    tests: list[TTest | None]
    why: list[str | None]
    reps: NDArray[np.float64]


def _retained(p: Pairing) -> _Retained:
    ps = p.ps
    present = {int(b) for b in np.unique(ps.piece_bucket)}
    user_b = [b for b in range(len(ps.buckets)) if b != ps.unbucketed and b in present]
    layout = cell_layout(
        ps.families, ps.buckets, bucket_cells=user_b, pooled_buckets=range(len(ps.buckets))
    )
    side = _side(p, layout)
    depth = ps.depths[1] if ps.depths is not None else None
    tests: list[TTest | None] = []
    why: list[str | None] = []
    for cell, in_cell in zip(layout, _piece_cells(ps, layout), strict=True):
        n = _per_request(ps, ps.n_b, in_cell)
        t = _per_request(ps, ps.t_b, in_cell)
        has = n > 0
        tests.append(ratio_test(n[has], t[has], depth=depth) if has.any() else None)
        why.append(p.support(cell)[1] if p.support is not None else None)
    return _Retained(layout, side.R, tests, why, side.reps)


@dataclass(frozen=True)
class _Compared:
    """One policy's figures: its R, its length and cost sides, and with a cost its rate.

    ``rate``: per cell of ``retained``, the test of Σ retained / Σ cost (tokens per ms) over
    the cell's requests (None without rounds).
    """

    retained: _Retained
    length: _Side
    cost: _Side | str | None
    rate: list[TTest | None] | None = None


def rate_tests(
    retained: PairedSums, cost: PairedSums, cells: Sequence[StatsCell]
) -> list[TTest | None]:
    """Per cell, the default interval's test of a policy's Σ retained / Σ cost (tokens per ms).

    Arm b of ``retained`` and of ``cost`` (the same requests, paired with the same reference)
    give each request's retained tokens t_i and cost c_i in the cell; tokens/s = 1000·Σt/Σc is a
    ratio of sums like R = Σt/Σn, so it takes R's interval (:func:`~specreplay.stats.cr2.ratio_test`
    with c_i for the rounds: CR2, effective df, Hall), as a fixed depth's tokens/s does, and its
    rule for fewer than 3 requests off the ratio (no bound: no depth limits tokens/s). The policy
    study (docs/calibration.md#policies-the-tokenss-interval-and-the-held-out-verdict) measured
    the percentile interval of the joint replicates it replaces at 0.89-0.91 coverage with 20
    requests.
    """
    out: list[TTest | None] = []
    in_t, in_c = _piece_cells(retained, cells), _piece_cells(cost, cells)
    for i in range(len(cells)):
        t = _per_request(retained, retained.t_b, in_t[i])
        c = _per_request(cost, cost.t_b, in_c[i])
        keep = c > 0
        out.append(ratio_test(c[keep], t[keep], depth=None) if keep.any() else None)
    return out


def compare_policies(plan: PolicyPlan) -> dict[str, dict[str, _Compared | str]]:
    """Compare each planned policy (its replicates from the run's one pass).

    The label is given where the figures are made (:func:`policy_figures`).
    """
    out: dict[str, dict[str, _Compared | str]] = {}
    for a, per in plan.per_arm.items():
        out[a] = {}
        for k, s in per.items():
            if isinstance(s, str):
                out[a][k] = s
                continue
            ret = _retained(s.retained)
            layout = ret.layout
            length = _side(s.length, layout)
            if not isinstance(s.cost, Pairing):
                out[a][k] = _Compared(ret, length, s.cost)
                continue
            rate = rate_tests(s.retained.ps, s.cost.ps, layout)
            out[a][k] = _Compared(ret, length, _side(s.cost, layout), rate)
    return out


def _figure(
    arm: str, policy: str, comp: _Compared | str, i: int, level: float, label: Label
) -> tuple[PolicyFigure, NDArray[np.float64] | None]:
    """Return the policy's figure in cell i and its tokens/s replicates (None without)."""
    if isinstance(comp, str):
        return PolicyFigure(arm, policy, None, None, None, None, label, False, comp), None
    r = comp.retained
    test, rb, why = r.tests[i], r.R[i], r.why[i]
    if why is not None or test is None or rb is None:
        reason = why or "no rounds in this cell"
        fig = PolicyFigure(arm, policy, None, None, None, None, label, why is None, reason)
        return fig, None
    lo, hi = test.interval(level)
    e_l = comp.length.R[i]
    fig = PolicyFigure(arm, policy, e_l, float(rb), lo, hi, label, True, None)
    if isinstance(comp.cost, str):
        return dataclasses.replace(fig, tokens_per_s_null_reason=comp.cost), None
    if comp.cost is None:
        return fig, None
    ms = comp.cost.R[i]
    if ms is None or ms <= 0:
        return fig, None
    reps = 1000.0 * r.reps[:, i] / comp.cost.reps[:, i]
    rate = comp.rate[i] if comp.rate is not None else None
    lo_ms, hi_ms = rate.interval(level) if rate is not None else (math.nan, math.nan)
    t_lo = 1000.0 * lo_ms if math.isfinite(lo_ms) else None
    t_hi = 1000.0 * hi_ms if math.isfinite(hi_ms) else None
    fig = dataclasses.replace(
        fig,
        round_ms=float(ms),
        tokens_per_s=1000.0 * float(rb) / float(ms),
        tokens_per_s_lo=t_lo,
        tokens_per_s_hi=t_hi,
    )
    return fig, reps


def policy_figures(
    name: str,
    comps: dict[str, _Compared | str],
    depth_figs: list[DepthFigure],
    depth_reps: dict[int, NDArray[np.float64]],
    i: int,
    level: float,
    label: Label = Label.SIMULATED,
) -> tuple[list[DepthFigure], list[PolicyFigure]]:
    """Return the arm's depth figures (``p_best`` joint) and its policy figures in cell i."""
    figs: list[PolicyFigure] = []
    reps: dict[tuple[str, object], NDArray[np.float64]] = {
        ("depth", d): r for d, r in depth_reps.items()
    }
    for k, comp in comps.items():
        fig, r = _figure(name, k, comp, i, level, label)
        figs.append(fig)
        if r is not None:
            reps[("policy", k)] = r
    if not reps or not any(key[0] == "policy" for key in reps):
        return depth_figs, figs
    shares = p_best_joint(reps)
    depth_figs = [
        dataclasses.replace(f, p_best=shares[("depth", f.depth)])
        if ("depth", f.depth) in shares
        else f
        for f in depth_figs
    ]
    figs = [
        dataclasses.replace(f, p_best=shares[("policy", f.policy)])
        if ("policy", f.policy) in shares
        else f
        for f in figs
    ]
    return depth_figs, figs


# -------------------------------------------------------------------------------------------------
# The honest choice: selection half, held-out half


def _half(keys: NDArray[np.uint64]) -> NDArray[np.bool_]:
    """Return True for the held-out half's requests: the low bit of each key's splitmix64.

    splitmix64's first output seeded with the key (:func:`~specreplay.sim.rng.stream_bits`).
    """
    bits = stream_bits_each(np.ascontiguousarray(keys, dtype=np.uint64), 0)
    return (bits & np.uint64(1)).astype(bool)


def _restricted(side: ArmSide, keep: NDArray[np.bool_]) -> ArmSide:
    m = keep[side.request]
    w, lim = side.width, side.limit
    return ArmSide(
        side.name,
        side.request[m],
        side.bucket[m],
        side.n[m],
        side.t[m],
        side.depth,
        None if w is None else w[m],
        None if lim is None else lim[m],
    )


def _rate(side: ArmSide, cost: ArmSide | float) -> float | None:
    n, t = float(side.n.sum()), float(side.t.sum())
    if n <= 0:
        return None
    ms = cost if isinstance(cost, float) else float(cost.t.sum()) / float(cost.n.sum())
    return 1000.0 * t / n / ms


@dataclass(frozen=True)
class Candidates:
    """An arm's supported depths and policies, as sides.

    ``depths``: per depth, its retained side and ms per round; ``policies``: per policy
    (canonical), its retained side and its cost side (ms summed per (request, bucket)).
    """

    depths: dict[int, tuple[ArmSide, float]]
    policies: dict[str, tuple[ArmSide, ArmSide]]


def _candidates(res: ReplayResult, arm: Arm, opts: SweepOptions) -> Candidates:
    cost = opts.cost
    assert cost is not None
    depths: dict[int, tuple[ArmSide, float]] = {}
    for d in opts.depths:
        ms = cost.ms(d)
        if ms is None or res.depth_problem(arm, d) is not None or res.short_reason(arm, d):
            continue
        depths[d] = (res.side(arm, d, name=f"{arm.sampler_spelling}@{d}"), ms)
    policies: dict[str, tuple[ArmSide, ArmSide]] = {}
    for rule in opts.policies:
        pa, la = arm.with_rule(rule), arm.with_rule(rule, length=True)
        if res.depth_problem(pa, rule.max_depth) is not None or res.short_reason(
            pa, rule.max_depth
        ):
            continue
        c = _cost_side(res, la, cost, f"{pa.canonical} (ms)")
        if isinstance(c, str):
            continue
        policies[rule.canonical] = (res.side(pa, name=pa.canonical), c)
    return Candidates(depths, policies)


def _best(cand: Candidates, keep: NDArray[np.bool_] | None) -> tuple[int | None, str | None]:
    """Return the depth and the policy of most tokens/s on the requests ``keep`` (None: all)."""

    def on(s: ArmSide) -> ArmSide:
        return s if keep is None else _restricted(s, keep)

    def best_of(rates: dict[Any, float | None]) -> Any:
        ok = {k: v for k, v in rates.items() if v is not None}
        return max(ok, key=lambda k: ok[k]) if ok else None

    d = best_of({d: _rate(on(s), ms) for d, (s, ms) in cand.depths.items()})
    p = best_of({k: _rate(on(s), on(c)) for k, (s, c) in cand.policies.items()})
    return d, p


def _margin(boot: BootstrapOptions, tokens_per_s: float, ms: float) -> float:
    """Return the margin in tokens/s against a depth of ``tokens_per_s`` at ``ms`` per round.

    A relative margin is a share of the depth's tokens/s; an absolute one is in tokens/round,
    as everywhere, priced at the depth's ms per round.
    """
    margin = boot.margin
    return margin.value * tokens_per_s if margin.relative else 1000.0 * margin.value / ms


def _rows(dside: ArmSide, ms: float, pside: ArmSide, cside: ArmSide) -> NDArray[np.float64]:
    """Return per request (ms·n, t_d, c_p, t_p): the depth's and the policy's (cost, retained).

    A request's pieces (buckets) are summed: the request is the unit. Requests without rounds at
    the depth are left out. Shape (r, 4), the (n_a, t_a, n_b, t_b) of
    :func:`~specreplay.stats.cr2.paired_tests` with cost in ms in the place of rounds.
    """
    size = 1 + max(
        (int(s.request.max()) for s in (dside, pside, cside) if s.request.size), default=-1
    )

    def per(s: ArmSide, v: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.bincount(s.request, weights=v, minlength=size)

    n = per(dside, dside.n)
    rows = np.stack([ms * n, per(dside, dside.t), per(cside, cside.t), per(pside, pside.t)], axis=1)
    return np.ascontiguousarray(rows[n > 0])


def _differing(rows: NDArray[np.float64]) -> int:
    """Return how many requests differ between the policy and the depth (cost or retained).

    Two figures differ when they are more than 1e-9 of themselves apart: rounding (a cost
    summed as T0·n + C·Σ E[L] against ms(d)·n) is not a difference.
    """
    cost = np.abs(rows[:, 2] - rows[:, 0]) > 1e-9 * np.abs(rows[:, 0])
    kept = np.abs(rows[:, 3] - rows[:, 1]) > 1e-9 * np.maximum(np.abs(rows[:, 1]), 1.0)
    return int(np.count_nonzero(cost | kept))


def _bounds(rows: NDArray[np.float64], level: float) -> tuple[float | None, ...]:
    """Return Δ tokens/s's interval and Δ/tokens/s_depth's (lo, hi, rel_lo, rel_hi); None: NaN.

    The default interval of a paired ratio of sums (:func:`~specreplay.stats.cr2.paired_tests`:
    CR2, effective df, Hall) on the rows of :func:`_rows`: R_b − R_a is tokens per ms, and
    R_b/R_a − 1 the relative gain. With fewer than 3 requests differing (or none off the
    ratios) it has no bound to give (no depth limits tokens/s): NaN, so None.
    """
    d, rel = paired_tests(rows)
    lo, hi = d.interval(level)
    rlo, rhi = rel.interval(level)
    out = (1000.0 * lo, 1000.0 * hi, rlo, rhi)
    return tuple(float(x) if math.isfinite(x) else None for x in out)


def _delta(
    cand: Candidates,
    choice: tuple[int, str],
    keep: NDArray[np.bool_] | None,
    boot: BootstrapOptions,
    *,
    every_depth: bool = False,
) -> dict[str, Any]:
    """Δ tokens/s (policy − depth) on the requests ``keep`` with its interval (:func:`_bounds`).

    ``every_depth``: also the policy's Δ against every other depth of ``cand``, each with its
    lower bounds and margin (``against``, the chosen depth first), and the requests that differ
    between the policy and the chosen depth (``differing_requests``).
    """
    d, k = choice
    pside, cside = cand.policies[k]
    if keep is not None:
        pside, cside = _restricted(pside, keep), _restricted(cside, keep)
    depths = [d, *(e for e in cand.depths if e != d)] if every_depth else [d]
    against = []
    for e in depths:
        side, ms = cand.depths[e]
        side = _restricted(side, keep) if keep is not None else side
        rows = _rows(side, ms, pside, cside)
        point = _rate(side, ms)
        assert point is not None
        lo, hi, rlo, rhi = _bounds(rows, boot.level)
        m = _margin(boot, point, ms)
        against.append(
            {"depth": e, "lo": lo, "hi": hi, "rel_lo": rlo, "rel_hi": rhi, "margin_tokens_per_s": m}
        )
        if e == d:
            point_d, n_req, k_diff = point, rows.shape[0], _differing(rows)
    point_p = _rate(pside, cside)
    assert point_p is not None
    first = against[0]
    out: dict[str, Any] = {
        "policy": k,
        "depth": d,
        "tokens_per_s_policy": point_p,
        "tokens_per_s_depth": point_d,
        "delta_tokens_per_s": point_p - point_d,
        "lo": first["lo"],
        "hi": first["hi"],
        "rel_lo": first["rel_lo"],
        "rel_hi": first["rel_hi"],
        "n_requests": n_req,
        "interval_method": METHOD,
    }
    if every_depth:
        out["against"] = [
            {x: a[x] for x in ("depth", "lo", "rel_lo", "margin_tokens_per_s")} for a in against
        ]
        out["differing_requests"] = k_diff
    return out


def _clears(a: dict[str, Any], margin: Margin, side: str) -> bool:
    """Whether the ``side`` (``lo`` or ``hi``) bound of ``a`` is beyond the margin (above/below)."""
    x = a[f"rel_{side}"] if margin.relative else a[side]
    if x is None:
        return False
    m = margin.value if margin.relative else a["margin_tokens_per_s"]
    return bool(x > m) if side == "lo" else bool(x < m)


def _verdict(held: dict[str, Any], margin: Margin) -> tuple[float, str, str | None]:
    """Return the margin in tokens/s, the verdict and why it is INCONCLUSIVE by rule (or None).

    **PAYS** when the lower bound of Δ against *every* supported depth exceeds that depth's
    margin (an intersection–union test: each at the interval's level, no adjustment; Berger
    1982), so a depth chosen by chance on the selection half cannot make a policy pay;
    **DOES NOT PAY** when the upper bound against the chosen depth is below its margin (the best
    depth has at least its tokens/s). A relative margin is read on Δ/tokens/s_depth, an absolute
    one on Δ. INCONCLUSIVE by rule, whatever the intervals, when the held-out half has fewer than
    :data:`~specreplay.stats.cr2.MIN_REQUESTS` requests, when fewer than
    :data:`~specreplay.stats.cr2.MIN_DIFFERING` of them differ between the policy and the
    chosen depth, or when they do not vary (every held-out request alike).
    """
    first = held["against"][0]
    m = first["margin_tokens_per_s"]
    n, k = held["n_requests"], held["differing_requests"]
    if n < MIN_REQUESTS:
        return m, "INCONCLUSIVE", f"{n} held-out requests < {MIN_REQUESTS}"
    if k < MIN_DIFFERING:
        why = f"{k} held-out requests differ between the policy and the depth < {MIN_DIFFERING}"
        return m, "INCONCLUSIVE", why
    lo, hi = held["lo"], held["hi"]
    if lo is None or hi is None or hi - lo <= 1e-9 * abs(held["tokens_per_s_depth"]):
        return m, "INCONCLUSIVE", "every held-out request alike: no interval"
    if all(_clears(a, margin, "lo") for a in held["against"]):
        return m, "PAYS", None
    if _clears({**first, "hi": hi, "rel_hi": held["rel_hi"]}, margin, "hi"):
        return m, "DOES NOT PAY", None
    return m, "INCONCLUSIVE", None


def held_out_choice(
    cand: Candidates, held: NDArray[np.bool_], boot: BootstrapOptions
) -> dict[str, Any]:
    """Return one arm's held-out verdict and in-sample figure (module docstring).

    ``held``: per request code, whether it is in the held-out half. Without a choice, the one
    key ``null_reason`` says why.
    """
    d_sel, p_sel = _best(cand, ~held)
    if d_sel is None or p_sel is None:
        why = "no supported fixed depth" if d_sel is None else "no supported policy"
        return {"null_reason": f"{why} on the selection half"}
    n_held = int(held[np.unique(cand.depths[d_sel][0].request)].sum())
    if n_held < 2:
        return {"null_reason": f"{n_held} requests in the held-out half"}
    held_out = _delta(cand, (d_sel, p_sel), held, boot, every_depth=True)
    m, verdict, reason = _verdict(held_out, boot.margin)
    d_all, p_all = _best(cand, None)
    assert d_all is not None and p_all is not None
    in_sample = _delta(cand, (d_all, p_all), None, boot)
    return {
        "selected_policy": p_sel,
        "selected_depth": d_sel,
        "held_out": {
            **held_out,
            "margin_tokens_per_s": m,
            "verdict": verdict,
            "verdict_reason": reason,
        },
        "in_sample": {
            **in_sample,
            "label": "ESTIMATED (in-sample: chosen and measured on the same requests)",
        },
    }


def policy_choice(
    res: ReplayResult, arms: Sequence[Arm], opts: SweepOptions
) -> list[dict[str, Any]]:
    """Per arm, the held-out verdict of the best policy against the best fixed depth."""
    out: list[dict[str, Any]] = []
    held = _half(res.request_keys)
    for arm in arms:
        entry: dict[str, Any] = {"arm": arm.canonical, "label": "ESTIMATED", "null_reason": None}
        if opts.cost is None:
            out.append({**entry, "null_reason": "the choice needs a cost model (--cost)"})
            continue
        cand = _candidates(res, arm, opts)
        out.append({**entry, **held_out_choice(cand, held, opts.boot)})
    return out
