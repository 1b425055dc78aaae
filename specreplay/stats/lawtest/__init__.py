"""Law tests: is the emitted token of one position distributed as the target p?.

See docs/methods.md#law-tests.

Terms (docs/methods.md#law-tests). At one position the drafter samples a candidate x from the
**sampler law** q^s; the verifier accepts it when v·q^v(x) < p(x) for a uniform v, where q^v is the
**verifier law** (q^v = q^s for a *matched* arm, e.g. ``dyadic24``; q^v ≠ q^s for a *mismatched*
one, e.g. ``dyadic8/float64``); on rejection it emits a **residual** token from r ∝ max(0, p − q^v).
The categories of a position are its n candidates plus one **other** bucket holding the target mass
outside the candidates, p_other = max(0, 1 − Σp); p_ext = (p, p_other) has n + 1 entries. The other
bucket is always in the residual, since q^v = 0 there.

What this package computes, per (arm, position), one module per concern:

1. :mod:`~specreplay.stats.lawtest.exact` — :func:`output_law`, the exact law of the emitted
   token, q^s(x)·a(x) + (1 − α)·r(x) with a(x) = P(v·q^v(x) < p(x)) and α = Σ_x q^s(x)·a(x), its
   acceptance α and its total-variation distance to p_ext (and the input checks).
2. :mod:`~specreplay.stats.lawtest.sampler` — :func:`sample_counts`, a Numba Monte Carlo sampler of
   the emitted token (counts over the n + 1 categories), with counter-based uniforms
   (:mod:`specreplay.sim.rng`).
3. :mod:`~specreplay.stats.lawtest.gof` — :func:`goodness_of_fit`, the G-test (default) or Pearson
   χ² of the counts against p_ext, after merging small categories (:func:`merge_categories`);
   :mod:`~specreplay.stats.lawtest.chi2` — the χ² and noncentral χ² distributions it needs.
4. :mod:`~specreplay.stats.lawtest.power` — :func:`draws_for_power`, the number of draws.
5. :mod:`~specreplay.stats.lawtest.family` — :func:`run_law_tests`, all of the above for every
   arm × position of one run, with Holm's step-down adjustment over that family
   (:func:`specreplay.stats.multiple.holm`).
6. :mod:`~specreplay.stats.lawtest.toy` — the toy-law suite (:func:`toy_cases`).

Every public name is importable from this package (``from specreplay.stats.lawtest import
run_law_tests``).

Decisions (documented here once; the functions cite them):

- **Accept convention** (docs/methods.md#rounds-retained-tokens-and-r): accept when v·q^v(x) < p(x),
so a(x) = 1 when q^v(x) = 0 and
  p(x) > 0, a(x) = 0 when p(x) = 0, else min(1, p(x)/q^v(x)).
- **Empty residual.** When the residual mass W = Σ max(0, p − q^v) + p_other is 0 but a rejection
  is still possible (a mismatched sampler drafts a candidate with p = q^v = 0), the residual falls
  back to p_ext itself (the bonus-token law). For a matched arm W = 0 implies α = 1, so this never
  applies to one.
- **Reference law.** The tests compare against p_ext / Σ p_ext: inputs must satisfy
  |Σp + p_other − 1| ≤ 1e-6 (archived float32 log-probabilities), and the renormalisation keeps
  expected counts summing to the number of draws.
- **Merging** (:func:`merge_categories`), with E = draws · p_ref: (i) every candidate with E < 5 is
  merged into the other category; (ii) if the merged other category still has E < 5 and some
  candidate remains, it is merged into the remaining candidate with the smallest E (ties to the
  lower index). df = categories − 1; with a single category there is nothing to test
  (statistic 0, df 0, p-value 1).
- **Uniforms.** Draw i of a position uses ``uniform(seed, key, i, position, STREAM_*)`` with the
  draw index as the round, ``STREAM_DRAFT`` for u, ``STREAM_ACCEPT`` for v and
  ``STREAM_RESIDUAL`` for the residual draw; :func:`run_law_tests` uses the arm's stable key
  ``request_key(arm)``. Counts are integers, so they do not depend on the thread count.
- **Draft draw** by CDF inversion: float laws take the first index whose cumulative sum exceeds u
  (the last positive one if rounding leaves none); dyadic laws take k = ⌊u·2^53⌋ >> (53 − N)
  against the integer cumulative sums of m_s (docs/methods.md#the-monte-carlo-estimator).
- **χ² tail without scipy**: the regularised incomplete gamma by its series (x < a + 1) or
  Lentz's continued fraction (Numerical Recipes, 3rd ed., §6.2), p-values underflowing to 0.
- **Power**: the noncentral χ² with the Pearson noncentrality λ = draws · Σ (law − p)²/p over the
  merged categories (used for the G-test too: both statistics share this local-alternative
  asymptotics), at the Bonferroni level family_alpha / m (conservative for Holm; m = arm ×
  position tests of the run). Its cdf is computed *exactly* (no Patnaik/Sankaran approximation),
  as the Poisson(λ/2) mixture of central χ² cdfs summed outward from the Poisson mode with the
  recurrence P(a + 1, y) = P(a, y) − y^a e^{−y}/Γ(a + 1) (Abramowitz & Stegun 26.4.25, 6.5.21).
- **Draws**: the smallest number reaching power 0.99, floored at ``min_draws`` (more draws never
  hurt the test) and capped at ``max_draws`` (then ``underpowered`` with the power reached). When
  the exact law equals p up to rounding (TV ≤ 1e-12, e.g. every matched arm) there is no
  alternative to power against: ``min_draws`` draws, power ``None`` and rule ``null-law``.
- **Toy suite** (:func:`toy_cases`): a few fixed laws and the arms float64, dyadic8 and
  dyadic8/float64. Their dyadic laws come from :func:`toy_quantize_dyadic_nearest`, a local copy of
  docs/methods.md#arms-policy-and-quantizers ``dyadicN:nearest`` for this suite only (the product
  quantizers live in ``specreplay.sim.policy``).

This package depends on numpy and numba only (scipy is a dev dependency, used in its tests).
"""

