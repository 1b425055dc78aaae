"""``specreplay sweep`` (issue 6, items 1–2): closed forms on constant-α traces, UNSUPPORTED depths,
the cost model's best depth (Leviathan et al. 2023, Theorem 3.8), brace lists, bad input."""

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
from specreplay.errors import SpecReplayError
from specreplay.pipelines.options import expand_braces, parse_depths
from specreplay.stats.depth import CostModel

ALPHA, DEPTH = 0.8, 10


def _constant_alpha_rows(
    n_requests: int = 24, n_rounds: int = 4, logged: bool = False
) -> list[dict[str, Any]]:
    """Two candidates per position, q = (1/2, 1/2) under top2:t1, p = (α/2, α/2): Σ min(p, q) =
    α at every position of every round, recorded to depth 10 (``logged``: with the drafted token,
    the first candidate, and its logging law, for the importance estimator)."""
    rows = []
    half = math.log(0.5)
    for r in range(n_requests):
        for rnd in range(n_rounds):
            for pos in range(1, DEPTH + 1):
                rows.append({
                    "request_id": f"q{r}", "family": ("chat", "code")[r % 2],
                    "context_tokens": 100 + 20 * rnd, "round": rnd, "position": pos,
                    "cand_ids": [2 * pos, 2 * pos + 1], "draft_logprobs": [half, half],
                    "target_probs": [ALPHA / 2, ALPHA / 2],
                    **({"drafted_id": 2 * pos, "emitted_q": [0.5, 0.5]} if logged else {}),
                })  # fmt: skip
    return rows


