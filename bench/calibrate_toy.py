"""Calibration of the toy model pair against docs/inputs.md#the-built-in-archive

Prints, per family and context bucket, MEASURED R (mean retained tokens 1 + A per round) of the
logging arm ``top32:t0.7@5`` and of ``greedy@5`` (two archives of the same requests and seed), the
logging arm's per-position survival P(A ≥ j), and the SIMULATED (analytic, path assumption) relative
change of R when the logging law q is quantized to dyadicN:nearest (largest remainder,
docs/methods.md#arms-policy-and-quantizers) with a matched verifier: E[1 + A] = 1 + Σ_k Π_{j≤k} α_j,
α_j = Σ min(p_j, q_j).

Usage: ``NUMBA_CACHE_DIR=/tmp/numba .venv/bin/python bench/calibrate_toy.py [n_requests] [seed]``
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from specreplay.sim.synth import SynthConfig, SynthShard, request_ids, simulate_shard
from specreplay.sim.toy import FAMILIES, ToyPair

BUCKETS = ("<4K", "4K-16K", "16K-32K", "32K-64K", ">=64K")
EDGES = np.array([4096, 16384, 32768, 65536])
BITS = (8, 12, 16, 24)


def dyadic_nearest(q: NDArray[np.float64], bits: int) -> NDArray[np.float64]:
    """Row-wise largest-remainder dyadic quantizer, as m / 2^N.

    ``dyadicN:nearest`` of docs/methods.md#arms-policy-and-quantizers.
    """
    scale = float(2**bits)
    x = q * scale
    m = np.floor(x)
    frac = x - m
    r = scale - m.sum(axis=1)
    n = q.shape[1]
    give = np.clip(r, 0, n).astype(np.int64)
    order = np.argsort(-frac, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(n)[None, :].repeat(q.shape[0], 0), axis=1)
    m += rank < give[:, None]
    rest = scale - m.sum(axis=1)
    m[np.arange(q.shape[0]), np.argmax(q, axis=1)] += rest
    assert np.all(m.sum(axis=1) == scale)
    out: NDArray[np.float64] = m / scale
    return out


def analytic_round_e(alpha: NDArray[np.float64]) -> NDArray[np.float64]:
    """E[1 + A] per round from per-position α (rounds, depth)."""
    out: NDArray[np.float64] = 1.0 + np.cumprod(alpha, axis=1).sum(axis=1)
    return out


def run(pair: ToyPair, n_requests: int, seed: int, *, quiet: bool = False) -> dict[str, float]:
    """Simulate and print the calibration table; return headline numbers.

    The ± is a rounds-level SE (rounds of one request are correlated, so it understates the
    request-clustered SE); the dyadic columns are SIMULATED relative changes of R, in percent.
    """
    cfg = SynthConfig(n_requests=n_requests, pair=pair)
    ids = request_ids(n_requests)
    t0 = time.perf_counter()
    log = simulate_shard(cfg, seed, ids)
    t1 = time.perf_counter()
    grd = simulate_shard(replace(cfg, greedy=True), seed, ids)
    d = cfg.depth
    fam_round = np.repeat(log.family, cfg.rounds)
    bucket = np.searchsorted(EDGES, log.round_context, side="right")

    def a_of(sh: SynthShard) -> NDArray[np.int64]:
        acc = sh.accepted.reshape(-1, d)
        out: NDArray[np.int64] = np.cumprod(acc, axis=1).sum(axis=1)
        return out

    a_log, a_grd = a_of(log), a_of(grd)
    q = log.emitted_q
    p = log.target_probs
    e_float = analytic_round_e(np.minimum(p, q).sum(axis=1).reshape(-1, d))
    e_dy = {
        b: analytic_round_e(np.minimum(p, dyadic_nearest(q, b)).sum(axis=1).reshape(-1, d))
        for b in BITS
    }
    res: dict[str, float] = {}

    def line(label: str, sel: NDArray[np.bool_]) -> None:
        n = int(sel.sum())
        if n == 0:
            return
        r_log = 1.0 + a_log[sel].mean()
        se = a_log[sel].std() / np.sqrt(n)
        r_grd = 1.0 + a_grd[sel].mean()
        rel = [(e_dy[b][sel].sum() / e_float[sel].sum() - 1.0) * 100 for b in BITS]
        res[f"R_log {label}"] = r_log
        res[f"R_grd {label}"] = r_grd
        for b, x in zip(BITS, rel, strict=True):
            res[f"dy{b} {label}"] = x
        if not quiet:
            print(
                f"{label:28s} {n:7d} {r_log:6.3f}±{se:5.3f} {r_grd:6.3f}  "
                + " ".join(f"{x:+8.3f}%" for x in rel)
            )

    if not quiet:
        print(f"simulate {n_requests} requests x {cfg.rounds} rounds: {t1 - t0:.2f} s")
        print(
            f"{'cell':28s} {'rounds':>7s} {'R top32:t0.7@5 ±SE':>12s} {'greedy@5':>7s}  "
            + " ".join(f"{'dyadic' + str(b):>9s}" for b in BITS)
        )
    line("pooled", np.ones(a_log.shape[0], dtype=bool))
    for b_i, b in enumerate(BUCKETS):
        line(f"bucket {b}", bucket == b_i)
    for f_i, f in enumerate(FAMILIES):
        line(f"family {f}", fam_round == f_i)
    for f_i, f in enumerate(FAMILIES):
        for b_i, b in enumerate(BUCKETS):
            line(f"{f} x {b}", (fam_round == f_i) & (bucket == b_i))
    if not quiet:
        short = bucket == 0
        surv = np.cumprod(log.accepted.reshape(-1, d), axis=1)
        cond = surv[:, 1:].sum(0) / surv[:, :-1].sum(0)
        print("per-position survival P(A>=j), j=1..5, pooled:", np.round(surv.mean(0), 4))
        print("  short contexts (<4K):                       ", np.round(surv[short].mean(0), 4))
        print("  conditional P(accept j | accepted j-1), j=2..5:", np.round(cond, 4))
        ana = e_float.mean()
        print(
            f"path-bias: MEASURED R {1 + a_log.mean():.4f} vs analytic (path assumption) {ana:.4f}"
        )
    return res


def main() -> None:
    """Print the calibration table for the default ToyPair."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    run(ToyPair(), n, seed)


if __name__ == "__main__":
    main()
