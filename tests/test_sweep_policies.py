"""``sweep --policy`` end to end (docs/methods.md#policies-adaptive-drafting).

A constant-law archive (issue 14's q = (0.9, 0.1), p = (0.7, 0.3) at every position, recorded to
depth 5) has closed forms for every figure: ``stop-below:τ@5`` with 0.1 < τ ≤ 0.9 keeps
R = 1 + Σ_{k≤5} 0.8·0.7^(k−1) tokens and drafts E[L] = Σ_{k≤5} 0.9^(k−1) positions per round,
so under ``linear:T0:C`` a round costs T0 + C·E[L] (not T0 + C·5: the policy's cost is charged
for L, not D) and a table costs Σ_l P(L = l)·T(l).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from archive_factory import write_parquet
from typer.testing import CliRunner

from specreplay.cli import app
from specreplay.pipelines.builders import write_synth_archive
from specreplay.pipelines.options import BootstrapOptions
from specreplay.pipelines.policies import Candidates, _half, held_out_choice, rate_tests
from specreplay.replay.paired import ArmSide, RequestCodes, pair_sides
from specreplay.replay.scan import no_progress
from specreplay.stats.buckets import Buckets
from specreplay.stats.cells import cell_layout
from specreplay.stats.cr2 import ratio_test

K = np.arange(1, 6)
R_STOP = 1 + float((0.8 * 0.7 ** (K - 1)).sum())
L_STOP = float((0.9 ** (K - 1)).sum())


def _rows(n_requests: int = 16, n_rounds: int = 3) -> list[dict[str, Any]]:
    rows = []
    for r in range(n_requests):
        for rnd in range(n_rounds):
            for pos in range(1, 6):
                rows.append(
                    {
                        "request_id": f"q{r}",
                        "family": ("chat", "code")[r % 2],
                        "context_tokens": 100 + 50 * rnd + 5000 * (r % 3 == 0),
                        "round": rnd,
                        "position": pos,
                        "cand_ids": [2 * pos, 2 * pos + 1],
                        "draft_logprobs": [math.log(0.9), math.log(0.1)],
                        "target_probs": [0.7, 0.3],
                    }
                )
    return rows


def _sweep(tmp_path: Path, *args: str) -> dict[str, Any]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_parquet(tmp_path / "a.parquet", _rows())
    out = tmp_path / "o"
    res = CliRunner().invoke(
        app,
        [
            *("sweep", str(path), "--arm", "t1@5", "--depths", "1..5", "--estimator", "analytic"),
            *("--out", str(out), "-q", "--n-boot", "200", *args),
        ],
    )
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads((out / "results.json").read_text())
    return doc


def _pooled(doc: dict[str, Any]) -> dict[str, Any]:
    cell: dict[str, Any] = doc["cells"][0]
    assert cell["level"] == "pooled"
    return cell


def test_linear_cost_is_charged_for_the_positions_drafted(tmp_path: Path) -> None:
    doc = _sweep(
        tmp_path,
        "--cost",
        "linear:1:0.25",
        "--policy",
        "stop-below:{0.5,0}@5",
        "--policy",
        "depth-by-bucket:>=0=3",
    )
    cell = _pooled(doc)
    pol = {p["policy"]: p for p in cell["policies"]}
    depth = {d["depth"]: d for d in cell["depths"]}
    stop = pol["stop-below:0.5@5"]
    assert stop["R"] == pytest.approx(R_STOP, rel=1e-12)
    assert stop["E_L"] == pytest.approx(L_STOP, rel=1e-12)
    assert stop["round_ms"] == pytest.approx(1 + 0.25 * L_STOP, rel=1e-12)
    assert stop["tokens_per_s"] == pytest.approx(1000 * R_STOP / (1 + 0.25 * L_STOP), rel=1e-12)
    assert stop["label"] == "SIMULATED" and stop["supported"] and stop["arm"] == "t1@5"
    # every request is the same: no interval (fewer than 3 requests off the ratio), not [x, x]
    assert stop["tokens_per_s_lo"] is None and stop["tokens_per_s_hi"] is None
    # τ = 0 never stops: the fixed depth 5; one depth everywhere: that fixed depth
    never = pol["stop-below:0@5"]
    assert never["R"] == pytest.approx(depth[5]["R"], rel=1e-12)
    assert never["E_L"] == 5.0
    assert never["tokens_per_s"] == pytest.approx(depth[5]["tokens_per_s"], rel=1e-12)
    table = pol["depth-by-bucket:>=0=3"]
    assert table["R"] == pytest.approx(depth[3]["R"], rel=1e-12)
    assert table["E_L"] == 3.0 and table["round_ms"] == pytest.approx(1.75)
    shares = [d["p_best"] for d in cell["depths"]] + [p["p_best"] for p in cell["policies"]]
    assert sum(shares) == pytest.approx(1.0)
    assert doc["options"]["policies"] == [
        "stop-below:0.5@5",
        "stop-below:0@5",
        "depth-by-bucket:>=0=3",
    ]


def test_a_cost_table_prices_each_length(tmp_path: Path) -> None:
    """P(L = l) = 0.9^(l−1)·0.1 for l < 5 and 0.9^4 at 5: E[T(L)] = Σ_l P(L = l)·T(l)."""
    ms = {1: 1.0, 2: 1.5, 3: 2.2, 4: 2.4, 5: 3.0}
    toml = tmp_path / "cost.toml"
    toml.write_text("[ms_per_round]\n" + "".join(f"{k} = {v}\n" for k, v in ms.items()))
    doc = _sweep(tmp_path, "--cost", str(toml), "--policy", "stop-below:0.5@5")
    (stop,) = _pooled(doc)["policies"]
    p_len = [0.9 ** (k - 1) * 0.1 for k in range(1, 5)] + [0.9**4]
    want = sum(p * ms[k] for k, p in zip(range(1, 6), p_len, strict=True))
    assert stop["round_ms"] == pytest.approx(want, rel=1e-12)


def test_a_table_policy_needs_its_own_depth_where_its_rounds_are(tmp_path: Path) -> None:
    """Rounds at 5,000+ tokens drafting 6 > 5 recorded: null there with the reason, not 0."""
    doc = _sweep(tmp_path, "--policy", "depth-by-bucket:<4K=2/>=4K=6")
    (pooled,) = _pooled(doc)["policies"]
    assert pooled["R"] is None and not pooled["supported"]
    assert "fewer positions than the policy drafts" in pooled["null_reason"]


def test_the_held_out_choice_is_reported_beside_the_in_sample_figure(tmp_path: Path) -> None:
    doc = _sweep(tmp_path, "--cost", "linear:1:0.25", "--policy", "stop-below:{0.5,0.05}@5")
    (choice,) = doc["policy_choice"]
    held, ins = choice["held_out"], choice["in_sample"]
    assert choice["label"] == "ESTIMATED" and "in-sample" in ins["label"]
    assert held["n_requests"] + 0 < 16 and ins["n_requests"] == 16
    assert held["against"][0]["depth"] == held["depth"]
    assert sorted(a["depth"] for a in held["against"]) == [1, 2, 3, 4, 5]
    # 16 requests: the held-out half is below the fewest the policy study allows
    assert held["verdict"] == "INCONCLUSIVE"
    assert held["verdict_reason"] == f"{held['n_requests']} held-out requests < 50"
    assert held["interval_method"] == "cr2-eff-hall" and ins["interval_method"] == "cr2-eff-hall"
    # every round is identical: the held-out Δ is the in-sample one
    assert held["delta_tokens_per_s"] == pytest.approx(ins["delta_tokens_per_s"], rel=1e-9)


def test_a_policys_tokens_per_s_takes_rs_interval_of_retained_over_cost() -> None:
    """Per cell, ratio_test(Σ cost, Σ retained) over the cell's requests, pieces summed."""
    rng = np.random.default_rng(11)
    n, buckets = 30, Buckets.parse("short:<4K,long:>=4K")
    family = (np.arange(n) % 2).astype(np.int32)
    codes = RequestCodes(
        [f"r{i:03d}" for i in range(n)],
        np.arange(n, dtype=np.uint64) + 1,
        family,
        ["chat", "code"],
        np.arange(n, dtype=np.int64),
    )
    req = np.repeat(np.arange(n), 2)
    bucket = np.tile(np.array([0, 1], np.int32), n)
    rounds = rng.integers(1, 40, 2 * n).astype(np.float64)
    t = rounds * rng.uniform(1.5, 4.0, 2 * n)
    c = rounds * rng.uniform(12.0, 15.0, 2 * n)
    ref = ArmSide("d", req, bucket, rounds, rounds * 2.0, 5)
    ret = pair_sides(ref, ArmSide("p", req, bucket, rounds, t, 5), codes, buckets)
    cost = pair_sides(ref, ArmSide("p (ms)", req, bucket, rounds, c, 5), codes, buckets)
    cells = cell_layout(ret.families, ret.buckets, bucket_cells=[0, 1], pooled_buckets=range(4))
    got = rate_tests(ret, cost, cells)
    for cell, test in zip(cells, got, strict=True):
        inside = np.isin(family[req], cell.fam_idx) & np.isin(bucket, cell.bucket_idx)
        t_i = np.bincount(req[inside], weights=t[inside], minlength=n)
        c_i = np.bincount(req[inside], weights=c[inside], minlength=n)
        keep = c_i > 0
        want = ratio_test(c_i[keep], t_i[keep], depth=None).interval(0.95)
        assert test is not None and test.interval(0.95) == pytest.approx(want, rel=1e-12)
        assert test.theta == pytest.approx(t_i.sum() / c_i.sum(), rel=1e-12)


