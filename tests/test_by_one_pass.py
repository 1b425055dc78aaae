"""``--by COLUMN`` from the one replay pass, and arms paired on the pass's request codes (issue 11).

The archive is synthetic (48 requests × 6 rounds, two shards, four families) with a carried
``worker`` column constant per request (w0, w1, w2 by request, and a null for every seventh
request: its own value ``(null)``). The references are passes over the same rows with the
``family`` column rewritten to the grouping (the worker; family · worker): what a pass coded by
those columns computes, independently of :meth:`ReplayResult.grouped`. Every comparison is exact
(to the bit), bootstrap draws included.

In a run, the groupings are resampled with the run's own comparisons in one pass (issue 13): the
last tests check that their replicates are the run's multiplicities (whole-number sums of the
groupings add up to the run's cells), that the run's own comparisons keep the replicates they
drew alone, and that ``requalify``/``sweep --by`` build their cells from that one pass.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from specreplay.pipelines.grouping import BY_LEVELS
from specreplay.pipelines.options import RequalifyOptions, SweepOptions
from specreplay.pipelines.requalify import (
    Planned,
    RequalifyArms,
    requalify_arms,
    requalify_plan,
    requalify_result,
    requalify_run,
    resampled_plan,
)
from specreplay.pipelines.sweep import resampled_sweeps, sweep_plan, sweep_result, sweep_run
from specreplay.replay.archive.reader import GROUP_SEP, NULL_VALUE
from specreplay.replay.archive.synthetic import synth_frames
from specreplay.replay.engine import OpenArchive, ReplayResult, replay_archive
from specreplay.replay.tails import RatioTail, TailAccumulator
from specreplay.results.model import Level, Role
from specreplay.sim.arms import parse_arm
from specreplay.sim.synth import SynthConfig
from specreplay.stats.bootstrap import bootstrap_sums
from specreplay.stats.pairing import pair_arms

LOGGING = "top32:t0.7@5"
ARMS = [parse_arm(a) for a in (LOGGING, "top32:t0.7:dyadic8@5", "top32:t0.7:dyadic24@5")]


def _worker(k: int) -> str | None:
    return None if k % 7 == 3 else f"w{k % 3}"


def _write(folder: Path, frames: list[pl.DataFrame], family: Any = None) -> Path:
    folder.mkdir()
    for i, f in enumerate(frames):
        if family is not None:
            f = f.with_columns(family=family)
        f.write_parquet(folder / f"part-{i}.parquet")
    return folder


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    cfg = SynthConfig(n_requests=48, rounds=6, requests_per_shard=24, context_max=16_384)
    frames = []
    for f in synth_frames(cfg, seed=11):
        k = f.get_column("request_id").str.extract(r"(\d+)$").cast(pl.Int64)
        worker = pl.Series("worker", [_worker(int(x)) for x in k.to_list()], dtype=pl.String)
        frames.append(f.with_columns(worker))
    root = tmp_path_factory.mktemp("by")
    worker = pl.col("worker").fill_null(NULL_VALUE)
    return {
        "w": _write(root / "w", frames),
        # references: the family column rewritten to the grouping of each level
        "by": _write(root / "by", frames, worker),
        "family×by": _write(root / "fxby", frames, pl.concat_str(["family", worker],
                                                                 separator=GROUP_SEP)),
    }  # fmt: skip


def _pass(path: Path, by: str | None, **kw: Any) -> ReplayResult:
    return OpenArchive(path, by=by).replay(ARMS, law_positions=8, **kw)


@pytest.fixture(scope="module")
def passes(archives: dict[str, Path]) -> dict[str, ReplayResult]:
    kw = {"estimator": "importance", "companion": "analytic"}
    return {
        "by_pass": _pass(archives["w"], "worker", **kw),
        "plain": _pass(archives["w"], None, **kw),
        "by": _pass(archives["by"], None, estimator="importance"),
        "family×by": _pass(archives["family×by"], None, estimator="importance"),
    }


def _assert_same_arrays(a: Any, b: Any, what: str) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f"{what}.{f.name}"


def _assert_same_pass(got: ReplayResult, want: ReplayResult) -> None:
    """Same request and family tables, and every per-estimator and MEASURED figure, to the bit."""
    assert got.requests == want.requests and got.families == want.families
    assert np.array_equal(got.request_family, want.request_family)
    assert list(got.replays) == list(want.replays)
    for e, r in want.replays.items():
        g = got.replays[e]
        assert g.replicates == r.replicates
        for c in r.arms:
            _assert_same_arrays(g.arms[c], r.arms[c], f"{e} {c} sums")
            # kept (value, key) pairs and dropped: a tail's order within a group is no figure
            _assert_same_arrays(g.tails[c].ordered(), r.tails[c].ordered(), f"{e} {c} tails")
            assert np.array_equal(g.unlogged[c], r.unlogged[c])
    _assert_same_arrays(got.measured, want.measured, "measured")
    _assert_same_arrays(got.measured.sums, want.measured.sums, "measured.sums")


def test_the_by_pass_is_the_plain_pass_on_the_family_table(
    passes: dict[str, ReplayResult],
) -> None:
    """Coded by family × worker and pooled back, the pass equals the pass coded by family."""
    by_pass, plain = passes["by_pass"], passes["plain"]
    assert len(by_pass.families) == 4 and by_pass.grouping is not None
    assert by_pass.grouping.values == [NULL_VALUE, "w0", "w1", "w2"]
    assert by_pass.tails[LOGGING].value.shape[0] > 0  # importance: the tails are compared too
    _assert_same_pass(by_pass, plain)
    _assert_same_pass(by_pass.with_estimator("analytic"), plain.with_estimator("analytic"))


@pytest.mark.parametrize("level", ["by", "family×by"])
def test_grouped_equals_a_pass_coded_by_the_grouping(
    passes: dict[str, ReplayResult], level: str
) -> None:
    _assert_same_pass(passes["by_pass"].grouped(level), passes[level])


@pytest.mark.parametrize("level", ["by", "family×by"])
def test_grouped_after_sampling_requests_equals_the_sampled_reference(
    passes: dict[str, ReplayResult], level: str
) -> None:
    """``--sample-requests`` before the grouping: the tails are pooled over every request read,
    then restricted to the sample (as a pass coded by the grouping then sampled does)."""
    keep = set(passes["plain"].requests[::3])
    got = passes["by_pass"].select(requests=keep).grouped(level)
    _assert_same_pass(got, passes[level].select(requests=keep))


def _same(a: Any, b: Any, where: str = "") -> None:
    """Recursive equality in which NaN equals NaN (figures of null cells)."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_by_cells_equal_the_family_cells_of_a_pass_coded_by_the_grouping(
    passes: dict[str, ReplayResult], archives: dict[str, Path]
) -> None:
    """Every figure of the ``by`` cells (intervals, TOST, Holm, verdicts: the bootstrap draws
    too) is the family cells' figure of a pass coded by worker, and the ``family×bucket×by``
    cells those of a pass coded by family · worker."""
    base, cand = ARMS[0], ARMS[1]
    arms = RequalifyArms(base, cand, None, base, {a.canonical: a for a in (base, cand)})
    opts = RequalifyOptions.build(baseline=base.canonical, candidate=cand.canonical,
                                  estimator="importance", n_boot=300, min_requests=3,
                                  seed=5)  # fmt: skip
    by_pass = passes["by_pass"]
    for level, keep in (("by", Level.FAMILY), ("family×by", Level.FAMILY_BUCKET)):
        ref = replay_archive(archives[level], list(arms.all.values()), estimator="importance",
                             law_positions=8)  # fmt: skip
        got = requalify_result(by_pass.grouped(level), arms, opts, archives["w"])
        want = requalify_result(ref, arms, opts, archives[level])
        cells = [c for c in got.cells if c.level == keep]
        assert len(cells) >= 4
        _same(cells, [c for c in want.cells if c.level == keep])