def _sweep(path: Path, out: Path, *args: str) -> tuple[Any, dict[str, Any]]:
    res = CliRunner().invoke(
        app, ["sweep", str(path), "--out", str(out), "-q", "--n-boot", "300", *args],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return res, json.loads((out / "results.json").read_text())


def _exact(d: int) -> float:
    return (1.0 - ALPHA ** (d + 1)) / (1.0 - ALPHA)


def test_constant_alpha_best_depth_is_leviathans(tmp_path: Path) -> None:
    """Depths 1..10 with 1 + 0.05·d ms per round: tokens/s = 1000(1 − 0.8^{d+1})/(0.2(1 + 0.05d)),
    largest at d = 8: 3092.1 (walltime factor 3.09; depths 7 and 9 lose 0.3% and 0.45%)."""
    path = write_parquet(tmp_path / "a.parquet", _constant_alpha_rows())
    res, doc = _sweep(path, tmp_path / "o", "--arm", f"top2:t1@{DEPTH}", "--depths", "1..10",
                      "--cost", "linear:1:0.05", "--estimator", "analytic")  # fmt: skip
    pooled = doc["cells"][0]
    figs = {f["depth"]: f for f in pooled["depths"]}
    for d in range(1, 11):
        assert figs[d]["supported"] and figs[d]["label"] == "SIMULATED"
        assert figs[d]["R"] == pytest.approx(_exact(d), rel=1e-12)
        tps = 1000.0 * _exact(d) / (1.0 + 0.05 * d)
        assert figs[d]["tokens_per_s"] == pytest.approx(tps, rel=1e-12)
    assert pooled["best_depth"] == {f"top2@{DEPTH}": 8}  # canonical form: t1 is the default
    assert round(figs[8]["tokens_per_s"], 1) == 3092.1
    assert figs[7]["tokens_per_s"] / figs[8]["tokens_per_s"] == pytest.approx(1 - 0.003, abs=5e-4)
    assert figs[9]["tokens_per_s"] / figs[8]["tokens_per_s"] == pytest.approx(1 - 0.0045, abs=5e-4)
    # every request has the same R at every depth: depth 8 wins in every resample
    assert figs[8]["p_best"] == 1.0 and figs[7]["p_best"] == 0.0
    deltas = {d["depth"]: d for d in pooled["deltas"] if d["role"] == "depth-vs-reference"}
    assert deltas[3]["point"] == pytest.approx(_exact(3) - _exact(DEPTH), rel=1e-12)
    assert deltas[3]["verdict"] is None and deltas[3]["verdict_null_reason"]
    assert "best depth 8" in res.stdout
    assert doc["options"]["estimator_used"] == "analytic"
    # TABLES.md's row of depth 8 carries the closed-form figures in their own columns
    tables = (tmp_path / "o" / "TABLES.md").read_text()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in tables.splitlines()]
    _, r, delta, tps, p_best, _ = next(c for c in rows if c[0] == "8" and len(c) == 6)
    assert p_best == "1.000"
    assert r.startswith(f"{_exact(8):.4f} [")
    assert delta.startswith(f"{_exact(8) - _exact(DEPTH):+.4f} [")
    assert tps.startswith(f"{1000.0 * _exact(8) / 1.4:.1f} [")
    png = (tmp_path / "o" / "depths.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000  # the depth curves were drawn


def test_depths_past_the_recorded_positions_are_unsupported(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "a.parquet", _constant_alpha_rows(n_requests=12))
    _, doc = _sweep(path, tmp_path / "o", "--arm", "top2:t1@4", "--depths", "3..12",
                    "--min-requests", "2")  # fmt: skip
    # auto falls back (no drafted_id), and says so
    assert doc["options"]["estimator_used"] == "analytic"
    figs = {f["depth"]: f for f in doc["cells"][0]["depths"]}
    for d in (11, 12):
        assert not figs[d]["supported"] and figs[d]["R"] is None
        assert (
            "UNSUPPORTED" in figs[d]["null_reason"]
            and "never extrapolated" in figs[d]["null_reason"]
        )
    assert figs[10]["R"] == pytest.approx(_exact(10), rel=1e-12)
    assert doc["cells"][0]["best_depth"] is None  # no cost model


def test_brace_lists_depth_lists_and_cost_models_parse() -> None:
    assert expand_braces("top32:t0.7:dyadic{8,12}@{4,5}") == [
        "top32:t0.7:dyadic8@4", "top32:t0.7:dyadic8@5", "top32:t0.7:dyadic12@4",
        "top32:t0.7:dyadic12@5",
    ]  # fmt: skip
    assert parse_depths("1..3,6") == (1, 2, 3, 6)
    assert CostModel.parse("linear:1:0.05").ms(8) == pytest.approx(1.4)
    for bad in ("0", "3..1", "a..b", "1..200"):
        with pytest.raises(SpecReplayError, match="--depths"):
            parse_depths(bad)
    for bad in ("top{8,}@5", "top{8@5"):
        with pytest.raises(SpecReplayError, match="--arm"):
            expand_braces(bad)


def test_a_cost_table_from_toml(tmp_path: Path) -> None:
    toml = tmp_path / "cost.toml"
    toml.write_text("[ms_per_round]\n1 = 1.0\n2 = 1.1\n3 = 5.0\n")
    m = CostModel.parse(str(toml))
    assert (m.ms(2), m.ms(4)) == (1.1, None)
    path = write_parquet(tmp_path / "a.parquet", _constant_alpha_rows(n_requests=12))
    _, doc = _sweep(path, tmp_path / "o", "--arm", "top2:t1@3", "--depths", "1..4",
                    "--cost", str(toml), "--min-requests", "2")  # fmt: skip
    figs = {f["depth"]: f for f in doc["cells"][0]["depths"]}
    assert figs[4]["tokens_per_s"] is None and figs[4]["R"] is not None  # no cost for depth 4
    assert doc["cells"][0]["best_depth"] == {"top2@3": 2}  # 1000·2.44/1.1 beats 1.8/1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cost", "linear:x"], "--cost"),
        (["--depths", "0..3"], "--depths"),
        (["--arm", "top2:t1@{3"], "--arm"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path: Path, args: list[str], message: str) -> None:
    path = write_parquet(tmp_path / "a.parquet", _constant_alpha_rows(n_requests=4))
    res = CliRunner().invoke(app, ["sweep", str(path), "--arm", "top2:t1@3", "--out",
                                   str(tmp_path / "o"), "-q", *args])  # fmt: skip
    assert res.exit_code == 2
    assert message in res.stderr and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_fewest_bits_by_fixed_sequence_on_the_synthetic_archive(
    small_archive: Path, tmp_path: Path
) -> None:
    """Most bits first, stop at the first arm that is not EQUIVALENT; the fewest EQUIVALENT is
    the last before it, and each step's verdict is the pooled candidate-vs-baseline one."""
    from specreplay.results.io import parse_result

    _, doc = _sweep(small_archive, tmp_path / "o", "--arm", "top32:t0.7:dyadic{8,24,12}@5",
                    "--baseline", "top32:t0.7@5", "--depths", "4..5", "--min-requests", "5",
                    "--margin", "2%")  # fmt: skip
    parse_result(json.dumps(doc).encode())  # report's checks pass
    bits = doc["fewest_bits"]
    seq = bits["sequence"]
    assert [s["bits"] for s in seq] == sorted((s["bits"] for s in seq), reverse=True)
    assert seq[0]["bits"] == 24
    pooled = {d["b"]: d["verdict"] for d in doc["cells"][0]["deltas"]
              if d["role"] == "candidate-vs-baseline"}  # fmt: skip
    for s in seq:
        assert pooled[s["arm"]] == s["verdict"]
    assert all(s["verdict"] == "EQUIVALENT" for s in seq[:-1])
    if seq[-1]["verdict"] != "EQUIVALENT":
        assert bits["stopped_at"] == seq[-1]["arm"]
        assert bits["fewest_bits_equivalent"] == (seq[-2]["arm"] if len(seq) > 1 else None)
    else:
        assert bits["stopped_at"] is None and bits["fewest_bits_equivalent"] == seq[-1]["arm"]


def _round_traces_of(archive: Path, out: Path) -> tuple[Path, dict[int, float]]:
    """Round traces (A = the leading accepted positions) of a position archive's `accepted`, and
    the MEASURED truncated acceptance 1 + Σ_{i≤d} P(A ≥ i) per d, counted here by hand."""
    import polars as pl

    frame = pl.read_parquet(sorted(archive.glob("*.parquet")))
    rounds = (
        frame.sort("request_id", "round", "position")
        .group_by("request_id", "round", maintain_order=True)
        .agg(
            pl.col("family").first(), pl.col("context_tokens").first(),
            drafted=pl.len().cast(pl.Int64),
            accepted=pl.col("accepted").cast(pl.Int64).cum_prod().sum().cast(pl.Int64),
        )
    )  # fmt: skip
    path = out / "rounds.parquet"
    rounds.write_parquet(path)
    a = rounds["accepted"].to_numpy()
    truncated = {d: 1.0 + float(sum((a >= i).mean() for i in range(1, d + 1))) for d in range(1, 6)}
    return path, truncated


def test_survival_proxy_equals_measured_truncation_and_the_importance_sweep(
    small_archive: Path, tmp_path: Path
) -> None:
    """Round traces from the archive's `accepted`: E(d) = 1 + Σ_{i≤d} S_i equals the MEASURED
    truncated acceptance at every d (exactly: the same rounds); depth 6 is past what every round
    drafted (UNSUPPORTED); the importance sweep of the logging arm holds E(d) in its 95%
    interval at every d (importance is unbiased for the logging arm's own acceptance)."""
    rounds, truth = _round_traces_of(small_archive, tmp_path)
    _, doc = _sweep(rounds, tmp_path / "proxy", "--depths", "1..6", "--min-requests", "5")
    figs = {f["depth"]: f for f in doc["cells"][0]["depths"]}
    assert doc["options"]["estimator_used"] == "survival-proxy"
    for d in range(1, 6):
        assert figs[d]["label"] == "ESTIMATED" and figs[d]["supported"]
        assert figs[d]["R"] == pytest.approx(truth[d], rel=1e-12)
    assert not figs[6]["supported"] and "every round drafted" in figs[6]["null_reason"]
    assert any("Survival truncation proxy" in a for a in doc["assumptions"])
    _, imp = _sweep(small_archive, tmp_path / "imp", "--arm", "top32:t0.7@5", "--depths", "1..5",
                    "--estimator", "importance", "--min-requests", "5")  # fmt: skip
    for f in imp["cells"][0]["depths"]:
        assert f["lo"] <= truth[f["depth"]] <= f["hi"], f


@pytest.mark.parametrize("estimator", ["importance", "montecarlo"])
def test_constant_alpha_every_estimator_reproduces_the_closed_form(
    tmp_path: Path, estimator: str
) -> None:
    """(1 − α^{d+1})/(1 − α) at every depth: importance exactly (its weight Π min(1, p/q) is
    α^k in every round), Monte Carlo within 4.5 standard errors (from its 95% interval)."""
    path = write_parquet(tmp_path / "a.parquet", _constant_alpha_rows(logged=True))
    _, doc = _sweep(path, tmp_path / "o", "--arm", f"top2:t1@{DEPTH}", "--depths", "1..10",
                    "--estimator", estimator)  # fmt: skip
    assert doc["options"]["estimator_used"] == estimator
    for f in doc["cells"][0]["depths"]:
        if estimator == "importance":
            assert f["R"] == pytest.approx(_exact(f["depth"]), rel=1e-12)
        else:
            se = (f["hi"] - f["lo"]) / 3.92
            assert abs(f["R"] - _exact(f["depth"])) <= 4.5 * se + 1e-12


def test_each_arm_table_row_shows_its_own_delta(tmp_path: Path) -> None:
    """Two arms of one policy at different own depths: each arm's Δ(d) is against its own depth
    (R(2) − R(4) for @4, R(2) − R(10) for @10), in results.json and in the printed table."""
    path = write_parquet(tmp_path / "a.parquet", _constant_alpha_rows())
    res, doc = _sweep(path, tmp_path / "o", "--arm", "top2:t1@10", "--arm", "top2:t1@4",
                      "--depths", "2", "--estimator", "analytic")  # fmt: skip
    deltas = {(d["a"], d["depth"]): d["point"] for d in doc["cells"][0]["deltas"]}
    assert deltas[("top2@4", 2)] == pytest.approx(_exact(2) - _exact(4), rel=1e-12)
    assert deltas[("top2@10", 2)] == pytest.approx(_exact(2) - _exact(10), rel=1e-12)
    section = res.stdout.split("## top2@4")[1]
    row = next(ln for ln in section.splitlines() if ln.startswith("| 2 "))
    assert f"{_exact(2) - _exact(4):+.4f}" in row


# -- joint replicates across depths (issue 10, item 6: "bootstraps seeded apart") --------------

N_VARYING, COST_SLOPE, SWEEP_SEED = 40, 0.05, 7


def _varying_alpha() -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray]:
    """Request r has its own α_r ~ U(0.5, 0.95) at every position and 1–5 rounds (seeded), so
    resamples of requests change R(d) and which depth has the most tokens/s: P(best) is spread
    over depths 5–10 (no depth wins every replicate). Returns the rows, α_r and the rounds."""
    rng = np.random.default_rng(20261201)
    alphas = rng.uniform(0.5, 0.95, N_VARYING)
    rounds = rng.integers(1, 6, N_VARYING)
    half = math.log(0.5)
    rows = [
        {"request_id": f"q{r}", "family": ("chat", "code")[r % 2],
         "context_tokens": 100 + 20 * rnd, "round": rnd, "position": pos,
         "cand_ids": [2 * pos, 2 * pos + 1], "draft_logprobs": [half, half],
         "target_probs": [alphas[r] / 2, alphas[r] / 2]}
        for r in range(N_VARYING) for rnd in range(int(rounds[r])) for pos in range(1, DEPTH + 1)
    ]  # fmt: skip
    return rows, alphas, rounds