def _codes(n: int) -> RequestCodes:
    return RequestCodes(
        [f"r{i:04d}" for i in range(n)],
        np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15),
        np.zeros(n, np.int32),
        ["all"],
        np.arange(n, dtype=np.int64),
    )


def _choice(
    n: int,
    depth_t: dict[int, np.ndarray],
    policy_t: np.ndarray,
    policy_ms: np.ndarray,
    margin: str = "0.5%",
) -> dict[str, Any]:
    """The held-out choice of hand-made sides: one round per request, ms(d) = 10 + d."""
    req, bucket, rounds = np.arange(n), np.zeros(n, np.int32), np.ones(n)

    def side(name: str, t: np.ndarray) -> ArmSide:
        return ArmSide(name, req, bucket, rounds, t.astype(np.float64), 5)

    cand = Candidates(
        {d: (side(f"d{d}", t), 10.0 + d) for d, t in depth_t.items()},
        {"p": (side("p", policy_t), side("p (ms)", policy_ms))},
    )
    return held_out_choice(cand, _half(_codes(n).keys), BootstrapOptions.build(margin=margin))


def test_a_policy_pays_only_over_every_depth() -> None:
    """The chosen depth is beaten, another is not: PAYS would be a depth chosen by chance."""
    n = 240
    held = _half(_codes(n).keys)
    rng = np.random.default_rng(3)
    base = 3.0 + rng.uniform(-0.3, 0.3, n)
    # depth 1 looks best on the selection half, depth 2 is best on the held-out half
    d1 = (np.where(held, base - 0.5, base + 0.5) + rng.uniform(-0.2, 0.2, n)) * 11 / 15
    d2 = base * 12 / 15
    # at 15 ms the policy beats depth 1 on the held-out half by 33 tokens/s, depth 2 by 0.33 (m ≈ 1)
    policy = base + 0.005
    got = _choice(n, {1: d1, 2: d2}, policy, np.full(n, 15.0))
    h = got["held_out"]
    assert got["selected_depth"] == 1 and h["depth"] == 1
    assert h["lo"] > h["margin_tokens_per_s"]  # 0.4.0's rule said PAYS
    two = next(a for a in h["against"] if a["depth"] == 2)
    assert two["lo"] <= two["margin_tokens_per_s"]
    assert h["verdict"] == "INCONCLUSIVE" and h["verdict_reason"] is None
    clear = _choice(n, {1: d1, 2: d2}, base + 3.0, np.full(n, 15.0))["held_out"]
    assert clear["verdict"] == "PAYS"
    # an absolute margin (tokens/round at each depth's ms) reads Δ itself: 0.02 → m ≈ 1.7
    absolute = _choice(n, {1: d1, 2: d2}, policy, np.full(n, 15.0), margin="0.02")["held_out"]
    two = next(a for a in absolute["against"] if a["depth"] == 2)
    assert two["margin_tokens_per_s"] == pytest.approx(1000 * 0.02 / 12)
    assert absolute["verdict"] == "INCONCLUSIVE"
    assert (
        _choice(n, {1: d1, 2: d2}, base + 3.0, np.full(n, 15.0), "0.02")["held_out"]["verdict"]
        == "PAYS"
    )