def test_a_by_cell_holds_the_requests_of_its_value_only(
    passes: dict[str, ReplayResult], archives: dict[str, Path]
) -> None:
    """Each ``by`` cell counts the requests and rounds of its worker, and its R is the ratio of
    its worker's sums computed from the rows (a cell built from another value's requests fails
    here: the workers' request counts differ)."""
    frame = pl.concat([pl.read_parquet(p) for p in sorted(archives["w"].glob("*.parquet"))])
    frame = frame.with_columns(pl.col("worker").fill_null(NULL_VALUE))
    per = (
        frame.group_by("worker")
        .agg(pl.col("request_id").n_unique().alias("requests"),
             pl.struct("request_id", "round").n_unique().alias("rounds"),
             ((pl.col("accepted").cum_prod().over("request_id", "round")).sum()).alias("acc"))
    )  # fmt: skip
    want = {r["worker"]: r for r in per.iter_rows(named=True)}
    assert sorted(r["requests"] for r in want.values()) == [7, 13, 14, 14]
    base, cand = ARMS[0], ARMS[1]
    arms = RequalifyArms(base, cand, None, base, {a.canonical: a for a in (base, cand)})
    opts = RequalifyOptions.build(baseline=base.canonical, candidate=cand.canonical,
                                  estimator="importance", n_boot=200, min_requests=3)  # fmt: skip
    got = requalify_result(passes["by_pass"].grouped("by"), arms, opts, archives["w"])
    cells = {c.family: c for c in got.cells if c.level == Level.FAMILY}
    assert set(cells) == set(want)
    for w, c in cells.items():
        measured = c.arms[f"{LOGGING} (MEASURED)"]
        assert c.n_requests == want[w]["requests"]
        assert measured.n_rounds == want[w]["rounds"]
        # MEASURED R = Σ (1 + A) / rounds, A the leading accepted positions of a round
        r_measured = (want[w]["rounds"] + want[w]["acc"]) / want[w]["rounds"]
        got_r = measured.R  # (SIM300 reads an upper-case attribute as a constant)
        assert got_r == pytest.approx(r_measured, rel=1e-12)