@pytest.fixture(scope="module")
def varying_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Any, Any]:
    """The analytic sweep of the varying-α archive over depths 1..10, cost 1 + 0.05·d ms."""
    tmp = tmp_path_factory.mktemp("varying")
    rows, alphas, rounds = _varying_alpha()
    path = write_parquet(tmp / "a.parquet", rows)
    _, doc = _sweep(path, tmp / "o", "--arm", f"top2:t1@{DEPTH}", "--depths", f"1..{DEPTH}",
                    "--cost", f"linear:1:{COST_SLOPE}", "--estimator", "analytic",
                    "--seed", str(SWEEP_SEED), "--n-boot", "400")  # fmt: skip
    return doc, alphas, rounds


def _joint_p_best(doc: dict[str, Any], alphas: np.ndarray, rounds: np.ndarray) -> dict[Any, Any]:
    """P(best) per cell (pooled; each family) computed here: per request n_r rounds and
    t_r(d) = n_r·Σ_{k≤d} α_r^k (the closed form of the analytic replay), the requests resampled
    by ``bootstrap_sums`` at the run's seed (stratified by family, as the sweep does), and in
    every replicate the depth of the largest 1000·R*(d)/ms(d) counted."""
    from specreplay.sim.rng import request_key
    from specreplay.stats.bootstrap import PairedSums, bootstrap_sums

    ids = [f"q{r}" for r in range(N_VARYING)]
    families = ("chat", "code")  # codes in sorted order, as the pairing gives them
    n_boot = doc["cells"][0]["deltas"][0]["n_boot"]
    n = rounds.astype(np.float64)
    tps = []  # per depth: (n_boot, 3) tokens/s of the pooled, chat and code cells
    for d in range(1, DEPTH + 1):
        t = n * sum(alphas**k for k in range(d + 1))
        ps = PairedSums(
            tuple(ids), np.array([request_key(i) for i in ids], np.uint64),
            np.array([r % 2 for r in range(N_VARYING)], np.int32), np.arange(N_VARYING),
            np.zeros(N_VARYING, np.int32), n, t, n, t, families, ("all",),
        )  # fmt: skip
        sums = bootstrap_sums(ps, n_boot=n_boot, seed=doc["seed"], stratify="family")[:, :, 0]
        r_fam = sums[:, :, 3] / sums[:, :, 2]
        r_pooled = sums[:, :, 3].sum(axis=1) / sums[:, :, 2].sum(axis=1)
        ms = 1.0 + COST_SLOPE * d
        tps.append(1000.0 * np.column_stack([r_pooled, r_fam]) / ms)
    wins = np.argmax(np.stack(tps, axis=2), axis=2)  # (n_boot, 3): index of the winning depth
    out: dict[Any, Any] = {}
    for j, key in enumerate((None, *families)):
        share = np.bincount(wins[:, j], minlength=DEPTH) / n_boot
        out[key] = {d + 1: float(share[d]) for d in range(DEPTH)}
    return out


