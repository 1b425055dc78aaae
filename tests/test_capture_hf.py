"""The transformers adapter's parts that need no torch: the live arm's law and the version gate.

The engine tests are in tests/capture/ (make test-capture); these run in the core install.
"""

from __future__ import annotations

import numpy as np
import pytest

from specreplay.capture.hf import LiveArm, check_transformers_version
from specreplay.errors import SpecReplayError
from specreplay.sim.arms import parse_arm
from specreplay.sim.policy import arm_laws


@pytest.mark.parametrize("arm", ["t1:dyadic8@4", "top8:t1@4", "top8:t0.7:p0.9:float16@4", "t1@4"])
def test_live_arm_law_is_the_replays_law(arm: str) -> None:
    # the law transformers samples and verifies with = the replay's LawCache law of the arm on
    # the same candidates (bit for bit: one row, same kernels)
    rng = np.random.default_rng(7)
    for top_k in (None, 12):
        live = LiveArm(arm, top_k)
        for _ in range(20):
            scores = rng.normal(0.0, 3.0, 32)
            cand, q = live.law(scores)
            lp = scores - np.logaddexp.reduce(scores)
            k = 32 if top_k is None else top_k
            want = np.argsort(-lp, kind="stable")[:k]
            assert cand.tolist() == want.tolist()
            ref = arm_laws(parse_arm(arm), np.array([0, k]), lp[want]).q_sampler
            assert np.array_equal(q, ref)
            assert q.sum() == pytest.approx(1.0, abs=1e-12)


def test_live_arm_candidates_break_ties_to_the_lower_id() -> None:
    cand, q = LiveArm("top2:t1@1", top_k=3).law(np.array([0.0, 1.0, 1.0, 1.0]))
    assert cand.tolist() == [1, 2, 3]
    assert q.tolist() == [0.5, 0.5, 0.0]


def test_live_arm_refusals() -> None:
    with pytest.raises(SpecReplayError, match="needs a sampled arm whose verifier is its sampler"):
        LiveArm("greedy@4")
    with pytest.raises(SpecReplayError, match="needs a sampled arm whose verifier is its sampler"):
        LiveArm("t1:dyadic8/float64@4")
    with pytest.raises(SpecReplayError, match="keeps more candidates than top_k=8"):
        LiveArm("top16:t1@4", top_k=8)


@pytest.mark.parametrize("version", ["5.20.0", "5.24.0", "5.24.1.dev0"])
def test_supported_transformers_versions(version: str) -> None:
    check_transformers_version(version)


@pytest.mark.parametrize("version", ["4.57.1", "5.19.2", "5.25.0", "6.0.0", "main"])
def test_unsupported_transformers_versions(version: str) -> None:
    with pytest.raises(
        SpecReplayError, match=rf"^transformers {version}: not supported .*5\.25\)$"
    ):
        check_transformers_version(version)
