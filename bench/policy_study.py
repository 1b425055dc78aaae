"""The policy study of issue 14: the tokens/s interval of a policy and the held-out verdict.

``python bench/policy_study.py [--quick] [--seed S] [--datasets N] [--n-boot B] [--sizes …]``
prints the tables docs/calibration.md#policies-the-tokenss-interval-and-the-held-out-verdict
quotes:

(a) coverage of the 95% tokens/s interval of one policy in a cell, 0.4.0's (percentile of the
    joint replicates) and sweep's now (R's interval of Σ retained / Σ cost);
(b) the false-verdict rates of the held-out rule (PAYS / DOES NOT PAY) where the policy is the
    best depth itself (``identical``, τ = 0), gains nothing (Δ = 0) or exactly the margin
    (Δ = m), for 0.4.0's rule, sweep's rule now and two halfway rules; and the winner's curse of
    a search over 20 policies of equal true tokens/s;
(c) power: P(PAYS) where the policy gains 2m and 5m.

Each figure is a share of datasets ± its Monte Carlo SE. ``--quick`` (n = 20 and 200, 20
datasets per setting) takes about a minute.

Data-generating processes (all truths exact)
--------------------------------------------
A dataset is n requests (n = 20, 50, 200, 1,000: the whole cell; the held-out half holds about
n/2). Cost ``linear:20:1``: a round drafting L positions costs 20 + L ms, so a fixed depth d costs
ms(d) = 20 + d; depths 1..8. Per request i:

* rounds n_i, independent of everything else: ``lognormal`` ⌈exp N(ln 30, 1)⌉ (heavy tail,
  finite variance), ``pareto`` ⌈10·U^(−1/1.5)⌉ (Pareto α = 1.5: finite mean, infinite
  variance), ``constant`` 40;
* acceptance p_i: a drafted token is accepted with probability p_i given the prefix was, so at
  depth d a round keeps R_d(p) = Σ_{k=0..d} p^k tokens on average; ``spread``:
  p = 0.1 + 0.85·Beta(2, 2) (best depth 5, 91.05 tokens/s; depth 4 0.4% behind); ``sparse``:
  p = 0.8 for a share 1 − π of requests and 0.15 for the rest (best depth 8; depth 7 0.3%
  behind); ``degenerate``: ``sparse``'s two kinds of round mixed in every request alike (a share
  π of each request's 40 rounds at p = 0.15), no noise: every request's sums are the same;
* a policy with maximum depth D (the world's best depth) stops each round after its first
  drafted position with probability s(p), else drafts D: R = s·R_1 + (1 − s)·R_D,
  E[L] = s + (1 − s)·D, and a round costs 20 + E[L] + δ ms (δ: the policy's own overhead per
  round). ``spread``: s = expit((τ − p)/0.05), τ = 0.4 (every request's E[L] differs from D);
  ``sparse`` and ``degenerate``: s = 1 at p = 0.15 and 0 at p = 0.8 (the policy *is* depth D on
  a share 1 − π of requests, or rounds);
* per-request sums: retained t = n·R + √n·sd·u and policy cost c = n·(20 + E[L] + δ) +
  √n·sd_L·u, sd and sd_L the per-round standard deviations of the retained tokens and of L,
  u ~ U(−√3, √3) one per request, shared by every depth and policy (common random numbers);
* truth: tokens/s = 1000·E[R]/E[cost per round] (n independent of p; exact sums over the atoms,
  200-node Gauss–Legendre quadrature of the Beta density otherwise), Δ_true = policy − best
  depth, m = 0.5% of the best depth's tokens/s (the default ``--margin 0.5%``);
* Δ_true = κ·m is set exactly: ``spread`` by solving δ (0.616, 0.495, 0.374, 0.020 ms for
  κ = 0, 1, 2, 5; the 20 policies of the winner's-curse world, τ = 0.25..0.55, each its own δ
  in 0.31..0.63 ms), ``sparse`` and ``degenerate`` by solving π (δ = 0; π = 0.020, 0.041, 0.100
  for κ = 1, 2, 5); ``identical`` is ``spread`` with s = 0 and δ = 0 (τ = 0: the policy's sums
  are depth D's, to the bit).

Through the package's own code
------------------------------
(a) The retained, length and cost sides are :class:`~specreplay.replay.paired.ArmSide` s paired
with depth D by :func:`~specreplay.replay.paired.pair_sides`, resampled together
(:func:`specreplay.pipelines.resample.resampled`), compared
(:func:`specreplay.pipelines.policies.compare_policies`) and turned into the cell's
:class:`~specreplay.results.model.PolicyFigure` as ``sweep`` does; the loop computes the two
intervals directly (:func:`percentile_interval`, :func:`studentized`), checked equal to that
path, to the bit, on the first dataset of every setting. (b, c) The choice is
:func:`specreplay.pipelines.policies.held_out_choice` (the request-hash halves of ``_half`` on
random 64-bit request keys, the selection on one half, the held-out figures and the verdict on
the other, the in-sample figure beside it); the other rules are recomputed from its fields (the
current one checked equal to its verdict), 0.4.0's interval from a resample of the held-out half
as 0.4.0 drew it (:func:`percentile_held_out`, n_boot 2,000, ``sweep``'s default).

Truths of a verdict. PAYS is false when the truth is ≤ m, DOES NOT PAY when it is ≥ m, both at
the boundary Δ_true = m. Two truths: the **target**, the chosen policy − the best depth (what
PAYS and DOES NOT PAY claim), and the **conditional** one, the chosen policy − the chosen depth
(what the held-out interval estimates: when the selection half picks a worse depth, a policy can
truly beat it).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special

from specreplay.pipelines.options import SweepOptions
from specreplay.pipelines.policies import (
    Candidates,
    PolicyPlan,
    PolicySides,
    _figure,
    _half,
    compare_policies,
    held_out_choice,
)
from specreplay.pipelines.resample import Pairing, resampled
from specreplay.replay.paired import ArmSide, RequestCodes, pair_sides
from specreplay.results.model import Label
from specreplay.stats.bootstrap import PairedSums, point_sums
from specreplay.stats.buckets import Buckets
from specreplay.stats.cr2 import MIN_DIFFERING, MIN_REQUESTS, ratio_test

T0, SLOPE = 20.0, 1.0
DEPTHS = tuple(range(1, 9))
MARGIN = 0.005
LEVEL = 0.95
SIZES = (20, 50, 200, 1000)
BUCKETS = Buckets.parse("all:>=0")
_GL_X, _GL_W = np.polynomial.legendre.leggauss(200)


def ms(d: int | float) -> float:
    """Return the ms of a round drafting ``d`` positions (``linear:20:1``)."""
    return T0 + SLOPE * d


def kept(p: NDArray[np.float64], d: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Return the mean and variance per round of the retained tokens 1 + min(A, d).

    P(A ≥ k) = p^k; E[min(A, d)] = Σ_{k≤d} p^k, E[min(A, d)²] = Σ_{k≤d} (2k − 1)·p^k.
    """
    pk = np.stack([p**k for k in range(1, d + 1)])
    mean = 1.0 + pk.sum(axis=0)
    m2 = (np.arange(1, 2 * d, 2)[:, None] * pk).sum(axis=0)
    return mean, m2 - (mean - 1.0) ** 2


