"""Schema v2's tails: read, validated, reported, and never replayed as if they were not there.

Issue 15, item 4: ``draft_tail`` and ``target_tail`` record the mass outside a row's candidates.
``validate`` checks "kept mass + tail = 1" and prints the kept-mass quantiles. The replay is exact
where the kept candidates determine the figure (the logging arm's sampler under importance; greedy
and top-k arms), which the truncated built-in archive checks against the whole one to 1e-12, and
refuses the rest with one line (the interval that holds whatever the tail does is not built yet);
an archive whose tails are all 0 or unknown replays exactly as the same archive without them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from archive_factory import clone, valid_rows, write_jsonl, write_parquet

from specreplay import api
from specreplay.errors import InvalidArchive
from tests.corpus import error_lines, invoke

# the factory's laws on its 4 candidates: draft Σ 15/16 (emitted_q holds it renormalised),
# target Σ 7/8
DRAFT_Q = [0.5, 0.25, 0.125, 0.0625]


def _v2(rows: list[dict[str, Any]], draft_tail: float | None, target_tail: float | None) -> Any:
    """The factory's rows as a v2 capture would write them: emitted_q never renormalised."""
    out = clone(rows)
    for r in out:
        lp = [math.exp(x) for x in r["draft_logprobs"]]  # the draft law, permuted as the row
        if draft_tail is not None:
            r["emitted_q"] = lp
        r["draft_tail"] = draft_tail
        r["target_tail"] = target_tail
    return out


def _write(tmp_path: Path, rows: list[dict[str, Any]], form: str) -> Path:
    if form == "jsonl":
        return write_jsonl(tmp_path / "a.jsonl", rows)
    return write_parquet(
        tmp_path / "a.parquet",
        rows,
        schema_overrides={"draft_tail": pl.Float64(), "target_tail": pl.Float64()},
    )


@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_tails_validate_and_the_kept_mass_is_reported(tmp_path: Path, form: str) -> None:
    path = _write(tmp_path, _v2(valid_rows(), 1 / 16, 1 / 8), form)
    res = api.validate(path)
    kept = res.archive.kept_mass
    assert kept.tails_recorded
    assert kept.draft.positions == kept.target.positions == 18  # 3 requests × 2 rounds × 3
    assert (kept.draft.min, kept.draft.median) == (15 / 16, 15 / 16)
    assert (kept.target.min, kept.target.median) == (7 / 8, 7 / 8)
    assert kept.draft.below_099 == kept.target.below_099 == 1.0
    out = invoke(["validate", str(path)]).stdout
    assert "kept mass (Σ on the candidates) of the draft: min 0.9375 · 1% 0.9375" in out
    assert "100.0% of positions below 0.99" in out and "tails recorded (schema v2" in out


@pytest.mark.parametrize(
    ("draft_tail", "target_tail", "rule"),
    [
        (0.1, 1 / 8, "Σ emitted_q + draft_tail is not 1 within 1e-6 (kept mass + tail = 1)"),
        (1 / 16, 0.2, "Σ target_probs + target_tail is not 1 within 1e-6 (kept mass + tail = 1)"),
        (-0.5, 1 / 8, "draft_tail or target_tail is not a number in [0, 1]"),
    ],
)
@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_a_wrong_tail_is_one_line_naming_the_row(
    tmp_path: Path, form: str, draft_tail: float, target_tail: float, rule: str
) -> None:
    rows = _v2(valid_rows(), 1 / 16, 1 / 8)
    rows[4]["draft_tail"], rows[4]["target_tail"] = draft_tail, target_tail
    path = _write(tmp_path, rows, form)
    with pytest.raises(InvalidArchive) as info:
        api.validate(path)
    where = "line 5" if form == "jsonl" else "row 4"
    assert f"{path}:{where}: {rule}" in info.value.errors[0] or (
        f"{path}: {where}" in info.value.errors[0] and rule in info.value.errors[0]
    )


def test_an_unknown_tail_allows_a_kept_mass_below_1(tmp_path: Path) -> None:
    # null draft_tail: emitted_q is the engine's law on the candidates, its tail unknown: Σ ≤ 1
    rows = _v2(valid_rows(), 1 / 16, None)
    for r in rows:
        r["draft_tail"] = None
    api.validate(_write(tmp_path, rows, "parquet"))
    rows[0]["emitted_q"] = [0.5, 0.5, 0.5, 0.5]
    with pytest.raises(InvalidArchive, match="emitted_q does not sum to 1"):
        api.validate(_write(tmp_path, rows, "parquet"))


