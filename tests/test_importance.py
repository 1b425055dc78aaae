"""The importance estimator (docs/methods.md#the-importance-estimator-and-its-weight): per-round
weights, the logging-arm identity, agreement with the MEASURED survival, the support check and the
errors for what an archive lacks.

The reference in this file recomputes every per-round value in pure Python from the archive's
rows read with polars (not through the reader's batches): per round and position the drafted
candidate's ratio (q^s/q^L)(x)·min(1, p(x)/q^v(x)), multiplied left to right. The arm's laws
q^s, q^v come from :func:`~specreplay.sim.policy.arm_laws` (tested against their own reference in
``test_arms.py``). The kernel performs the same IEEE operations in the same order (no fast-math),
so the values must agree **bit for bit**.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from archive_factory import valid_rows, write_parquet
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.batch import RoundBatch, concat_batches
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.archive.synthetic import synth_frames
from specreplay.replay.engine import replay_archive
from specreplay.replay.estimators import get_estimator
from specreplay.replay.estimators.base import RoundValues
from specreplay.sim.arms import Arm, parse_arm
from specreplay.sim.policy import FLAG_LOGGING_SUPPORT, LawCache, arm_laws
from specreplay.sim.synth import SynthConfig

LOGGING = "top32:t0.7@5"  # the synthetic archive's logging arm
ARMS = [LOGGING, "top32:t0.7:dyadic8@5", "greedy@5", "top32:t1@5"]
IMPORTANCE = get_estimator("importance")
U = 2.0**-53  # unit roundoff of float64
# emitted_q is the logging arm's *policy* law bit for bit; its sampler law (float64 quantizer)
# renormalises it once more: s = Σ q over n = 32 candidates is 1 within 2n·u (the stored law's
# own rounding plus the sum's), so q^s/q^L = 1 within (2n + 1)·u per candidate (9u measured).
RATIO_ULPS = 2 * 32 + 1
# a weight w_k multiplies k ≤ 5 such factors, each with its own ratio error and ≤ 4 roundings
# (the quotient and product in either computation): relative error ≤ 5·(RATIO_ULPS + 4)·u
RTOL_LOGGING = 5 * (RATIO_ULPS + 4) * U


def _write_synth(path: Path, cfg: SynthConfig, seed: int) -> Path:
    pl.concat(list(synth_frames(cfg, seed=seed))).write_parquet(path)
    return path


@pytest.fixture(scope="module")
def synth_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 requests × 6 rounds × 5 positions of the toy pair, logged by top32:t0.7@5."""
    out = tmp_path_factory.mktemp("imp") / "synth.parquet"
    return _write_synth(out, SynthConfig(n_requests=24, rounds=6), seed=11)


def _batch(path: Path) -> RoundBatch:
    return concat_batches(list(ArchiveReader(path)))


def _values(batch: RoundBatch, arm: str, logging: Arm | None = None) -> RoundValues:
    cache = LawCache(batch.offsets, batch.draft_logprobs)
    return IMPORTANCE.rounds(
        batch, parse_arm(arm), cache, seed=0, replicates=0, max_depth=5, logging=logging
    )


def _accept(qv: float, p: float) -> float:
    """min(1, p/q^v), with the conventions of
    docs/methods.md#the-importance-estimator-and-its-weight: 0 when p = 0, 1 when q^v = 0 < p."""
    if p <= 0.0:
        return 0.0
    if qv == 0.0:
        return 1.0
    return min(1.0, p / qv)


