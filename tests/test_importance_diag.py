"""Tail diagnostics of the importance estimator: ESS and Pareto k̂ of the policy ratio.

See docs/methods.md#the-importance-estimator-and-its-weight.

References, computed independently of the code under test:
- the per-round policy ratio r_k = Π_{j≤k} q^s_j(x_j)/q^L_j(x_j) from the archive's rows (polars
  read, ``emitted_q`` as q^L, the arm's laws from :func:`~specreplay.sim.policy.arm_laws`),
  multiplied left to right as the kernel does: equal **bit for bit**;
- ESS = (Σr)²/Σr² by numpy over every round of a cell;
- k̂ by ArviZ's ``pareto_khat`` (r_eff = 1, right tail) on the cell's **full** ratio array.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from arviz_stats.base import array_stats

import specreplay.replay.tails as tails_mod
from specreplay.pipelines.requalify import with_replay_figures
from specreplay.render.tables import importance_table
from specreplay.replay.archive.batch import RoundBatch, concat_batches
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.archive.synthetic import synth_frames
from specreplay.replay.engine import ReplayResult, replay_archive
from specreplay.replay.estimators import get_estimator
from specreplay.replay.tails import RatioTail, TailAccumulator
from specreplay.results.model import Cell, ImportanceDiagnostic, Level
from specreplay.sim.arms import parse_arm
from specreplay.sim.policy import LawCache, arm_laws
from specreplay.sim.synth import SynthConfig
from specreplay.stats.importance_diag import (
    CONSTANT_REASON,
    diagnose,
    khat_threshold,
    pareto_khat_of_tail,
    psis_tail_length,
)

LOGGING = "top32:t0.7@5"
ARMS = [LOGGING, "top32@5", "top32:t0.8@5", "top32:t0.7:dyadic8@5"]  # canonical (t1: T = 1)
U = 2.0**-53


def _khat(x: np.ndarray) -> float:
    return float(array_stats.pareto_khat(x, chain_axis=None, draw_axis=-1, r_eff=1.0, tail="right"))


@pytest.fixture(scope="module")
def synth_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 requests × 10 rounds × 5 positions (600 rounds: M = 73 tail draws pooled)."""
    out = tmp_path_factory.mktemp("diag") / "synth.parquet"
    pl.concat(list(synth_frames(SynthConfig(n_requests=60, rounds=10), seed=5))).write_parquet(out)
    return out


def _batch(path: Path) -> RoundBatch:
    return concat_batches(list(ArchiveReader(path)))


def _reference_ratio(frame: pl.DataFrame, arm: str) -> np.ndarray:
    """Per round, r_1..r_5 from the rows alone (q^L = emitted_q)."""
    lens = frame["cand_ids"].list.len().to_numpy()
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    qs = arm_laws(parse_arm(arm), offsets, np.concatenate(frame["draft_logprobs"].to_list()))
    out: list[list[float]] = []
    for i, row in enumerate(frame.iter_rows(named=True)):
        if row["position"] == 1:
            out.append([])
            r = 1.0
        x = row["cand_ids"].index(row["drafted_id"])
        q_log = row["emitted_q"][x]
        r *= qs.q_sampler[int(offsets[i]) + x] / q_log if q_log > 0 else 0.0
        out[-1].append(r)
    return np.array(out)


def _cells(res: ReplayResult) -> list[Cell]:
    """Pooled, family, bucket and family × bucket cells on the replay's tables."""
    names = res.buckets.names[: res.buckets.n_user]
    cells = [Cell(Level.POOLED, None, None, 0, {})]
    cells += [Cell(Level.FAMILY, f, None, 0, {}) for f in res.families]
    cells += [Cell(Level.BUCKET, None, b, 0, {}) for b in names]
    cells += [Cell(Level.FAMILY_BUCKET, f, b, 0, {}) for f in res.families for b in names]
    return cells


