"""transformers assisted generation, end to end through the adapter (issue 12, item 2).

The tiny random pair of ``hfpair`` (vocab 32, float64, nothing downloaded) generates for real
through :class:`~specreplay.capture.hf.AssistedCapture`; the recorder keeps the whole vocabulary
(top_k = 32), so the replay's laws are the live laws.

Design (figures of this seed, measured on the 2-core machine):

- **Sampled recording**: 40 requests × 48 new tokens at K = 4, logging arm ``t1@4``: 811 target
  forwards = 811 rounds, of which 20 undrafted (the last token before ``max_length``: no draft,
  nothing to record), 791 recorded, 47 short (end of generation) and 744 full. Per-position
  acceptance (P(accepted at j | reached j)): 0.63, 0.64, 0.60, 0.64.
- **Engine count**: a forward hook on the target counts its forwards and the tokens each fed; a
  never-stopping stopping criterion records the length after every round. transformers 5.24 has
  NO separate prefill forward: the first forward feeds prompt + the first K drafts, so tokens
  emitted = output length − prompt length (not "− 1" as the issue assumed).
- **Logging arm** (``--short-rounds exclude``, 744 rounds): MEASURED 2.440, SIMULATED
  (importance) 2.500; requalify's paired path-bias gap 0.060 with SE 0.038 (1.6 SE).
- **Counterfactual**: from each of the 744 full round starts, M = 2 live single rounds per arm
  through the same transformers path with the live-arm hook (1,488 generate calls per arm):
  ``t1:dyadic8@4`` predicted 2.500 (SE_pred 0.033), live 2.554 (SE_live 0.039): 1.1 combined
  SE; ``top8:t1@4`` predicted 1.319 (SE_pred 0.022), live 1.356 (SE_live 0.017): 1.4 combined
  SE. top8's predicted Δ from the logging arm is −1.181 with SE 0.039 (−30 SE), and its live
  mean is 31 combined SE from the logging arm's R: a replay that returned that R fails.
- **Greedy**: 10 requests × 48 tokens, ``greedy@4``: 480 rounds (10 undrafted, 30 short);
  validate and MEASURED exact.
- **Recorded laws**: the rows of rounds 0–2 of every request equal fresh forwards of both models
  on the round's prefix plus its drafts (float32-logit tolerance).

Tolerances: 3.5 SE two-sided is P(|Z| > 3.5) = 4.7e-4 per check, three such checks. SEs are read
from requalify's 95% intervals as (hi − lo) / (2 × 1.96), which overstates them by up to 10%
where the interval uses a t quantile (df ≈ 10–13 here). SE_live is clustered by start (the
standard error of the per-start means). Run time of this file: about 55–90 s with a warm Numba
cache.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import torch

from capture.hfpair import VOCAB, ForwardCounter, LengthTrace, prompts, tiny_pair
from specreplay import api
from specreplay.capture import Recorder
from specreplay.capture.hf import AssistedCapture, RequestCapture, StopAfterRounds
from specreplay.errors import SpecReplayError

K = 4
N_REQUESTS, N_GREEDY, NEW_TOKENS = 40, 10, 48
M_LIVE = 2
Z_CHECK = 3.5  # P(|Z| > 3.5) = 4.7e-4 per two-sided check
Z95 = 1.959963984540054
SEED = 12


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Any:
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: torch's own threads only slow tiny models down
    yield
    torch.set_num_threads(old)


@dataclass
class EngineRound:
    """One round as the engine ran it (hooks on the target, not the adapter)."""

    drafted: int
    emitted: int


@dataclass
class Run:
    path: Path
    captures: list[RequestCapture]
    engine: list[list[EngineRound]]
    outputs: list[Any]
    prompt_len: int


def _seed(*key: object) -> int:
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=4).digest(), "big")


def _record(
    path: Path, arm: str, n: int, do_sample: bool, top_k: int = VOCAB, tails: bool = False
) -> Run:
    target, draft = tiny_pair()
    counter = ForwardCounter(target)
    captures, engine, outputs = [], [], []
    ps = prompts(n, seed=SEED)
    with Recorder(path, logging_arm=arm, top_k=top_k, engine="transformers", tails=tails) as rec:
        cap = AssistedCapture(target, draft, rec, num_assistant_tokens=K)
        for i, p in enumerate(ps):
            torch.manual_seed(_seed(SEED, "request", i))
            counter.fed.clear()
            trace = LengthTrace()
            out, rc = cap.generate(
                p,
                request_id=f"req{i:03d}",
                family="tiny",
                do_sample=do_sample,
                max_new_tokens=NEW_TOKENS,
                top_k=None,
                stopping_criteria=[trace],
            )
            plen = int(p.shape[1])
            ends = [plen, *trace.lengths]
            drafted = [counter.fed[0] - plen] + [f - 1 for f in counter.fed[1:]]
            assert len(counter.fed) == len(trace.lengths)  # one target forward per round
            engine.append([EngineRound(d, ends[j + 1] - ends[j]) for j, d in enumerate(drafted)])
            captures.append(rc)
            outputs.append(out[0])
    counter.remove()
    return Run(path, captures, engine, outputs, int(ps[0].shape[1]))


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _record(tmp_path_factory.mktemp("hf") / "sampled", f"t1@{K}", N_REQUESTS, True)


@pytest.fixture(scope="module")
def greedy(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _record(tmp_path_factory.mktemp("hf") / "greedy", f"greedy@{K}", N_GREEDY, False)


def _requalify(path: Path, candidate: str) -> Any:
    return api.requalify(
        path, baseline=f"t1@{K}", candidate=candidate, short_rounds="exclude", n_boot=1000
    )


@pytest.fixture(scope="module")
def rq_dyadic(sampled: Run) -> Any:
    return _requalify(sampled.path, f"t1:dyadic8@{K}")


@pytest.fixture(scope="module")
def rq_top8(sampled: Run) -> Any:
    return _requalify(sampled.path, f"top8:t1@{K}")


def _arm(res: Any, arm: str, *, role: str | None = None) -> dict[str, Any]:
    arms = res.to_polars("arms").filter(pl.col("level") == "pooled", pl.col("arm") == arm)
    arms = arms.filter(pl.col("role").is_null() if role is None else pl.col("role") == role)
    assert arms.height == 1, arms
    return arms.row(0, named=True)


def _delta(res: Any, role: str) -> dict[str, Any]:
    d = res.to_polars("deltas").filter(pl.col("level") == "pooled", pl.col("role") == role)
    assert d.height == 1, d
    return d.row(0, named=True)


def _se(row: dict[str, Any]) -> float:
    return float(row["hi"] - row["lo"]) / (2 * Z95)


# ------------------------------------------------------------------------------------------------
# the engine's own count
# ------------------------------------------------------------------------------------------------


def test_rounds_as_the_engine_ran_them(sampled: Run) -> None:
    # no separate prefill: the first target forward feeds the prompt and the first K drafts
    for rc, rounds, seq in zip(sampled.captures, sampled.engine, sampled.outputs, strict=True):
        assert rounds[0].drafted == K
        assert sum(r.emitted for r in rounds) == int(seq.shape[0]) - sampled.prompt_len
        assert rc.tokens_emitted == int(seq.shape[0]) - sampled.prompt_len
        # the adapter saw the same rounds: drafts, and accepted = emitted − 1
        assert list(rc.drafted) == [r.drafted for r in rounds]
        assert list(rc.accepted) == [r.emitted - 1 for r in rounds]
        assert all(rc.recorded[j] == (r.drafted > 0) for j, r in enumerate(rounds))
        assert all(r.drafted == K for r in rounds[:-3])  # short rounds only at the end
    total = sum(len(r) for r in sampled.engine)
    undrafted = sum(r.drafted == 0 for rs in sampled.engine for r in rs)
    short = sum(0 < r.drafted < K for rs in sampled.engine for r in rs)
    assert (total, undrafted, short) == (811, 20, 47)  # the docstring's design figures


def test_validate_passes_and_measured_equals_the_engine_count(sampled: Run) -> None:
    res = api.validate(sampled.path)
    drafted = [r for rs in sampled.engine for r in rs if r.drafted > 0]
    assert res.archive.rounds == len(drafted)
    assert res.archive.positions == sum(r.drafted for r in drafted)
    assert res.archive.logging_arm == f"t1@{K}"
    cell = next(c for c in res.cells if c.level == "pooled")
    (fig,) = cell.arms.values()
    tokens = sum(r.emitted for r in drafted)
    # exact: the same rounds, the same integer token count, one division
    assert fig.n_rounds == len(drafted)
    assert tokens / len(drafted) == fig.R


def test_a_default_requalify_answers(sampled: Run) -> None:
    """Issue 16, item 1: the adapter marks the rounds the token budget or an EOS cut short
    (``capped``), and a requalify with every default gives a pooled verdict and no UNSUPPORTED
    cell: the capped rounds are left out and counted."""
    rows = pl.read_parquet(sorted(sampled.path.glob("*.parquet")))
    per_round = rows.group_by("request_id", "round").agg(
        pl.len().alias("n"), pl.col("capped").first(), pl.col("capped").n_unique().alias("u")
    )
    assert (per_round["u"] == 1).all()  # one mark per round
    assert per_round.filter(pl.col("capped"))["n"].max() < K  # marked: short rounds only
    assert per_round.filter(~pl.col("capped"))["n"].min() == K  # every short round is marked
    capped = int(per_round["capped"].sum())
    res = api.requalify(sampled.path, baseline=f"t1@{K}", candidate=f"t1:dyadic8@{K}", n_boot=1000)
    assert res.requalification is not None and res.requalification.verdict is not None
    cells = res.to_polars("cells")
    assert not cells["null_reason"].drop_nulls().str.contains("UNSUPPORTED").any()
    (entry,) = [e for e in res.excluded if "--short-rounds capped" in e.reason]
    assert entry.rounds == capped > 0
    print(f"\n{capped} capped rounds left out; verdict {res.requalification.verdict}")


def test_measured_with_short_rounds_excluded(sampled: Run, rq_top8: Any) -> None:
    full = [r for rs in sampled.engine for r in rs if r.drafted == K]
    short = sum(0 < r.drafted < K for rs in sampled.engine for r in rs)
    measured = _arm(rq_top8, f"t1@{K}", role="path-bias")
    assert measured["label"] == "MEASURED"
    assert measured["n_rounds"] == len(full)
    assert measured["R"] == sum(r.emitted for r in full) / len(full)
    (excluded,) = rq_top8.excluded
    assert excluded.rounds == short == 47


def test_per_position_acceptance_between_0_3_and_0_9(sampled: Run) -> None:
    rows = pl.read_parquet(sampled.path / "*.parquet")
    rate = rows.group_by("position").agg(pl.col("accepted").mean()).sort("position")
    # P(accepted at j | reached j): over rounds whose positions before j were all accepted
    reached = rows.with_columns(
        pl.col("accepted").cast(pl.Int8).cum_sum().over("request_id", "round").alias("c")
    ).filter(pl.col("c") - pl.col("accepted").cast(pl.Int8) == pl.col("position") - 1)
    cond = reached.group_by("position").agg(pl.col("accepted").mean()).sort("position")
    assert rate.height == K
    assert cond["accepted"].min() >= 0.3 and cond["accepted"].max() <= 0.9, cond


def test_recorded_laws_are_the_models_laws(sampled: Run) -> None:
    # Fresh forwards of both models on the round's prefix plus its drafts 1..j-1 give, at
    # position j, the target law p and the drafter's t=1 log-probabilities the recorder must
    # hold; the engine casts logits to float32, hence the 1e-6 tolerance.
    target, draft = tiny_pair()
    rows = pl.read_parquet(sampled.path / "*.parquet").filter(pl.col("round") < 3)
    seqs = {f"req{i:03d}": s for i, s in enumerate(sampled.outputs)}
    checked = 0
    for (rid, _), g in rows.group_by("request_id", "round", maintain_order=True):
        g = g.sort("position")
        ctx = int(g["context_tokens"][0])
        drafted = g["drafted_id"].to_list()
        drafts = torch.tensor(drafted[:-1], dtype=torch.long)
        ids = torch.cat([seqs[str(rid)][:ctx], drafts])[None, :]
        with torch.no_grad():
            p = torch.softmax(target(ids).logits[0, ctx - 1 :].float().double(), -1).numpy()
            lq = torch.log_softmax(draft(ids).logits[0, ctx - 1 :].float().double(), -1).numpy()
        for j, row in enumerate(g.iter_rows(named=True)):
            cand = np.asarray(row["cand_ids"])
            np.testing.assert_allclose(row["target_probs"], p[j, cand], rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(row["draft_logprobs"], lq[j, cand], rtol=0, atol=1e-6)
            np.testing.assert_allclose(row["emitted_q"], np.exp(lq[j, cand]), atol=1e-6)
            checked += 1
    assert checked == rows.height and checked > 400


# ------------------------------------------------------------------------------------------------
# the logging arm and the counterfactual on the real engine
# ------------------------------------------------------------------------------------------------


def test_logging_arm_simulated_within_3_5_se_of_measured(rq_dyadic: Any) -> None:
    sim = _arm(rq_dyadic, f"t1@{K}")
    meas = _arm(rq_dyadic, f"t1@{K}", role="path-bias")
    gap = _delta(rq_dyadic, "path-bias")
    assert sim["estimator"] == "importance" and sim["label"] == "SIMULATED"
    assert gap["point"] == pytest.approx(sim["R"] - meas["R"], abs=1e-12)  # SIMULATED − MEASURED
    se = _se(gap)
    assert 0.0 < se < 0.1
    assert abs(gap["point"]) <= Z_CHECK * se, (gap["point"], se)


def _live(run: Run, arm: str) -> tuple[float, float]:
    """Mean and clustered SE of 1 + A over M_LIVE live rounds from every full round start."""
    target, draft = tiny_pair()
    cap = AssistedCapture(target, draft, None, num_assistant_tokens=K, live_arm=arm)
    means = []
    for i, (rc, seq) in enumerate(zip(run.captures, run.outputs, strict=True)):
        for j, (ctx, d) in enumerate(zip(rc.context_tokens, rc.drafted, strict=True)):
            if d != K:
                continue
            prefix = seq[:ctx][None, :]
            got = []
            for m in range(M_LIVE):
                torch.manual_seed(_seed(SEED, arm, i, j, m))
                _, live = cap.generate(
                    prefix,
                    request_id="live",
                    do_sample=True,
                    max_new_tokens=K + 1,
                    top_k=None,
                    stopping_criteria=[StopAfterRounds(1)],
                )
                assert live.drafted == (K,)
                got.append(live.tokens_emitted)
            means.append(np.mean(got))
    x = np.asarray(means)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.shape[0]))


def test_counterfactual_dyadic8_on_the_real_engine(sampled: Run, rq_dyadic: Any) -> None:
    pred = _arm(rq_dyadic, f"t1:dyadic8@{K}")
    assert pred["estimator"] == "importance"
    live, se_live = _live(sampled, f"t1:dyadic8@{K}")
    se = float(np.hypot(se_live, _se(pred)))
    assert abs(live - pred["R"]) <= Z_CHECK * se, (live, pred["R"], se_live, _se(pred))


def test_counterfactual_top8_can_fail(sampled: Run, rq_top8: Any) -> None:
    # requalify's predicted Δ(top8 − t1) is ≥ 5 SE: a replay that returned the logging arm's R
    # for top8 would miss the live figure by that much
    delta = _delta(rq_top8, "candidate-vs-baseline")
    assert delta["point"] <= -5 * _se(delta), (delta["point"], _se(delta))
    pred = _arm(rq_top8, f"top8@{K}")
    logging = _arm(rq_top8, f"t1@{K}")
    live, se_live = _live(sampled, f"top8:t1@{K}")
    se = float(np.hypot(se_live, _se(pred)))
    assert abs(live - pred["R"]) <= Z_CHECK * se, (live, pred["R"], se_live, _se(pred))
    assert abs(live - logging["R"]) > Z_CHECK * float(np.hypot(se_live, _se(logging)))


# ------------------------------------------------------------------------------------------------
# greedy
# ------------------------------------------------------------------------------------------------


KEPT = 8  # of the 32 ids: the truncated capture (schema v2)


@pytest.fixture(scope="module")
def truncated(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _record(
        tmp_path_factory.mktemp("hf") / "cut", f"t1@{K}", N_REQUESTS, True, KEPT, tails=True
    )


def test_a_truncated_capture_records_its_tails_and_replays_the_logging_arm(
    truncated: Run,
) -> None:
    """Logits mode keeping 8 of 32 ids with tails=True (schema v2): the kept mass is below 1,
    recorded, and the logging arm's importance R lies within 3.5 SE of MEASURED (its weights
    read the drafted token's unrenormalised q; a renormalised law would bias them)."""
    kept = api.validate(truncated.path).archive.kept_mass
    assert kept.tails_recorded and kept.draft.median < 0.99
    res = api.requalify(
        truncated.path, baseline=f"t1@{K}", candidate=f"t1@{K - 1}", short_rounds="exclude",
        n_boot=1000, estimator="importance",
    )  # fmt: skip
    gap = _delta(res, "path-bias")
    print(f"\nkept draft mass median {kept.draft.median:.3f}; path-bias gap {gap['point']:+.4f} "
          f"SE {_se(gap):.4f}")  # fmt: skip
    assert abs(gap["point"]) <= Z_CHECK * _se(gap)