def test_arms_paired_on_codes_equal_arms_paired_by_id(passes: dict[str, ReplayResult]) -> None:
    """:meth:`ReplayResult.paired` (numpy on the request codes) gives the PairedSums that
    :func:`pair_arms` gives from request ids (polars join), field for field: SIMULATED and
    MEASURED sides, depths, after a request sample, and on a ``--by`` level."""
    plain = passes["plain"]
    keep = set(plain.requests[1::2])
    grouped = passes["by_pass"].grouped("family×by")  # the run's own estimator only
    for res in (plain, plain.select(requests=keep), grouped):
        a, b = ARMS[0], ARMS[2]
        other = "analytic" if res is not grouped else None
        cases = [
            ((a, None, None), (b, None, None)),
            ((a, 3, None), (a, None, other)),
            ("MEASURED", (a, None, None)),
        ]
        for x, y in cases:
            if x == "MEASURED":
                sa, da = res.measured_side("m"), res.measured_data("m")
            else:
                sa = res.side(x[0], x[1], estimator=x[2])
                da = res.arm_data(x[0], x[1], estimator=x[2])
            sb = res.side(y[0], y[1], estimator=y[2])
            db = res.arm_data(y[0], y[1], estimator=y[2])
            got = res.paired(sa, sb)
            want, _ = pair_arms(da, db, buckets=res.buckets)
            for f in dataclasses.fields(want):
                u, v = getattr(got, f.name), getattr(want, f.name)
                if isinstance(v, np.ndarray):
                    assert u.dtype == v.dtype and np.array_equal(u, v), f.name
                else:
                    assert u == v, f.name


def test_a_coarsened_tail_is_the_tail_accumulated_on_the_coarse_codes() -> None:
    """Top K of the union = top K of the parts' top K, ``dropped`` included: ratios of 6 fine
    families (3 coarse ones) with ties, kept with K = 5, pooled, then compared with the tail
    accumulated on the coarse codes from the start."""
    rng = np.random.default_rng(20261201)
    n, depth, nb = 400, 3, 2
    fine = rng.integers(0, 6, n).astype(np.int32)
    coarse_of = np.array([0, 2, 1, 0, 2, 1], np.int64)
    bucket = rng.integers(0, nb, n).astype(np.int32)
    key = rng.integers(0, 50, n).astype(np.uint64)
    ratio = np.round(rng.pareto(1.5, (n, depth)), 1)  # rounded: many ties
    d = rng.integers(1, depth + 1, n).astype(np.int32)
    a, b = TailAccumulator(nb, depth, cap=5), TailAccumulator(nb, depth, cap=5)
    for lo in range(0, n, 97):  # batches
        s = slice(lo, lo + 97)
        a.add(fine[s], bucket[s], key[s], d[s], ratio[s])
        b.add(coarse_of[fine[s]].astype(np.int32), bucket[s], key[s], d[s], ratio[s])
    # a tail is grouped, in no order within a group: compared in canonical order
    got = a.tail.coarsened(coarse_of, 3, cap=5).ordered()
    want = b.tail.ordered()
    for f in dataclasses.fields(RatioTail):
        x, y = getattr(got, f.name), getattr(want, f.name)
        assert x.dtype == y.dtype and np.array_equal(x, y), f.name
    assert np.isfinite(want.dropped).sum() > 6  # the cap cut many groups