@dataclass(frozen=True)
class Policy:
    """A stop rule: stop after position 1 with probability s(p), else draft D; δ ms overhead.

    ``tau`` None: s(p) = ``share`` where p < ``cut`` (else 0); else s = expit((τ − p)/width).
    """

    D: int
    delta: float = 0.0
    tau: float | None = None
    width: float = 0.05
    share: float = 0.0
    cut: float = 1.0

    def stop(self, p: NDArray[np.float64]) -> NDArray[np.float64]:
        """Return s(p), the probability that a round stops after its first position."""
        if self.tau is None:
            return np.where(p < self.cut, self.share, 0.0)
        out: NDArray[np.float64] = special.expit((self.tau - p) / self.width)
        return out

    @property
    def identical(self) -> bool:
        """Whether the policy is depth D on every round (never stops early, no overhead)."""
        return self.tau is None and (self.share == 0.0 or self.cut <= 0.0) and self.delta == 0.0

    def per_round(self, p: NDArray[np.float64]) -> dict[str, NDArray[np.float64]]:
        """Per-round mean and sd of the retained tokens, of L and the mean cost (ms)."""
        s = self.stop(p)
        r1, v1 = kept(p, 1)
        rd, vd = kept(p, self.D)
        mean = s * r1 + (1 - s) * rd
        var = s * (v1 + r1**2) + (1 - s) * (vd + rd**2) - mean**2
        el = s + (1 - s) * self.D
        return {
            "R": mean,
            "sd": np.sqrt(np.maximum(var, 0.0)),
            "cost": ms(0) + SLOPE * el + self.delta,
            "sd_cost": SLOPE * (self.D - 1) * np.sqrt(s * (1 - s)),
            "L": el,
        }