@pytest.mark.parametrize("verb", ["requalify", "sweep"])
def test_a_replay_refuses_positive_tails_in_one_line(tmp_path: Path, verb: str) -> None:
    path = _write(tmp_path, _v2(valid_rows(), 1 / 16, 1 / 8), "jsonl")
    out = tmp_path / "out"
    args = (
        ["--baseline", "t1@3", "--candidate", "t1@2"] if verb == "requalify" else ["--arm", "t1@3"]
    )
    res = invoke([verb, str(path), *args, "--out", str(out)])
    assert res.exit_code == 2
    (line,) = error_lines(res)
    # t1 is not the logging arm's sampler (top4:t1): its law on the 4 candidates is unknown
    assert line.startswith(f"error: {path}:line 1: draft_tail 0.0625, target_tail 0.125: arm t1@")
    assert "re-capture keeping the whole vocabulary" in line
    assert "Traceback" not in res.output and not out.exists()


def test_zero_or_unknown_tails_replay_as_the_archive_without_them(tmp_path: Path) -> None:
    rows = valid_rows()
    v1 = write_parquet(tmp_path / "v1.parquet", rows)
    v2_rows = clone(rows)
    for r in v2_rows:
        r["draft_tail"] = 0.0  # emitted_q is the whole logging law
        r["target_tail"] = None  # the target's missing 1/8 unknown, as in v1
    v2 = write_parquet(
        tmp_path / "v2.parquet",
        v2_rows,
        schema_overrides={"draft_tail": pl.Float64(), "target_tail": pl.Float64()},
    )
    a = api.requalify(v1, baseline="t1@3", candidate="t1:dyadic8@3", n_boot=200)
    b = api.requalify(v2, baseline="t1@3", candidate="t1:dyadic8@3", n_boot=200)
    fa, fb = a.to_polars("arms"), b.to_polars("arms")
    assert fa.height > 0 and fa.select("arm", "role", "R").equals(fb.select("arm", "role", "R"))


def test_a_v1_archive_says_its_tails_are_not_recorded(small_archive: Path) -> None:
    out = invoke(["validate", str(small_archive)]).stdout
    assert "tails not recorded (schema v1)" in out
    res = api.validate(small_archive)
    assert res.archive.kept_mass.tails_recorded is False


# ------------------------------------------------------------------------------------------------
# the replay of truncated laws: exact where the law on the candidates is known, refused elsewhere
# ------------------------------------------------------------------------------------------------

KEEP = 8  # candidates kept of the built-in archive's 32


@pytest.fixture(scope="module")
def truncated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The built-in archive (whole laws on 32 candidates) and the same capture as a v2 recorder
    keeping the 8 most probable candidates (plus the drafted one where it is not among them)
    would write it: emitted_q unrenormalised, the tails recorded."""
    root = tmp_path_factory.mktemp("trunc")
    full = root / "full"
    assert invoke(["synth", str(full), "--requests", "60", "--rounds", "16", "-q"]).exit_code == 0
    df = pl.read_parquet(sorted(full.glob("*.parquet")))
    cut = _cut(df, KEEP, root / "cut.parquet")
    plain = root / "plain.parquet"  # the full archive as one file (same row order)
    df.write_parquet(plain)
    return plain, cut


def _cut(df: pl.DataFrame, keep: int, path: Path) -> Path:
    """Write ``df`` as a v2 capture keeping each row's ``keep`` most probable candidates."""
    keep_rows = []
    for r in df.iter_rows(named=True):
        order = sorted(range(len(r["cand_ids"])), key=lambda j: -r["emitted_q"][j])[:keep]
        d = r["cand_ids"].index(r["drafted_id"])
        if d not in order:
            order.append(d)
        out = dict(r)
        for c in ("cand_ids", "draft_logprobs", "target_probs", "emitted_q"):
            out[c] = [r[c][j] for j in order]
        out["draft_tail"] = max(0.0, 1.0 - math.fsum(out["emitted_q"]))
        out["target_tail"] = max(0.0, 1.0 - math.fsum(out["target_probs"]))
        keep_rows.append(out)
    pl.DataFrame(keep_rows, schema=df.schema | {"draft_tail": pl.Float64, "target_tail":
                                                pl.Float64}).write_parquet(path)  # fmt: skip
    return path


def _depth_rs(path: Path, arm: str) -> dict[int, float]:
    res = api.sweep(path, arms=f"{arm}@8", depths="1..8", estimator="importance", n_boot=100)
    d = res.to_polars("depths").filter(pl.col("level") == "pooled")
    return dict(zip(d["depth"].to_list(), d["R"].to_list(), strict=True))


