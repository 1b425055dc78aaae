"""The API as scipy and ArviZ users expect it (issue 11, item 5).

- ``api.interval`` on arms in memory gives every figure of the same requests read from
  per-request sums files (the file path is the reference);
- ``Result.verdict`` is the headline verdict of the command's typed result;
- ``Result.to_arviz()`` holds exactly the comparison's bootstrap replicates (recomputed here with
  the statistics functions the pipeline calls), and a result read from disk has none;
- the ``to_polars`` views show plain arms, with ``role``, ``estimator`` and ``label`` columns in
  place of results.json's arm-key suffixes.

Data are seeded; figures are compared exactly (the same arithmetic runs on the same numbers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from specreplay import api
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.importers import read_arm
from specreplay.results.model import Label, Role
from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets
from specreplay.stats.compare import compare, parse_margin
from specreplay.stats.pairing import pair_arms

BASE, CAND = "top32:t0.7@5", "top32:t0.7:dyadic24@5"
N_BOOT = 400
SEED = 11


def _arm(rng: np.random.Generator, n: int, shift: float) -> dict[str, Any]:
    """Per-request sums of n requests over three families: rounds 5..60, 1 + A per round."""
    rounds = rng.integers(5, 60, n)
    p = np.clip(rng.beta(6, 3, n) + shift, 0.0, 1.0)
    tokens = rounds + rng.binomial(4 * rounds, p)
    return {
        "request_id": [f"q{i:03d}" for i in range(n)],
        "family": [("code", "math", "chat")[i % 3] for i in range(n)],
        "rounds": rounds,
        "retained_tokens": tokens.astype(float),
    }


@pytest.fixture(scope="module")
def arms() -> tuple[dict[str, Any], dict[str, Any]]:
    rng = np.random.default_rng(20261201)
    return _arm(rng, 90, 0.0), _arm(rng, 90, 0.03)


def _write(path: Path, arm: dict[str, Any], ids: list[str] | None = None) -> Path:
    """Write an arm as a per-request sums JSONL file (the format of ``interval``'s files)."""
    ids = ids if ids is not None else arm["request_id"]
    families = arm.get("family", ["all"] * len(ids))
    with path.open("w") as f:
        for r, fam, n, t in zip(ids, families, arm["rounds"], arm["retained_tokens"], strict=True):
            f.write(json.dumps({"request_id": r, "family": fam, "rounds": int(n),
                                "retained_tokens": float(t)}) + "\n")  # fmt: skip
    return path


def _interval(a: Any, b: Any, **kw: Any) -> api.Result:
    return api.interval(a, b, name_a="A", name_b="B", n_boot=N_BOOT, seed=SEED, **kw)


@pytest.fixture(scope="module")
def from_files(arms: tuple[dict[str, Any], dict[str, Any]], tmp_path_factory: Any) -> api.Result:
    tmp = tmp_path_factory.mktemp("sums")
    return _interval(_write(tmp / "a.jsonl", arms[0]), _write(tmp / "b.jsonl", arms[1]))


def test_arrays_give_every_figure_of_the_same_sums_file(
    arms: tuple[dict[str, Any], dict[str, Any]], from_files: api.Result
) -> None:
    a, b = arms
    as_mapping = _interval(a, b)
    as_frames = _interval(pl.DataFrame(a), pl.DataFrame(b))
    # rows in another order: pairing is by request id, the sums are the same
    flip = np.random.default_rng(3).permutation(len(b["rounds"]))
    shuffled = {k: [v[i] for i in flip] for k, v in b.items()}
    as_shuffled = _interval(a, shuffled)
    assert from_files.pooled.delta(Role.B_VS_A).null_reason is None  # a real comparison
    for res in (as_mapping, as_frames, as_shuffled):
        assert res.cells == from_files.cells  # every figure of every cell, exactly
        assert res.arms == from_files.arms == ("A", "B")
        assert res.verdict == from_files.verdict
        assert res.options["a"] is None and res.inputs == ()
    assert len(from_files.cells) == 1 + 3 + 1 + 3  # pooled, 3 families, bucket, 3 fam × bucket


def test_arrays_without_ids_pair_by_position(
    arms: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    a, b = arms
    ids = [str(i) for i in range(len(a["rounds"]))]  # what position i is named
    plain = {k: v for k, v in a.items() if k not in ("request_id", "family")}
    plain_b = {"rounds": b["rounds"], "retained_tokens": b["retained_tokens"]}
    files = _interval(
        _write(tmp_path / "a.jsonl", plain, ids), _write(tmp_path / "b.jsonl", plain_b, ids)
    )
    pair = _interval((a["rounds"], a["retained_tokens"]), (b["rounds"], b["retained_tokens"]))
    lists = {"rounds": list(b["rounds"]), "tokens": list(b["retained_tokens"])}
    tokens = _interval({"rounds": a["rounds"], "tokens": a["retained_tokens"]}, lists)
    assert pair.cells == files.cells == tokens.cells
    assert [c.family for c in pair.cells if c.level.value == "family"] == ["all"]


def _two(n_a: int = 4, n_b: int = 4) -> tuple[dict[str, Any], dict[str, Any]]:
    return ({"rounds": [3] * n_a, "retained_tokens": [7.0] * n_a},
            {"rounds": [3] * n_b, "retained_tokens": [8.0] * n_b})  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a, b: (a, {**b, "rounds": [3] * 3, "retained_tokens": [8.0] * 3}),
         r"arm A has 4 requests and arm B has 3: arms without request_id are paired by position"),
        (lambda a, b: ({**a, "request_id": ["1", "2", "3", "4"]}, b),
         r"request_id is given for arm A only: give it for both arms"),
        (lambda a, b: ({**a, "rounds": [3, 0, 3, 3]}, b),
         r"arm A: rounds\[1\] = 0: must be a whole number ≥ 1"),
        (lambda a, b: (a, {**b, "rounds": [3, 3, 2.5, 3]}),
         r"arm B: rounds\[2\] = 2.5: must be a whole number ≥ 1"),
        (lambda a, b: (a, {**b, "retained_tokens": [8.0, 2.0, 8.0, 8.0]}),
         r"arm B: retained_tokens\[1\] = 2 is less than rounds = 3 \(each round retains"),
        (lambda a, b: (a, {**b, "retained_tokens": [8.0, float("nan"), 8.0, 8.0]}),
         r"arm B: retained_tokens\[1\] = .*nan.* is not a finite number"),
        (lambda a, b: ({**a, "rounds": [3, "x", 3, 3]}, b),
         r"arm A: rounds\[1\] = 'x' is not a number"),
        (lambda a, b: ({**a, "tokns": [1]}, b), r"arm A: unknown key 'tokns'; expected rounds"),
        (lambda a, b: ({"rounds": a["rounds"]}, b), r"arm A: no retained_tokens given"),
        (lambda a, b: (pl.DataFrame({**a, "tokens": a["retained_tokens"]}), b),
         r"arm A: retained_tokens given twice \(and as tokens\)"),
        (lambda a, b: (pl.DataFrame({**a, "note": ["x"] * 4}), {**b, "retained_tokens": [1] * 4}),
         r"arm B: retained_tokens\[0\] = 1 is less than rounds = 3"),  # extra column ignored
        (lambda a, b: ({**a, "family": ["x"] * 3}, b),
         r"arm A: its columns differ in length \(rounds 4, retained_tokens 4, family 3\)"),
        (lambda a, b: ({**a, "rounds": [[3, 3]] * 4}, b),
         r"arm A: rounds should be 1-D, got shape \(4, 2\)"),
        (lambda a, b: (a, {**b, "bucket": ["<4K", "nope", "<4K", "<4K"]}),
         r"arm B: bucket\[1\] = 'nope' is not a bucket of the run \(<4K, 4K-16K"),
        (lambda a, b: ({**a, "request_id": ["1", "2", "1", "4"]},
                       {**b, "request_id": ["1", "2", "3", "4"]}),
         r"arm A: duplicate request_id '1' at index 2 \(first at index 0\)"),
        (lambda a, b: ({**a, "request_id": [1, 2, 3, 3], "bucket": ["<4K", "<4K", "<4K", ">=64K"],
                        "family": ["f", "f", "f", "g"]}, {**b, "request_id": [1, 2, 3, 4]}),
         r"arm A: request '3' has family 'g' at index 3 but 'f' at index 2"),
        (lambda a, b: (np.ones((4, 2)), b),
         r"arm A: expected a path, a \(rounds, retained_tokens\) pair .* got ndarray"),
        (lambda a, b: (a, "some/file.jsonl"), r"give both arms as paths or both in memory"),
    ],
)  # fmt: skip
def test_bad_arrays_raise_naming_the_arm_and_index(change: Any, message: str) -> None:
    a, b = change(*_two())
    with pytest.raises(SpecReplayError, match=message):
        api.interval(a, b, n_boot=100)


