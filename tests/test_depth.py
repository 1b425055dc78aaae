"""stats/depth (issue 11): the cost model, tokens/s, P(best) and the best depth, as pure functions.

Each figure is checked against a value computed here another way: P(best) by counting winners
replicate by replicate in plain Python, the cost model by its closed form.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from specreplay.errors import SpecReplayError
from specreplay.stats.depth import CostModel, best_depth, p_best, tokens_per_s


def test_tokens_per_s_is_1000_r_over_ms_for_scalars_and_replicates() -> None:
    assert tokens_per_s(2.44, 1.1) == 1000.0 * 2.44 / 1.1
    reps = np.array([1.5, 2.0, np.nan])
    got = tokens_per_s(reps, 1.25)
    assert got[:2].tolist() == [1200.0, 1600.0] and math.isnan(got[2])


def test_p_best_counts_each_replicates_winner() -> None:
    rng = np.random.default_rng(11)
    depths = [1, 2, 3, 5]
    reps = {d: rng.normal(100.0 + d, 3.0, size=500).round(0) for d in depths}  # ties happen
    reps[3][[4, 40, 400]] = np.nan  # those replicates count for no depth
    got = p_best(reps)
    wins = dict.fromkeys(depths, 0)
    kept = 0
    for b in range(500):
        row = [reps[d][b] for d in depths]
        if any(math.isnan(x) for x in row):
            continue
        kept += 1
        top = max(row)
        wins[next(d for d, x in zip(depths, row, strict=True) if x == top)] += 1  # lowest on ties
    assert kept == 497
    assert got == {d: wins[d] / kept for d in depths}
    assert sum(got.values()) == pytest.approx(1.0)


def test_p_best_with_no_finite_replicate_is_zero_everywhere() -> None:
    assert p_best({1: np.array([np.nan, 1.0]), 2: np.array([2.0, np.nan])}) == {1: 0.0, 2: 0.0}


def test_best_depth_is_the_highest_central_rate_lowest_on_ties() -> None:
    assert best_depth({3: 488.0, 1: 1800.0, 2: 2218.2}) == 2
    assert best_depth({4: 10.0, 2: 10.0, 6: 9.0}) == 2
    assert best_depth({1: None, 2: 5.0}) == 2
    assert best_depth({}) is None


def test_linear_cost_model_and_a_toml_table(tmp_path: Path) -> None:
    m = CostModel.parse("linear:20:1.5")
    assert [m.ms(d) for d in (1, 4, 8)] == [21.5, 26.0, 32.0]
    toml = tmp_path / "cost.toml"
    toml.write_text("[ms_per_round]\n1 = 1.0\n2 = 1.1\n3 = 5\n")
    t = CostModel.parse(str(toml))
    assert (t.ms(1), t.ms(2), t.ms(3), t.ms(4)) == (1.0, 1.1, 5.0, None)
    assert t.table == {1: 1.0, 2: 1.1, 3: 5.0} and t.text == str(toml)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("linear:x", "expected linear:T0:C"),
        ("linear:1:2:3", "expected linear:T0:C"),
        ("linear:0:0", "not both 0"),
        ("linear:-1:1", "finite ms ≥ 0"),
        ("linear:inf:1", "finite ms ≥ 0"),
    ],
)
def test_bad_linear_cost_models_are_errors(text: str, message: str) -> None:
    with pytest.raises(SpecReplayError, match=message):
        CostModel.parse(text)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"x = 1\n", "expected a table ms_per_round"),
        (b"[ms_per_round]\n0 = 1.0\n", "depth 1..127"),
        (b"[ms_per_round]\n128 = 1.0\n", "depth 1..127"),
        (b"[ms_per_round]\n2 = -1.0\n", "finite ms > 0"),
        (b'[ms_per_round]\n2 = "1"\n', "finite ms > 0"),
        (b"[ms_per_round\n", "--cost"),
        (b"\xff\xfe", "not valid UTF-8"),
    ],
)
def test_bad_cost_tables_are_errors(tmp_path: Path, body: bytes, message: str) -> None:
    toml = tmp_path / "cost.toml"
    toml.write_bytes(body)
    with pytest.raises(SpecReplayError, match=message):
        CostModel.parse(str(toml))
    with pytest.raises(SpecReplayError, match="--cost"):
        CostModel.parse(str(tmp_path / "missing.toml"))
