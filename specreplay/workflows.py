"""The Python API behind each CLI command: run a whole job, write its outputs, return its text.

Functions here compose the subpackages (``replay`` → ``stats`` → ``report``) and return the text the
terminal shows; they never print. ``progress(what, total)`` is a context-manager factory yielding
``advance(n)``; the CLI passes a rich progress bar on stderr.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import polars as pl

from specreplay.errors import SpecReplayError
from specreplay.replay.buckets import Buckets
from specreplay.replay.stream import ArchiveReader
from specreplay.report import (
    cells_frame,
    input_records,
    output_dir,
    results_document,
    write_json,
)
from specreplay.stats.cells import excluded_unbucketed, measured_cells
from specreplay.stats.measured import MeasuredAccumulator, MeasuredArchive
from specreplay.tables import archive_summary, measured_tables

__all__ = ["ArchiveScan", "run_demo", "run_synth", "run_validate", "scan_archive"]

Progress = Callable[[str, int | None], AbstractContextManager[Callable[[int], None]]]

PATH_ASSUMPTION_NOTE = (
    "MEASURED figures count the archived verifier's decisions (`accepted`): A = leading True "
    "values of a round, retained tokens 1 + A, R = Σ(1 + A) / #rounds pooled over rounds."
)


def _no_progress(what: str, total: int | None) -> AbstractContextManager[Callable[[int], None]]:
    return nullcontext(lambda n: None)


class ArchiveScan:
    """Result of reading a whole archive once: reader tables plus MEASURED accumulations."""

    def __init__(self, reader: ArchiveReader, measured: MeasuredArchive, has_accepted: bool):
        self.reader = reader
        self.measured = measured
        self.has_accepted = has_accepted

    @property
    def arm(self) -> str:
        """Name the MEASURED figures are reported under: the logging arm, else ``archive``."""
        return self.reader.logging_arm or "archive"

    def cells(self) -> list[dict[str, Any]]:
        """MEASURED cells pooled, per family, per bucket and per family × bucket."""
        return measured_cells(
            self.measured,
            arm=self.arm,
            families=self.reader.families,
            buckets=self.reader.buckets,
            has_accepted=self.has_accepted,
        )


def _parquet_rows(path: Path) -> int | None:
    try:
        files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
        if not files or any(f.suffix != ".parquet" for f in files):
            return None
        return sum(int(pl.scan_parquet(f).select(pl.len()).collect().item()) for f in files)
    except Exception:
        return None


def scan_archive(
    path: Path,
    *,
    buckets: str,
    logging_arm: str | None = None,
    max_errors: int | None = 1,
    progress: Progress = _no_progress,
) -> ArchiveScan:
    """Read, validate and accumulate MEASURED figures of an archive in one streaming pass."""
    reader = ArchiveReader(
        path, buckets=Buckets.parse(buckets), logging_arm=logging_arm, max_errors=max_errors
    )
    acc = MeasuredAccumulator(len(reader.buckets.names))
    with progress(f"reading {path.name}", _parquet_rows(path)) as advance:
        for batch in reader:
            acc.add(batch)
            advance(batch.n_positions)
    return ArchiveScan(reader, acc.result(), "accepted" in reader.columns)


def run_synth(
    out: Path,
    *,
    n_requests: int,
    rounds: int,
    shard_requests: int,
    seed: int,
    force: bool,
    progress: Progress = _no_progress,
) -> str:
    """Generate the synthetic archive into ``out`` (Parquet shards + SYNTH.json manifest)."""
    t0 = time.perf_counter()
    with output_dir(out, force=force) as tmp:
        cfg, files = _write_synth(tmp, n_requests, rounds, shard_requests, seed, progress)
        rows = n_requests * rounds * cfg.depth
    return (
        f"wrote {n_requests:,} requests × {rounds} rounds × {cfg.depth} positions "
        f"({rows:,} rows) in {len(files)} shards to {out} "
        f"(logging arm {_arm(cfg)}, seed {seed}) in {time.perf_counter() - t0:.1f} s"
    )


def _arm(cfg: Any) -> str:
    from specreplay.sim.synth import logging_arm_name

    return logging_arm_name(cfg)


def _write_synth(
    folder: Path, n_requests: int, rounds: int, shard_requests: int, seed: int, progress: Progress
) -> tuple[Any, list[Path]]:
    from specreplay.replay.writer import TraceWriter
    from specreplay.sim.synth import SynthConfig, synth_frames

    cfg = SynthConfig(n_requests=n_requests, rounds=rounds, requests_per_shard=shard_requests)
    with (
        progress("synthesising requests", n_requests) as advance,
        TraceWriter(folder, format="parquet-dir") as writer,
    ):
        for frame in synth_frames(cfg, seed):
            writer.append_frame(frame)
            writer.end_shard()
            advance(frame.height // (rounds * cfg.depth))
    files = writer.written
    manifest = results_document(
        command="synth",
        seed=seed,
        inputs=[],
        options={
            "requests": n_requests,
            "rounds": rounds,
            "depth": cfg.depth,
            "shard_requests": shard_requests,
            "logging_arm": _arm(cfg),
        },
        assumptions=[
            "Synthetic archive logged from specreplay's toy draft/target model pair "
            "(specreplay.sim.toy); no real model was run.",
        ],
        excluded=[],
        arms=[_arm(cfg)],
        cells=[],
        outputs=input_records([(f, None) for f in files]),
    )
    write_json(folder / "SYNTH.json", manifest)
    return cfg, files


def _write_measured(
    folder: Path,
    scan: ArchiveScan,
    command: str,
    seed: int,
    options: dict[str, Any],
    rename: tuple[Path, Path] | None = None,
) -> str:
    """Write results.json, cells.parquet and TABLES.md of a MEASURED scan into ``folder``.

    ``rename = (tmp, final)`` rewrites input paths read from the temporary output folder.
    """
    cells = scan.cells()
    inputs = input_records([(f.path, f.rows) for f in scan.reader.files])
    if rename is not None:
        for rec in inputs:
            rec["path"] = rec["path"].replace(str(rename[0]), str(rename[1]), 1)
    doc = results_document(
        command=command,
        seed=seed,
        inputs=inputs,
        options=options,
        assumptions=[PATH_ASSUMPTION_NOTE],
        excluded=excluded_unbucketed(scan.measured, scan.reader.buckets),
        arms=[scan.arm],
        cells=cells,
    )
    write_json(folder / "results.json", doc)
    cells_frame(cells).write_parquet(folder / "cells.parquet")
    tables = measured_tables(cells, scan)
    (folder / "TABLES.md").write_text(tables)
    return tables


def run_validate(
    path: Path,
    *,
    max_errors: int | None,
    buckets: str,
    logging_arm: str | None,
    out: Path | None,
    force: bool,
    progress: Progress = _no_progress,
) -> tuple[bool, str]:
    """Validate an archive; return (valid, text): counts and MEASURED R, or the error lines."""
    scan = scan_archive(
        path, buckets=buckets, logging_arm=logging_arm, max_errors=max_errors, progress=progress
    )
    errors = scan.reader.errors
    if errors:
        more = " (stopped there; --all lists every one)" if scan.reader.truncated else ""
        return False, "\n".join([*errors, f"{len(errors)} error(s) in {path}{more}"])
    options = {"path": str(path), "buckets": buckets, "logging_arm": logging_arm}
    text = archive_summary(scan)
    if out is not None:
        with output_dir(out, force=force) as tmp:
            _write_measured(tmp, scan, "validate", 0, options)
    return True, text + "\n\n" + measured_tables(scan.cells(), scan)


DEMO_BASELINE = "top32:t0.7@5"
DEMO_CANDIDATE = "top32:t0.7:dyadic24@5"
DEMO_REFERENCE = "greedy@5"
DEMO_BITS = (8, 12, 16)
DEMO_MISMATCHED = "top32:t0.7:dyadic8/float64@5"


def run_demo(
    out: Path,
    *,
    n_requests: int,
    seed: int,
    force: bool,
    n_boot: int = 10_000,
    progress: Progress = _no_progress,
) -> str:
    """Generate the built-in archive into ``out/archive`` and tell its story, verdicts first.

    1. the archive (MEASURED acceptance by family × bucket, per-position survival);
    2. requalification of dyadic24 against float64 sampling, greedy as reference, with the law
       test and the path-bias diagnostic (``out/requalify``);
    3. a bits sweep (dyadic 8, 12, 16, 24: ``out/bits-dyadicN``) and the mismatched verifier
       ``dyadic8/float64`` failing the law test (``out/lawtest``).
    """
    from specreplay.replay.buckets import DEFAULT_BUCKETS
    from specreplay.requalify import run_requalify

    with output_dir(out, force=force) as tmp:
        archive = tmp / "archive"
        _write_synth(archive, n_requests, 64, 250, seed, progress)
        scan = scan_archive(archive, buckets=DEFAULT_BUCKETS, progress=progress)
        options = {"requests": n_requests, "archive": str(out / "archive")}
        tables = _write_measured(tmp, scan, "demo", seed, options, rename=(tmp, out))
        common: dict[str, Any] = {"force": True, "seed": seed, "n_boot": n_boot}
        main_text, _, main = run_requalify(
            archive, baseline=DEMO_BASELINE, candidate=DEMO_CANDIDATE, reference=DEMO_REFERENCE,
            out=tmp / "requalify", **common,
        )  # fmt: skip
        sweep = {24: main}
        for bits in DEMO_BITS:
            _, _, sweep[bits] = run_requalify(
                archive, baseline=DEMO_BASELINE, candidate=f"top32:t0.7:dyadic{bits}@5",
                reference=None, out=tmp / f"bits-dyadic{bits}", **common,
            )  # fmt: skip
        law_text, _ = run_lawtest(
            [DEMO_MISMATCHED, DEMO_CANDIDATE], archive=archive, out=tmp / "lawtest",
            force=True, seed=seed,
        )  # fmt: skip
        law_doc = json.loads((tmp / "lawtest" / "results.json").read_text())
    verdicts = _demo_verdicts(main, sweep, law_doc["law_tests"])
    head = (
        f"specreplay demo: built-in synthetic archive, {n_requests:,} requests, seed {seed} "
        f"(written to {out}/archive)"
    )
    return "\n".join(
        [
            head,
            "",
            verdicts,
            "",
            "# 1. The archive (MEASURED)",
            "",
            archive_summary(scan, out / "archive"),
            "",
            tables,
            f"# 2. Requalification of {DEMO_CANDIDATE} against {DEMO_BASELINE} ({out}/requalify)",
            "",
            main_text.replace(str(tmp), str(out)),
            f"# 3. Mismatched verifier {DEMO_MISMATCHED} ({out}/lawtest)",
            "",
            law_text.replace(str(tmp), str(out)),
            f"Outputs: {out}/",
        ]
    )


def _demo_verdicts(
    main: dict[str, Any], sweep: dict[int, dict[str, Any]], law: list[dict[str, Any]]
) -> str:
    def delta(doc: dict[str, Any], role: str) -> dict[str, Any] | None:
        return next((d for d in doc["cells"][0]["deltas"] if d["role"] == role), None)

    lines = ["VERDICTS (pooled; SIMULATED replays of the MEASURED archive)"]
    d = delta(main, "candidate-vs-baseline")
    rq = main["requalification"]
    if d is not None and d["point"] is not None:
        lines.append(
            f"- requalification {DEMO_CANDIDATE} vs {DEMO_BASELINE}: {rq['verdict']} "
            f"(Δ {d['point']:+.2e} tokens/round, {100 * d['rel']:+.4f}%; {rq['because']})"
        )
    parts = []
    for bits in sorted(sweep):
        db = delta(sweep[bits], "candidate-vs-baseline")
        if db is not None and db["point"] is not None:
            lo, hi = 100 * db["rel_lo"], 100 * db["rel_hi"]
            parts.append(
                f"dyadic{bits} {sweep[bits]['requalification']['verdict']} "
                f"({100 * db['rel']:+.3f}% [{lo:+.3f}%, {hi:+.3f}%])"
            )
    lines.append("- bits sweep at margin 0.5%: " + "; ".join(parts))
    mism = [t for t in law if t["arm"] == DEMO_MISMATCHED and t["passed"] is not None]
    failed = [t for t in mism if not t["passed"]]
    if mism:
        lines.append(
            f"- mismatched verifier {DEMO_MISMATCHED}: law test FAILED at {len(failed)} of "
            f"{len(mism)} archive positions (exact TV up to {max(t['tv'] for t in mism):.3g})"
        )
    g = delta(main, "candidate-vs-reference")
    if g is not None and g["point"] is not None:
        lines.append(
            f"- gain of {DEMO_CANDIDATE} over {DEMO_REFERENCE}: {g['point']:+.4f} tokens/round "
            f"[{g['lo']:+.4f}, {g['hi']:+.4f}] ({100 * g['rel']:+.2f}%)"
        )
    pb = delta(main, "path-bias")
    if pb is not None and pb["point"] is not None:
        lines.append(
            f"- path bias of the logging arm (SIMULATED − MEASURED R): {pb['point']:+.4f} "
            f"[{pb['lo']:+.4f}, {pb['hi']:+.4f}] tokens/round"
        )
    return "\n".join(lines)


def run_interval(
    path_a: Path,
    path_b: Path,
    *,
    out: Path,
    force: bool,
    question_file: Path | None = None,
    margin: str = "0.5%",
    fail_on: frozenset[str] = frozenset(),
    n_boot: int = 10_000,
    seed: int = 0,
    stratify: str = "family",
    level: float = 0.95,
    min_requests: int = 10,
    drop_unpaired: bool = False,
    buckets: str = "",
    choice: int = 0,
    drafted: int | None = None,
    names: tuple[str | None, str | None] = (None, None),
    progress: Progress = _no_progress,
) -> tuple[str, int]:
    """Paired interval between two observed arms; return (terminal text, exit code).

    The exit code is 1 when the pooled verdict is in ``fail_on``, else 0.
    """
    from specreplay.plots import forest_plot
    from specreplay.replay.armdata import ArmData
    from specreplay.replay.buckets import DEFAULT_BUCKETS
    from specreplay.replay.observed import detect_kind, read_arm
    from specreplay.stats.arviz_bridge import add_hdi_eti
    from specreplay.stats.compare import compare, parse_margin
    from specreplay.stats.pairing import pair_arms
    from specreplay.tables import comparison_tables

    mg = parse_margin(margin)
    bk = Buckets.parse(buckets or DEFAULT_BUCKETS)
    kinds = (detect_kind(path_a), detect_kind(path_b))
    for flag, used_by, given in (
        ("--question-file", ("medusa",), question_file is not None),
        ("--choice", ("spec-bench", "medusa"), choice != 0),
        ("--drafted", ("spec-bench",), drafted is not None),
    ):
        if given and not set(kinds) & set(used_by):
            raise SpecReplayError(
                f"{flag} applies to {' and '.join(used_by)} inputs; A is {kinds[0]}, "
                f"B is {kinds[1]}"
            )

    def load(path: Path, kind: str, name: str | None) -> ArmData:
        return read_arm(
            path,
            buckets=bk,
            question_file=question_file if kind == "medusa" else None,
            choice=choice if kind in ("spec-bench", "medusa") else 0,
            drafted=drafted if kind == "spec-bench" else None,
            name=name,
        )

    with output_dir(out, force=force) as tmp:
        arm_a = load(path_a, kinds[0], names[0])
        arm_b = load(path_b, kinds[1], names[1])
        if arm_a.name == arm_b.name:
            arm_b = dataclasses.replace(arm_b, name=arm_b.name + " (B)")
        ps, excluded = pair_arms(arm_a, arm_b, buckets=bk, drop_unpaired=drop_unpaired)
        with progress(f"bootstrap ({n_boot:,} resamples)", None):
            comp = compare(
                ps,
                arm_a=arm_a.name,
                arm_b=arm_b.name,
                n_boot=n_boot,
                seed=seed,
                stratify=stratify,
                level=level,
                margin=mg,
                min_requests=min_requests,
                label=arm_a.label,
            )
        add_hdi_eti(comp, prob=level)
        files = list(dict.fromkeys([*arm_a.files, *arm_b.files]))
        notes = list(dict.fromkeys([*arm_a.notes, *arm_b.notes]))
        doc = results_document(
            command="interval",
            seed=seed,
            inputs=input_records(files),
            options={
                "a": str(path_a),
                "b": str(path_b),
                "question_file": str(question_file) if question_file else None,
                "margin": mg.to_json(),
                "fail_on": sorted(fail_on),
                "n_boot": n_boot,
                "stratify": stratify,
                "level": level,
                "min_requests": min_requests,
                "drop_unpaired": drop_unpaired,
                "buckets": bk.spec,
                "choice": choice,
                "drafted": drafted,
            },
            assumptions=[
                "Requests are the bootstrap unit (clusters): all rounds of a request are "
                "resampled together; strata = " + stratify + ".",
                "R = Σ retained tokens / Σ rounds over the cell (ratio of sums, pooled); "
                "each arm keeps its own round counts.",
                *notes,
            ],
            excluded=[*arm_a.excluded, *arm_b.excluded, *excluded],
            arms=[arm_a.name, arm_b.name],
            cells=comp.cells,
            sources={arm_a.name: arm_a.kind, arm_b.name: arm_b.kind},
        )
        write_json(tmp / "results.json", doc)
        cells_frame(comp.cells).write_parquet(tmp / "cells.parquet")
        tables = comparison_tables(
            comp.cells, arm_a=arm_a.name, arm_b=arm_b.name, margin_text=mg.text
        )
        (tmp / "TABLES.md").write_text(tables)
        forest_plot(
            comp.cells,
            tmp / "forest.png",
            relative=mg.relative,
            margin=mg.value,
            title=f"{arm_b.name} vs {arm_a.name} ({arm_a.label})",
        )
    pooled = comp.cells[0]["deltas"][0]
    verdict = pooled["verdict"]
    head = _verdict_line(pooled, arm_a.name, arm_b.name, mg.text)
    short = comparison_tables(
        comp.cells, arm_a=arm_a.name, arm_b=arm_b.name, margin_text=mg.text,
        levels=("pooled", "family"),
    )  # fmt: skip
    text = (
        f"{head}\n\n{short}\nOutputs: {out}/ (results.json, TABLES.md, cells.parquet, forest.png)"
    )
    return text, (1 if verdict in fail_on else 0)


def _verdict_line(d: dict[str, Any], a: str, b: str, margin: str) -> str:
    if d["null_reason"] is not None:
        return f"VERDICT (pooled): — ({d['null_reason']})"
    return (
        f"VERDICT (pooled, {d['label']}): {d['verdict']} at margin {margin} — "
        f"{b} vs {a}: Δ = {d['point']:+.4f} tokens/round "
        f"[{d['lo']:+.4f}, {d['hi']:+.4f}] ({100 * d['rel']:+.2f}% "
        f"[{100 * d['rel_lo']:+.2f}%, {100 * d['rel_hi']:+.2f}%]), 95% percentile"
    )


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
    from specreplay.lawsuite import archive_cases, run_cases, toy_arm_cases
    from specreplay.replay.buckets import DEFAULT_BUCKETS
    from specreplay.sim.arms import parse_arm
    from specreplay.stats.lawtest import toy_cases
    from specreplay.tables import lawtest_table

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
            more, more_skipped = archive_cases(
                archive, arms, positions=positions, buckets=bk, logging_arm=logging_arm
            )
            cases += more
            skipped += more_skipped
            inputs = input_records([(p, None) for p in _archive_files(archive)])
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


def _archive_files(archive: Path) -> list[Path]:
    from specreplay.replay.sources import list_archive

    return [f.path for f in list_archive(archive)]
