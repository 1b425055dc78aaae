"""``specreplay requalify``: does a drafting-path change keep acceptance? (SPEC §3.1–3.4).

The archive is replayed under baseline, candidate and reference arms; the change (typically a
quantizer) is requalified when the candidate's acceptance stays equivalent to the baseline's.

Figures: R per arm per cell (SIMULATED, with its Monte Carlo standard error), Δ(candidate −
baseline) with intervals and the verdict, Δ(candidate − reference) (the gain a budget uses; no
verdict), the path-bias diagnostic of the archive's logging arm (its MEASURED R beside its
SIMULATED R, with a paired interval of the gap), per-position survival P(A ≥ j) per arm, the
off-path rates, the law test of the candidate (and baseline) on sampled archive positions, and
the requalification: QUALIFIED when the candidate is EQUIVALENT to the baseline and its law test
passes, NOT QUALIFIED when it is DIFFERENT or its law test fails, else INCONCLUSIVE.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.sources import archive_rows, list_archive
from specreplay.replay.engine import ReplayResult, replay_archive
from specreplay.replay.scan import Progress
from specreplay.results.output import (
    cells_frame,
    input_records,
    output_dir,
    results_document,
    write_json,
)
from specreplay.sim.arms import Arm, parse_arm
from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets
from specreplay.stats.compare import Comparison, compare, parse_margin
from specreplay.stats.pairing import pair_arms

__all__ = ["ASSUMPTIONS", "merge_cells", "peek_logging_arm", "run_requalify", "sample_requests"]


ASSUMPTIONS = [
    "Path assumption (SIMULATED figures): the archived positions are replayed as if their laws "
    "did not depend on what was drafted before; real drafts depend on their prefix, so this is "
    "biased even for the arm that produced the archive (see the path-bias diagnostic).",
    "A policy that changes depth also changes where later rounds start, which no replay of these "
    "archives can see.",
    "Common random numbers: every arm sees the same uniforms for the same (request, round, "
    "position, replicate), so paired deltas carry little Monte Carlo noise.",
    "Requests are the bootstrap unit (clusters); R is a ratio of sums pooled over rounds.",
]


def peek_logging_arm(path: Path) -> str | None:
    """Return the archive's logging_arm value from its first row, if it has that column."""
    first = list_archive(path)[0]
    if first.kind == "parquet":
        lf = pl.scan_parquet(first.path)
        if "logging_arm" not in lf.collect_schema():
            return None
        head = lf.select("logging_arm").head(1).collect()
        return str(head.item()) if head.height else None
    with first.path.open(encoding="utf-8-sig") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    return None
                v = obj.get("logging_arm") if isinstance(obj, dict) else None
                return str(v) if v is not None else None
    return None


def sample_requests(path: Path, n: int, seed: int) -> set[str]:
    """Choose ``n`` request ids deterministically: the n smallest seeded hashes of their keys."""
    from specreplay.replay.archive.reader import ArchiveReader
    from specreplay.sim.rng import STREAM_REQUALIFY_SAMPLE, request_key, uniform_py

    ids: set[str] = set()
    for f in list_archive(path):
        if f.kind == "parquet":
            ids.update(pl.scan_parquet(f.path).select("request_id").unique().collect().to_series())
        else:
            reader = ArchiveReader(f.path)
            for _ in reader:
                pass
            ids.update(reader.requests)
    ranked = sorted(
        ids, key=lambda r: (uniform_py(seed, int(request_key(r)), 0, 0, STREAM_REQUALIFY_SAMPLE), r)
    )
    return set(ranked[:n])