def test_few_differing_or_alike_held_out_requests_are_inconclusive() -> None:
    n = 240
    rng = np.random.default_rng(5)
    t = 3.0 + rng.uniform(-0.3, 0.3, n)
    # the policy is depth 2 on every request: Δ ≡ 0 < m, yet no request says so
    same = _choice(n, {1: t * 0.7, 2: t}, t.copy(), np.full(n, 12.0))["held_out"]
    assert same["differing_requests"] == 0 and same["verdict"] == "INCONCLUSIVE"
    assert same["verdict_reason"].startswith("0 held-out requests differ")
    # two held-out requests differ (a large gain on them): still too few
    held = _half(_codes(n).keys)
    two = t.copy()
    two[np.flatnonzero(held)[:2]] += 5.0
    got = _choice(n, {1: t * 0.7, 2: t}, two, np.full(n, 12.0))["held_out"]
    assert got["differing_requests"] == 2 and got["verdict"] == "INCONCLUSIVE"
    # every request alike (zero variance): rounding leaves residuals of 1e-16, an interval of
    # no width; the verdict must not come from the last bits
    flat = np.full(n, 3.0)
    alike = _choice(n, {1: flat * 0.7, 2: flat}, flat * 0.9, np.full(n, 10.0))["held_out"]
    assert alike["differing_requests"] > 3
    assert alike["lo"] == pytest.approx(alike["hi"], rel=1e-12)
    assert alike["verdict"] == "INCONCLUSIVE"
    assert alike["verdict_reason"] == "every held-out request alike: no interval"