def _diagnostics(res: ReplayResult) -> list[tuple[ImportanceDiagnostic, ...]]:
    arms = [parse_arm(a) for a in ARMS]
    return [c.importance for c in with_replay_figures(_cells(res), res, arms)]


@pytest.fixture(scope="module")
def ratios(synth_path: Path) -> dict[str, np.ndarray]:
    """Per arm, the reference r_k of every round of the synthetic archive."""
    frame = pl.read_parquet(synth_path)
    return {arm: _reference_ratio(frame, arm) for arm in ARMS}


@pytest.fixture(scope="module")
def replayed(synth_path: Path) -> tuple[ReplayResult, RoundBatch, list[str]]:
    """The replay of every arm, the archive as one batch, and the reader's family codes."""
    res = replay_archive(synth_path, [parse_arm(a) for a in ARMS], estimator="importance")
    reader = ArchiveReader(synth_path)
    batch = concat_batches(list(reader))
    return res, batch, list(reader.families)


def _cell_rounds(cell: Cell, batch: RoundBatch, fams: list[str], names: tuple[str, ...]) -> Any:
    ok = np.ones(batch.n_rounds, bool)
    if cell.family is not None:
        ok &= batch.round_family == fams.index(cell.family)
    if cell.bucket is not None:
        ok &= batch.round_bucket == names.index(cell.bucket)
    return ok


@pytest.mark.parametrize("arm", ARMS)
def test_kernel_policy_ratio_equals_the_row_reference(synth_path: Path, arm: str) -> None:
    """The importance kernel's per-round r_k equal the rows' products bit for bit."""
    batch = _batch(synth_path)
    v = get_estimator("importance").rounds(
        batch, parse_arm(arm), LawCache(batch.offsets, batch.draft_logprobs), seed=0,
        replicates=0, max_depth=5,
    )  # fmt: skip
    assert v.ratio is not None
    np.testing.assert_array_equal(v.ratio, _reference_ratio(pl.read_parquet(synth_path), arm))


@pytest.mark.parametrize("estimator", ["analytic", "montecarlo"])
def test_other_estimators_carry_no_ratio_and_no_diagnostics(
    synth_path: Path, estimator: str
) -> None:
    """Analytic and Monte Carlo produce no ratio, no tail and an empty ``importance`` tuple."""
    arms = [parse_arm(a) for a in ARMS[:2]]
    res = replay_archive(synth_path, arms, estimator=estimator, replicates=4)
    assert all(t.value.shape[0] == 0 for t in res.tails.values())
    cells = with_replay_figures(_cells(res)[:1], res, arms)
    assert cells[0].importance == ()
    assert importance_table(cells[0]) == []


def test_ess_per_cell_equals_numpy_over_every_round(
    replayed: Any, ratios: dict[str, np.ndarray]
) -> None:
    """ESS and ESS share of every cell, arm and depth equal (Σr)²/Σr² over the cell's rounds.

    The code sums per (request, bucket) key then over keys; numpy sums the rounds pairwise:
    each sum is within (S − 1)·u relative of the exact one, so ESS is within 3·S·u.
    """
    res, batch, fams = replayed
    names = res.buckets.names
    for cell, diags in zip(_cells(res), _diagnostics(res), strict=True):
        ok = _cell_rounds(cell, batch, fams, names)
        for d in diags:
            if d.arm == LOGGING:
                continue
            r = ratios[d.arm][ok, d.depth - 1]
            assert d.rounds == r.shape[0]
            if r.shape[0] == 0:
                assert d.ess is None and d.null_reason == "no rounds in this cell"
                continue
            ess = r.sum() ** 2 / (r**2).sum()
            assert d.ess == pytest.approx(ess, rel=3 * r.shape[0] * U)
            assert d.ess_share == pytest.approx(ess / r.shape[0], rel=3 * r.shape[0] * U)