def test_p_best_comes_from_one_joint_bootstrap_of_requests(
    varying_sweep: tuple[dict[str, Any], Any, Any],
) -> None:
    """P(best) of every depth in the pooled and family cells equals, exactly, the share computed
    here from one joint resample of requests shared by all depths (:func:`_joint_p_best`).
    Seeding each depth apart (``seed + d``) draws other requests per depth and moves the shares:
    planted, this test fails. The spread over depths (no depth wins every replicate, checked) is
    what makes it sensitive; a constant-α archive gives 1.0 under either bug or none."""
    doc, alphas, rounds = varying_sweep
    expected = _joint_p_best(doc, alphas, rounds)
    checked = 0
    for cell in doc["cells"]:
        if cell["level"] not in ("pooled", "family"):
            continue
        got = {f["depth"]: f["p_best"] for f in cell["depths"]}
        assert got == expected[cell["family"]], cell["family"]
        assert max(got.values()) < 0.9  # replicates disagree: the check has teeth
        checked += 1
    assert checked == 3


def test_tokens_per_s_interval_is_the_r_interval_over_the_cost(
    varying_sweep: tuple[dict[str, Any], Any, Any],
) -> None:
    """For every supported depth of the pooled and family cells, tokens/s and its interval are
    1000·(R, lo, hi)/ms(d) with ms(d) = 1 + 0.05·d, lo ≤ R ≤ hi, and R = Σ t_r(d)/Σ n_r in closed
    form (the glue between the R interval and the cost model, whatever the interval method)."""
    doc, alphas, rounds = varying_sweep
    fam = np.array([("chat", "code")[r % 2] for r in range(N_VARYING)])
    checked = 0
    for cell in doc["cells"]:
        if cell["level"] not in ("pooled", "family"):
            continue
        sel = np.ones(N_VARYING, bool) if cell["family"] is None else fam == cell["family"]
        for f in cell["depths"]:
            d = f["depth"]
            assert f["supported"]
            exact = float((rounds * sum(alphas**k for k in range(d + 1)))[sel].sum()
                          / rounds[sel].sum())  # fmt: skip
            assert f["R"] == pytest.approx(exact, rel=1e-12)
            assert f["lo"] <= f["R"] <= f["hi"]
            ms = 1.0 + COST_SLOPE * d
            assert f["tokens_per_s"] == pytest.approx(1000.0 * f["R"] / ms, rel=1e-12)
            assert f["tokens_per_s_lo"] == pytest.approx(1000.0 * f["lo"] / ms, rel=1e-12)
            assert f["tokens_per_s_hi"] == pytest.approx(1000.0 * f["hi"] / ms, rel=1e-12)
            checked += 1
    assert checked == 3 * DEPTH