def _reference(frame: pl.DataFrame, arm: str, depth: int = 5) -> dict[str, Any]:
    """Per round: the weights w_1..w_D and t = 1 + cumulative sums, from the rows alone."""
    lens = frame["cand_ids"].list.len().to_numpy()
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    lp = np.concatenate(frame["draft_logprobs"].to_list())
    laws = arm_laws(parse_arm(arm), offsets, lp)
    qs, qv = laws.q_sampler.tolist(), laws.q_verifier.tolist()
    surv: list[list[float]] = []
    for i, row in enumerate(frame.iter_rows(named=True)):
        if row["position"] == 1:
            surv.append([])
            w = 1.0
        x = row["cand_ids"].index(row["drafted_id"])
        at = int(offsets[i]) + x
        q_log = row["emitted_q"][x]
        ratio = (qs[at] / q_log) * _accept(qv[at], row["target_probs"][x]) if q_log > 0 else 0.0
        w *= ratio
        if row["position"] <= depth:
            surv[-1].append(w)
    s = np.array(surv)
    # t = ((1 + w_1) + w_2) + …, added left to right as the kernel does (cumsum is sequential)
    t = np.cumsum(np.hstack([np.ones((s.shape[0], 1)), s]), axis=1)[:, 1:]
    return {"surv": s, "t": t}


@pytest.mark.parametrize("arm", ARMS)
def test_per_round_values_equal_the_pure_python_reference(synth_path: Path, arm: str) -> None:
    """Every round's w_k and t at every depth equal the reference bit for bit (same operations
    in the same order); var and off-path are zeros, depth the recorded one."""
    v = _values(_batch(synth_path), arm)
    ref = _reference(pl.read_parquet(synth_path), arm)
    np.testing.assert_array_equal(v.surv, ref["surv"])
    np.testing.assert_array_equal(v.t, ref["t"])
    assert (v.depth == 5).all() and not v.var.any() and not v.offpath.any()
    assert not (v.flag & FLAG_LOGGING_SUPPORT).any()  # top32 logging law covers all four arms


def test_without_emitted_q_the_logging_arms_law_is_the_logging_law(synth_path: Path) -> None:
    """Dropping emitted_q and naming the logging arm uses its sampler law, equal to emitted_q
    up to the float64 renormalisation, so the values agree within RTOL_LOGGING for every arm;
    a shallower max_depth truncates them bit for bit."""
    batch = _batch(synth_path)
    no_eq = dataclasses.replace(batch, emitted_q=np.zeros(0))
    for arm in ARMS:
        with_eq = _values(batch, arm)
        by_arm = _values(no_eq, arm, logging=parse_arm(LOGGING))
        np.testing.assert_allclose(by_arm.surv, with_eq.surv, rtol=RTOL_LOGGING, atol=0)
        cache = LawCache(batch.offsets, batch.draft_logprobs)
        d3 = IMPORTANCE.rounds(batch, parse_arm(arm), cache, seed=0, replicates=0, max_depth=3)
        np.testing.assert_array_equal(d3.t, with_eq.t[:, :3])


def test_engine_sums_are_the_per_round_values_over_shards(small_archive: Path) -> None:
    """Through replay_archive on a 3-shard archive (each shard's reader gives the logging arm to
    the estimator) the sums are the per-round values added up: totals per depth agree within
    (rounds − 1)·u relative, the bound of a recursive sum of positive terms in any order."""
    arms = [parse_arm(a) for a in ARMS]
    res = replay_archive(small_archive, arms, estimator="importance")
    batch = _batch(small_archive)
    assert res.replicates == 0 and res.estimator == "importance"
    for arm in arms:
        v = _values(batch, arm.canonical)
        s = res.sums[arm.canonical]
        np.testing.assert_allclose(s.t.sum(axis=0), v.t.sum(axis=0), rtol=batch.n_rounds * U)
        np.testing.assert_allclose(s.surv.sum(axis=0), v.surv.sum(axis=0), rtol=batch.n_rounds * U)
        assert not s.var.any() and not s.offpath.any()
        assert res.unlogged_rows[arm.canonical] == 0