from specreplay.stats.lawtest.chi2 import chi2_isf, chi2_power, chi2_sf, gammainc_pq, ncx2_cdf
from specreplay.stats.lawtest.exact import OutputLaw, output_law
from specreplay.stats.lawtest.family import (
    DEFAULT_FAMILY_ALPHA,
    LawCase,
    LawTestResult,
    run_law_tests,
)
from specreplay.stats.lawtest.gof import MIN_EXPECTED, GofResult, goodness_of_fit, merge_categories
from specreplay.stats.lawtest.power import (
    DEFAULT_MAX_DRAWS,
    DEFAULT_MIN_DRAWS,
    TARGET_POWER,
    TV_NULL,
    draws_for_power,
)
from specreplay.stats.lawtest.sampler import sample_counts
from specreplay.stats.lawtest.toy import toy_cases, toy_laws, toy_quantize_dyadic_nearest

__all__ = [
    "DEFAULT_FAMILY_ALPHA",
    "DEFAULT_MAX_DRAWS",
    "DEFAULT_MIN_DRAWS",
    "MIN_EXPECTED",
    "TARGET_POWER",
    "TV_NULL",
    "GofResult",
    "LawCase",
    "LawTestResult",
    "OutputLaw",
    "chi2_isf",
    "chi2_power",
    "chi2_sf",
    "draws_for_power",
    "gammainc_pq",
    "goodness_of_fit",
    "merge_categories",
    "ncx2_cdf",
    "output_law",
    "run_law_tests",
    "sample_counts",
    "toy_cases",
    "toy_laws",
    "toy_quantize_dyadic_nearest",
]