def test_no_cost_model_no_choice_and_bad_policies_are_one_line_errors(tmp_path: Path) -> None:
    doc = _sweep(tmp_path, "--policy", "stop-cum:0.2@5")
    assert doc["policy_choice"][0]["null_reason"].endswith("(--cost)")
    path = write_parquet(tmp_path / "b.parquet", _rows(2, 1))
    for bad, words in (
        ("stop-below:2@5", "must be in [0, 1]"),
        ("depth-by-bucket:<4K=5/8K-16K=3", "no range holds contexts 4K-8K"),
        ("stop-below:{0.1@5", "unbalanced brace"),
    ):
        res = CliRunner().invoke(
            app,
            ["sweep", str(path), "--arm", "t1@5", "--policy", bad, "--out", str(tmp_path / "x")],
        )
        assert res.exit_code == 2 and words in res.stderr and "Traceback" not in res.output
        assert "--policy" in res.stderr
        assert not (tmp_path / "x").exists()


def _round_traces(tmp_path: Path, drafted: int = 5) -> tuple[Path, list[tuple[int, int]]]:
    """12 requests × 4 rounds: context 1,000 (even requests) or 6,000 (odd), A = (r + k) % 6."""
    import polars as pl

    rows, seen = [], []
    for r in range(12):
        for k in range(4):
            ctx, a = (1000, 6000)[r % 2], min((r + k) % 6, drafted)
            rows.append(
                {
                    "request_id": f"q{r}",
                    "family": "chat",
                    "context_tokens": ctx,
                    "round": k,
                    "accepted": a,
                    "drafted": drafted,
                }
            )
            seen.append((ctx, a))
    path = tmp_path / "rounds.parquet"
    pl.DataFrame(rows).write_parquet(path)
    return path, seen