KEPT_MOST = 31  # of 32: the tiny pair's laws are broad; 31 ids keep ≥ 99% of the draft's mass


@pytest.fixture(scope="module")
def nearly_whole(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _record(
        tmp_path_factory.mktemp("hf") / "most", f"t1@{K}", N_REQUESTS, True, KEPT_MOST, tails=True
    )


def test_the_analytic_range_holds_the_measured_figure(nearly_whole: Run, sampled: Run) -> None:
    """Logits mode keeping 31 of 32 ids (mean kept draft mass ≥ 0.99): the analytic R of the
    logging arm is a range (the unseen id's acceptance is not recorded), not null, no wider than
    its bound Σ_j (d − j + 1)·min(1 − Σp_j, 1 − Σq_j) averaged over rounds, holding MEASURED
    within 3.5 SE of the path-bias delta beyond it. With one id unseen per position its
    acceptance is min(q, p) of that id, the range's top: the same requests recorded whole
    (``sampled``, same seeds) replay to the top of the range."""
    rows = pl.read_parquet(sorted(nearly_whole.path.glob("*.parquet")))
    kept = float((1.0 - rows["draft_tail"]).mean())  # type: ignore[operator]
    assert kept >= 0.99 and api.validate(nearly_whole.path).archive.kept_mass.tails_recorded
    res = api.requalify(
        nearly_whole.path, baseline=f"t1@{K}", candidate=f"t1@{K - 1}", short_rounds="exclude",
        n_boot=1000, estimator="analytic",
    )  # fmt: skip
    sim = _arm(res, f"t1@{K}")
    assert sim["estimator"] == "analytic" and sim["R"] is not None
    w, bound = sim["tail_width"], sim["tail_limit"]
    assert w is not None and 0.0 < w <= bound
    gap = _delta(res, "path-bias")
    assert gap["tail_width"] == pytest.approx(w)
    se = (gap["hi"] - gap["lo"] - w) / (2 * Z95)  # the interval is widened by w/2 each side
    print(f"\nkept draft mass {kept:.4f}: analytic range [{sim['R'] - w / 2:.4f}, "
          f"{sim['R'] + w / 2:.4f}] (width {w:.4f}, bound {bound:.4f}); path-bias gap "
          f"{gap['point']:+.4f} SE {se:.4f}")  # fmt: skip
    assert abs(gap["point"]) <= Z_CHECK * se + w / 2
    whole = api.requalify(
        sampled.path, baseline=f"t1@{K}", candidate=f"t1@{K - 1}", short_rounds="exclude",
        n_boot=200, estimator="analytic",
    )  # fmt: skip
    assert _arm(whole, f"t1@{K}")["R"] == pytest.approx(sim["R"] + w / 2, rel=1e-12)


def test_greedy_validates_and_measured_is_exact(greedy: Run) -> None:
    res = api.validate(greedy.path)
    drafted = [r for rs in greedy.engine for r in rs if r.drafted > 0]
    assert res.archive.logging_arm == f"greedy@{K}"
    cell = next(c for c in res.cells if c.level == "pooled")
    (fig,) = cell.arms.values()
    assert fig.n_rounds == len(drafted) == res.archive.rounds
    assert sum(r.emitted for r in drafted) / len(drafted) == fig.R
    rows = pl.read_parquet(greedy.path / "*.parquet")
    # target_probs: a point mass on the target's argmax, the law a greedy verifier accepts against
    tp = rows["target_probs"].to_list()
    assert all(sorted(p)[-1] == 1.0 and sum(p) == 1.0 for p in tp)
    eq = rows.with_columns(
        (
            pl.col("cand_ids").list.get(pl.col("target_probs").list.arg_max())
            == pl.col("drafted_id")
        ).alias("is_argmax")
    )
    # the verifier's decision is "draft == argmax": accepted rows are exactly those (up to the
    # first mismatch, after which positions are recorded False)
    assert eq.filter(pl.col("accepted"))["is_argmax"].all()
    first = (
        eq.filter(~pl.col("is_argmax"))
        .group_by("request_id", "round")
        .agg(pl.col("position").min().alias("first_miss"))
    )
    joined = rows.join(first, on=["request_id", "round"], how="left").with_columns(
        pl.col("first_miss").fill_null(K + 1)
    )
    assert (joined["accepted"] == (joined["position"] < joined["first_miss"])).all()


# ------------------------------------------------------------------------------------------------
# refusals
# ------------------------------------------------------------------------------------------------


def test_refusals(tmp_path: Path) -> None:
    target, draft = tiny_pair()
    p = prompts(1)[0]
    with pytest.raises(SpecReplayError, match="needs a sampled arm whose verifier is its sampler"):
        AssistedCapture(target, draft, num_assistant_tokens=K, live_arm=f"t1:dyadic8/float64@{K}")
    with pytest.raises(SpecReplayError, match="its depth should be num_assistant_tokens=4"):
        AssistedCapture(target, draft, num_assistant_tokens=K, live_arm="t1@3")
    cap = AssistedCapture(target, draft, num_assistant_tokens=K)
    with pytest.raises(SpecReplayError, match=r"generate\(num_assistant_tokens=3\)"):
        cap.generate(p, request_id="x", do_sample=True, num_assistant_tokens=3)
    with pytest.raises(SpecReplayError, match=r"generate\(prompt_lookup_num_tokens=\.\.\.\)"):
        cap.generate(p, request_id="x", do_sample=True, prompt_lookup_num_tokens=3)
    with Recorder(tmp_path / "a", logging_arm=f"t1@{K}", top_k=VOCAB) as rec:
        cap = AssistedCapture(target, draft, rec, num_assistant_tokens=K)
        with pytest.raises(SpecReplayError, match="needs greedy@4"):
            cap.generate(p, request_id="x", do_sample=False)
        with pytest.raises(SpecReplayError, match=r"samples at temperature 0\.7"):
            cap.generate(p, request_id="x", do_sample=True, temperature=0.7)
        live = AssistedCapture(target, draft, rec, num_assistant_tokens=K, live_arm=f"top8@{K}")
        with pytest.raises(SpecReplayError, match="drafts with the live arm top8@4"):
            live.generate(p, request_id="x", do_sample=True, top_k=None)
    assert draft.generation_config.num_assistant_tokens == K
    assert draft.generation_config.num_assistant_tokens_schedule == "constant"
    assert draft.generation_config.assistant_confidence_threshold == 0.0