@pytest.mark.parametrize(
    ("option", "value"),
    [("question_file", "q.jsonl"), ("choice", 1), ("drafted", 4), ("ignore", "*.txt")],
)
def test_file_options_are_errors_for_arrays(option: str, value: Any) -> None:
    with pytest.raises(SpecReplayError, match=rf"^{option} applies to input files, not to arms"):
        api.interval(*_two(), n_boot=100, **{option: value})


def test_ids_pair_in_any_order_and_a_bucket_splits_a_request() -> None:
    a = {"request_id": [1, 2, 2], "bucket": ["<4K", "<4K", "4K-16K"], "rounds": [4, 3, 5],
         "retained_tokens": [9.0, 7.0, 12.0]}  # fmt: skip
    b = {"request_id": ["2", "1"], "rounds": [6, 4], "retained_tokens": [15.0, 11.0]}
    res = api.interval(a, b, n_boot=100, min_requests=2)
    pooled = res.pooled
    assert (pooled.arms["A"].R, pooled.arms["B"].R) == ((9 + 7 + 12) / (4 + 3 + 5), 26 / 10)
    bucket = {c.bucket: c for c in res.cells if c.level.value == "bucket"}
    assert bucket["4K-16K"].arms["A"].n_rounds == 5 and bucket["4K-16K"].arms["B"].n_rounds == 0