def test_round_traces_replay_a_table_by_the_survival_proxy(tmp_path: Path) -> None:
    """Each round keeps 1 + min(A, d(c)) and drafts d(c): R, E[L] and ms by hand; a stop rule
    is null with the reason (round traces hold no draft probabilities)."""
    path, seen = _round_traces(tmp_path)
    out = tmp_path / "o"
    res = CliRunner().invoke(
        app,
        [
            *("sweep", str(path), "--depths", "1..5", "--cost", "linear:1:0.25", "-q"),
            *("--policy", "depth-by-bucket:<4K=4/>=4K=2", "--policy", "stop-below:0.1@5"),
            *("--out", str(out), "--n-boot", "200", "--min-requests", "5"),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    pol = {p["policy"]: p for p in _pooled(doc)["policies"]}
    d_of = {1000: 4, 6000: 2}
    r_hand = np.mean([1 + min(a, d_of[c]) for c, a in seen])
    l_hand = np.mean([d_of[c] for c, _ in seen])
    table = pol["depth-by-bucket:<4K=4/>=4K=2"]
    assert table["label"] == "ESTIMATED" and table["supported"]
    assert table["R"] == pytest.approx(r_hand, rel=1e-12)
    assert table["E_L"] == pytest.approx(l_hand, rel=1e-12)
    assert table["round_ms"] == pytest.approx(1 + 0.25 * l_hand, rel=1e-12)
    stop = pol["stop-below:0.1@5"]
    assert stop["R"] is None and "need position traces" in stop["null_reason"]


def test_round_traces_that_drafted_too_few_leave_the_table_unsupported(tmp_path: Path) -> None:
    path, _ = _round_traces(tmp_path, drafted=3)
    out = tmp_path / "o"
    res = CliRunner().invoke(
        app,
        [
            *("sweep", str(path), "--depths", "1..3", "-q", "--out", str(out), "--n-boot", "200"),
            *("--policy", "depth-by-bucket:<4K=4/>=4K=2", "--min-requests", "5"),
        ],
    )
    assert res.exit_code == 0, res.output
    (table,) = _pooled(json.loads((out / "results.json").read_text()))["policies"]
    assert table["R"] is None and "drafted fewer positions than the table" in table["null_reason"]


def test_round_traces_without_context_leave_the_table_unsupported(tmp_path: Path) -> None:
    """Two of the 48 rounds record no context: the table gives them no depth, so it is null with
    that count (never a depth guessed for them); the fixed depths are still replayed."""
    import polars as pl

    path, _ = _round_traces(tmp_path)
    frame = pl.read_parquet(path)
    ctx = frame.get_column("context_tokens").to_list()
    ctx[5] = ctx[17] = None
    frame.with_columns(pl.Series("context_tokens", ctx, dtype=pl.Int64)).write_parquet(path)
    out = tmp_path / "o"
    res = CliRunner().invoke(
        app,
        [
            *("sweep", str(path), "--depths", "1..3", "-q", "--out", str(out), "--n-boot", "200"),
            *("--policy", "depth-by-bucket:<4K=4/>=4K=2", "--min-requests", "5"),
        ],
    )
    assert res.exit_code == 0, res.output
    cell = _pooled(json.loads((out / "results.json").read_text()))
    (table,) = cell["policies"]
    assert table["R"] is None and table["null_reason"].startswith("2 rounds record no context")
    assert all(d["R"] is not None for d in cell["depths"])


def test_the_shard_cache_keys_by_the_policy(tmp_path: Path) -> None:
    """A cached pass of one τ never serves another τ's figures (the arms' canonical forms,
    policy included, are in the key), and the same τ again is served from the cache."""
    path = write_parquet(tmp_path / "a.parquet", _rows())
    cache = tmp_path / "cache"

    def run(out: str, policy: str, *extra: str) -> dict[str, Any]:
        res = CliRunner().invoke(
            app,
            [
                *("sweep", str(path), "--arm", "t1@5", "--depths", "1..5", "-q"),
                *("--estimator", "analytic", "--n-boot", "200", "--policy", policy),
                *("--out", str(tmp_path / out), *extra),
            ],
        )
        assert res.exit_code == 0, res.output
        doc: dict[str, Any] = json.loads((tmp_path / out / "results.json").read_text())
        return doc

    first = run("a", "stop-below:0.5@5", "--cache", str(cache))
    second = run("b", "stop-below:0.95@5", "--cache", str(cache))
    again = run("c", "stop-below:0.5@5", "--cache", str(cache))
    fresh = run("d", "stop-below:0.95@5")
    (p1,), (p2,), (p3,), (p4,) = (_pooled(d)["policies"] for d in (first, second, again, fresh))
    assert p1["R"] == p3["R"] == pytest.approx(R_STOP, rel=1e-12)
    assert p2["R"] == p4["R"] == pytest.approx(1.8, rel=1e-12)  # 0.9 < 0.95: depth 1's R
    assert p2["E_L"] == p4["E_L"] == 1.0
    reports = [d["replay_backend"]["cache"] for d in (first, second, again)]
    assert [r["reused"] for r in reports] == [0, 0, 1], reports


def test_a_never_stopping_policy_is_the_fixed_depth_in_every_cell(tmp_path: Path) -> None:
    """τ = 0 drafts D every round: in every cell (pooled, family, bucket, family × bucket) its R,
    R's interval, tokens/s and tokens/s's interval are depth D's, which compare() computes on
    its own path. D = 5 is the arm's own depth (the reference of the pairing), D = 4 is not: a
    policy's cell sums taken from the wrong (family, bucket) blocks, or from the reference's side
    of its pairing, fail."""
    archive = tmp_path / "synth"
    write_synth_archive(archive, 60, 6, 60, 3, no_progress, depth=5)
    out = tmp_path / "o"
    policies = {"stop-below:0@5": 5, "stop-cum:0@5": 5, "stop-below:0@4": 4}
    res = CliRunner().invoke(
        app,
        [
            *("sweep", str(archive), "--arm", "top32:t0.7@5", "--depths", "1..5"),
            *("--estimator", "analytic", "--cost", "linear:1:0.05", "--out", str(out), "-q"),
            "--n-boot",
            "300",
            *(x for p in policies for x in ("--policy", p)),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    levels = {c["level"] for c in doc["cells"]}
    assert {"pooled", "family", "bucket", "family×bucket"} <= levels
    checked = 0
    for cell in doc["cells"]:
        for p in cell["policies"]:
            d = policies[p["policy"]]
            fixed = next(x for x in cell["depths"] if x["depth"] == d)
            if fixed["R"] is None:
                continue
            # a depth's R interval is clipped to [1, d + 1] (then its tokens/s's is too); a
            # policy's tokens/s interval is not (its cost is random) and is null under 3
            # requests off the ratio
            clipped = fixed["lo"] <= 1.0 or fixed["hi"] >= d + 1.0
            keys = ("R", "lo", "hi", "tokens_per_s") + (
                () if clipped else ("tokens_per_s_lo", "tokens_per_s_hi")
            )
            for key in keys:
                if fixed[key] is None:
                    assert p[key] is None, (cell["level"], p["policy"], key)
                else:
                    got, want = p[key], pytest.approx(fixed[key], rel=1e-9)
                    assert got == want, (cell["level"], p["policy"], key)
            assert p["E_L"] == pytest.approx(float(d), rel=1e-12)
            checked += 1
    assert checked >= 3 * 12
