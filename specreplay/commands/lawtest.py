"""``specreplay lawtest``: law tests of arms (does a verifier keep the target law)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.results.output import (
    input_records,
    output_dir,
    results_document,
    write_json,
)
from specreplay.stats.buckets import Buckets

__all__ = ["run_lawtest"]


def run_lawtest(
    arms_text: list[str],
    *,
    archive: Path | None,
    out: Path,
    force: bool,
    positions: int = 8,
    seed: int = 0,
    family_alpha: float = 1e-5,
    max_draws: int | None = None,
    buckets: str = "",
    logging_arm: str | None = None,
) -> tuple[str, bool]:
    """Law tests of arms on the toy laws and, given an archive, on sampled positions.

    Without ``--arm`` the built-in toy suite runs (float64, dyadic8 and dyadic8/float64 on four
    toy positions). Returns (terminal text, every test passed).
    """
    from specreplay.replay.engine import replay_archive
    from specreplay.replay.lawcases import run_cases, sample_cases, toy_arm_cases
    from specreplay.results.tables import lawtest_table
    from specreplay.sim.arms import parse_arm
    from specreplay.stats.buckets import DEFAULT_BUCKETS
    from specreplay.stats.lawtest import toy_cases

    arms = [parse_arm(a) for a in arms_text]
    with output_dir(out, force=force) as tmp:
        if arms:
            cases, skipped = toy_arm_cases(arms)
            cases = [c._replace(arm=f"toy:{c.arm}") for c in cases]
            skipped = [{**s, "arm": f"toy:{s['arm']}"} for s in skipped]
        else:
            cases, skipped = toy_cases(), []
        inputs: list[dict[str, Any]] = []
        if archive is not None:
            if not arms:
                raise SpecReplayError("lawtest ARCHIVE: name the arms to test with --arm")
            bk = Buckets.parse(buckets or DEFAULT_BUCKETS)
            # one pass: positions sampled by hash; depths past the archive are UNSUPPORTED
            # (exit 2 with the reason, as requalify does)
            res = replay_archive(archive, arms, seed=seed, buckets=bk, logging_arm=logging_arm,
                                 law_positions=positions)  # fmt: skip
            for arm in arms:
                why = res.depth_problem(arm)
                if why is not None:
                    raise SpecReplayError(why)
            more, more_skipped = sample_cases(res.law_sample, arms)
            cases += more
            skipped += more_skipped
            inputs = input_records([(f.path, f.rows) for f in res.files])
        law = run_cases(cases, skipped, seed=seed, family_alpha=family_alpha, max_draws=max_draws)
        doc = results_document(
            command="lawtest",
            seed=seed,
            inputs=inputs,
            options={
                "arms": arms_text,
                "archive": str(archive) if archive else None,
                "positions": positions,
                "family_alpha": family_alpha,
                "max_draws": max_draws,
            },
            assumptions=[
                "Exact output law: q_s·min(1, p/q_v) + (1 − α)·r, r ∝ max(0, p − q_v), target mass "
                "outside the candidates as one bucket; Monte Carlo G-test of sampled outputs "
                "against p, categories with expected count < 5 merged, Holm over every test.",
            ],
            excluded=[],
            arms=[a.canonical for a in arms] or sorted({c.arm for c in cases}),
            cells=[],
            law_tests=law,
        )
        write_json(tmp / "results.json", doc)
        table = lawtest_table(law, family_alpha)
        (tmp / "TABLES.md").write_text(table)
    ok = all(t["passed"] is not False for t in law)
    return table + f"\nOutputs: {out}/ (results.json, TABLES.md)", ok