def merge_cells(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Merge cell lists of several comparisons on the same requests, keyed by level/family/bucket.

    Arms are united, deltas concatenated; the first list's cell order is kept.
    """
    out: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for cells in parts:
        for c in cells:
            k = (c["level"], c["family"], c["bucket"])
            if k not in out:
                out[k] = {**c, "arms": dict(c["arms"]), "deltas": list(c["deltas"])}
            else:
                out[k]["arms"].update(c["arms"])
                out[k]["deltas"].extend(c["deltas"])
    return list(out.values())


def _no_verdict(comp: Comparison, role: str, why: str, label: str) -> list[dict[str, Any]]:
    for c in comp.cells:
        for d in c["deltas"]:
            d["role"] = role
            d["label"] = label
            d["verdict"] = None
            d["verdict_null_reason"] = why
    return comp.cells


def _cell_masks(res: ReplayResult, cells: list[dict[str, Any]], arm: Arm) -> list[Any]:
    s = res.sums[arm.canonical]
    nb = len(res.buckets.names)
    req = s.keys // nb
    bkt = s.keys % nb
    fam = np.array([res.reader.request_family[int(i)] for i in req], dtype=np.int64)
    names_f = res.reader.families
    names_b = res.buckets.names
    masks = []
    for c in cells:
        m = np.ones(s.keys.shape[0], bool)
        if c["family"] is not None:
            m &= fam == names_f.index(c["family"])
        if c["bucket"] is not None:
            m &= bkt == names_b.index(c["bucket"])
        elif c["level"] == "bucket":
            m &= bkt != res.buckets.unbucketed_code
        masks.append(m)
    return masks


def _add_replay_figures(res: ReplayResult, cells: list[dict[str, Any]], arms: list[Arm]) -> None:
    """MCSE per arm, SIMULATED survival per arm, MEASURED survival and off-path rates."""
    has_drafted = "drafted_id" in res.reader.columns
    for arm in arms:
        s = res.sums[arm.canonical]
        surv = s.surv_mc if res.estimator == "montecarlo" else s.surv_analytic
        for c, m in zip(cells, _cell_masks(res, cells, arm), strict=True):
            entry = c["arms"].get(arm.canonical)
            if entry is not None:
                entry["mcse"] = res.mcse(arm, m)
                entry["estimator"] = res.estimator
            n = float(s.n[m].sum())
            c.setdefault("survival", [])
            for j in range(1, arm.depth + 1):
                short = float(s.short[m, j - 1].sum())
                why = None if short == 0 else f"{int(short)} rounds record fewer than {j} positions"
                if n == 0:
                    why = "no rounds in this cell"
                c["survival"].append(
                    {
                        "arm": arm.canonical,
                        "position": j,
                        "value": None if why else float(surv[m, j - 1].sum()) / n,
                        "label": "SIMULATED",
                        "null_reason": why,
                    }
                )
            off = s.offpath[m].sum(axis=0)
            why_off = None if has_drafted else "archive has no drafted_id column"
            c.setdefault("offpath", []).append(
                {
                    "arm": arm.canonical,
                    "accepted_offpath_share": None
                    if why_off or off[0] == 0
                    else float(off[1] / off[0]),
                    "evaluated_offpath_share": None
                    if why_off or off[2] == 0
                    else float(off[3] / off[2]),
                    "label": "SIMULATED",
                    "null_reason": why_off,
                }
            )


def run_requalify(
    archive: Path,
    *,
    baseline: str,
    candidate: str,
    reference: str | None,
    out: Path,
    force: bool,
    estimator: str = "analytic",
    replicates: int = 16,
    margin: str = "0.5%",
    fail_on: frozenset[str] = frozenset(),
    families: set[str] | None = None,
    n_sample_requests: int | None = None,
    n_boot: int = 10_000,
    seed: int = 0,
    stratify: str = "family",
    level: float = 0.95,
    min_requests: int = 10,
    buckets: str = "",
    logging_arm: str | None = None,
    law_positions: int = 8,
    progress: Progress | None = None,
) -> tuple[str, int, dict[str, Any]]:
    """Requalify ``candidate`` against ``baseline``; return (terminal text, exit code, results)."""
    from specreplay.results.plots import forest_plot
    from specreplay.results.tables import requalify_tables

    mg = parse_margin(margin)
    bk = Buckets.parse(buckets or DEFAULT_BUCKETS)
    arm_base, arm_cand = parse_arm(baseline), parse_arm(candidate)
    arm_ref = parse_arm(reference) if reference else None
    if arm_base.canonical == arm_cand.canonical:
        raise SpecReplayError(f"baseline and candidate are the same arm ({arm_base.canonical})")
    logged_text = peek_logging_arm(archive) or logging_arm
    arm_log = None
    if logged_text is not None:
        try:
            arm_log = parse_arm(logged_text)
        except SpecReplayError:
            arm_log = None
    arms: dict[str, Arm] = {}
    for a in (arm_base, arm_cand, arm_ref, arm_log):
        if a is not None:
            arms.setdefault(a.canonical, a)
    wanted = sample_requests(archive, n_sample_requests, seed) if n_sample_requests else None
    ctx = progress("replaying", archive_rows(archive)) if progress else nullcontext(None)
    with output_dir(out, force=force) as tmp:
        with ctx as advance:
            res = replay_archive(archive, list(arms.values()), estimator=estimator,
                                 replicates=replicates, seed=seed, buckets=bk, families=families,
                                 requests=wanted, logging_arm=logging_arm,
                                 progress=advance)  # fmt: skip
        for a in arms.values():
            if res.flagged_rows[a.canonical]:
                raise SpecReplayError(
                    f"{a.canonical}: top-K larger than the archived candidates in "
                    f"{res.flagged_rows[a.canonical]} position rows (never clamped silently)"
                )
            if res.unsupported_rows[a.canonical]:
                raise SpecReplayError(
                    f"{a.canonical}: {res.unsupported_rows[a.canonical]} position rows have no "
                    "candidate with a finite draft log-probability: nothing to draft"
                )
        data = {k: res.arm_data(a) for k, a in arms.items()}
        common = dict(n_boot=n_boot, seed=seed, stratify=stratify, level=level, margin=mg,
                      min_requests=min_requests)  # fmt: skip
        ps, _ = pair_arms(data[arm_base.canonical], data[arm_cand.canonical], buckets=bk)
        main = compare(ps, arm_a=arm_base.canonical, arm_b=arm_cand.canonical, label="SIMULATED",
                       role="candidate-vs-baseline", **common)  # type: ignore[arg-type]  # fmt: skip
        parts = [main.cells]
        if arm_ref is not None:
            ps_r, _ = pair_arms(data[arm_ref.canonical], data[arm_cand.canonical], buckets=bk)
            ref = compare(ps_r, arm_a=arm_ref.canonical, arm_b=arm_cand.canonical,
                          label="SIMULATED", role="candidate-vs-reference", **common)  # type: ignore[arg-type]  # fmt: skip
            parts.append(_no_verdict(ref, "candidate-vs-reference",
                                     "reference comparison (the gain a budget uses): no verdict",
                                     "SIMULATED"))  # fmt: skip
        path_bias = None
        if arm_log is not None and "accepted" in res.reader.columns:
            meas = res.measured_data(f"{arm_log.canonical} (MEASURED)")
            ps_b, _ = pair_arms(meas, data[arm_log.canonical], buckets=bk)
            pb = compare(ps_b, arm_a=meas.name, arm_b=arm_log.canonical, label="SIMULATED",
                         role="path-bias", **common)  # type: ignore[arg-type]  # fmt: skip
            for c in pb.cells:
                c["arms"][meas.name]["label"] = "MEASURED"
            parts.append(_no_verdict(pb, "path-bias",
                                     "diagnostic: SIMULATED − MEASURED R of the logging arm",
                                     "SIMULATED"))  # fmt: skip
            path_bias = pb.cells[0]["deltas"][0]
        cells = merge_cells(parts)
        _add_replay_figures(res, cells, list(arms.values()))
        law = _law_tests(archive, [arm_cand, arm_base], seed=seed, positions=law_positions,
                         buckets=bk, logging_arm=logging_arm)  # fmt: skip
        ran = [
            t["passed"] for t in law if t["arm"] == arm_cand.canonical and t["passed"] is not None
        ]
        law_pass: bool | None = all(ran) if ran else None
        for c in cells:
            c["requalification"] = _requalification(c, law_pass)
        overall = cells[0]["requalification"]
        doc = results_document(
            command="requalify",
            seed=seed,
            inputs=input_records([(f.path, f.rows) for f in res.reader.files]),
            options={
                "archive": str(archive),
                "baseline": baseline,
                "candidate": candidate,
                "reference": reference,
                "estimator": estimator,
                "replicates": res.replicates,
                "margin": mg.to_json(),
                "fail_on": sorted(fail_on),
                "families": sorted(families) if families else None,
                "sample_requests": n_sample_requests,
                "n_boot": n_boot,
                "stratify": stratify,
                "level": level,
                "min_requests": min_requests,
                "buckets": bk.spec,
                "logging_arm": logging_arm,
            },
            assumptions=ASSUMPTIONS,
            excluded=res.excluded,
            arms=list(arms),
            cells=cells,
            law_tests=law,
            requalification=overall,
            logging_arm=arm_log.canonical if arm_log else None,
            path_bias=path_bias,
        )
        write_json(tmp / "results.json", doc)
        cells_frame(cells).write_parquet(tmp / "cells.parquet")
        tables = requalify_tables(doc, arm_base.canonical, arm_cand.canonical, mg.text)
        (tmp / "TABLES.md").write_text(tables)
        forest_plot(main.cells, tmp / "forest.png", relative=mg.relative, margin=mg.value,
                    title=f"{arm_cand.canonical} vs {arm_base.canonical} (SIMULATED)")  # fmt: skip
    text = tables + f"\nOutputs: {out}/ (results.json, TABLES.md, cells.parquet, forest.png)"
    return text, (1 if overall["verdict"] in fail_on else 0), doc


def _requalification(cell: dict[str, Any], law_pass: bool | None) -> dict[str, Any]:
    d = next(x for x in cell["deltas"] if x["role"] == "candidate-vs-baseline")
    v = d["verdict"]
    if v is None:
        return {"verdict": None, "null_reason": d["null_reason"], "label": "SIMULATED"}
    if v == "DIFFERENT" or law_pass is False:
        out = "NOT QUALIFIED"
    elif v == "EQUIVALENT" and law_pass:
        out = "QUALIFIED"
    else:
        out = "INCONCLUSIVE"
    law = {True: "passed", False: "FAILED", None: "not run (no testable position)"}[law_pass]
    why = f"Δ verdict {v}; law test {law}"
    return {"verdict": out, "because": why, "label": "SIMULATED", "null_reason": None}


def _law_tests(
    archive: Path,
    arms: list[Arm],
    *,
    seed: int,
    positions: int,
    buckets: Buckets,
    logging_arm: str | None,
) -> list[dict[str, Any]]:
    """Law tests of each arm on ``positions`` archive positions spread over the first batch."""
    from specreplay.replay.lawcases import archive_cases, run_cases

    cases, skipped = archive_cases(
        archive, arms, positions=positions, buckets=buckets, logging_arm=logging_arm
    )
    return run_cases(cases, skipped, seed=seed)
