"""Small cells: which test may call DIFFERENT below the verdict minimum (issue 16, item 3).

See docs/calibration.md#small-cells.

Below :data:`specreplay.stats.cr2.MIN_REQUESTS` (50) requests the default CR2 interval may not
give a verdict: in the developers' heavy-tailed, skewed settings its P(DIFFERENT | Δ = 0) was
8.5% at 10 requests. This study measures, on family cells of n ∈ {10, 20, 30, 40} requests, the
false-DIFFERENT rate and the power of candidate tests of Δ = 0, from 4,000 datasets (4 family
cells each) per setting and size:

* ``signflip``: the sign-flip randomisation test of the per-request differences d_i = t_bi − t_ai
  (paired: n_ai = n_bi). The statistic Σ d_i against Σ s_i d_i over sign vectors s (every one of
  the 2^n at n ≤ 12, else B = 9,999 drawn); p = (1 + #{|Σ s d| ≥ |Σ d|}) / (B + 1) taken
  two-sided as 2·min of the one-sided counts. Exact when each d_i is symmetric about 0 (a null
  stronger than Δ = 0); asymptotically valid for E[d] = 0 without symmetry (the randomisation
  variance Σ d_i² estimates n·E[d²] = n·Var d under the null). The statistic is monotone in the
  one-sample t statistic of d given Σ d_i², so the studentised sign-flip test is the same test.
* ``cr2``: today's default (CR2, effective df, Hall; :func:`specreplay.stats.cr2.paired_tests`)
  without the request minimum, for reference; and at n = 50 the default's own rate (the issue's
  second allowance: no higher than the default at 50 requests in that setting).
* ``bernstein``: the empirical-Bernstein bound (Maurer & Pontil 2009) on the per-request mean of
  d_i/n_i ∈ [−d, d] (a cap of d tokens per round: range 2d = 10): half-width
  √(2 V ln(4/α) / n) + 7·2d·ln(4/α) / (3(n − 1)); reported as its half-width only (at n ≤ 40 its
  second term alone exceeds 2 tokens/round, more than any Δ the settings hold: no power).

Settings: the calibration grid of :mod:`hardcases` (rounds heavy | mild × effects skew+, skew−,
exp, sparse, sparse-mixed × truths free, margin, zero; zero is the null) and two added here, each
at Δ/R_a = 0 (``zero``) and +1.0% (``plus1``), with the grid's families, rounds and binomial
coupling:

* ``few-changed``: 10% of requests changed, α^b = clip(α^a + c + 0.03·N(0, 1), 0, 1), the rest
  identical (t_b = t_a): Δ/R_a,f = 0.1·d·c/R_a,f, so c = 0 (zero) or 0.01·R_a,f/(0.1·d)
  (+1.0%: c = 0.06–0.08); the clip binds with probability < 1e-8 (α^a ∈ [0.25, 0.75]).
* ``smooth``: every request changed, α^b = clip(α^a + c + 0.02·(Exp(1) − 1), 0, 1): c = 0 or
  0.01·R_a,f/d; the clip binds where Exp(1) > 12 (probability 6e-6, a bias below 1e-7).

A power scan (``--power``) gives, for ``smooth`` and ``few-changed`` at n = 20, the rejection
rate of each test against the true Δ/R_a, and the smallest effect rejected with probability 0.8.

Usage::

    PYTHONPATH=. python bench/smallcells.py [--datasets 4000] [--sizes 10,20,30,40]
        [--seed 20261207] [--out smallcells.json] [--power]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hardcases as hc

from specreplay.stats.cr2 import paired_tests

ALPHA = 0.05
EXHAUSTIVE_MAX = 12
N_FLIPS = 9_999
NEW_EFFECTS = ("few-changed", "smooth")
NEW_TRUTHS = ("zero", "plus1")
FEW_SHARE = 0.1
FEW_SIGMA = 0.03
SMOOTH_SCALE = 0.02
COVERAGE_SETS = 1000


def family_ra() -> NDArray[np.float64]:
    """R_a of each family: 1 + d·E_f[p]."""
    return np.array([1 + hc.DEPTH * (0.25 + 0.5 * a / (a + b)) for a, b in hc.BETA_AB])


@dataclass(frozen=True)
class NewSetting:
    """A setting added by issue 16: ``few-changed`` or ``smooth`` at a true Δ/R_a."""

    rounds: str
    effect: str
    rel: float  # the true Δ/R_a of every family (so of the pooled cell)

    @property
    def name(self) -> str:
        return f"{self.rounds}/{self.effect}/{self.rel:+.4f}"

    def shift(self) -> NDArray[np.float64]:
        """c of each family."""
        share = FEW_SHARE if self.effect == "few-changed" else 1.0
        return self.rel * family_ra() / (share * hc.DEPTH)


def draw_new(st: NewSetting, n: int, n_sets: int, rng: np.random.Generator) -> NDArray[np.float64]:
    """n_sets datasets of 4 families × n requests: (n_sets, 4n, 3) n, t_a, t_b (as hc.draw)."""
    shape = (n_sets, hc.FAMILIES, n)
    if st.rounds == "mild":
        rounds = rng.integers(5, 61, shape).astype(np.float64)
    else:
        m = np.log(np.array(hc.HEAVY_M))[None, :, None]
        rounds = np.minimum(np.ceil(np.exp(m + hc.HEAVY_SIGMA * rng.standard_normal(shape))), 400)
        rounds = np.maximum(rounds, 1.0)
    a = np.array([x for x, _ in hc.BETA_AB])[None, :, None]
    b = np.array([y for _, y in hc.BETA_AB])[None, :, None]
    p = 0.25 + 0.5 * rng.beta(np.broadcast_to(a, shape), np.broadcast_to(b, shape))
    c = st.shift()[None, :, None]
    if st.effect == "few-changed":
        pb = np.clip(p + c + FEW_SIGMA * rng.standard_normal(shape), 0.0, 1.0)
        pb = np.where(rng.random(shape) < FEW_SHARE, pb, p)
    else:
        pb = np.clip(p + c + SMOOTH_SCALE * (rng.exponential(1.0, shape) - 1.0), 0.0, 1.0)
    return hc.couple(rounds, p, pb - p, rng)


def flips(n: int, seed: int) -> NDArray[np.float64]:
    """Sign vectors (B, n): all 2^n − 1 but the identity at n ≤ 12, else 9,999 drawn."""
    if n <= EXHAUSTIVE_MAX:
        codes = np.arange(1, 2**n, dtype=np.int64)
        bits = (codes[:, None] >> np.arange(n)[None, :]) & 1
        return 1.0 - 2.0 * bits.astype(np.float64)
    rng = np.random.default_rng([seed, n])
    return 1.0 - 2.0 * rng.integers(0, 2, (N_FLIPS, n)).astype(np.float64)


def signflip_p(d: NDArray[np.float64], signs: NDArray[np.float64]) -> NDArray[np.float64]:
    """Two-sided sign-flip p-values of Σ d = 0 for each row of d (cells, n)."""
    t = d.sum(axis=1)
    ts = d @ signs.T  # (cells, B), exact: integer sums
    b1 = signs.shape[0] + 1.0
    up = (1.0 + (ts >= t[:, None]).sum(axis=1)) / b1
    down = (1.0 + (ts <= t[:, None]).sum(axis=1)) / b1
    return np.minimum(1.0, 2.0 * np.minimum(up, down))


def cr2_p(cells: NDArray[np.float64]) -> NDArray[np.float64]:
    """The default's difference p-value (Δ/R_a) of each cell (cells, n, 3), no request minimum."""
    out = np.empty(cells.shape[0])
    for i, c in enumerate(cells):
        sums = np.stack([c[:, 0], c[:, 1], c[:, 0], c[:, 2]], axis=1)
        _, rel = paired_tests(sums, depths=(hc.DEPTH, hc.DEPTH))
        out[i] = rel.p_difference()
    return out


