"""``--estimator auto`` (the default): importance wherever the archive supports it, and why.

Each test compares an auto run with the explicit run of the estimator it chose (the figures must
be those of that run, bit for bit; verdicts differ only where auto's per-cell tail rule made
them INCONCLUSIVE) and checks the recorded reason; the tail rule is checked at its boundaries,
and the swap of a pass's two estimators against a pass run the other way round. The per-cell
rule and the exact ratio bound are tested in ``test_auto_cells.py``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from archive_factory import valid_rows, write_parquet
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.synthetic import synth_frames
from specreplay.replay.choice import BOUND_MAX, auto_passes, choose, tail_blocks
from specreplay.replay.engine import replay_archive
from specreplay.sim.arms import parse_arm
from specreplay.sim.synth import SynthConfig

LOGGING = "top32:t0.7@5"
FAST = ["-q", "--n-boot", "300", "--min-requests", "5"]


def _requalify(archive: Path, out: Path, *extra: str) -> tuple[dict[str, object], str]:
    cli = CliRunner().invoke(
        app, ["requalify", str(archive), "--out", str(out), *FAST, *extra], env={"COLUMNS": "300"}
    )
    assert cli.exit_code in (0, 1), cli.output
    return json.loads((out / "results.json").read_text()), cli.stdout


def _figures(doc: dict[str, object]) -> dict[str, object]:
    return {k: doc[k] for k in ("cells", "law_tests", "path_bias", "requalification", "arms")}


@pytest.mark.parametrize(
    ("candidate", "why"),
    [
        # temperature 1: far enough from the logging arm's 0.7 for k̂ to count in some cells
        ("top32@5", "k̂ > "),
        # t2: the ESS share of its policy ratio is below 0.1 in cells (0.07 pooled at depth 1)
        ("top32:t2@5", "ESS share < 0.1"),
    ],
)
def test_auto_is_the_explicit_importance_run_but_for_the_cells_its_tail_rule_rejects(
    small_archive: Path, tmp_path: Path, candidate: str, why: str
) -> None:
    """Every figure of an auto run is the explicit importance run's, bit for bit; a verdict
    differs only where auto's per-cell tail rule made it INCONCLUSIVE, and says why there."""
    arms = ["--baseline", LOGGING, "--candidate", candidate, "--reference", "greedy@5"]
    auto, text = _requalify(small_archive, tmp_path / "auto", *arms)
    named, _ = _requalify(small_archive, tmp_path / "named", *arms, "--estimator", "importance")
    opts = auto["options"]
    assert isinstance(opts, dict)
    assert (opts["estimator"], opts["estimator_used"]) == ("auto", "importance")
    assert {k: auto[k] for k in ("law_tests", "path_bias", "arms")} == {
        k: named[k] for k in ("law_tests", "path_bias", "arms")
    }
    cells_a, cells_n = auto["cells"], named["cells"]
    assert isinstance(cells_a, list) and isinstance(cells_n, list)
    rejected = 0
    for ca, cn in zip(cells_a, cells_n, strict=True):
        assert {k: v for k, v in ca.items() if k not in ("deltas", "requalification")} == {
            k: v for k, v in cn.items() if k not in ("deltas", "requalification")
        }
        for da, dn in zip(ca["deltas"], cn["deltas"], strict=True):
            same = ("verdict", "verdict_reason")
            assert {k: v for k, v in da.items() if k not in same} == {
                k: v for k, v in dn.items() if k not in same
            }
            if da["verdict"] != dn["verdict"]:
                assert da["verdict"] == "INCONCLUSIVE"
                assert da["verdict_reason"].startswith("--estimator auto: the importance tail")
                rejected += why in da["verdict_reason"]
    assert rejected > 0
    named_opts = named["options"]
    assert isinstance(named_opts, dict)
    assert named_opts["estimator_reason"] == "named by --estimator importance"
    line = next(s for s in text.splitlines() if s.lower().startswith("estimator"))
    assert line.startswith("Estimator importance (auto: the archive carries drafted_id")


