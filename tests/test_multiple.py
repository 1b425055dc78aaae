"""Tests of Holm's procedure (:mod:`specreplay.stats.multiple`) and of its two callers."""

from __future__ import annotations

import numpy as np

from specreplay.stats import intervals
from specreplay.stats.lawtest import family as lawtest_family
from specreplay.stats.multiple import holm


def test_holm_against_hand_computation() -> None:
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, max(0.04·1, 0.06) = 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    # capped at 1 and monotone; ties keep their input order
    np.testing.assert_allclose(holm([0.5, 0.2, 0.2]), [0.6, 0.6, 0.6])
    np.testing.assert_allclose(holm([0.9, 0.001]), [0.9, 0.002])
    np.testing.assert_allclose(holm([0.3]), [0.3])
    assert holm([]).shape == (0,)


def test_holm_five_tests_with_ties_and_cap_by_hand() -> None:
    # m = 5, ascending (ties in input order): 0.001 (#1), 0.012 (#4), 0.2 (#0), 0.2 (#2), 0.6 (#3)
    #   #1: 5·0.001 = 0.005
    #   #4: 4·0.012 = 0.048
    #   #0: 3·0.2   = 0.6
    #   #2: 2·0.2   = 0.4   -> running max 0.6
    #   #3: 1·0.6   = 0.6
    np.testing.assert_allclose(
        holm([0.2, 0.001, 0.2, 0.6, 0.012]), [0.6, 0.005, 0.6, 0.6, 0.048], rtol=1e-15
    )
    # 2·0.7 = 1.4 is capped at 1, and the larger p-value inherits the cap
    np.testing.assert_array_equal(holm([0.7, 0.9]), [1.0, 1.0])


def test_both_callers_use_the_one_procedure() -> None:
    p = [0.013, 0.0021, 0.4, 0.0021, 0.05]
    assert lawtest_family.holm is holm  # run_law_tests adjusts with it
    # the comparison's wrapper only rounds to 15 decimals for printing
    assert intervals.holm(p) == [round(float(x), 15) for x in holm(p)]
    np.testing.assert_allclose(intervals.holm(p), holm(p), rtol=0, atol=5e-16)