def bernstein_half(cells: NDArray[np.float64]) -> NDArray[np.float64]:
    """Empirical-Bernstein half-width (tokens/round) of each cell's per-request mean."""
    z = (cells[:, :, 2] - cells[:, :, 1]) / cells[:, :, 0]
    n = z.shape[1]
    v = z.var(axis=1, ddof=1)
    log = math.log(4.0 / ALPHA)
    return np.sqrt(2.0 * v * log / n) + 7.0 * 2.0 * hc.DEPTH * log / (3.0 * (n - 1.0))


def rate(x: NDArray[np.bool_]) -> list[float]:
    """[rate, MC SE]."""
    r = float(x.mean())
    return [r, math.sqrt(max(r * (1 - r), 1e-12) / x.size)]


def signflip_rel_interval(cells: NDArray[np.float64], signs: NDArray[np.float64], level: float
                          ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:  # fmt: skip
    """The sign-flip interval of Δ/R_a of each cell (as specreplay.stats.signflip), by chunks."""
    sets = (1.0 - signs) / 2.0  # the flipped requests
    b = sets.shape[0]
    k = math.ceil((b + 1) * (1.0 - level) / 2.0 - 1e-9) - 2
    lo, hi = np.full(cells.shape[0], -np.inf), np.full(cells.shape[0], np.inf)
    if k < 0:
        return lo, hi
    for s0 in range(0, cells.shape[0], 500):
        c = cells[s0 : s0 + 500]
        ratio = ((c[:, :, 2] - c[:, :, 1]) @ sets.T) / (c[:, :, 1] @ sets.T)
        lo[s0 : s0 + 500] = np.partition(ratio, k, axis=1)[:, k]
        hi[s0 : s0 + 500] = np.partition(ratio, b - 1 - k, axis=1)[:, b - 1 - k]
    return lo, hi


def cr2_rel(cells: NDArray[np.float64], level: float) -> tuple[NDArray[np.float64], ...]:
    """The default's difference p-value (Δ/R_a) of each cell, no request minimum, and its
    interval at ``level``."""
    p, lo, hi = (np.empty(cells.shape[0]) for _ in range(3))
    for i, c in enumerate(cells):
        sums = np.stack([c[:, 0], c[:, 1], c[:, 0], c[:, 2]], axis=1)
        _, rel = paired_tests(sums, depths=(hc.DEPTH, hc.DEPTH))
        p[i] = rel.p_difference()
        lo[i], hi[i] = rel.interval(level)
    return p, lo, hi


def evaluate(data: NDArray[np.float64], n: int, seed: int, true_rel: NDArray[np.float64]
             ) -> dict[str, Any]:  # fmt: skip
    """Rejection rates per family and over family cells for every test at α and α/2, and the
    coverage of the chosen rule's interval (the hull of both at 1 − α/2) of Δ/R_a."""
    n_sets = data.shape[0]
    cells = data.reshape(n_sets, hc.FAMILIES, n, 3).reshape(-1, n, 3)
    d = cells[:, :, 2] - cells[:, :, 1]
    out: dict[str, Any] = {"share_unchanged": float((d == 0).mean())}
    signs = flips(n, seed)
    p_sf = signflip_p(d, signs)
    p_cr2, c_lo, c_hi = cr2_rel(cells, 1.0 - ALPHA / 2)
    tests = {"signflip": p_sf, "cr2": p_cr2, "both": np.maximum(p_sf, p_cr2)}
    for name, p in tests.items():
        for tag, a in (("", ALPHA), ("/2", ALPHA / 2)):
            rej = (p < a).reshape(n_sets, hc.FAMILIES)
            fam = [rate(rej[:, f]) for f in range(hc.FAMILIES)]
            out[name + tag] = {"all": rate(rej.ravel()), "worst_family": max(fam), "families": fam}
    # the interval's coverage on the first COVERAGE_SETS datasets (its 9,999 flips per cell cost)
    sets = min(n_sets, COVERAGE_SETS)
    m = sets * hc.FAMILIES
    s_lo, s_hi = signflip_rel_interval(cells[:m], signs, 1.0 - ALPHA / 2)
    lo, hi = np.minimum(s_lo, c_lo[:m]), np.maximum(s_hi, c_hi[:m])
    truth = np.repeat(true_rel[None, : hc.FAMILIES], sets, axis=0).ravel()
    cov = ((lo <= truth) & (truth <= hi)).reshape(sets, hc.FAMILIES)
    out["rule_coverage"] = {"worst_family": min(rate(cov[:, f]) for f in range(hc.FAMILIES)),
                            "level": 1.0 - ALPHA / 2}  # fmt: skip
    # the rule is consistent with its interval: DIFFERENT iff the hull excludes 0
    rule = tests["both"][:m] < ALPHA / 2
    out["rule_interval_agrees"] = float(np.mean(rule == ((lo > 0) | (hi < 0))))
    out["bernstein_half_median"] = float(np.median(bernstein_half(cells)))
    return out


def grid_settings() -> list[Any]:
    """The calibration grid's settings and the two added ones."""
    old = [hc.make_setting(r, e, t) for r in hc.ROUNDS for e in hc.EFFECTS for t in hc.TRUTHS]
    new = [NewSetting(r, e, v) for r in hc.ROUNDS for e in NEW_EFFECTS for v in (0.0, 0.01)]
    return old + new


def is_null(st: Any) -> bool:
    """Δ = 0 exactly in the setting."""
    return bool(st.rel == 0.0) if isinstance(st, NewSetting) else bool(st.truth == "zero")


def true_rel(st: Any) -> NDArray[np.float64]:
    """Δ/R_a of each family (and the pooled cell for the grid's settings)."""
    if isinstance(st, NewSetting):
        return np.full(hc.FAMILIES + 1, st.rel)
    return np.asarray(st.truths()["rel"])


def draw_any(st: Any, n: int, n_sets: int, seed: int, k: int) -> NDArray[np.float64]:
    rng = np.random.default_rng([seed, k, n])
    return (
        draw_new(st, n, n_sets, rng) if isinstance(st, NewSetting) else hc.draw(st, n, n_sets, rng)
    )


def run(
    sizes: list[int], n_sets: int, seed: int, out: Path, only: str | None = None
) -> dict[str, Any]:
    """Every setting (whose name holds one of the comma-separated ``only``) at every size, and
    the default at 50 for the null settings."""
    res: dict[str, Any] = {"seed": seed, "datasets": n_sets, "sizes": sizes, "settings": {}}
    t0 = time.perf_counter()
    for k, st in enumerate(grid_settings()):
        if only is not None and not any(o in st.name for o in only.split(",")):
            continue
        entry: dict[str, Any] = {"null": is_null(st), "sizes": {}}
        run_sizes = sizes + ([50] if is_null(st) else [])
        for n in run_sizes:
            data = draw_any(st, n, n_sets, seed, k)
            r = evaluate(data, n, seed, true_rel(st))
            entry["sizes"][str(n)] = r
            w = {
                k: v["worst_family"][0] for k, v in r.items() if isinstance(v, dict) and "all" in v
            }
            print(
                f"{st.name:28s} n={n:3d} "
                + " ".join(f"{k} {v:.4f}" for k, v in w.items())
                + f" cov {r['rule_coverage']['worst_family'][0]:.4f}"
                f" agree {r['rule_interval_agrees']:.4f} unch {r['share_unchanged']:.2f}"
                f" ({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
        res["settings"][st.name] = entry
        tmp = out.with_name(out.name + ".part")
        tmp.write_text(json.dumps(res, indent=1))
        tmp.replace(out)
    return res


def power_scan(n: int, n_sets: int, seed: int) -> dict[str, Any]:
    """Rejection rate against the true Δ/R_a in ``smooth`` and ``few-changed`` at n requests."""
    rels = (0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3)
    res: dict[str, Any] = {}
    for k, (r, e) in enumerate((r, e) for r in hc.ROUNDS for e in ("smooth",)):
        rows = []
        for j, rel in enumerate(rels):
            data = draw_new(
                NewSetting(r, e, rel), n, n_sets, np.random.default_rng([seed, 99, k, j])
            )
            ev = evaluate(data, n, seed, np.full(hc.FAMILIES + 1, rel))
            rows.append(
                [rel, ev["both/2"]["all"][0], ev["cr2"]["all"][0], ev["signflip"]["all"][0]]
            )
            print(
                f"power {r}/{e} n={n} Δ/R_a {rel:.4f}: rule {rows[-1][1]:.3f} "
                f"cr2@α {rows[-1][2]:.3f} sf@α {rows[-1][3]:.3f}",
                flush=True,
            )
        res[f"{r}/{e}"] = {
            "rows": rows,
            "rule_80": crossing(rows, 1),
            "cr2_80": crossing(rows, 2),
            "signflip_80": crossing(rows, 3),
        }
    return res


def crossing(rows: list[list[float]], col: int) -> float | None:
    """The effect at which the rate first reaches 0.8 (linear interpolation); None if never."""
    for a, b in itertools.pairwise(rows):
        if a[col] < 0.8 <= b[col]:
            return a[0] + (0.8 - a[col]) * (b[0] - a[0]) / (b[col] - a[col])
    return rows[0][0] if rows[0][col] >= 0.8 else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=4000)
    ap.add_argument("--sizes", default="10,20,30,40")
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--out", type=Path, default=Path("smallcells.json"))
    ap.add_argument("--power", action="store_true")
    ap.add_argument("--only", default=None, help="settings whose name holds one of these")
    ap.add_argument("--md", nargs="*", type=Path, help="print the tables of these JSON files")
    a = ap.parse_args(argv)
    if a.md:
        print(markdown(a.md))
        return
    if a.power:
        res = power_scan(20, a.datasets // 4, a.seed)
        a.out.write_text(json.dumps(res, indent=1))
        return
    run([int(x) for x in a.sizes.split(",")], a.datasets, a.seed, a.out, a.only)


def markdown(paths: list[Path]) -> str:
    """The study's tables (false-DIFFERENT rates, coverage) from its JSON files."""
    settings: dict[str, Any] = {}
    for p in paths:
        settings.update(json.loads(p.read_text())["settings"])
    sizes = ("10", "20", "30", "40")
    head = "| setting | test | " + " | ".join(f"n = {n}" for n in sizes) + " | default at 50 |"
    out = [head, "|" + "---|" * (len(sizes) + 3)]
    for name, e in settings.items():
        if not e["null"]:
            continue
        ref = e["sizes"].get("50", {}).get("cr2", {}).get("worst_family")
        for test, tag in (("cr2", "CR2 at α"), ("signflip", "sign-flip at α"),
                          ("both/2", "**both at α/2**")):  # fmt: skip
            cells = []
            for n in sizes:
                r = e["sizes"][n][test]["worst_family"][0]
                cells.append(f"{r:.4f}")
            tail = f"{ref[0]:.4f}" if ref and test == "cr2" else ""
            out.append(f"| {name} | {tag} | " + " | ".join(cells) + f" | {tail} |")
    cov = ["", "| setting | " + " | ".join(f"n = {n}" for n in sizes) + " |",
           "|" + "---|" * (len(sizes) + 1)]  # fmt: skip
    for name, e in settings.items():
        cells = [f"{e['sizes'][n]['rule_coverage']['worst_family'][0]:.3f}" for n in sizes]
        cov.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out + cov) + "\n"


if __name__ == "__main__":
    main()