@dataclass(frozen=True)
class World:
    """Acceptance law (atoms or a scaled Beta(2, 2)), round law, noise, the policies."""

    name: str
    rounds: str
    policies: tuple[Policy, ...]
    atoms: tuple[tuple[float, float], ...] = ()  # (p, probability)
    beta: tuple[float, float] | None = None  # p = lo + width·Beta(2, 2)
    noise: bool = True
    within: bool = False  # the atoms are kinds of round inside every request, mixed alike

    def nodes(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Return the law of p as (values, weights): atoms, or Gauss–Legendre nodes."""
        if self.beta is None:
            return np.array([a[0] for a in self.atoms]), np.array([a[1] for a in self.atoms])
        lo, width = self.beta
        x = (_GL_X + 1) / 2
        return lo + width * x, _GL_W / 2 * 6 * x * (1 - x)

    def draw_p(self, rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        """Draw each request's acceptance p."""
        if self.beta is not None:
            lo, width = self.beta
            return lo + width * rng.beta(2.0, 2.0, n)
        vals, probs = self.nodes()
        return vals[rng.choice(vals.shape[0], size=n, p=probs)]

    def draw_rounds(self, rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        """Draw each request's round count."""
        if self.rounds == "lognormal":
            return np.ceil(np.exp(rng.normal(math.log(30.0), 1.0, n)))
        if self.rounds == "pareto":
            return np.ceil(10.0 * rng.uniform(size=n) ** (-1 / 1.5))
        return np.full(n, 40.0)


@dataclass(frozen=True)
class Truth:
    """Population tokens/s of every depth and policy, the best depth and the margin m."""

    depth: dict[int, float]
    policy: list[float]
    best_depth: int = field(init=False)
    m: float = field(init=False)

    def __post_init__(self) -> None:
        best = max(self.depth, key=lambda d: self.depth[d])
        object.__setattr__(self, "best_depth", best)
        object.__setattr__(self, "m", MARGIN * self.depth[best])

    @property
    def delta(self) -> float:
        """Best policy − best depth (the target of the held-out verdict)."""
        return max(self.policy) - self.depth[self.best_depth]


def truth(w: World) -> Truth:
    """Return the world's exact tokens/s (n independent of p; sums over the law of p)."""
    p, wt = w.nodes()
    depth = {d: 1000.0 * float(wt @ kept(p, d)[0]) / ms(d) for d in DEPTHS}
    pol = []
    for k in w.policies:
        f = k.per_round(p)
        pol.append(1000.0 * float(wt @ f["R"]) / float(wt @ f["cost"]))
    return Truth(depth, pol)


# ------------------------------------------------------------------------------------------------
# Worlds with Δ_true = κ·m set exactly


def spread(rounds: str, kappa: float | None, taus: tuple[float, ...] = (0.4,)) -> World:
    """``spread``; κ None: the identical policy (τ = 0); else each τ's δ solved for κ·m."""
    base = World("spread", rounds, (), beta=(0.1, 0.85))
    tr = truth(base)
    D = tr.best_depth
    if kappa is None:
        return World("identical", rounds, (Policy(D),), beta=(0.1, 0.85))
    return World(
        "spread",
        rounds,
        tuple(_solve_delta(base, Policy(D, tau=t), kappa) for t in taus),
        beta=(0.1, 0.85),
    )


def degenerate(kappa: float | None) -> World:
    """``degenerate``: ``sparse``'s two kinds of round mixed inside every request alike.

    Every request has 40 rounds, a share π of them hard (p = 0.15, where the policy stops) and
    no noise: every request's sums are the same, zero variance. κ None: π = 0, the identical
    policy.
    """
    if kappa is None:
        return _sparse_world("constant", 0.0, within=True)
    return sparse("constant", kappa, within=True)


def _solve_delta(base: World, pol: Policy, kappa: float) -> Policy:
    tr = truth(base)
    target = tr.depth[tr.best_depth] + kappa * tr.m
    p, wt = base.nodes()
    f = pol.per_round(p)
    delta = 1000.0 * float(wt @ f["R"]) / target - float(wt @ f["cost"])
    if delta < 0:
        raise ValueError(f"κ = {kappa}: the natural policy gains less; δ = {delta} < 0")
    return Policy(pol.D, delta, pol.tau, pol.width, pol.share, pol.cut)


def _sparse_world(rounds: str, pi: float, *, within: bool = False) -> World:
    atoms = ((0.8, 1.0 - pi), (0.15, pi)) if pi > 0 else ((0.8, 1.0),)
    D = truth(World("", rounds, (), atoms=((0.8, 1.0),))).best_depth
    name = "degenerate" if within else "sparse"
    pol = Policy(D, share=1.0, cut=0.5) if pi > 0 else Policy(D)
    return World(name, rounds, (pol,), atoms=atoms, noise=not within, within=within)


def sparse(rounds: str, kappa: float, *, within: bool = False) -> World:
    """``sparse``: π (share of p = 0.15 requests, where the policy stops) solved for κ·m."""

    def gap(pi: float) -> float:
        tr = truth(_sparse_world(rounds, pi, within=within))
        return tr.delta - kappa * tr.m

    pi = optimize.brentq(gap, 1e-6, 0.2, xtol=1e-15, rtol=1e-15)
    w = _sparse_world(rounds, pi, within=within)
    tr = truth(w)
    # the policy is depth D on the p = 0.8 requests; D must stay the best depth
    assert tr.best_depth == w.policies[0].D, (pi, tr.best_depth)
    return w


# ------------------------------------------------------------------------------------------------
# One dataset: the sides as a replay pass holds them


@dataclass(frozen=True)
class Dataset:
    """One dataset's request table and sides."""

    codes: RequestCodes
    depths: dict[int, ArmSide]
    policies: list[tuple[ArmSide, ArmSide, ArmSide]]  # retained, length (Σ E[L]), cost (Σ ms)

    def paired(self, a: ArmSide, b: ArmSide) -> PairedSums:
        """Pair two sides on the table (:meth:`ReplayResult.paired`)."""
        return pair_sides(a, b, self.codes, BUCKETS)

    def candidates(self) -> Candidates:
        """Every depth and policy as ``sweep`` gives them to the held-out choice."""
        return Candidates(
            {d: (s, ms(d)) for d, s in self.depths.items()},
            {f"policy{j}": (r, c) for j, (r, _, c) in enumerate(self.policies)},
        )


def draw(w: World, n: int, rng: np.random.Generator) -> Dataset:
    """Draw one dataset of ``n`` requests from world ``w``."""
    rounds = w.draw_rounds(rng, n)
    p = np.zeros(n) if w.within else w.draw_p(rng, n)
    u = rng.uniform(-math.sqrt(3), math.sqrt(3), n) if w.noise else np.zeros(n)
    keys = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(
        0, 2, n, dtype=np.uint64
    )
    codes = RequestCodes(
        ids=[f"r{i:07d}" for i in range(n)],
        keys=keys,
        family=np.zeros(n, np.int32),
        families=["all"],
        rank=np.arange(n, dtype=np.int64),
    )
    req, bucket = np.arange(n, dtype=np.int64), np.zeros(n, np.int32)
    root = np.sqrt(rounds)

    def side(name: str, t: NDArray[np.float64], d: int) -> ArmSide:
        return ArmSide(name, req, bucket, rounds, np.ascontiguousarray(t), d)

    vals, probs = w.nodes()

    def per_request(f: Callable[[NDArray[np.float64]], NDArray[np.float64]]) -> Any:
        """f per request: at its p, or (``within``) the round-mixture of f over the atoms."""
        return np.full(n, float(probs @ f(vals))) if w.within else f(p)

    depths = {}
    for d in DEPTHS:
        mean = per_request(lambda q, d=d: kept(q, d)[0])
        sd = per_request(lambda q, d=d: np.sqrt(kept(q, d)[1]))
        depths[d] = side(f"t1@{d}", rounds * mean + root * sd * u, d)
    pols = []
    for j, k in enumerate(w.policies):
        name = f"policy{j}"
        if k.identical:  # the policy is depth D on every round: its sums are D's, to the bit
            t = depths[k.D].t
            c, el = rounds * ms(k.D), rounds * float(k.D)
        else:
            f = {
                key: per_request(lambda q, key=key, k=k: k.per_round(q)[key])
                for key in ("R", "sd", "cost", "sd_cost", "L")
            }
            t = rounds * f["R"] + root * f["sd"] * u
            c = rounds * f["cost"] + root * f["sd_cost"] * u
            el = rounds * f["L"]
        pols.append(
            (side(name, t, k.D), side(f"{name} (L)", el, k.D), side(f"{name} (ms)", c, k.D))
        )
    return Dataset(codes, depths, pols)


# ------------------------------------------------------------------------------------------------
# (a) the cell's tokens/s interval of a policy, through sweep's own functions


def percentile(reps: NDArray[np.float64], level: float) -> tuple[float | None, float | None]:
    """0.4.0's percentile interval of replicates (``specreplay.pipelines.policies._percentile``)."""
    ok = reps[np.isfinite(reps)]
    if ok.shape[0] < 2:
        return None, None
    lo, hi = np.quantile(ok, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _cell_pairings(ds: Dataset) -> list[Pairing]:
    ret, length, cost = ds.policies[0]
    ref = ds.depths[ret.depth or 1]
    return [Pairing(ds.paired(ref, s), ref.name, s.name) for s in (ret, length, cost)]


def cell_interval(
    ds: Dataset, opts: SweepOptions, seed: int
) -> tuple[tuple[float, float, float], NDArray[np.float64]]:
    """Return the cell's policy tokens/s with its interval and its joint replicates (sweep's path).

    The sides are planned, resampled in one pass, compared and turned into the cell's
    :class:`PolicyFigure` exactly as ``sweep`` does (:func:`compare_policies`, ``_figure``).
    """
    plan = PolicyPlan({"arm": {"policy0": PolicySides(*_cell_pairings(ds))}})
    plan = plan.with_pairings(iter(resampled(plan.pairings(), opts.boot, seed)))
    comps = compare_policies(plan)
    fig, reps = _figure(
        "arm", "policy0", comps["arm"]["policy0"], 0, opts.boot.level, Label.SIMULATED
    )
    assert fig.tokens_per_s is not None and reps is not None
    lo = fig.tokens_per_s_lo if fig.tokens_per_s_lo is not None else math.nan
    hi = fig.tokens_per_s_hi if fig.tokens_per_s_hi is not None else math.nan
    return (fig.tokens_per_s, lo, hi), reps


def percentile_interval(ds: Dataset, opts: SweepOptions, seed: int) -> tuple[float, float, float]:
    """0.4.0's interval: the percentile interval of sweep's joint replicates of tokens/s.

    The same replicates (:func:`resampled`), 1000·(Σ t / Σ n) / (Σ cost / Σ n) of the pooled
    cell and the same percentile; checked equal, to the bit, to the percentile of
    :func:`cell_interval`'s replicates on the first dataset of every setting.
    """
    ret, _, cost = resampled(_cell_pairings(ds), opts.boot, seed)
    assert ret.replicates is not None and cost.replicates is not None
    r, c = ret.replicates.sum(axis=(1, 2)), cost.replicates.sum(axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = 1000.0 * (r[:, 3] / r[:, 2]) / (c[:, 3] / c[:, 2])
    lo, hi = percentile(reps, opts.boot.level)
    # the point as compare() sums it: the pooled cell's finest cells, then R and ms per round
    _, _, nb, tb = point_sums(ret.ps).reshape(-1, 4).sum(axis=0)
    _, _, nc, tc = point_sums(cost.ps).reshape(-1, 4).sum(axis=0)
    point = 1000.0 * float(tb / nb) / float(tc / nc)
    return point, math.nan if lo is None else lo, math.nan if hi is None else hi


def studentized(ds: Dataset, level: float) -> tuple[float, float]:
    """sweep's interval now: R's default interval (CR2, effective df, Hall) of Σt/Σc.

    :func:`specreplay.stats.cr2.ratio_test` with the cost c_i in the place of the rounds (NaN
    bounds where fewer than 3 requests are off the ratio: no depth bounds tokens/s); checked
    equal, to the bit, to :func:`cell_interval` on the first dataset of every setting.
    """
    ret, _, cost = ds.policies[0]
    lo, hi = ratio_test(cost.t, ret.t, depth=None).interval(level)
    return 1000.0 * lo, 1000.0 * hi


# ------------------------------------------------------------------------------------------------
# (b, c) the held-out choice


def choice(ds: Dataset, opts: SweepOptions) -> dict[str, Any]:
    """Return :func:`held_out_choice` of the dataset (sweep's code path)."""
    return held_out_choice(ds.candidates(), _half(ds.codes.keys), opts.boot)


def _held(s: ArmSide, keep: NDArray[np.bool_]) -> ArmSide:
    m = keep[s.request]
    return ArmSide(s.name, s.request[m], s.bucket[m], s.n[m], s.t[m], s.depth)


def percentile_held_out(
    ds: Dataset, h: dict[str, Any], opts: SweepOptions, seed: int
) -> dict[str, Any]:
    """0.4.0's held-out interval: the percentile of Δ tokens/s over a resample of the held half.

    As 0.4.0's ``_delta`` did it (the policy's retained and cost sides paired with the chosen
    depth, resampled in one pass, Δ = 1000·(Σt_p/Σn)/(Σc_p/Σn) − 1000·Σt_d/Σn/ms(d), percentile
    interval), and the same Δ against every other depth from the same replicates (its lower
    bound), for today's rules on 0.4.0's interval.
    """
    keep = _half(ds.codes.keys)
    pol = int(h["policy"].removeprefix("policy"))
    ret, _, cost = (_held(s, keep) for s in ds.policies[pol])
    d = h["depth"]
    order = [d, *(e for e in ds.depths if e != d)]
    sides = {e: _held(ds.depths[e], keep) for e in order}
    pairs = [Pairing(ds.paired(sides[d], ret), "d", "p")]
    pairs += [Pairing(ds.paired(sides[d], cost), "d", "c")]
    pairs += [Pairing(ds.paired(sides[e], ret), "e", "p") for e in order[1:]]
    sums = []
    for p in resampled(pairs, opts.boot, seed):
        assert p.replicates is not None
        sums.append(p.replicates.sum(axis=(1, 2)))  # pooled: (n_boot, 4) = n_a, t_a, n_b, t_b
    r, c, *rest = sums
    with np.errstate(divide="ignore", invalid="ignore"):
        tps_p = 1000.0 * (r[:, 3] / r[:, 2]) / (c[:, 3] / c[:, 2])
        tps = {
            e: 1000.0 * x[:, 1] / x[:, 0] / ms(e) for e, x in zip(order, [r, *rest], strict=True)
        }
    lo, hi = percentile(tps_p - tps[d], opts.boot.level)
    los = {e: percentile(tps_p - tps[e], opts.boot.level)[0] for e in order}
    return {"lo": lo, "hi": hi, "los": los}


@dataclass
class Tally:
    """Counts over datasets of one setting."""

    n: int = 0
    counts: dict[str, float] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    sq: dict[str, float] = field(default_factory=dict)

    def hit(self, key: str, yes: bool) -> None:
        """Count one yes/no event."""
        self.counts[key] = self.counts.get(key, 0.0) + float(yes)

    def add(self, key: str, x: float) -> None:
        """Add one value of a mean."""
        self.sums[key] = self.sums.get(key, 0.0) + x
        self.sq[key] = self.sq.get(key, 0.0) + x * x

    def share(self, key: str, of: str | None = None) -> str:
        """Return a share ± its MC SE (``of``: the count of datasets it is a share of)."""
        n = self.counts.get(of, 0.0) if of else self.n
        if n == 0:
            return "—"
        p = self.counts.get(key, 0.0) / n
        return f"{p:.3f} ± {math.sqrt(max(p * (1 - p), 0.25 / n) / n):.3f}"

    def mean(self, key: str, scale: float = 1.0) -> str:
        """Return a mean ± its MC SE, divided by ``scale``."""
        if self.n == 0 or key not in self.sums:
            return "—"
        mu = self.sums[key] / self.n
        var = max(self.sq[key] / self.n - mu * mu, 0.0)
        return f"{mu / scale:+.2f} ± {math.sqrt(var / self.n) / scale:.2f}"


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


def study_cells(
    worlds: list[tuple[str, World]],
    sizes: tuple[int, ...],
    n_data: int,
    opts: SweepOptions,
    seed: int,
) -> list[tuple[str, str, list[str]]]:
    """(a): coverage of the policy's tokens/s interval (0.4.0's percentile; sweep's now)."""
    rows = []
    for wi, (label, w) in enumerate(worlds):
        target = truth(w).policy[0]
        pct, stud = [], []
        for n in sizes:
            t = Tally()
            for i in range(n_data):
                ds = draw(w, n, _rng(seed, 1, wi, n, i))
                point, lo, hi = percentile_interval(ds, opts, seed + i)
                s_lo, s_hi = studentized(ds, opts.boot.level)
                if i == 0:  # the fast paths are sweep's own figures, to the bit
                    fig, reps = cell_interval(ds, opts, seed + i)
                    assert np.array_equal(fig, [point, s_lo, s_hi], equal_nan=True), fig
                    assert percentile(reps, opts.boot.level) == (lo, hi)
                t.n += 1
                t.hit("cover", lo <= target <= hi)
                t.hit("above", hi < target)
                t.hit("zero", hi - lo <= 1e-9 * abs(point))
                t.hit("s cover", s_lo <= target <= s_hi)
                t.hit("s above", s_hi < target)
                t.hit("s null", math.isnan(s_lo))
            pct.append(
                f"{t.share('cover')} (above {t.share('above')}; zero width "
                f"{t.counts.get('zero', 0) / t.n:.2f})"
            )
            stud.append(
                f"{t.share('s cover')} (above {t.share('s above')}; null "
                f"{t.counts.get('s null', 0) / t.n:.2f})"
            )
        rows.append((label, "percentile (0.4.0)", pct))
        rows.append((label, "CR2-eff-Hall (now)", stud))
    return rows


# ------------------------------------------------------------------------------------------------
# (b, c) the verdict rules, each recomputed from the held-out figures sweep reports

RULES = ("0.4.0", "percentile + rules", "default interval alone", "now but < 50", "now")
"""``0.4.0``: its percentile interval against the chosen depth, PAYS when lo > m, DOES NOT PAY
when hi < m; ``percentile + rules``: that interval with today's rules (PAYS only when lo > m
against every depth; INCONCLUSIVE with < 50 held-out requests, < 3 of them differing or no
width); ``default interval alone``: today's interval (CR2-eff-Hall of Δ/tokens/s_depth) against
the chosen depth without the rules; ``now but < 50``: sweep's rule without its minimum of 50
held-out requests; ``now``: sweep's verdict (that interval and the rules; recomputed here from
its fields and checked equal)."""


def verdicts(h: dict[str, Any], old: dict[str, Any]) -> dict[str, str]:
    """Return the verdict of each rule of :data:`RULES` (``old``: :func:`percentile_held_out`)."""
    m = h["margin_tokens_per_s"]
    margins = {a["depth"]: a["margin_tokens_per_s"] for a in h["against"]}

    def rule(pays: bool, dnp: bool) -> str:
        return "PAYS" if pays else "DOES NOT PAY" if dnp else "INCONCLUSIVE"

    lo, hi = old["lo"], old["hi"]
    v0 = rule(lo is not None and lo > m, hi is not None and hi < m)
    by_rule = h["n_requests"] < MIN_REQUESTS or h["differing_requests"] < MIN_DIFFERING
    flat = lo is None or hi is None or hi - lo <= 1e-9 * abs(h["tokens_per_s_depth"])
    every = all(x is not None and x > margins[e] for e, x in old["los"].items())
    v1 = "INCONCLUSIVE" if by_rule or flat else rule(every, hi is not None and hi < m)
    rlo, rhi = h["rel_lo"], h["rel_hi"]
    v2 = rule(rlo is not None and rlo > MARGIN, rhi is not None and rhi < MARGIN)
    every = all(a["rel_lo"] is not None and a["rel_lo"] > MARGIN for a in h["against"])
    no_width = h["lo"] is None or h["hi"] - h["lo"] <= 1e-9 * abs(h["tokens_per_s_depth"])
    few = h["differing_requests"] < MIN_DIFFERING
    v3 = rule(every, rhi is not None and rhi < MARGIN)
    v3 = "INCONCLUSIVE" if few or no_width else v3
    now = "INCONCLUSIVE" if h["n_requests"] < MIN_REQUESTS else v3
    assert now == h["verdict"], (now, h)
    return {
        "0.4.0": v0,
        "percentile + rules": v1,
        "default interval alone": v2,
        "now but < 50": v3,
        "now": now,
    }


def _above(delta: float, m: float) -> bool:
    """Whether a true Δ is above the margin (the boundary Δ = m, solved to ~1e-14, is not)."""
    return delta > m * (1 + 1e-9)


def _below(delta: float, m: float) -> bool:
    """Whether a true Δ is below the margin (not at the boundary)."""
    return delta < m * (1 - 1e-9)


def study_choice(w: World, n: int, n_data: int, opts: SweepOptions, seed: int, key: int) -> Tally:
    """(b, c): each rule's verdict rates, the held-out interval's coverage, the winner's curse.

    Truths: the **target** is the chosen policy − the best depth (what PAYS and DOES NOT PAY
    claim), the **conditional** one the chosen policy − the chosen depth.
    """
    tr = truth(w)
    pol_tps = {f"policy{j}": v for j, v in enumerate(tr.policy)}
    best = tr.depth[tr.best_depth]
    t = Tally()
    for i in range(n_data):
        ds = draw(w, n, _rng(seed, 2, key, n, i))
        ch = choice(ds, opts)
        t.n += 1
        if "held_out" not in ch:
            t.hit("null", True)
            continue
        h, ins = ch["held_out"], ch["in_sample"]
        target = pol_tps[h["policy"]] - best
        cond = pol_tps[h["policy"]] - tr.depth[h["depth"]]
        m_cond = MARGIN * tr.depth[h["depth"]]
        t.hit("answered", True)
        old = percentile_held_out(ds, h, opts, seed + i)
        for rule, v in verdicts(h, old).items():
            t.hit(f"{v}/{rule}", True)
            t.hit(f"false PAYS/{rule}", v == "PAYS" and not _above(target, tr.m))
            t.hit(f"false DNP/{rule}", v == "DOES NOT PAY" and not _below(target, tr.m))
            t.hit(f"false PAYS|c/{rule}", v == "PAYS" and not _above(cond, m_cond))
            t.hit(f"false DNP|c/{rule}", v == "DOES NOT PAY" and not _below(cond, m_cond))
        t.hit("no width", h["lo"] is None or h["hi"] - h["lo"] <= 1e-9 * h["tokens_per_s_depth"])
        t.hit("cover|c", h["lo"] is not None and h["lo"] <= cond <= h["hi"])
        t.hit("cover|c/0.4.0", old["lo"] is not None and old["lo"] <= cond <= old["hi"])
        t.hit("best depth", h["depth"] == tr.best_depth)
        t.hit("few differing", h["differing_requests"] < MIN_DIFFERING)
        t.add("held bias", h["delta_tokens_per_s"] - cond)
        ins_cond = pol_tps[ins["policy"]] - tr.depth[ins["depth"]]
        t.add("in-sample bias", ins["delta_tokens_per_s"] - ins_cond)
        t.add("held - target", h["delta_tokens_per_s"] - target)
        t.add("held policy bias", h["tokens_per_s_policy"] - pol_tps[h["policy"]])
        t.add("in-sample policy bias", ins["tokens_per_s_policy"] - pol_tps[ins["policy"]])
        t.add("held depth bias", h["tokens_per_s_depth"] - tr.depth[h["depth"]])
        t.add("in-sample depth bias", ins["tokens_per_s_depth"] - tr.depth[ins["depth"]])
        t.add("in-sample - target", ins["delta_tokens_per_s"] - (pol_tps[ins["policy"]] - best))
        t.hit("in-sample PAYS", ins["rel_lo"] is not None and ins["rel_lo"] > MARGIN)
    return t


SETTINGS: list[tuple[str, str, Callable[[str], World]]] = [
    ("null", "identical (τ = 0)", lambda r: spread(r, None)),
    ("null", "spread, Δ = 0", lambda r: spread(r, 0.0)),
    ("boundary", "spread, Δ = m", lambda r: spread(r, 1.0)),
    ("boundary", "sparse, Δ = m", lambda r: sparse(r, 1.0)),
    ("power", "spread, Δ = 2m", lambda r: spread(r, 2.0)),
    ("power", "sparse, Δ = 2m", lambda r: sparse(r, 2.0)),
    ("power", "spread, Δ = 5m", lambda r: spread(r, 5.0)),
    ("power", "sparse, Δ = 5m", lambda r: sparse(r, 5.0)),
    (
        "curse",
        "20 policies, each Δ = 0",
        lambda r: spread(r, 0.0, tuple(np.linspace(0.25, 0.55, 20))),
    ),
]
DEGENERATE: list[tuple[str, str, Callable[[str], World]]] = [
    ("null", "degenerate, identical", lambda r: degenerate(None)),
    ("boundary", "degenerate, Δ = m", lambda r: degenerate(1.0)),
    ("power", "degenerate, Δ = 2m", lambda r: degenerate(2.0)),
]


def _table(head: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()


Results = dict[tuple[str, str, str, int], Tally]


def _sh(t: Tally, k: str) -> str:
    return t.share(k, "answered")


def _rows(
    results: Results, groups: tuple[str, ...], cell: Callable[[Tally], list[str]]
) -> list[list[str]]:
    return [[lab, r, str(n), *cell(t)] for (g, lab, r, n), t in results.items() if g in groups]


def print_cells(rows: list[tuple[str, str, list[str]]], sizes: tuple[int, ...]) -> None:
    """(a)."""
    print(
        "## (a) coverage of the 95% tokens/s interval of a policy in a cell "
        "(± MC SE; the truth above the interval; zero-width or null intervals)\n"
    )
    _table(["world", "interval", *(f"n = {n}" for n in sizes)], [[w, k, *c] for w, k, c in rows])


def print_verdicts(results: Results) -> None:
    """(b): false verdicts, 0.4.0 and now, and which change removes which."""
    print(
        "## (b) false verdicts where the policy does not pay (null) or sits at the margin "
        "(boundary); truth: the chosen policy − the best depth\n"
    )
    keys = ["false PAYS/0.4.0", "false PAYS/now", "false DNP/0.4.0", "false DNP/now"]
    keys += ["INCONCLUSIVE/now", "few differing", "no width", "cover|c/0.4.0", "cover|c"]
    keys += ["best depth"]
    head = ["false PAYS 0.4.0", "false PAYS now", "false DNP 0.4.0", "false DNP now"]
    head += ["INCONCLUSIVE now", "< 3 differing", "no width", "Δ covers (cond.) 0.4.0"]
    head += ["Δ covers (cond.) now", "best depth chosen"]
    _table(
        ["setting", "rounds", "n", *head],
        _rows(results, ("null", "boundary"), lambda t: [_sh(t, k) for k in keys]),
    )
    print(
        "## (b) which change removes which false verdict: false PAYS / false DOES NOT PAY "
        "(conditional truth, the chosen policy − the chosen depth, in brackets)\n"
    )

    def per_rule(t: Tally) -> list[str]:
        return [
            f"{_sh(t, f'false PAYS/{r}')} [{_sh(t, f'false PAYS|c/{r}')}] / "
            f"{_sh(t, f'false DNP/{r}')} [{_sh(t, f'false DNP|c/{r}')}]"
            for r in RULES
        ]

    _table(["setting", "rounds", "n", *RULES], _rows(results, ("null", "boundary"), per_rule))


def print_curse(results: Results) -> None:
    """(b): the winner's curse of a search over 20 equal policies."""
    print(
        "## (b) winner's curse: 20 policies of equal true tokens/s (each Δ = 0 against the "
        "best depth); estimate − truth of the chosen policy's and depth's tokens/s and of their "
        "Δ, in units of m (± MC SE)\n"
    )
    means = ["in-sample policy bias", "held policy bias", "in-sample depth bias"]
    means += ["held depth bias", "in-sample bias", "held bias", "held - target"]
    head = ["policy: in-sample", "policy: held-out", "depth: in-sample", "depth: held-out"]
    head += ["Δ: in-sample", "Δ: held-out", "held-out Δ̂ − target", "in-sample lo > m"]
    head += ["held-out PAYS 0.4.0", "held-out PAYS now"]

    def cells(t: Tally, m: float) -> list[str]:
        shares = [_sh(t, k) for k in ("in-sample PAYS", "PAYS/0.4.0", "PAYS/now")]
        return [t.mean(k, m) for k in means] + shares

    body = [
        [r, str(n), *cells(t, truth(spread(r, 0.0)).m)]
        for (g, _, r, n), t in results.items()
        if g == "curse"
    ]
    _table(["rounds", "n", *head], body)


def print_power(results: Results, sizes: tuple[int, ...]) -> None:
    """(c): P(PAYS) under each rule."""
    print("## (c) power: P(PAYS) (± MC SE), under each rule\n")
    body = [
        [lab, r, rule, *(_sh(results[(g, lab, r, m)], f"PAYS/{rule}") for m in sizes)]
        for g, lab, r, n in results
        if g == "power" and n == sizes[0]
        for rule in RULES
    ]
    _table(["setting", "rounds", "rule", *(f"n = {n}" for n in sizes)], body)


def main() -> None:
    """Run the study and print its tables."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="~1 minute: n = 20, 200, few datasets")
    ap.add_argument("--datasets", type=int, default=None, help="per setting (default 250; 20)")
    ap.add_argument("--sizes", default=None, help="requests per dataset, comma-separated")
    ap.add_argument("--only", default=None, help="(b, c) settings of these groups only")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20261214)
    args = ap.parse_args()
    n_data = args.datasets or (20 if args.quick else 250)
    sizes = (20, 200) if args.quick else SIZES
    sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else sizes
    groups = tuple(args.only.split(",")) if args.only else None
    opts = SweepOptions.build(arms="t1@8", cost="linear:20:1", n_boot=args.n_boot)
    started = time.perf_counter()
    print(
        f"# policy study: seed {args.seed}, {n_data} datasets per setting of (b, c) (a third "
        f"for degenerate ones), {3 * n_data} of (a), n_boot {args.n_boot}, "
        f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores), "
        f"{time.strftime('%Y-%m-%d')}\n",
        flush=True,
    )
    kinds = ("lognormal", "pareto")
    if groups is None:
        worlds = [(f"{r}/spread", spread(r, 2.0)) for r in kinds]
        worlds += [(f"{r}/sparse", sparse(r, 2.0)) for r in kinds]
        worlds += [("constant/degenerate", degenerate(2.0))]
        print_cells(study_cells(worlds, sizes, 3 * n_data, opts, args.seed), sizes)
        print(f"({time.perf_counter() - started:.0f} s)\n", flush=True)
    results: Results = {}
    plan = [(g, lab, make, r) for g, lab, make in SETTINGS for r in kinds]
    plan += [(g, lab, make, "constant") for g, lab, make in DEGENERATE]
    for key, (group, label, make, r) in enumerate(plan):
        if groups is not None and group not in groups:
            continue
        w = make(r)
        for n in sizes:
            k = max(n_data // 3, 10) if r == "constant" else n_data
            results[(group, label, r, n)] = study_choice(w, n, k, opts, args.seed, 100 * key + n)
    print_verdicts(results)
    print_curse(results)
    print_power(results, sizes)
    print(f"(total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
