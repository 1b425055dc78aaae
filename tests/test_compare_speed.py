"""The comparisons' fast paths give the figures of the expressions they replace, to the bit.

Issue 18 item 3 ("comparisons and law tests" ≤ 0.5 s at 2 M positions): each fast path here
replaces an expression whose result results.json carries, so each is checked against that
expression on seeded data whose terms span many magnitudes (a changed order of addition moves
the last bits, and the equality below fails).
"""

from __future__ import annotations

import numpy as np
import pytest

from specreplay.stats.compare import cell_sums


def _one_pass_layout(rng: np.random.Generator, shape: tuple[int, int, int, int]) -> np.ndarray:
    """Replicate sums stored arm-sum outermost, as the run's one resample pass leaves them."""
    block = rng.lognormal(0.0, 4.0, (shape[3], *shape[:3]))  # 1e-5 … 1e5: order matters
    out = np.moveaxis(block, 0, -1)
    assert out.shape == shape and not out.flags.c_contiguous
    return out


@pytest.mark.parametrize(
    ("fams", "buckets"),
    [([0, 1, 2, 3], list(range(7))), ([2], [0, 3, 6]), ([1, 3], [5]), ([0], [0])],
)
def test_cell_sums_equal_the_gathered_sum_bit_for_bit(fams: list[int], buckets: list[int]) -> None:
    rng = np.random.default_rng(18_3)
    reps = _one_pass_layout(rng, (500, 4, 7, 4))
    fi, bi = np.array(fams), np.array(buckets)
    want = reps[:, fi][:, :, bi].reshape(500, -1, 4).sum(axis=1)  # the expression replaced
    got = cell_sums(reps, fi, bi)
    np.testing.assert_array_equal(got, want)
    assert got.shape == (500, 4) and got.flags.writeable
    got += 1.0  # a new array: the replicates are untouched
    np.testing.assert_array_equal(reps[:, fi][:, :, bi].reshape(500, -1, 4).sum(axis=1), want)


def test_cell_sums_refuse_an_empty_cell() -> None:
    with pytest.raises(ValueError, match="no family or no bucket"):
        cell_sums(np.zeros((3, 2, 2, 4)), np.array([], np.int64), np.array([0]))


def test_tail_checks_are_computed_once_per_replay_and_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """The diagnostics and auto's rule share one computation per (replay, arm, cell rows); a
    different cell, arm or replay computes its own, and a freed replay leaves no memo."""
    import gc
    from types import SimpleNamespace

    from specreplay.pipelines import importance
    from specreplay.sim.arms import parse_arm

    calls: list[tuple[int, ...]] = []

    def fake_checks(*args: object) -> tuple[int, ...]:
        mask = args[3]
        assert isinstance(mask, np.ndarray)
        calls.append(tuple(np.flatnonzero(mask)))
        return (len(calls),)

    monkeypatch.setattr(importance, "cell_checks", fake_checks)

    class Replay(SimpleNamespace):
        pass  # weakly referable, as a ReplayResult

    arm, other = parse_arm("top32:t0.7@5"), parse_arm("greedy@5")
    res = Replay(sums={arm.canonical: 0, other.canonical: 0}, tails={arm.canonical: 0,
                 other.canonical: 0})  # fmt: skip
    m1, m2 = np.array([True, False, True]), np.array([True, True, False])
    once = importance._checks_once
    first = once(res, arm, m1, (0,), (0, 1))  # type: ignore[arg-type]
    assert once(res, arm, m1.copy(), (0,), (0, 1)) == first  # type: ignore[arg-type]
    assert len(calls) == 1
    once(res, arm, m2, (0,), (0, 1))  # type: ignore[arg-type]  # other rows
    once(res, other, m1, (0,), (0, 1))  # type: ignore[arg-type]  # another arm
    once(Replay(**vars(res)), arm, m1, (0,), (0, 1))  # type: ignore[arg-type]  # another replay
    assert len(calls) == 4
    del res
    gc.collect()
    assert importance._memo == {}