def test_auto_without_drafted_id_is_analytic_with_the_reason(tmp_path: Path) -> None:
    """Explicit importance is an error on this archive (exit 2); auto replays it, analytic."""
    rows = [{k: v for k, v in r.items() if k not in ("drafted_id", "accepted")}
            for r in valid_rows(n_requests=4, n_rounds=3, depth=3)]  # fmt: skip
    path = write_parquet(tmp_path / "a.parquet", rows)
    arms = ["--baseline", "top4:t1@3", "--candidate", "top4:t1:dyadic8@3"]
    doc, text = _requalify(path, tmp_path / "o", *arms, "--min-requests", "2")
    opts = doc["options"]
    assert isinstance(opts, dict)
    assert opts["estimator_used"] == "analytic"
    assert "the archive has no drafted_id column" in opts["estimator_reason"]
    assert "WARNING: estimator analytic" in text


def test_an_arm_outside_the_support_keeps_importance_and_switches_no_other(tmp_path: Path) -> None:
    """A greedy logging arm never drafts what a sampled arm can accept: that arm's rows are
    counted in the reason, and the run stays on importance (no arm switches the others)."""
    path = tmp_path / "greedy.parquet"
    cfg = SynthConfig(n_requests=6, rounds=4, greedy=True)
    pl.concat(list(synth_frames(cfg, seed=3))).write_parquet(path)
    arms = [parse_arm("greedy@5"), parse_arm(LOGGING)]
    est, comp = auto_passes("auto")
    res = replay_archive(path, arms, estimator=est, companion=comp)
    c = choose(res, arms)
    rows = int(res.replays["importance"].unlogged[LOGGING].sum())
    assert rows > 0 and c.used == "importance" and not c.fell_back
    assert f"{LOGGING} ({rows} position rows)" in c.reason
    assert int(res.replays["importance"].unlogged["greedy@5"].sum()) == 0


def test_either_estimator_of_a_pass_equals_the_pass_run_with_it_as_its_own(
    small_archive: Path,
) -> None:
    """One pass holds both estimators in one map: picking importance from an analytic pass
    (``with_estimator``) gives, to the bit, what a pass run with importance as its own gives,
    for each estimator's sums, unlogged rows and ratio tails."""
    arms = [parse_arm(a) for a in (LOGGING, "top32:t0.7:dyadic8@5", "greedy@5")]
    a = replay_archive(small_archive, arms, estimator="analytic", companion="importance")
    b = replay_archive(small_archive, arms, estimator="importance", companion="analytic")
    assert list(a.replays) == ["analytic", "importance"]
    assert list(b.replays) == ["importance", "analytic"]
    s = a.with_estimator("importance")
    assert (s.estimator, s.replicates, a.replicates) == ("importance", 0, 0)
    for est in ("analytic", "importance"):
        one, other = s.replays[est], b.replays[est]
        for c in (x.canonical for x in arms):
            for f in dataclasses.fields(one.arms[c]):
                x, y = getattr(one.arms[c], f.name), getattr(other.arms[c], f.name)
                assert np.array_equal(x, y), f.name
            assert np.array_equal(one.unlogged[c], other.unlogged[c])
            assert np.array_equal(s.flagged[c], b.flagged[c])
            for f in dataclasses.fields(one.tails[c]):
                x, y = getattr(one.tails[c], f.name), getattr(other.tails[c], f.name)
                assert np.array_equal(x, y), f.name
    assert s.sums is a.replays["importance"].arms  # a lookup, no copy
    assert s.tails is a.replays["importance"].tails and s.tails[LOGGING].value.shape[0] > 0
    assert a.tails[LOGGING].value.shape[0] == 0  # the analytic replay keeps no ratio
    with pytest.raises(SpecReplayError, match="no montecarlo replay in this pass"):
        a.with_estimator("montecarlo")


@pytest.mark.parametrize(
    ("share", "k_hat", "threshold", "bound", "blocks"),
    [
        (0.1, None, None, 1e9, False),  # no fit: the share alone decides
        (0.0999, None, None, 1.0, True),
        (0.5, 0.71, 0.7, BOUND_MAX, False),  # heavy shape, small size: the dyadic24 case
        (0.5, 0.71, 0.7, BOUND_MAX * 1.0001, True),
        (0.5, 0.7, 0.7, 1e9, False),  # at the threshold is adequate
        (0.5, 0.69, 0.67, 11.0, True),  # the sample-size threshold, not 0.7, is the bar
    ],
)
def test_tail_rule_at_its_boundaries(
    share: float, k_hat: float | None, threshold: float | None, bound: float, blocks: bool
) -> None:
    assert (tail_blocks(share, k_hat, threshold, bound) is not None) is blocks
