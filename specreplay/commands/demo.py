"""``specreplay demo``: the built-in archive's story, verdicts first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specreplay.commands.lawtest import run_lawtest
from specreplay.replay.engine import OpenArchive
from specreplay.replay.scan import Progress, no_progress, scan_archive
from specreplay.results.builders import (
    write_measured,
    write_synth_archive,
)
from specreplay.results.output import (
    output_dir,
)
from specreplay.results.tables import archive_summary
from specreplay.sim.arms import parse_arm

__all__ = ["run_demo"]


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
    progress: Progress = no_progress,
) -> str:
    """Generate the built-in archive into ``out/archive`` and tell its story, verdicts first.

    1. the archive (MEASURED acceptance by family × bucket, per-position survival);
    2. requalification of dyadic24 against float64 sampling, greedy as reference, with the law
       test and the path-bias diagnostic (``out/requalify``);
    3. a bits sweep (dyadic 8, 12, 16, 24: ``out/bits-dyadicN``) and the mismatched verifier
       ``dyadic8/float64`` failing the law test (``out/lawtest``).
    """
    from specreplay.commands.requalify import run_requalify
    from specreplay.stats.buckets import DEFAULT_BUCKETS

    with output_dir(out, force=force) as tmp:
        archive = tmp / "archive"
        write_synth_archive(archive, n_requests, 64, 250, seed, progress)
        scan = scan_archive(archive, buckets=DEFAULT_BUCKETS, progress=progress)
        options = {"requests": n_requests, "archive": str(out / "archive")}
        tables = write_measured(tmp, scan, "demo", seed, options, rename=(tmp, out))
        # one replay pass for every arm of the story (requalification and bits sweep)
        opened = OpenArchive(archive)
        logged = [parse_arm(opened.logging_arm)] if opened.logging_arm else []
        story = [DEMO_BASELINE, DEMO_CANDIDATE, DEMO_REFERENCE]
        story += [f"top32:t0.7:dyadic{b}@5" for b in DEMO_BITS]
        arms = {a.canonical: a for a in [*(parse_arm(x) for x in story), *logged]}
        replayed = opened.replay(list(arms.values()), seed=seed, law_positions=8)
        common: dict[str, Any] = {
            "force": True, "seed": seed, "n_boot": n_boot, "replayed": replayed,
        }  # fmt: skip
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
