"""Tests of the accept probability (:mod:`specreplay.sim.accept`) shared by replay and law tests."""

from __future__ import annotations

import numpy as np

from specreplay.sim.accept import accept_prob, accept_probs
from specreplay.stats.lawtest import output_law


def test_accept_probs_by_hand() -> None:
    # a(x) = min(1, p/q^v); 1 when q^v = 0 < p (always accepted); 0 when p = 0
    qv = np.array([0.5, 0.0, 0.2, 0.3, 0.0, 0.25])
    p = np.array([0.25, 0.1, 0.4, 0.0, 0.0, 0.25])
    np.testing.assert_array_equal(accept_probs(qv, p), [0.5, 1.0, 1.0, 0.0, 0.0, 1.0])
    assert accept_probs(np.empty(0), np.empty(0)).shape == (0,)


def test_accept_probs_is_the_scalar_kernel_elementwise() -> None:
    rng = np.random.default_rng(7)
    qv = rng.dirichlet(np.full(40, 0.3))
    p = rng.dirichlet(np.full(40, 0.3))
    qv[::7] = 0.0
    p[::5] = 0.0
    expected = [accept_prob(float(a), float(b)) for a, b in zip(qv, p, strict=True)]
    np.testing.assert_array_equal(accept_probs(qv, p), expected)
    # and the vectorised NumPy form the law tests used before (same IEEE operations)
    safe = np.where(qv > 0.0, qv, 1.0)
    old = np.where(qv > 0.0, np.minimum(1.0, p / safe), np.where(p > 0.0, 1.0, 0.0))
    np.testing.assert_array_equal(accept_probs(qv, p), old)


def test_output_law_alpha_uses_the_accept_convention() -> None:
    # q^s = q^v = (0.5, 0.3, 0.2), p = (0.25, 0.5, 0.2), p_other = 0.05:
    # α = 0.5·0.5 + 0.3·1 + 0.2·1 = 0.75
    out = output_law([0.5, 0.3, 0.2], [0.5, 0.3, 0.2], [0.25, 0.5, 0.2], 0.05)
    assert abs(out.alpha - 0.75) < 1e-15
