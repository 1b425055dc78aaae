"""Engine, requalify and lawtest (issue 3): estimators agree, invariance, verdicts, outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.replay.engine import replay_archive
from specreplay.results.io import parse_result
from specreplay.sim.arms import parse_arm

ARMS = [
    "top32:t0.7@5",
    "top32:t0.7:dyadic8@5",
    "top32:t0.7:dyadic12:floor-argmax@5",
    "top8:t1.3:p0.9:bfloat16@5",
    "t0.7:float16@5",
    "greedy@5",
    "top32:t0.7:dyadic8/float64@5",
]


@pytest.fixture(scope="module")
def both(small_archive: Path):  # type: ignore[no-untyped-def]
    arms = [parse_arm(a) for a in ARMS]
    mc = replay_archive(small_archive, arms, estimator="montecarlo", replicates=16, seed=3)
    an = replay_archive(small_archive, arms, estimator="analytic")
    return arms, mc, an


def test_montecarlo_agrees_with_analytic_within_mc_error(both) -> None:  # type: ignore[no-untyped-def]
    """Every arm, every depth: |R_mc − R_an| ≤ 4.5 MCSE (delta method over rounds), pooled.

    With 7 arms × 5 depths = 35 comparisons at 4.5 SE, a false failure has probability < 3e-4.
    """
    arms, res, an = both
    for arm in arms:
        s, a = res.sums[arm.canonical], an.sums[arm.canonical]
        n = s.n.sum()
        assert (a.var == 0).all()  # exact estimator
        for d in range(1, 6):
            r_an = a.t[:, d - 1].sum() / n
            r_mc = s.t[:, d - 1].sum() / n
            mcse = math.sqrt(s.var[:, d - 1].sum()) / n
            assert abs(r_mc - r_an) <= 4.5 * mcse, (arm.canonical, d, r_mc, r_an, mcse)
            assert mcse > 0


def test_mcse_cross_checked_with_arviz(small_archive: Path) -> None:
    """The delta-method MCSE of R (M = 64) against ArviZ's MCSE of independent replays.

    64 independent replays (seeds 100..163) with M = 2 each give 64 draws of R; their mean
    averages 128 replicates, so ArviZ's MCSE of that mean (one chain of 64 draws) is the M = 64
    MCSE divided by sqrt(2). The two are estimates of one quantity: they agree within 35%
    (the relative SE of an SD from 64 draws is ~9%; 35% is ~4 SE).
    """
    import arviz as az

    arm = parse_arm("top32:t0.7@5")
    res = replay_archive(small_archive, [arm], estimator="montecarlo", replicates=64, seed=1)
    ours = res.mcse(arm)
    draws = []
    for k in range(64):
        r = replay_archive(small_archive, [arm], estimator="montecarlo", replicates=2, seed=100 + k)
        s = r.sums[arm.canonical]
        draws.append(s.t[:, 4].sum() / s.n.sum())
    ref = float(az.mcse(np.array(draws)[None, :], method="mean"))
    assert ours == pytest.approx(ref * math.sqrt(2), rel=0.35)


def test_same_sums_with_one_and_two_threads_and_any_batch_size(small_archive: Path) -> None:
    arms = [parse_arm("top32:t0.7:dyadic16@5"), parse_arm("greedy@5")]
    kw = {"estimator": "montecarlo", "replicates": 4, "seed": 5}
    base = replay_archive(small_archive, arms, batch_rows=10**6, **kw)
    numba.set_num_threads(1)
    try:
        one = replay_archive(small_archive, arms, batch_rows=97, **kw)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    for a in arms:
        x, y = base.sums[a.canonical], one.sums[a.canonical]
        for f in ("request_key", "bucket", "request", "n", "short", "t", "var", "surv", "offpath"):
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f), err_msg=f)


def test_common_random_numbers_pair_the_arms(both) -> None:  # type: ignore[no-untyped-def]
    """Arms replayed with the same uniforms differ far less than independent replays would."""
    _, res, _ = both
    a = res.sums["top32:t0.7@5"].t[:, 4]
    b = res.sums["top32:t0.7:dyadic8@5"].t[:, 4]
    # same uniforms: the paired difference is far less noisy than either arm's own MC error
    assert np.std(a - b) < 0.5 * np.std(a)


def test_requalify_verdicts_and_outputs(small_archive: Path, tmp_path: Path) -> None:
    out = tmp_path / "rq"
    args = ["requalify", str(small_archive), "--baseline", "top32:t0.7@5", "--candidate",
            "top32:t0.7:dyadic24@5", "--reference", "greedy@5", "--out", str(out), "-q",
            "--n-boot", "1000", "--min-requests", "5"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("REQUALIFICATION (pooled, SIMULATED): QUALIFIED")
    doc = json.loads((out / "results.json").read_text())
    parse_result(json.dumps(doc).encode())  # report's checks pass
    assert doc["requalification"]["verdict"] == "QUALIFIED"
    pooled = doc["cells"][0]
    roles = {d["role"] for d in pooled["deltas"]}
    assert roles == {"candidate-vs-baseline", "candidate-vs-reference", "path-bias",
                     "path-bias-importance"}  # fmt: skip
    ref = next(d for d in pooled["deltas"] if d["role"] == "candidate-vs-reference")
    assert ref["verdict"] is None and "no verdict" in ref["verdict_null_reason"]
    # a delta without a verdict carries no reason for one (family cells of 13-19 requests are
    # INCONCLUSIVE by rule where they have a verdict)
    unruled = [d for c in doc["cells"] for d in c["deltas"] if d["verdict_null_reason"]]
    assert unruled and all(d["verdict_reason"] is None for d in unruled)
    assert any(d["verdict_reason"] for c in doc["cells"][1:] for d in c["deltas"])
    assert all(v["label"] in ("SIMULATED", "MEASURED") for v in pooled["arms"].values())
    assert any("Path assumption" in a for a in doc["assumptions"])
    assert doc["law_tests"] and all(t["passed"] for t in doc["law_tests"])
    for f in ("TABLES.md", "cells.parquet", "forest.png"):
        assert (out / f).exists()
    # dyadic8 is NOT QUALIFIED at the default 0.5% margin, and --fail-on exits 1
    res8 = CliRunner().invoke(
        app,
        [*args[:5], "top32:t0.7:dyadic8@5", "--out", str(tmp_path / "rq8"), "-q", "--n-boot",
         "1000", "--fail-on", "NOT QUALIFIED"],
    )  # fmt: skip
    assert res8.exit_code == 1, res8.output
    assert "NOT QUALIFIED" in res8.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("arm", "message"),
    [("top32:t0@5", "use greedy"), ("top32:t0.7:dyadic7@5", "8..53"), ("top999@5", "top-K")],
)
def test_requalify_bad_arms_exit_2(
    small_archive: Path, tmp_path: Path, arm: str, message: str
) -> None:
    res = CliRunner().invoke(
        app,
        ["requalify", str(small_archive), "--baseline", "top32:t0.7@5", "--candidate", arm,
         "--out", str(tmp_path / "o"), "-q", "--n-boot", "200"],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert res.exit_code == 2
    assert message in res.stderr and "Traceback" not in res.output


def test_lawtest_toy_suite_and_archive(small_archive: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["lawtest", "--out", str(tmp_path / "toy"), "--fail-on-fail"])
    assert res.exit_code == 1  # the built-in suite includes dyadic8/float64, which fails
    doc = json.loads((tmp_path / "toy" / "results.json").read_text())
    for t in doc["law_tests"]:
        mismatched = t["arm"].endswith("/float64")
        assert t["passed"] is (not mismatched), t
    res = CliRunner().invoke(
        app,
        ["lawtest", str(small_archive), "--arm", "top32:t0.7:dyadic8@5", "--positions", "4",
         "--out", str(tmp_path / "arch"), "--fail-on-fail"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output


def test_family_filter_keeps_exactly_that_familys_sums(small_archive: Path) -> None:
    """Replaying --families code gives, key for key, the code rows of the unfiltered replay."""
    arm = parse_arm("top32:t0.7:dyadic12@5")
    full = replay_archive(small_archive, [arm], estimator="montecarlo", replicates=4, seed=2)
    code = replay_archive(
        small_archive, [arm], estimator="montecarlo", replicates=4, seed=2, families={"code"},
        batch_rows=101,
    )  # fmt: skip
    f, c = full.sums[arm.canonical], code.sums[arm.canonical]
    is_code = f.family == full.families.index("code")
    assert 0 < is_code.sum() < f.n.shape[0]
    np.testing.assert_array_equal(c.request_key, f.request_key[is_code])
    for name in ("bucket", "request", "n", "t", "var", "surv", "offpath"):
        np.testing.assert_array_equal(getattr(c, name), getattr(f, name)[is_code], err_msg=name)
    dropped = code.excluded[0]
    assert dropped["reason"] == "family not in --families"
    assert dropped["rows"] == full.positions - code.positions


def test_families_typo_exits_2_listing_the_known_families(
    small_archive: Path, tmp_path: Path
) -> None:
    """--families code,nosuch used to drop 'nosuch' silently; now it names the known families."""
    res = CliRunner().invoke(
        app,
        ["requalify", str(small_archive), "--baseline", "top32:t0.7@5", "--candidate",
         "top32:t0.7:dyadic24@5", "--families", "code,nosuch", "--out", str(tmp_path / "o"),
         "-q", "--n-boot", "200"],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    known = replay_archive(small_archive, [parse_arm("greedy@5")]).families
    assert f"--families: nosuch not in the archive; its families are {', '.join(known)}" in (
        res.stderr
    )
    assert "Traceback" not in res.output


def test_sampled_requests_equal_a_pass_over_those_requests_alone(
    small_archive: Path, tmp_path: Path
) -> None:
    """Replaying everything and selecting the sample afterwards gives, bit for bit, the sums of
    an archive holding only the sampled requests; the rows left out are counted."""
    import polars as pl

    from specreplay.pipelines.requalify import sample_requests

    arm = parse_arm("top32:t0.7:dyadic12@5")
    full = replay_archive(small_archive, [arm], estimator="montecarlo", replicates=4, seed=2)
    wanted = sample_requests(full.requests, 10, seed=2)
    assert len(wanted) == 10
    picked = full.select(None, wanted)
    frame = pl.read_parquet(sorted(small_archive.glob("*.parquet")))
    alone_path = tmp_path / "alone.parquet"
    frame.filter(pl.col("request_id").is_in(sorted(wanted))).write_parquet(alone_path)
    alone = replay_archive(alone_path, [arm], estimator="montecarlo", replicates=4, seed=2)
    x, y = picked.sums[arm.canonical], alone.sums[arm.canonical]
    for f in ("request_key", "bucket", "n", "short", "t", "var", "surv", "offpath"):
        np.testing.assert_array_equal(getattr(x, f), getattr(y, f), err_msg=f)
    assert picked.arm_data(arm).sums.equals(alone.arm_data(arm).sums)
    assert picked.measured_data().sums.equals(alone.measured_data().sums)
    assert picked.excluded == [
        {"reason": "request not in the --sample-requests sample",
         "rows": frame.height - alone.positions}
    ]  # fmt: skip
    assert picked.positions == alone.positions


def test_requalify_on_a_shared_replay_equals_its_own_pass(
    small_archive: Path, tmp_path: Path
) -> None:
    """The demo's one pass over many arms gives each requalification exactly its own figures."""
    from specreplay.commands.requalify import run_requalify
    from specreplay.pipelines.requalify import (
        RequalifyArms,
        RequalifyOptions,
        requalify_result,
    )
    from specreplay.replay.choice import resolve_auto
    from specreplay.replay.engine import OpenArchive

    opts = RequalifyOptions.build(baseline="top32:t0.7@5", candidate="top32:t0.7:dyadic12@5",
                                  reference="greedy@5", n_boot=300, seed=4,
                                  min_requests=5)  # fmt: skip
    _, _, own = run_requalify(small_archive, opts, out=tmp_path / "own", force=True)
    opened = OpenArchive(small_archive)
    logged = str(opened.logging_arm)
    names = ["top32:t0.7@5", "top32:t0.7:dyadic12@5", "greedy@5", "top32:t0.7:dyadic8@5", logged]
    shared = opened.replay([parse_arm(a) for a in dict.fromkeys(names)], seed=4, law_positions=8,
                           companion="importance", exclude_below=5,
                           capped_only=True)  # fmt: skip  # the default --short-rounds capped
    base, cand, ref = (parse_arm(a) for a in names[:3])
    log = parse_arm(logged)
    every = {a.canonical: a for a in (base, cand, ref, log)}
    arms = RequalifyArms(base, cand, ref, log, every)
    shared, choice = resolve_auto(shared, list(every.values()))  # the default --estimator auto
    assert choice.used == own.options["estimator_used"] == "importance"
    reused = requalify_result(shared, arms, opts, small_archive)
    for key in ("cells", "law_tests", "path_bias", "excluded", "inputs", "requalification",
                "assumptions"):  # fmt: skip
        assert getattr(own, key) == getattr(reused, key), key