# --- Result.to_arviz -------------------------------------------------------------------------


def test_to_arviz_without_arviz_says_how_to_install_it(
    arms: tuple[dict[str, Any], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16, item 9: ArviZ is an optional extra; without it to_arviz() is one line."""
    import sys

    from specreplay.errors import SpecReplayError

    res = _interval(*arms)
    monkeypatch.setitem(sys.modules, "arviz", None)  # ``import arviz`` raises ImportError
    with pytest.raises(SpecReplayError, match=r"pip install 'specreplay\[arviz\]'"):
        res.to_arviz()


def test_to_arviz_holds_the_comparisons_replicates(
    arms: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    import arviz as az

    a_path, b_path = _write(tmp_path / "a.jsonl", arms[0]), _write(tmp_path / "b.jsonl", arms[1])
    res = _interval(a_path, b_path)
    tree = res.to_arviz()
    # the same comparison, recomputed from the files with the statistics functions
    bk = Buckets.parse(DEFAULT_BUCKETS)
    read_a, read_b = (read_arm(p, buckets=bk, name=n) for p, n in ((a_path, "A"), (b_path, "B")))
    ps, _ = pair_arms(read_a, read_b, buckets=bk)
    comp = compare(ps, arm_a="A", arm_b="B", n_boot=N_BOOT, seed=SEED, margin=parse_margin("0.5%"))
    post = tree["posterior"]
    assert post["delta"].dims == ("chain", "draw", "cell")
    # the files have no context lengths: the one bucket holds every request, its draws are the
    # pooled cell's, and the tree leaves it out (issue 16, item 8); every other cell is there
    keep = [i for i, c in enumerate(comp.cells) if i == 0 or c.n_requests < comp.pooled.n_requests]
    assert len(keep) == len(comp.cells) - 1
    np.testing.assert_array_equal(post["delta"].values[0], comp.delta_reps[:, keep])
    np.testing.assert_array_equal(post["rel"].values[0], comp.rel_reps[:, keep])
    assert comp.rb_reps is not None
    np.testing.assert_array_equal(post["rb"].values[0], comp.rb_reps[:, keep])
    assert list(post["cell"].values[:2]) == ["pooled", "chat"]
    # ArviZ's HDI of the draws is the result's pooled HDI (stored as results.json's hdi)
    d = res.pooled.delta(Role.B_VS_A)
    assert d is not None and d.hdi is not None
    lo, hi = az.hdi(tree, prob=0.95)["delta"].values[0]
    assert (lo, hi) == pytest.approx((d.hdi.lo, d.hdi.hi), rel=1e-12)
    # the same draws whether the arms came from files or memory
    mem = _interval(*arms).to_arviz()
    np.testing.assert_array_equal(mem["posterior"]["delta"].values, post["delta"].values)


def test_to_arviz_on_a_result_read_from_disk_raises(
    arms: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    res = _interval(*arms, out=tmp_path / "run")
    doc = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "replicates" not in doc  # results.json does not change
    again = api.read_result(tmp_path / "run")
    assert again == res  # the replicates are not part of the result's equality
    with pytest.raises(
        SpecReplayError, match=r"^replicates are not stored; rerun through the API$"
    ):
        again.to_arviz()


# --- Result.verdict, views of a requalification ----------------------------------------------


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("api5") / "archive"
    api.synth(folder, requests=60, rounds=16, depth=5)  # logged by BASE: depth 5, not the 8 default
    return folder


@pytest.fixture(scope="module")
def requalified(archive: Path) -> api.Result:
    return api.requalify(archive, baseline=BASE, candidate=CAND, n_boot=200)


def test_verdict_is_the_headline(
    requalified: api.Result, from_files: api.Result, archive: Path
) -> None:
    assert requalified.requalification is not None
    assert requalified.verdict == requalified.requalification.verdict == "QUALIFIED"
    d = from_files.pooled.delta(Role.B_VS_A)
    assert d is not None and from_files.verdict == d.verdict is not None
    sweep = api.sweep(archive, arms=BASE, depths="2,4", n_boot=200)
    assert sweep.verdict is None
    budget = api.budget(price_ms=1.0, base=2.5, delta_lo=0.1)
    assert budget.verdict is None
    with pytest.raises(SpecReplayError, match=r"^to_arviz: a budget result has no bootstrap"):
        budget.to_arviz()


def test_requalify_to_arviz_is_the_candidate_vs_baseline_comparison(
    requalified: api.Result,
) -> None:
    post = requalified.to_arviz()["posterior"]
    pooled = requalified.pooled.delta(Role.CANDIDATE_VS_BASELINE)
    assert pooled is not None and pooled.point is not None
    draws = post["delta"].values[0, :, 0]
    assert draws.shape == (200,) and int(np.isfinite(draws).sum()) == pooled.n_boot_valid
    rb = post["rb"].values[0, :, 0]
    ra = rb - draws  # R_a of each replicate; Δ/R_a then is the rel draw
    # rel is computed as R_b/R_a − 1: equal to Δ/R_a up to a few roundings of 1 (ulp 2.2e-16)
    np.testing.assert_allclose(post["rel"].values[0, :, 0], draws / ra, rtol=0, atol=1e-15)


def test_views_show_plain_arms_with_role_estimator_and_label(requalified: api.Result) -> None:
    pooled = requalified.pooled
    keys = set(pooled.arms)
    assert {f"{BASE} (MEASURED)", f"{BASE} (analytic)", f"{CAND} (analytic)"} <= keys
    arms = requalified.to_polars("arms").filter(level="pooled")
    rows = {
        (r["arm"], r["role"], r["label"], r["estimator"]): r["R"]
        for r in arms.iter_rows(named=True)
    }
    own = pooled.arms[BASE].estimator
    assert own == "importance"
    bias, pbi = "path-bias", "path-bias-importance"
    assert rows == {
        (BASE, None, "SIMULATED", own): pooled.arms[BASE].R,
        (CAND, None, "SIMULATED", own): pooled.arms[CAND].R,
        (BASE, bias, "MEASURED", None): pooled.arms[f"{BASE} (MEASURED)"].R,
        (BASE, pbi, "SIMULATED", "analytic"): pooled.arms[f"{BASE} (analytic)"].R,
        (CAND, pbi, "SIMULATED", "analytic"): pooled.arms[f"{CAND} (analytic)"].R,
    }
    deltas = requalified.to_polars("deltas").filter(level="pooled")
    bias = deltas.filter(role="path-bias").row(0, named=True)
    assert (bias["a"], bias["b"], bias["label_a"], bias["label_b"]) == (
        BASE,
        BASE,
        "MEASURED",
        "SIMULATED",
    )
    imp = deltas.filter(role="path-bias-importance", a=CAND).row(0, named=True)
    assert (imp["b"], imp["estimator"], imp["estimator_a"], imp["estimator_b"]) == (
        CAND, "analytic − importance", "importance", "analytic")  # fmt: skip
    main = pooled.delta(Role.CANDIDATE_VS_BASELINE)
    assert main is not None
    assert deltas.filter(role="candidate-vs-baseline")["point"].to_list() == [main.point]
    # cells.parquet (the "cells" view): plain arms, an estimator column; R rows unique per cell
    cells = requalified.to_polars()
    assert "estimator" in cells.columns
    names = pl.concat([cells["arm"], cells["arm_a"], cells["arm_b"]]).drop_nulls().unique()
    assert set(names.to_list()) == {BASE, CAND}
    r_rows = cells.filter(kind="R")
    key = ["level", "family", "bucket", "group", "arm", "role", "estimator", "label"]
    assert (
        r_rows.select(key).unique().height
        == r_rows.height
        == sum(len(c.arms) for c in requalified.cells)
    )
    # results.json keeps its keys
    assert {f"{BASE} (MEASURED)"} <= set(pooled.arms)


def test_an_own_arm_named_like_a_companion_stays_whole() -> None:
    res = api.interval(*_two(12, 12), name_b="x (MEASURED)", n_boot=100)
    view = res.to_polars("arms").filter(level="pooled")
    assert view["arm"].to_list() == ["A", "x (MEASURED)"]
    assert view["role"].to_list() == [None, None]
    assert view["label"].to_list() == [Label.MEASURED.value] * 2


def test_hashed_ids_keep_the_replicates(arms: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """--hash-ids rebuilds the result; the replicates (which name cells, not requests) stay."""
    plain, hashed = _interval(*arms), _interval(*arms, hash_ids=True)
    assert hashed.options["hash_ids"] is True and hashed.cells == plain.cells
    np.testing.assert_array_equal(
        hashed.to_arviz()["posterior"]["delta"].values,
        plain.to_arviz()["posterior"]["delta"].values,
    )


def test_sweep_to_arviz_holds_the_draws_behind_p_best(archive: Path) -> None:
    """P(best) recomputed from the tree's R draws (tokens/s per depth) is the result's."""
    from specreplay.stats.depth import CostModel, p_best, tokens_per_s

    cost = "linear:1:0.05"
    sweep = api.sweep(archive, arms=[BASE, CAND], depths="2,4,5", n_boot=200, cost=cost)
    post = sweep.to_arviz()["posterior"]
    assert post["R"].dims == ("chain", "draw", "arm", "depth", "cell")
    assert list(post["arm"].values) == [BASE, CAND] and list(post["depth"].values) == [2, 4, 5]
    model = CostModel.parse(cost)
    for arm in (BASE, CAND):
        r = post["R"].sel(arm=arm).values[0, :, :, 0]  # (draw, depth) of the pooled cell
        reps = {d: tokens_per_s(r[:, j], model.ms(d) or 0.0) for j, d in enumerate((2, 4, 5))}
        figs = {f.depth: f for f in sweep.pooled.depths if f.arm == arm}
        assert p_best(reps) == {d: figs[d].p_best for d in (2, 4, 5)}
        # one joint resample: R at the reference depth (R − delta) is the same at every depth
        ref = r - post["delta"].sel(arm=arm).values[0, :, :, 0]
        np.testing.assert_allclose(ref, np.repeat(ref[:, 2:3], 3, axis=1), rtol=1e-13)
        at_ref = post["delta"].sel(arm=arm, depth=5).values[0, :, 0]  # the pooled cell
        assert np.all(at_ref == 0.0)  # 5 is the reference depth: Δ = 0 exactly