@pytest.mark.parametrize("arm", ["top32:t0.7", "top4:t0.7", "greedy", "top4:t1.5:dyadic8"])
def test_importance_on_truncated_laws_equals_the_whole_laws(
    truncated: tuple[Path, Path], arm: str
) -> None:
    """The logging arm's sampler (at every depth) and the truncated arms replay the 8-candidate
    capture exactly as the 32-candidate one: their weights read only kept candidates."""
    plain, cut = truncated
    kept = api.validate(cut).archive.kept_mass
    assert kept.tails_recorded and kept.draft.below_099 > 0.3  # truncation that matters
    whole, part = _depth_rs(plain, arm), _depth_rs(cut, arm)
    assert sorted(whole) == list(range(1, 9))
    for depth, r in whole.items():
        assert part[depth] == pytest.approx(r, rel=1e-12, abs=1e-12), (arm, depth)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--arm", "top32:t1.0@8", "--estimator", "importance"], "arm top32@8: its law"),
        (["--arm", "top32:t1.0@8", "--estimator", "analytic"], "how the mass outside them"),
        (["--arm", "top32:t0.7@8", "--estimator", "montecarlo"], "under the montecarlo estim"),
    ],
)
def test_what_depends_on_the_unseen_mass_is_refused(
    truncated: tuple[Path, Path], tmp_path: Path, args: list[str], says: str
) -> None:
    _, cut = truncated
    res = invoke(["sweep", str(cut), *args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and not (tmp_path / "o").exists()
    (line,) = error_lines(res)
    assert line.startswith(f"error: {cut}: row ") and says in line
    assert "re-capture keeping the whole vocabulary" in line


def test_requalify_on_a_truncated_capture_bounds_the_analytic_diagnostic(
    truncated: tuple[Path, Path],
) -> None:
    plain, cut = truncated
    a = api.requalify(plain, baseline="top32:t0.7@8", candidate="top32:t0.7@4", n_boot=200)
    b = api.requalify(cut, baseline="top32:t0.7@8", candidate="top32:t0.7@4", n_boot=200)

    def r(res: Any, role: str | None) -> float:
        arms = res.to_polars("arms").filter(pl.col("level") == "pooled")
        arms = arms.filter(pl.col("role").is_null() if role is None else pl.col("role") == role)
        return float(arms.filter(pl.col("arm") == "top32:t0.7@4")["R"][0])

    assert r(b, None) == pytest.approx(r(a, None), rel=1e-12)  # importance, exact
    # the analytic diagnostic is bounded over the tails; keeping 8 of 32 candidates leaves it
    # too wide to say anything: null, with the width and its bound as the reason
    diag = b.to_polars("arms").filter(
        pl.col("level") == "pooled", pl.col("role") == "path-bias-importance"
    )
    full = a.to_polars("arms").filter(
        pl.col("level") == "pooled", pl.col("role") == "path-bias-importance"
    )
    assert diag.height == full.height == 2
    assert diag["R"].null_count() == 2 and full["R"].null_count() == 0
    for why, width in zip(diag["null_reason"], diag["tail_width"], strict=True):
        assert "the mass outside the candidates leaves R anywhere" in why
        assert width > 0.1 and f"{width:.3g} tokens/round" in why


def test_auto_names_the_arm_no_estimator_can_replay(
    truncated: tuple[Path, Path], tmp_path: Path
) -> None:
    # auto answers by importance on a truncated capture: an arm importance cannot replay (another
    # temperature on the untruncated law) is the one named, not the analytic diagnostic's
    _, cut = truncated
    res = invoke(["requalify", str(cut), "--baseline", "top32:t0.7@8", "--candidate",
                  "top32:t1.0@8", "--out", str(tmp_path / "o")])  # fmt: skip
    assert res.exit_code == 2 and not (tmp_path / "o").exists()
    assert "arm top32@8: its law on the candidates depends on the mass outside them" in res.stderr


# ------------------------------------------------------------------------------------------------
# the analytic replay of the logging arm's sampler: a range that holds whatever the tail does
# ------------------------------------------------------------------------------------------------


def _analytic_depths(path: Path, arm: str) -> pl.DataFrame:
    res = api.sweep(path, arms=arm, depths="1..8", estimator="analytic", n_boot=100)
    return res.to_polars("depths").filter(pl.col("R").is_not_null())


def test_the_analytic_range_holds_the_whole_laws_figure(truncated: tuple[Path, Path]) -> None:
    """Keeping 20 of 32 candidates, the analytic R of the logging arm's sampler at depths 1..8,
    in every cell, is a range whose width meets Σ_j (d − j + 1)·min(1 − Σp_j, 1 − Σq_j) and
    which holds the figure of the whole laws (the built-in archive the capture was cut from):
    exactly, as both are exact given the laws. A replay that renormalised the kept laws, or
    that gave the unseen ids nothing (the range's low end as the figure), misses it."""
    plain, _ = truncated
    cut20 = _cut(pl.read_parquet(plain), 20, plain.parent / "cut20.parquet")
    arm = "top32:t0.7@8"
    whole, part = _analytic_depths(plain, arm), _analytic_depths(cut20, arm)
    keys = ["level", "family", "bucket", "depth"]
    j = whole.join(part, on=keys, suffix="_cut", nulls_equal=True)
    assert j.height >= 8 * 5 and whole["tail_width"].is_null().all()  # whole laws: exact
    w, lim = j["tail_width_cut"].to_numpy(), j["tail_limit_cut"].to_numpy()
    mid, truth = j["R_cut"].to_numpy(), j["R"].to_numpy()
    assert (w > 0).all() and (w <= lim + 1e-12).all()
    off = np.abs(truth - mid) / (w / 2)
    assert off.max() <= 1.0 + 1e-9  # inside the range, in every cell and at every depth
    print(
        f"\nkeeping 20 of 32: widths {w.min():.4f}..{w.max():.4f} (limits up to "
        f"{lim.max():.3f}); the whole laws' R at {off.max():.2f} of the half-width at most"
    )
    # the planted replays: the low end offered as the figure; the renormalised (v1) capture
    assert (np.abs(truth - (mid - w / 2)) > 1e-6).mean() > 0.9
    v1 = plain.parent / "cut20_v1.parquet"
    pl.read_parquet(cut20).drop("draft_tail", "target_tail").with_columns(
        pl.col("emitted_q").list.eval(pl.element() / pl.element().sum()),  # as v1 stored it
        pl.lit("t0.7@8").alias("logging_arm"),  # top32 on 20 candidates: refused in v1
    ).write_parquet(v1)
    renormalised = _analytic_depths(v1, "t0.7@8")
    renorm = j.select(keys).join(renormalised, on=keys, nulls_equal=True, how="left")
    assert (np.abs(renorm["R"].to_numpy() - truth) > w / 2).mean() > 0.5
    # the CI holds the range: lo/hi widened by the half-width around the midpoint's interval
    assert (j["lo_cut"].to_numpy() <= mid - w / 2).all()
    assert (j["hi_cut"].to_numpy() >= mid + w / 2).all()


def test_with_one_id_unseen_the_whole_laws_figure_is_the_ranges_top(
    truncated: tuple[Path, Path],
) -> None:
    """The built-in archive with each row's target law renormalised onto its 32 candidates (the
    whole vocabulary, as a capture of a 32-id model records it), cut to 31: one id is unseen
    per row, its acceptance is exactly min(q, p) of that id, the most the range allows, so the
    whole archive's figure is the range's top (a replay that understated the top, or widened
    it, misses)."""
    plain, _ = truncated
    whole = plain.parent / "whole32.parquet"
    pl.read_parquet(plain).with_columns(
        pl.col("target_probs").list.eval(pl.element() / pl.element().sum())
    ).write_parquet(whole)
    cut31 = _cut(pl.read_parquet(whole), 31, plain.parent / "cut31.parquet")
    arm = "top32:t0.7@8"
    keys = ["level", "family", "bucket", "depth"]
    j = _analytic_depths(whole, arm).join(
        _analytic_depths(cut31, arm), on=keys, suffix="_cut", nulls_equal=True
    )
    assert j.height >= 8 * 5
    w = j["tail_width_cut"].to_numpy()
    top = j["R_cut"].to_numpy() + w / 2
    assert (w > 0).all()
    assert np.abs(j["R"].to_numpy() - top).max() <= 1e-12


def test_an_exact_arm_on_a_truncated_capture_carries_no_width(
    truncated: tuple[Path, Path],
) -> None:
    # greedy lives on the most probable candidate, which every row keeps: exact, no range
    plain, cut = truncated
    whole, part = _analytic_depths(plain, "greedy@8"), _analytic_depths(cut, "greedy@8")
    assert part["tail_width"].is_null().all()
    assert part["R"].to_list() == pytest.approx(whole["R"].to_list(), rel=1e-12)