def test_one_requalify_run_parses_the_logging_arm_option_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11, item 3: ``--logging-arm`` is parsed once per run, not by every reader and pass.

    Three shards without a logging_arm column; a counter around the arm parser (every
    ``parse_arm`` goes through it) records the texts parsed during one ``requalify`` run. The
    option is spelled unlike any other arm of the run, so its count is its own.
    """
    from archive_factory import clone, valid_rows, write_jsonl

    from specreplay.sim import arms as arms_module

    rows = clone(valid_rows(n_requests=6, n_rounds=3, seed=11))
    for r in rows:
        del r["logging_arm"]
    folder = tmp_path / "archive"
    folder.mkdir()
    ids = list(dict.fromkeys(r["request_id"] for r in rows))
    for k in range(3):
        write_jsonl(
            folder / f"part-{k}.jsonl", [r for r in rows if ids.index(r["request_id"]) % 3 == k]
        )
    spelled = "top4:t1.0@3"  # the archive's drafting arm (top4:t1@3), spelled otherwise
    assert parse_arm(spelled) == parse_arm("top4:t1@3")
    parsed: list[str] = []
    real = arms_module._Parser.arm

    def counted(self: Any) -> Any:
        parsed.append(self.text)
        return real(self)

    monkeypatch.setattr(arms_module._Parser, "arm", counted)
    args = ["requalify", str(folder), "--baseline", "top4:t1@3", "--candidate",
            "top4:t1:dyadic24@3", "--logging-arm", spelled, "-q", "--n-boot", "100",
            "--min-requests", "2", "--out", str(tmp_path / "out")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert parsed.count(spelled) == 1, parsed
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["options"]["logging_arm"] == spelled  # the user's spelling, kept for options