def test_khat_per_cell_equals_arviz_on_the_full_array(
    replayed: Any, ratios: dict[str, np.ndarray]
) -> None:
    """k̂ of every cell (≥ 25 rounds) equals ArviZ's pareto_khat on all the cell's r_k."""
    res, batch, fams = replayed
    checked = 0
    for cell, diags in zip(_cells(res), _diagnostics(res), strict=True):
        ok = _cell_rounds(cell, batch, fams, res.buckets.names)
        for d in diags:
            if d.arm == LOGGING or d.rounds < 25:
                continue
            r = ratios[d.arm][ok, d.depth - 1]
            assert d.pareto_k == _khat(r), (cell, d)
            checked += 1
    assert checked > 40


def test_tail_trick_with_a_small_cap_equals_arviz(
    replayed: Any, ratios: dict[str, np.ndarray], synth_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With K = 15 every finest cell is truncated; every cell whose kept tail still holds its
    M + 1 largest ratios (a finest cell of ≤ 70 rounds: M + 1 ≤ 15) gets ArviZ's k̂ on the full
    array, the others (pooled: M + 1 = 74) a null with the reason; at least one of each kind."""
    monkeypatch.setattr(tails_mod, "TAIL_CAP", 15)
    res = replay_archive(synth_path, [parse_arm(a) for a in ARMS], estimator="importance")
    _, batch, fams = replayed
    exact = nulls = 0
    for cell, diags in zip(_cells(res), _diagnostics(res), strict=True):
        ok = _cell_rounds(cell, batch, fams, res.buckets.names)
        for d in diags:
            if d.arm == LOGGING or d.rounds < 25:
                continue
            if d.pareto_k is None:
                assert d.null_reason is not None and "tail cap exceeded" in d.null_reason
                nulls += 1
                continue
            assert d.pareto_k == _khat(ratios[d.arm][ok, d.depth - 1])
            exact += 1
    assert exact > 0 and nulls > 0


@pytest.mark.parametrize("flush", [1 << 20, 64])
def test_tail_accumulator_over_batches_equals_arviz_on_heavy_tailed_draws(
    flush: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pareto draws (shape 1/ξ, ξ = 0.8) streamed in 7 batches with K = M + 1: k̂ of the kept
    tail padded with zeros equals pareto_khat of all 5000 draws, bit for bit, whether the
    buffer is merged once at the end or after every batch (a flush threshold of 64)."""
    monkeypatch.setattr(TailAccumulator, "_FLUSH", flush)
    rng = np.random.default_rng(20240611)
    n = 5000
    x = rng.pareto(1 / 0.8, size=n)
    m = psis_tail_length(n)
    acc = TailAccumulator(n_buckets=1, max_depth=1, cap=m + 1)
    for part in np.array_split(np.arange(n), 7):
        k = part.shape[0]
        acc.add(np.zeros(k, np.int32), np.zeros(k, np.int32), part.astype(np.uint64),
                np.ones(k, np.int32), x[part, None])  # fmt: skip
    values, dropped = acc.tail.cell((0,), (0,), 1)
    assert values.shape[0] == m + 1
    k_tail, why = pareto_khat_of_tail(values, dropped, n)
    assert why is None and k_tail == _khat(x)
    short, why = pareto_khat_of_tail(values[1:], dropped, n)  # one too few: refused
    assert short is None and why is not None and "tail cap exceeded" in why


def test_hotter_arm_has_a_finite_khat_and_the_logging_arm_none(replayed: Any) -> None:
    """Pooled: t1.0 drafts the logging arm's (t0.7) low-probability tokens far more often, so its
    ratio has a heavy right tail: a finite k̂ at every depth, above 0.7 (with the warning) at
    depth 1, and a smaller ESS share than t0.8 at every depth; the logging arm's ratio is
    constant (ArviZ's k̂ is undefined there): ESS share 1, k̂ null with the reason."""
    res, _, _ = replayed
    pooled = {(d.arm, d.depth): d for d in _diagnostics(res)[0]}
    for k in range(1, 6):
        hot, warm = pooled[("top32@5", k)], pooled[("top32:t0.8@5", k)]
        assert hot.pareto_k is not None and hot.null_reason is None
        assert hot.ess_share is not None and warm.ess_share is not None
        assert hot.ess_share < warm.ess_share
        log = pooled[(LOGGING, k)]
        assert log.ess_share == 1.0 and log.ess == log.rounds == 600
        assert log.pareto_k is None and log.null_reason == CONSTANT_REASON
        assert log.warning is None
    d1 = pooled[("top32@5", 1)]
    assert d1.pareto_k is not None and d1.pareto_k > 0.7
    assert d1.warning is not None and "> 0.7" in d1.warning


def test_one_shard_and_three_shards_give_the_same_diagnostics(
    small_archive: Path, tmp_path: Path
) -> None:
    """Whole requests per shard: the 3-shard archive and its one-file copy give bit-identical
    ESS and equal k̂ in every cell."""
    one = tmp_path / "one.parquet"
    pl.concat([pl.read_parquet(f) for f in sorted(small_archive.glob("*.parquet"))]).write_parquet(
        one
    )
    arms = [parse_arm(a) for a in ARMS]
    three = replay_archive(small_archive, arms, estimator="importance")
    single = replay_archive(one, arms, estimator="importance", batch_rows=1000)
    assert _diagnostics(three) == _diagnostics(single)


def test_sample_requests_keeps_the_selected_requests_tail(
    replayed: Any, ratios: dict[str, np.ndarray], synth_path: Path
) -> None:
    """After selecting half the requests, pooled k̂ equals ArviZ on those requests' ratios."""
    res, batch, _ = replayed
    keep = set(res.requests[::2])
    sel = res.select(requests=keep)
    ids = np.array(res.requests)[np.searchsorted(res.request_keys, batch.round_key)]
    ok = np.isin(ids, list(keep))
    pooled = {(d.arm, d.depth): d for d in _diagnostics(sel)[0]}
    for k in range(1, 6):
        d = pooled[("top32@5", k)]
        assert d.rounds == int(ok.sum())
        assert d.pareto_k == _khat(ratios["top32@5"][ok, k - 1])


def test_diagnose_nulls_and_warnings() -> None:
    """No rounds, all-zero ratios, fewer than 25 rounds: null with the reason; thresholds."""
    empty = np.zeros(0)
    d = diagnose(n=0, ratio_sum=0, ratio_sq=0, ratio_min=np.inf, ratio_max=-np.inf, tail=empty,
                 dropped=-np.inf)  # fmt: skip
    assert d.ess is None and d.null_reason == "no rounds in this cell"
    d = diagnose(n=10, ratio_sum=0, ratio_sq=0, ratio_min=0, ratio_max=0, tail=np.zeros(10),
                 dropped=-np.inf)  # fmt: skip
    assert (
        d.ess is None and d.null_reason is not None and "every policy ratio is 0" in d.null_reason
    )
    r = np.arange(1.0, 11.0)
    d = diagnose(n=10, ratio_sum=r.sum(), ratio_sq=(r**2).sum(), ratio_min=1, ratio_max=10,
                 tail=r, dropped=-np.inf)  # fmt: skip
    assert d.ess == pytest.approx(r.sum() ** 2 / (r**2).sum()) and d.pareto_k is None
    assert d.null_reason is not None and "at least 5 tail draws" in d.null_reason
    assert khat_threshold(1000) == pytest.approx(2 / 3)
    assert khat_threshold(10**9) == 0.7
    # Lomax draws of shape 1 (ξ = 1); seed chosen so this sample's k̂ (1.00) is near the truth
    x = np.random.default_rng(2).pareto(1.0, size=4000)
    d = diagnose(n=4000, ratio_sum=x.sum(), ratio_sq=(x**2).sum(), ratio_min=x.min(),
                 ratio_max=x.max(), tail=x, dropped=-np.inf)  # fmt: skip
    assert d.pareto_k is not None and d.pareto_k > 0.7
    assert d.warning is not None and "> 0.7" in d.warning and "ESS share" in d.warning


def test_merge_is_the_top_k_of_the_union() -> None:
    """Merging two tails keeps the K largest of both per cell; the dropped max is the largest
    value left out."""
    a, b = TailAccumulator(1, 1, cap=3), TailAccumulator(1, 1, cap=3)
    z = np.zeros(4, np.int32)
    one = np.ones(4, np.int32)
    a.add(z, z, np.arange(4, dtype=np.uint64), one, np.array([[5.0], [1.0], [3.0], [2.0]]))
    b.add(z, z, np.arange(4, 8, dtype=np.uint64), one, np.array([[4.0], [0.5], [6.0], [0.1]]))
    m = RatioTail.merge(a.tail, b.tail, cap=3)
    values, dropped = m.cell((0,), (0,), 1)
    assert sorted(values.tolist()) == [4.0, 5.0, 6.0] and dropped == 3.0
    assert m.ordered().cell((0,), (0,), 1)[0].tolist() == [6.0, 5.0, 4.0]


def _random_tail(rng: np.random.Generator, n: int, cap: int) -> RatioTail:
    """A tail of up to ``cap`` entries per group, with many tied values and keys."""
    fam = rng.integers(0, 3, n).astype(np.int32)
    bkt = rng.integers(0, 2, n).astype(np.int32)
    dep = rng.integers(0, 2, n).astype(np.int32)
    key = rng.integers(0, 6, n).astype(np.uint64)
    val = rng.integers(0, 8, n).astype(np.float64) / 4
    order = np.lexsort((key, -val, (fam * 2 + bkt) * 2 + dep))
    t = RatioTail(fam[order], bkt[order], dep[order], key[order], val[order],
                  np.full((3, 2, 2), -np.inf))  # fmt: skip
    return t._select(cap)[0]


@pytest.mark.parametrize("seed", range(6))
def test_linear_merge_equals_a_lexsort_of_the_union(seed: int) -> None:
    """``RatioTail.merge`` (selection per group) keeps the same entries, in canonical order once
    ordered, with the same dropped maxima as a three-key lexsort of both tails' entries cut at
    the cap."""
    rng = np.random.default_rng(seed)
    cap = 5
    a, b = _random_tail(rng, 60, cap), _random_tail(rng, 45, cap)
    m = RatioTail.merge(a, b, cap=cap).ordered()
    fam = np.concatenate([a.family, b.family])
    bkt = np.concatenate([a.bucket, b.bucket])
    dep = np.concatenate([a.depth, b.depth])
    key = np.concatenate([a.request_key, b.request_key])
    val = np.concatenate([a.value, b.value])
    code = (fam * 2 + bkt) * 2 + dep
    order = np.lexsort((key, -val, code))  # stable: a's entry first on a full tie
    want = []
    dropped = np.maximum(a.dropped, b.dropped)
    seen: dict[int, int] = {}
    for i in order.tolist():
        c = int(code[i])
        seen[c] = seen.get(c, 0) + 1
        if seen[c] <= cap:
            want.append((int(fam[i]), int(bkt[i]), int(dep[i]), int(key[i]), float(val[i])))
        else:
            dropped[fam[i], bkt[i], dep[i]] = max(dropped[fam[i], bkt[i], dep[i]], val[i])
    got = list(zip(m.family.tolist(), m.bucket.tolist(), m.depth.tolist(),
                   m.request_key.tolist(), m.value.tolist(), strict=True))  # fmt: skip
    assert got == want
    np.testing.assert_array_equal(m.dropped, dropped)
    assert len(want) < len(order)  # some entries were cut


def test_requalify_reports_the_diagnostics_in_json_and_tables(
    small_archive: Path, tmp_path: Path
) -> None:
    """``requalify --estimator importance``: every cell carries one SIMULATED diagnostic per
    arm and depth, results.json validates against the shipped schema and reads back equal, and
    TABLES.md has the pooled table with the logging arm's null reason; analytic has none."""
    import json

    from typer.testing import CliRunner

    from specreplay.cli import app
    from specreplay.results.io import parse_result, read_result

    runs = {}
    for est in ("importance", "analytic"):
        out = tmp_path / est
        res = CliRunner().invoke(
            app,
            ["requalify", str(small_archive), "--baseline", LOGGING, "--candidate", "top32@5",
             "--estimator", est, "--n-boot", "200", "--min-requests", "5", "--out", str(out),
             "-q"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        runs[est] = out
    doc = json.loads((runs["importance"] / "results.json").read_text())
    parse_result(json.dumps(doc).encode())  # report's checks pass
    for cell in doc["cells"]:
        assert len(cell["importance"]) == 2 * 5
        assert all(d["label"] == "SIMULATED" for d in cell["importance"])
    log = [d for d in doc["cells"][0]["importance"] if d["arm"] == LOGGING]
    assert all(d["pareto_k"] is None and d["null_reason"] == CONSTANT_REASON for d in log)
    result = read_result(runs["importance"] / "results.json")
    assert result.pooled.importance[0].arm == LOGGING
    tables = (runs["importance"] / "TABLES.md").read_text()
    assert "## Importance tail diagnostics of the policy ratio, pooled (SIMULATED)" in tables
    assert CONSTANT_REASON in tables
    cells = pl.read_parquet(runs["importance"] / "cells.parquet")
    k = cells.filter((pl.col("kind") == "pareto_k") & (pl.col("level") == "pooled"))
    assert (
        k.height == 10
        and k.filter(pl.col("arm") == LOGGING)["null_reason"].to_list() == [CONSTANT_REASON] * 5
    )
    analytic = json.loads((runs["analytic"] / "results.json").read_text())
    assert all(c["importance"] == [] for c in analytic["cells"])
    assert "Importance tail diagnostics" not in (runs["analytic"] / "TABLES.md").read_text()


def test_canonical_order_equals_the_three_key_lexsort() -> None:
    """The tie-aware two-key sort of the tails is np.lexsort((key, -value, code)) exactly, on
    data with many ties (zeros and repeated values, repeated keys)."""
    from specreplay.replay.tails import _canonical_order

    rng = np.random.default_rng(17)
    m = 20_000
    code = rng.integers(0, 30, m).astype(np.int64)
    value = np.round(rng.random(m), 2)
    value[rng.random(m) < 0.2] = 0.0
    key = rng.integers(0, 500, m).astype(np.uint64)
    np.testing.assert_array_equal(
        _canonical_order(code, value, key), np.lexsort((key, -value, code))
    )
    distinct = rng.random(m)
    np.testing.assert_array_equal(
        _canonical_order(code, distinct, key), np.lexsort((key, -distinct, code))
    )
    wide = code * 5000  # codes spanning more than 16 bits: no radix sort
    np.testing.assert_array_equal(
        _canonical_order(wide, value, key), np.lexsort((key, -value, wide))
    )


def test_a_failed_pareto_fit_is_null_with_its_reason_not_nan() -> None:
    """ArviZ returns NaN for a tail of rounding-level excesses (28 ratios within 4e-8 of 1, as
    dyadic24 gives on a 24-request archive); results.json cannot hold NaN, so k̂ is null."""
    from specreplay.stats.importance_diag import pareto_khat_of_tail

    ratios = 1.0 + np.array([4, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1] + [0] * 17) * 1e-8
    raw = array_stats.pareto_khat(ratios, chain_axis=None, draw_axis=-1, r_eff=1.0, tail="right")
    assert np.isnan(raw)  # the case this guards against still happens
    k, why = pareto_khat_of_tail(ratios, -np.inf, ratios.shape[0])
    assert k is None
    assert why is not None and "fit to the 5 largest of 28 ratios failed" in why