# -- one resample pass per run (issue 13, item 1) ---------------------------------------------


def _shared_plans(by_pass: ReplayResult, n_boot: int = 300) -> list[list[Planned]]:
    """The plans of the run and its two groupings, resampled in one pass (as ``_passes`` does)."""
    base, cand = ARMS[0], ARMS[1]
    arms = RequalifyArms(base, cand, None, base, {a.canonical: a for a in (base, cand)})
    opts = RequalifyOptions.build(baseline=base.canonical, candidate=cand.canonical,
                                  estimator="importance", n_boot=n_boot)  # fmt: skip
    runs = [by_pass, *(by_pass.grouped(level) for level in BY_LEVELS)]
    return resampled_plan([requalify_plan(r, arms) for r in runs], opts, by_pass.seed)


def _pooled_over(sums: np.ndarray, names: tuple[str, ...], part: int, into: tuple[str, ...]) -> Any:
    """Sum the family × worker cells (``names``: ``family·worker``) over the other part."""
    out = np.zeros((sums.shape[0], len(into), *sums.shape[2:]))
    for j, name in enumerate(names):
        out[:, into.index(name.split(GROUP_SEP)[part])] += sums[:, j]
    return out


def test_the_groupings_are_resampled_with_the_runs_multiplicities(
    passes: dict[str, ReplayResult],
) -> None:
    """Rounds and MEASURED retained tokens are whole numbers, so their resampled sums are exact:
    the family × bucket × worker cells of every replicate add up, over the workers, to the run's
    family × bucket cells and, over the families, to the worker cells, in every comparison. Each
    level drawn on its own (within its own groups, as before issue 13) fails: its replicates
    resample other requests."""
    plans = _shared_plans(passes["by_pass"])
    # candidate, path bias, 2 × path-bias-importance (the groupings: the run's estimator only)
    assert [len(p) for p in plans] == [4, 2, 2]
    for main, by, crossed in zip(plans[0][:2], *plans[1:], strict=True):
        assert main.role == by.role == crossed.role
        whole = [0, 2] + ([1] if main.role is Role.PATH_BIAS else [])  # MEASURED t: whole too
        m, b, x = (p.pairing for p in (main, by, crossed))
        assert m.replicates is not None and b.replicates is not None
        assert x.replicates is not None
        over_workers = _pooled_over(x.replicates, x.ps.families, 0, m.ps.families)
        over_families = _pooled_over(x.replicates, x.ps.families, 1, b.ps.families)
        np.testing.assert_array_equal(over_workers[..., whole], m.replicates[..., whole])
        np.testing.assert_array_equal(over_families[..., whole], b.replicates[..., whole])
        alone = bootstrap_sums(b.ps, n_boot=300, seed=passes["by_pass"].seed)
        assert not np.array_equal(alone[..., whole], b.replicates[..., whole])