def test_logging_arm_weights_are_products_of_min_one_p_over_q(synth_path: Path) -> None:
    """For the logging arm q^s = q^L (emitted_q is its law, up to the float64 quantizer's
    renormalisation), so every policy ratio is 1 and P(A ≥ k) = Π_{j≤k} min(1, p/q^L)(x_j),
    from the archive's columns alone (within RTOL_LOGGING)."""
    batch = _batch(synth_path)
    cache = LawCache(batch.offsets, batch.draft_logprobs)
    np.testing.assert_array_equal(cache.policy(parse_arm(LOGGING).policy).q, batch.emitted_q)
    qs = cache.laws(parse_arm(LOGGING)).q_sampler
    drafted = batch.offsets[:-1] + batch.drafted_idx
    ratio = qs[drafted] / batch.emitted_q[drafted]
    assert np.abs(ratio - 1.0).max() <= RATIO_ULPS * U
    frame = pl.read_parquet(synth_path)
    factors = [
        _accept(q[d], p[d])
        for q, p, d in zip(
            frame["emitted_q"].to_list(),
            frame["target_probs"].to_list(),
            [
                c.index(x)
                for c, x in zip(frame["cand_ids"].to_list(), frame["drafted_id"], strict=True)
            ],
            strict=True,
        )
    ]
    expected = np.array(
        [
            [math.prod(factors[r * 5 : r * 5 + k]) for k in range(1, 6)]
            for r in range(len(factors) // 5)
        ]
    )
    np.testing.assert_allclose(_values(batch, LOGGING).surv, expected, rtol=RTOL_LOGGING, atol=0)


def test_logging_arm_importance_survival_matches_measured_within_paired_interval(
    tmp_path: Path,
) -> None:
    """Acceptance (docs/methods.md#the-importance-estimator-and-its-weight): for the logging arm the
    importance P(A ≥ k) and the archived MEASURED frequency of A ≥ k have the same expectation
    (given the drafted tokens, the archived accept indicators are independent with means min(1,
    p/q^L)). Per request the paired difference D_i = Σ_rounds (w_k − 1{A ≥ k}) over its n_i rounds;
    δ = ΣD/Σn with the delta- method standard error over requests (the bootstrap unit). Tolerance
    4·SE at each k: under normality a false failure has probability 6.3e-5 per depth, ≤ 3.2e-4 over
    the five (union bound); the seed is fixed, so the test is deterministic anyway."""
    path = _write_synth(tmp_path / "a.parquet", SynthConfig(n_requests=300, rounds=16), seed=5)
    batch = _batch(path)
    for delta, se in _paired_survival_gaps(batch, _values(batch, LOGGING)):
        assert 0 < se < 0.005  # an informative interval (0.002 to 0.003 on this archive)
        assert abs(delta) <= 4 * se, (delta, se)


def _paired_survival_gaps(batch: RoundBatch, v: RoundValues) -> list[tuple[float, float]]:
    """Per k = 1..5: δ_k = mean(w_k − 1{A ≥ k}) over rounds and its request-clustered SE."""
    a = batch.measured_accepted
    n_req = int(batch.round_request.max()) + 1
    n = np.bincount(batch.round_request, minlength=n_req).astype(float)
    out = []
    for k in range(1, 6):
        diff = v.surv[:, k - 1] - (a >= k)
        d = np.bincount(batch.round_request, weights=diff, minlength=n_req)
        delta = d.sum() / n.sum()
        se = math.sqrt(n_req / (n_req - 1) * ((d - delta * n) ** 2).sum()) / n.sum()
        out.append((float(delta), se))
    return out


def test_logging_arm_importance_survival_matches_measured_on_a_demo_sized_archive() -> None:
    """Acceptance, on a demo-sized archive (2,000 requests × 64 rounds × 5 positions, seed 0: what
    ``make demo`` replayed until issue 14 made the built-in archive 8 positions deep, regenerated
    in memory at ``SynthConfig``'s depth 5): at every k the paired 95% interval of
    importance P(A ≥ k) − MEASURED P(A ≥ k), Bonferroni over the five depths (|δ| ≤ 2.576 SE,
    family-wise false failure ≤ 5%), holds 0. Measured: z = −1.55, 0.22, 0.78, −0.65, 0.01,
    SE ≈ 0.0004–0.0005. At 8 positions seed 0 gives z_8 = −2.90; over 31 seeds the z are
    standard normal within their MC error (bench/measured_survival_z.py, docs/calibration.md)."""
    from specreplay_testing.livetruth import round_batch, sample_starts

    cfg = SynthConfig(n_requests=2000, rounds=64)
    batch = round_batch(sample_starts(cfg, 0, n_starts=128_000, rounds_per_request=64), cfg)
    assert batch.n_positions == 640_000
    for delta, se in _paired_survival_gaps(batch, _values(batch, LOGGING)):
        assert 0 < se < 0.001
        assert abs(delta) <= 2.576 * se, (delta, se)


def _count_unlogged(frame: pl.DataFrame, arm: str) -> dict[str, int]:
    """Per request, rows where some candidate has q^L = 0 but a(x) = q^s(x)·min(1, p/q^v) > 0."""
    lens = frame["cand_ids"].list.len().to_numpy()
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    laws = arm_laws(parse_arm(arm), offsets, np.concatenate(frame["draft_logprobs"].to_list()))
    qs, qv = laws.q_sampler, laws.q_verifier
    count: dict[str, int] = {}
    for i, (rid, eq, p) in enumerate(
        zip(frame["request_id"], frame["emitted_q"], frame["target_probs"], strict=True)
    ):
        lo = int(offsets[i])
        hit = any(
            eq[c] == 0.0 and qs[lo + c] * _accept(qv[lo + c], p[c]) > 0 for c in range(len(eq))
        )
        count[rid] = count.get(rid, 0) + hit
    return count


@pytest.fixture(scope="module")
def greedy_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A greedy-logged archive (emitted_q a point mass): 6 requests × 4 rounds × 5 positions."""
    out = tmp_path_factory.mktemp("greedy") / "greedy.parquet"
    return _write_synth(out, SynthConfig(n_requests=6, rounds=4, greedy=True), seed=3)


def test_greedy_logging_and_a_sampled_arm_get_null_cells_with_the_count(
    greedy_path: Path, tmp_path: Path
) -> None:
    """A sampled arm can accept candidates a greedy drafter never drafts: those rows are
    counted per arm and request (the reference count, from the rows alone); the greedy arm itself
    has none. requalify exits 0: the sampled arm's R, survival and deltas are null with the reason
    and the count, the pooled requalification null with that reason; the greedy arm's figures
    stay computed; results.json validates."""
    import json

    from specreplay.results.io import parse_result

    res = replay_archive(greedy_path, [parse_arm("greedy@5"), parse_arm(LOGGING)],
                         estimator="importance")  # fmt: skip
    per_request = _count_unlogged(pl.read_parquet(greedy_path), LOGGING)
    expected, held = sum(per_request.values()), sum(v > 0 for v in per_request.values())
    assert expected > 0 and held > 0
    assert res.unlogged_rows == {"greedy@5": 0, LOGGING: expected}
    assert dict(zip(res.requests, res.unlogged[LOGGING].tolist(), strict=True)) == per_request
    out = tmp_path / "o"
    cli = CliRunner().invoke(
        app,
        ["requalify", str(greedy_path), "--baseline", "greedy@5", "--candidate", LOGGING,
         "--estimator", "importance", "--out", str(out), "-q", "--n-boot", "200",
         "--min-requests", "2"],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert cli.exit_code == 0, cli.output
    doc = json.loads((out / "results.json").read_text())
    parse_result(json.dumps(doc).encode())  # report's checks pass
    pooled = next(c for c in doc["cells"] if c["level"] == "pooled")
    why = (
        f"{expected} position rows (in {held} requests) hold a candidate this arm can accept "
        "but the logging law never drafts: the importance estimate would be biased"
    )
    sampled, greedy = pooled["arms"][LOGGING], pooled["arms"]["greedy@5"]
    assert sampled["R"] is None and sampled["mcse"] is None and sampled["null_reason"] == why
    assert greedy["R"] is not None and greedy["null_reason"] is None
    assert greedy["mcse"] is not None and greedy["n_rounds"] == 6 * 4
    deltas = [d for d in pooled["deltas"] if LOGGING in (d["a"], d["b"])]
    assert deltas
    for d in deltas:
        assert d["point"] is None and d["lo"] is None and d["verdict"] is None
        assert d["null_reason"] == why and d["verdict_null_reason"] == why
    for s in pooled["survival"]:
        assert (s["value"] is None) == (s["arm"] == LOGGING)
        assert s["null_reason"] == (why if s["arm"] == LOGGING else None)
    assert pooled["requalification"]["verdict"] is None
    assert pooled["requalification"]["null_reason"] == why
    assert doc["requalification"]["null_reason"] == why


def _rows_without(*columns: str) -> list[dict[str, Any]]:
    rows = valid_rows(n_requests=2, n_rounds=2, depth=3)
    return [{k: v for k, v in r.items() if k not in columns} for r in rows]


def test_importance_without_drafted_id_is_an_error(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "a.parquet", _rows_without("drafted_id", "accepted"))
    with pytest.raises(SpecReplayError, match="needs the archive's drafted_id column"):
        replay_archive(path, [parse_arm("top4:t1@3")], estimator="importance")


def test_importance_without_emitted_q_and_logging_arm_is_an_error(tmp_path: Path) -> None:
    """Neither emitted_q nor a logging arm: an error (exit 2 through the CLI); with
    --logging-arm the same archive replays."""
    path = write_parquet(tmp_path / "a.parquet", _rows_without("emitted_q", "logging_arm"))
    arm = parse_arm("top4:t1@3")
    with pytest.raises(SpecReplayError, match="neither an emitted_q column nor a logging arm"):
        replay_archive(path, [arm], estimator="importance")
    res = replay_archive(path, [arm], estimator="importance", logging_arm="top4:t1@3")
    assert np.isfinite(res.sums[arm.canonical].t).all()
    cli = CliRunner().invoke(
        app,
        ["requalify", str(path), "--baseline", "top4:t1@3", "--candidate", "top4:t1:dyadic8@3",
         "--estimator", "importance", "--out", str(tmp_path / "o"), "-q", "--n-boot", "200"],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert cli.exit_code == 2, cli.output
    assert "neither an emitted_q column nor a logging arm" in cli.stderr
    assert "Traceback" not in cli.output


def test_requalify_with_importance_labels_and_reports_the_analytic_offpath_rates(
    small_archive: Path, tmp_path: Path
) -> None:
    """The report of an importance requalification: figures SIMULATED, the estimator recorded,
    and the off-path shares those of the path-assumption (analytic) replay of the same pass,
    equal to an analytic run's; without that companion they are null *with* a reason."""
    import json

    docs = {}
    for est in ("importance", "analytic"):
        out = tmp_path / est
        res = CliRunner().invoke(
            app,
            ["requalify", str(small_archive), "--baseline", "top32:t0.7@5", "--candidate",
             "top32:t0.7:dyadic8@5", "--estimator", est, "--n-boot", "300",
             "--min-requests", "5", "--out", str(out), "-q"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        docs[est] = json.loads((out / "results.json").read_text())
    doc = docs["importance"]
    assert doc["options"]["estimator"] == doc["options"]["estimator_used"] == "importance"
    for cell, twin in zip(doc["cells"], docs["analytic"]["cells"], strict=True):
        for fig in cell["arms"].values():
            assert fig["label"] in ("SIMULATED", "MEASURED")
        assert cell["offpath"] == twin["offpath"]
    assert doc["cells"][0]["offpath"][0]["accepted_offpath_share"] > 0
    from specreplay.pipelines.requalify import with_replay_figures

    alone = replay_archive(small_archive, [parse_arm(LOGGING)], estimator="importance")
    merged = with_replay_figures([_a_cell()], alone, [parse_arm(LOGGING)])
    off = merged[0].offpath[0]
    assert off.accepted_offpath_share is None
    assert off.null_reason == (
        "the importance estimator follows the archived tokens: no off-path draw"
    )


def _a_cell() -> Any:
    from specreplay.results.model import Cell, Level

    return Cell(level=Level.POOLED, family=None, bucket=None, n_requests=0, arms={}, deltas=())


def test_only_cells_whose_requests_hold_unlogged_rows_are_null(greedy_path: Path) -> None:
    """Per cell: with the unlogged rows kept only in one family's requests, that family's cell
    (and the pooled cell) null the sampled arm with that family's count; every other family's
    cell keeps its R and its delta figures."""
    from specreplay.pipelines.requalify import (
        RequalifyArms,
        RequalifyOptions,
        requalify_result,
    )

    greedy, sampled = parse_arm("greedy@5"), parse_arm(LOGGING)
    res = replay_archive(greedy_path, [greedy, sampled], estimator="importance")
    per_request = _count_unlogged(pl.read_parquet(greedy_path), LOGGING)
    family = res.families[int(res.request_family[0])]
    in_family = [res.families[int(f)] == family for f in res.request_family]
    kept = {r: per_request[r] * k for r, k in zip(res.requests, in_family, strict=True)}
    unlogged = np.array([kept[r] for r in res.requests], dtype=np.int64)
    own = dataclasses.replace(res.own, unlogged={**res.unlogged, LOGGING: unlogged})
    res = dataclasses.replace(res, replays={res.estimator: own})
    rows, held = sum(kept.values()), sum(v > 0 for v in kept.values())
    assert rows > 0 and held == sum(in_family)
    arms = RequalifyArms(greedy, sampled, None, None, {a.canonical: a for a in (greedy, sampled)})
    opts = RequalifyOptions.build(baseline="greedy@5", candidate=LOGGING,
                                  estimator="importance", n_boot=200)  # fmt: skip
    # min_requests 1 (below the option's bound of 2, as this test always set it): every cell
    boot = dataclasses.replace(opts.boot, min_requests=1)
    opts = dataclasses.replace(opts, boot=boot)
    cells = {c.name: c for c in requalify_result(res, arms, opts, greedy_path).cells}
    why = f"{rows} position rows (in {held} request{'s' * (held != 1)}) hold a candidate"
    for name in ("pooled", family):
        fig = cells[name].arms[LOGGING]
        assert fig.R is None and fig.null_reason is not None and fig.null_reason.startswith(why)
        d = cells[name].deltas[0]
        assert d.point is None and d.verdict is None and d.null_reason == fig.null_reason
        assert cells[name].requalification is not None
        assert cells[name].requalification.null_reason == fig.null_reason
    others = [f for f in res.families if f != family and cells[f].n_requests > 0]
    assert others
    for name in others:
        fig = cells[name].arms[LOGGING]
        assert fig.R is not None and fig.null_reason is None
        d = cells[name].deltas[0]
        assert d.null_reason is None or "logging law" not in d.null_reason
        assert d.point is not None
        assert d.point == fig.R - cells[name].arms["greedy@5"].R


@pytest.mark.parametrize(
    "arm", [LOGGING, "top32:t0.7:dyadic8@5", "top32:t0.7:dyadic12/float64@5", "greedy@5"]
)
def test_support_rows_per_request_equal_the_row_reference_for_every_quantizer(
    greedy_path: Path, arm: str
) -> None:
    """The kernel's support check on each path (dyadic-nearest fast path, reference quantizer,
    mismatched verifier) counts exactly the rows the reference finds from materialized laws."""
    res = replay_archive(greedy_path, [parse_arm(arm)], estimator="importance")
    c = parse_arm(arm).canonical
    expected = _count_unlogged(pl.read_parquet(greedy_path), arm)
    assert dict(zip(res.requests, res.unlogged[c].tolist(), strict=True)) == expected
    assert (sum(expected.values()) > 0) is (arm != "greedy@5")
