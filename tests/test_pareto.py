"""The package's Pareto k̂ (specreplay.stats.pareto) against ArviZ's, which it replaces at run time.

Reference: ``arviz_stats`` 1.3 (imported here only), ``array_stats.pareto_khat(x, r_eff=1,
tail="right")`` on every ratio of a tail, ``array_stats._gpdfit`` on its excesses, and
``scipy.special.logsumexp``.

Tolerance: none. The port runs the same NumPy operations as ``_gpdfit`` and SciPy's
``logsumexp``, in the same order, on arrays of the same shape and layout (so the same pairwise
summation and the same elementwise ``log1p``/``exp``), and the excesses it fits are the same
numbers (the M + 1 largest values are the same whichever sort finds them). A plausible slip (the
prior's weight, the quartile's index, the grid's sign, a sum taken in another order, a
logsumexp without its max split out) changes at least the last bits of some k̂ here, so the
figures must be equal to the bit; ArviZ changing its algorithm fails these tests too, on purpose:
the package would then no longer give "ArviZ's k̂" as docs/methods.md says.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from collections.abc import Iterator

import numpy as np
import pytest
from arviz_stats.base import array_stats
from scipy.special import logsumexp as scipy_logsumexp

from specreplay.stats.importance_diag import pareto_khat_of_tail, psis_tail_length
from specreplay.stats.pareto import gpd_fit, logsumexp

# n = 25 is the smallest PSIS tail (M = 5), where the first quartile x* is the smallest excess
# and every fit is NaN (a null); n = 30 (M = 6) is the smallest with a finite k̂; 225/226
# straddle the switch from ⌊n/5⌋ to ⌊3√n⌋ tail draws
SIZES = (25, 30, 60, 225, 226, 1000, 10_000, 100_000)
GPD_SHAPES = tuple(np.round(np.linspace(-0.3, 1.5, 10), 2))  # -0.3, -0.1, 0.1, ..., 1.5


def arviz_khat(x: np.ndarray) -> float:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        k = array_stats.pareto_khat(x, chain_axis=None, draw_axis=-1, r_eff=1.0, tail="right")
    return float(k)


def gpd_draws(rng: np.random.Generator, k: float, n: int) -> np.ndarray:
    """n generalised Pareto draws of shape k, scale 1 by inversion: ((1 − u)^(−k) − 1)/k."""
    u = rng.random(n)
    return np.asarray(-np.log1p(-u) if k == 0 else np.expm1(-k * np.log1p(-u)) / k)


def tails() -> Iterator[tuple[str, np.ndarray]]:
    """Seeded ratio-like samples: GPD, lognormal, tied (rounded and dyadic), with a zero mass."""
    rng = np.random.default_rng(20261129)
    for n in SIZES:
        for k in (*GPD_SHAPES, 0.0):
            yield f"gpd k={k} n={n}", 1.0 + gpd_draws(rng, k, n)
        yield f"lognormal n={n}", rng.lognormal(0.0, 1.5, n)
        yield f"rounded lognormal n={n}", np.round(rng.lognormal(0.0, 1.0, n), 1)
        # a dyadic grid: long runs of equal values, as a dyadic quantizer's ratios have
        yield f"dyadic n={n}", np.round(rng.lognormal(0.0, 0.3, n) * 8) / 8
        zeros = rng.lognormal(0.0, 1.0, n)
        zeros[rng.random(n) < 0.3] = 0.0  # ratio 0: the arm never drafts the archived token
        yield f"with zeros n={n}", zeros


def test_khat_equals_arviz_on_every_seeded_tail() -> None:
    """k̂ from the full array equals ArviZ's pareto_khat bit for bit, on 15 kinds × 8 sizes,
    NaN fits (no Pareto tail) included as nulls with their reason."""
    finite = nulls = 0
    for name, x in tails():
        want = arviz_khat(x)
        got, why = pareto_khat_of_tail(x, -np.inf, x.shape[0])
        if math.isnan(want):
            assert got is None and why is not None and "failed" in why, name
            nulls += 1
        else:
            assert got == want, (name, got, want)
            finite += 1
    # both branches reached on these seeds: 103 finite; 17 nulls (every n = 25 tail and 2 more)
    assert finite >= 100 and nulls >= 15


@pytest.mark.parametrize("n", [30, 400, 100_000])  # 30: the smallest finite fit
def test_khat_from_the_kept_top_equals_arviz_on_the_full_array(n: int) -> None:
    """Only the M + 1 largest ratios (as the streaming tails keep them) and the largest dropped
    one: k̂ equals ArviZ's on all n; one value fewer is refused."""
    rng = np.random.default_rng(n)
    x = 1.0 + gpd_draws(rng, 0.6, n)
    m = psis_tail_length(n)
    order = np.argsort(x)[::-1]
    kept, dropped = x[order[: m + 1]], float(x[order[m + 1]])
    got, why = pareto_khat_of_tail(rng.permutation(kept), dropped, n)
    assert why is None and got == arviz_khat(x)
    short, why = pareto_khat_of_tail(kept[:m], dropped, n)
    assert short is None and why is not None and "tail cap exceeded" in why


