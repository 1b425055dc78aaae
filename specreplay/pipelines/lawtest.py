"""Law-test results: the toy suite and archive positions, as a typed result.

See docs/methods.md#law-tests.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specreplay.errors import SpecReplayError
from specreplay.pipelines.document import ignored_inputs, input_files, new_result
from specreplay.pipelines.options import LawtestOptions
from specreplay.replay.engine import ReplayResult, replay_archive
from specreplay.replay.lawcases import run_cases, sample_cases, toy_arm_cases
from specreplay.results.from_stats import law_tests
from specreplay.results.model import InputFile, InputIgnored, Result
from specreplay.results.privacy import IdHasher, hash_result
from specreplay.stats.lawtest import toy_cases

__all__ = ["lawtest_result"]


def lawtest_result(
    opts: LawtestOptions, *, archive: Path | None, replayed: ReplayResult | None = None
) -> Result:
    """Law tests of arms on the toy laws and, given an archive, on sampled positions.

    Without arms the built-in toy suite runs (float64, dyadic8 and dyadic8/float64 on four toy
    positions); with arms, each arm on the toy positions (named ``toy:ARM``) and, given an
    archive, on ``positions`` of its positions chosen by hash in one replay pass of the arms
    (``replayed``: a pass already made with these arms and ``law_positions``). An arm deeper
    than the archive's recorded positions is UNSUPPORTED: an error with the reason, as in
    ``requalify``. ``opts.ignore``: ``--ignore`` globs, entries of the archive's folder to skip.
    """
    arms, seed = list(opts.arms), opts.seed
    if arms:
        cases, skipped = toy_arm_cases(arms)
        cases = [c._replace(arm=f"toy:{c.arm}") for c in cases]
        skipped = [dataclasses.replace(s, arm=f"toy:{s.arm}") for s in skipped]
    else:
        cases, skipped = toy_cases(), []
    inputs: tuple[InputFile, ...] = ()
    ignored: tuple[InputIgnored, ...] = ()
    if archive is not None:
        if not arms:
            raise SpecReplayError("lawtest ARCHIVE: name the arms to test with --arm")
        res = replayed or replay_archive(
            archive,
            arms,
            seed=seed,
            buckets=opts.buckets,
            logging_arm=opts.logging_arm,
            law_positions=opts.positions,
            ignore=opts.ignore,
        )
        for arm in arms:
            why = res.depth_problem(arm)
            if why is not None:
                raise SpecReplayError(why)
        more, more_skipped = sample_cases(res.law_sample, arms, res.requests)
        cases += more
        skipped += more_skipped
        inputs = input_files([(f.path, f.rows) for f in res.files])
        ignored = ignored_inputs((e.path, e.glob) for e in res.ignored)
    law = run_cases(
        cases, skipped, seed=seed, family_alpha=opts.family_alpha, max_draws=opts.max_draws
    )
    result = new_result(
        command="lawtest",
        seed=seed,
        inputs=inputs,
        options={
            "arms": list(opts.arms_spelled),
            "archive": str(archive) if archive else None,
            "positions": opts.positions,
            "family_alpha": opts.family_alpha,
            "max_draws": opts.max_draws,
        },
        assumptions=[
            "Exact output law: q_s·min(1, p/q_v) + (1 − α)·r, r ∝ max(0, p − q_v), target mass "
            "outside the candidates as one bucket; Monte Carlo G-test of sampled outputs "
            "against p, categories with expected count < 5 merged, Holm over every test.",
        ],
        arms=[a.canonical for a in arms] or sorted({c.arm for c in cases}),
        law_tests=law_tests(law),
        inputs_ignored=ignored,
    )
    return hash_result(result, IdHasher() if opts.hash_ids else None)  # request fields by name
