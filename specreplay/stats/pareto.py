"""Generalised Pareto fit of a right tail: the Pareto k̂ of PSIS, without ArviZ.

See docs/methods.md#tail-diagnostics-ess-and-pareto-k-hat.

Terms. The **excesses** of a tail are its M largest values less the (M + 1)-th largest (the
cutoff), in ascending order. The generalised Pareto law of shape k and scale σ has the
survival function (1 + k x/σ)^(−1/k). Its **fit** is Zhang & Stephens' empirical Bayes estimate
(2009, "A new and efficient estimation method for the generalized Pareto distribution",
Technometrics 51(3), 316–325, sec. 3) with the weakly informative prior on k of Vehtari,
Simpson, Gelman, Yao & Gabry (2024, "Pareto smoothed importance sampling", JMLR 25(72),
arXiv:1507.02646): a normal centred at 0.5 worth 10 observations, which steadies k̂ for short
tails.

This is the fit ``arviz_stats`` 1.3 makes (``_DiagnosticsBase._gpdfit``, reached by
``array_stats.pareto_khat(x, r_eff=1, tail="right")``), ported operation for operation in NumPy,
with SciPy's ``logsumexp`` likewise, so that it gives ArviZ's k̂ **bit for bit**
(``tests/test_pareto.py`` checks it against ``arviz_stats`` on GPD, lognormal, tied, minimal and
constant tails). Importing ArviZ takes seconds; every default run needs k̂, so the package
computes it itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["GeneralizedPareto", "gpd_fit", "logsumexp"]

PRIOR_BS: Final = 3
"""Zhang & Stephens' grid scale: the grid of θ = −b spans about 1/(3 x*) (sec. 3, step 1)."""
PRIOR_K: Final = 10
"""Weight of the prior on k, in observations (Vehtari et al. 2024)."""
PRIOR_K_MEAN: Final = 0.5
"""Centre of the prior on k."""


@dataclass(frozen=True)
class GeneralizedPareto:
    """A generalised Pareto fit: shape ``k`` and scale ``sigma``.

    Attributes
    ----------
    k : float
        Posterior-mean shape with the prior applied; NaN when the first quartile of the
        excesses is not above their minimum (no Pareto tail), +inf when the fit overflowed.
    sigma : float
        Scale (before the prior on k); NaN with either failure.
    """

    k: float
    sigma: float


def logsumexp(a: NDArray[np.float64]) -> float:
    """Return log Σ exp(a) as ``scipy.special.logsumexp`` computes it for a 1-D float64 array.

    SciPy 1.18's algorithm, step for step: the maxima are taken out of the sum (``m`` of them),
    log Σ = log1p(Σ_rest exp(a − max) / m) + log m + max, and a non-finite result is replaced by
    the direct log(Σ exp(a)) (Blanchard, Higham & Higham 2021, IMA J. Numer. Anal. 41(4)).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # as SciPy's
        a_max = np.max(a)
        top = a == a_max
        m = np.sum(top, dtype=np.float64)
        s = np.sum(np.exp(np.where(top, -np.inf, a) - a_max))
        if s != 0:
            s = s / m
        out = np.log1p(s) + np.log(m) + a_max
        if not np.isfinite(out):
            out = np.log(np.sum(np.exp(a)))
    return float(out)


def gpd_fit(excess: NDArray[np.float64]) -> GeneralizedPareto:
    """Fit the generalised Pareto law to ascending excesses (module docstring).

    Parameters
    ----------
    excess : float64, (M,)
        The tail's excesses over its cutoff, ascending (M ≥ 1; PSIS uses M ≥ 5).

    Notes
    -----
    Zhang & Stephens (2009), sec. 3, with b = −θ: a grid of ``m_est`` = 30 + ⌊√M⌋ values
    b_j = 1/x_(M) + (1 − √(m_est / (j − ½))) / (3 x*), x* the first quartile (step 1); the
    profile log-likelihood l(b) = M (log(−b / k(b)) − k(b) − 1) with k(b) = mean log1p(−b x)
    (step 2); posterior weights w_j ∝ exp l(b_j), those under 10 ε dropped (step 3); the
    posterior mean b̂ = Σ w_j b_j and k = mean log1p(−b̂ x), σ = −k / b̂ (step 4); then the
    prior: k ← (M k + 10 · 0.5) / (M + 10) (Vehtari et al. 2024).
    """
    n = len(excess)
    m_est = 30 + int(n**0.5)
    xstar = excess[int((n / 4 + 0.5) - 1)]  # first quartile
    if xstar <= excess[0]:  # far from a generalised Pareto law
        return GeneralizedPareto(np.nan, np.nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b_ary = 1 - np.sqrt(m_est / (np.arange(1, m_est + 1, dtype=float) - 0.5))
        b_ary /= PRIOR_BS * xstar
        b_ary += 1 / excess[-1]
        k_ary = np.mean(np.log1p(-b_ary[:, None] * excess), axis=1)  # nearly all the time
        len_scale = n * (np.log(-b_ary / k_ary) - k_ary - 1)
        w_theta = np.exp(len_scale - logsumexp(len_scale))
        real = w_theta >= 10 * np.finfo(float).eps  # negligible weights removed
        if not np.all(real):
            w_theta = w_theta[real]
            b_ary = b_ary[real]
        w_theta /= w_theta.sum()
        b_post = np.sum(b_ary * w_theta)
        kappa = np.mean(np.log1p(-b_post * excess))
        sigma = -kappa / b_post
        kappa = (n * kappa + PRIOR_K * PRIOR_K_MEAN) / (n + PRIOR_K)
    if np.isnan(kappa):
        return GeneralizedPareto(np.inf, np.nan)
    return GeneralizedPareto(float(kappa), float(sigma))