def test_gpd_fit_equals_arviz_gpdfit_shape_and_scale() -> None:
    """gpd_fit(excesses) returns _gpdfit's (k, σ) bit for bit, NaN where it gives NaN."""
    compared = 0
    for name, x in tails():
        m = psis_tail_length(x.shape[0])
        top = np.sort(x)[::-1]
        if top[0] - top[m - 1] < np.finfo(float).tiny:
            continue
        excess = top[m - 1 :: -1] - top[m]
        with np.errstate(all="ignore"):
            k_ref, sigma_ref = array_stats._gpdfit(excess)
        fit = gpd_fit(excess)
        np.testing.assert_array_equal([fit.k, fit.sigma], [k_ref, sigma_ref], err_msg=name)
        compared += 1
    assert compared == 120  # no sample here has a constant tail


@pytest.mark.parametrize("n", [25, 26, 1000])
def test_a_constant_tail_is_null_where_arviz_refuses(n: int) -> None:
    """The M largest equal: ArviZ raises, the package returns None with the reason."""
    x = np.ones(n)
    x[:3] = 0.5  # the rest of the ratios may differ: only the tail matters
    with pytest.raises(ValueError, match="All tail values are the same"):
        array_stats.pareto_khat(x, chain_axis=None, draw_axis=-1, r_eff=1.0, tail="right")
    k, why = pareto_khat_of_tail(x, -np.inf, n)
    assert k is None and why is not None and "are all equal" in why


def test_logsumexp_equals_scipy_bit_for_bit() -> None:
    """Random vectors and the edges SciPy treats apart: ties at the maximum, −inf entries,
    all −inf, +inf, NaN, one element."""
    rng = np.random.default_rng(7)
    cases = [rng.normal(0, 10.0 ** rng.integers(-2, 4), int(rng.integers(1, 200)))
             for _ in range(300)]  # fmt: skip
    cases += [np.array([3.0, 3.0, 1.0]), np.array([-np.inf, 0.0, -2.0]),
              np.full(4, -np.inf), np.array([np.inf, 1.0]), np.array([np.nan, 1.0]),
              np.array([-7.5]), np.array([700.0, 710.0, 709.9])]  # fmt: skip
    for a in cases:
        with np.errstate(all="ignore"):
            want = float(scipy_logsumexp(a))
        got = logsumexp(a)
        assert got == want or (math.isnan(got) and math.isnan(want)), (a, got, want)


def test_the_khat_fit_imports_no_arviz() -> None:
    """A fresh process computing k̂ never imports arviz, arviz_stats or scipy."""
    probe = (
        "import sys, numpy as np\n"
        "from specreplay.stats.importance_diag import pareto_khat_of_tail\n"
        "x = np.random.default_rng(0).pareto(1.5, 5000)\n"
        "k, why = pareto_khat_of_tail(x, -np.inf, 5000)\n"
        "assert why is None and 0.5 < k < 0.9, (k, why)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('arviz', 'arviz_stats', "
        "'arviz_base', 'scipy', 'xarray')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