def test_the_runs_own_comparisons_keep_their_replicates_and_share_each_arm(
    passes: dict[str, ReplayResult],
) -> None:
    """Only the groupings move: each comparison of the run itself has, to the bit, the replicates
    it drew on its own before issue 13 (same seed, same requests, same strata); and an arm in two
    comparisons has, to the bit, the same resampled sums in both."""
    run = _shared_plans(passes["by_pass"])[0]
    for p in run:
        alone = bootstrap_sums(p.pairing.ps, n_boot=300, seed=passes["by_pass"].seed)
        np.testing.assert_array_equal(p.pairing.replicates, alone)
    sums: dict[str, list[np.ndarray]] = {}
    for p in run:
        reps = p.pairing.replicates
        assert reps is not None
        sums.setdefault(p.pairing.arm_a, []).append(reps[..., :2])
        sums.setdefault(p.pairing.arm_b, []).append(reps[..., 2:])
    base, cand = ARMS[0].canonical, ARMS[1].canonical
    assert len(sums[base]) == 3 and len(sums[cand]) == 2  # baseline = the logging arm
    for name in (base, cand):
        for other in sums[name][1:]:
            np.testing.assert_array_equal(other, sums[name][0])


def test_a_by_run_builds_its_cells_from_the_one_pass(
    passes: dict[str, ReplayResult], archives: dict[str, Path]
) -> None:
    """``requalify --by worker`` end to end: the deltas of its ``by`` and ``family×bucket×by``
    cells (BCa and resamples drawn included) are those of the groupings resampled with the run
    (and not those of a grouping resampled on its own)."""
    base, cand = ARMS[0], ARMS[1]
    opts = RequalifyOptions.build(baseline=base.canonical, candidate=cand.canonical,
                                  estimator="importance", n_boot=300, min_requests=3,
                                  by="worker")  # fmt: skip
    got = requalify_run(archives["w"], opts)
    arms = requalify_arms(base, cand, None, base)
    plans = _shared_plans(passes["by_pass"])
    for i, (level, keep, mine) in enumerate(
        (("by", Level.FAMILY, Level.BY), ("family×by", Level.FAMILY_BUCKET, Level.FAMILY_BUCKET_BY))
    ):
        grouped = passes["by_pass"].grouped(level)
        want = requalify_result(grouped, arms, opts, archives["w"], plans[i + 1])
        alone = requalify_result(grouped, arms, opts, archives["w"])
        cells = [c.deltas for c in got.cells if c.level == mine]
        assert len(cells) >= 4
        _same(cells, [c.deltas for c in want.cells if c.level == keep])
        bca = [d.bca for c in alone.cells if c.level == keep for d in c.deltas]
        assert bca != [d.bca for c in want.cells if c.level == keep for d in c.deltas]


def test_a_by_sweep_builds_its_cells_from_the_one_pass(
    passes: dict[str, ReplayResult], archives: dict[str, Path]
) -> None:
    """``sweep --by worker`` with a cost model and a fewest-bits baseline: its ``by`` and
    ``family×bucket×by`` cells (deltas, R(d), tokens/s and P(best) per depth) are those of the
    groupings resampled with the run; a grouping resampled on its own gives other P(best)."""
    opts = SweepOptions.build(arms=[ARMS[0].canonical, ARMS[1].canonical], depths="1..5",
                              baseline=LOGGING, cost="linear:1:0.05", estimator="importance",
                              n_boot=300, min_requests=3, by="worker")  # fmt: skip
    got = sweep_run(archives["w"], opts)
    arms, by_pass = list(opts.arms), passes["by_pass"]
    runs = [by_pass, *(by_pass.grouped(level) for level in BY_LEVELS)]
    plans = resampled_sweeps([sweep_plan(r, arms, opts, opts.baseline) for r in runs], opts,
                             by_pass.seed)  # fmt: skip
    moved = False
    for i, (keep, mine) in enumerate(
        ((Level.FAMILY, Level.BY), (Level.FAMILY_BUCKET, Level.FAMILY_BUCKET_BY))
    ):
        want = sweep_result(runs[i + 1], arms, opts, archives["w"], opts.baseline, plans[i + 1])
        alone = sweep_result(runs[i + 1], arms, opts, archives["w"], opts.baseline)
        cells = [(c.deltas, c.depths) for c in got.cells if c.level == mine]
        assert len(cells) >= 4
        _same(cells, [(c.deltas, c.depths) for c in want.cells if c.level == keep])
        shares = [[d.p_best for d in c.depths] for c in want.cells if c.level == keep]
        assert any(p is not None and 0 < p < 1 for s in shares for p in s)  # not all decided
        moved |= shares != [[d.p_best for d in c.depths] for c in alone.cells if c.level == keep]
    assert moved
