"""Compare every results.json under two run folders, figure by figure.

Pairs the ``results.json`` files of OLD_DIR and NEW_DIR by their path relative to each folder and
walks both JSON trees together (lists by index, objects by key; ``cells`` by their level, family
and bucket, so a new cell order is no difference). Left out, because they differ
between any two runs: ``created_utc``, ``environment``, ``validation`` (how many input files were
validated earlier: a second run skips what the first checked), ``inputs[].path``,
``inputs[].sha256`` and path-valued ``options`` (absolute paths, and the ``archive``/``out``
options).

Prints the verdict differences (``verdict`` and ``passed`` fields), every other non-numeric
difference (strings, booleans, a null against a number, a missing key, a list length), how many
numeric figures were compared, the largest relative change |new − old| / max(|old|, |new|) and
where it is, and every figure changing by more than ``--threshold`` (default 1e-9) relative.
Exit status 0 when the folders agree exactly, 1 when anything differs.

    python bench/compare_results.py OLD_DIR NEW_DIR [--threshold 1e-9] [--show 40]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERDICT_KEYS = frozenset({"verdict", "passed"})
IGNORED_TOP = frozenset({"created_utc", "environment", "validation"})
IGNORED_INPUT_KEYS = frozenset({"path", "sha256"})
PATH_OPTIONS = frozenset({"archive", "out", "output", "path"})


@dataclass
class Report:
    """What the walk found."""

    numeric: int = 0
    identical: int = 0
    largest: tuple[float, str, Any, Any] = (0.0, "", None, None)
    changed: list[tuple[float, str, Any, Any]] = field(default_factory=list)
    verdicts: list[tuple[str, Any, Any]] = field(default_factory=list)
    other: list[tuple[str, Any, Any]] = field(default_factory=list)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _rel(a: float, b: float) -> float:
    if a == b or (
        isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    ):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(b - a) / max(abs(a), abs(b))


def _ignored(where: list[str | int], key: str, value: Any) -> bool:
    if not where and key in IGNORED_TOP:
        return True
    if len(where) == 2 and where[0] == "inputs" and key in IGNORED_INPUT_KEYS:
        return True
    if where and where[0] == "options" and isinstance(value, str):
        return key in PATH_OPTIONS or os.path.isabs(value)
    return False


def _name(file: str, where: list[str | int]) -> str:
    out = file + ":"
    for w in where:
        out += f"[{w}]" if isinstance(w, int) else (f".{w}" if out[-1] != ":" else str(w))
    return out


def walk(
    old: Any, new: Any, file: str, where: list[str | int], rep: Report, threshold: float
) -> None:
    """Compare ``old`` and ``new`` (at ``where`` in ``file``) recursively into ``rep``."""
    here = _name(file, where)
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            if _ignored(where, key, old.get(key, new.get(key))):
                continue
            if key not in old or key not in new:
                rep.other.append(
                    (f"{here}.{key}", old.get(key, "<missing>"), new.get(key, "<missing>"))
                )
                continue
            walk(old[key], new[key], file, [*where, key], rep, threshold)
    elif isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            rep.other.append((f"{here} (length)", len(old), len(new)))
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            walk(a, b, file, [*where, i], rep, threshold)
    elif _is_number(old) and _is_number(new):
        rep.numeric += 1
        r = _rel(float(old), float(new))
        if r == 0.0:
            rep.identical += 1
        if r > rep.largest[0]:
            rep.largest = (r, here, old, new)
        if r > threshold:
            rep.changed.append((r, here, old, new))
    elif old != new:
        key = where[-1] if where else ""
        (rep.verdicts if key in VERDICT_KEYS else rep.other).append((here, old, new))


def _keyed(doc: Any, skip_law_tests: bool) -> Any:
    """Cells keyed by (level, family, bucket), so a change of cell order is not a change of figure;
    with ``skip_law_tests``, law tests summarised as pass/fail/null counts per arm (for runs whose
    law-test positions were chosen differently)."""
    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    if isinstance(doc.get("cells"), list):
        out["cells"] = {f"{c['level']}|{c['family']}|{c['bucket']}": c for c in doc["cells"]}
    if skip_law_tests and isinstance(doc.get("law_tests"), list):
        counts: dict[str, dict[str, int]] = {}
        for t in doc["law_tests"]:
            k = {True: "passed", False: "failed", None: "null"}[t.get("passed")]
            counts.setdefault(t["arm"], {"passed": 0, "failed": 0, "null": 0})[k] += 1
        out["law_tests"] = counts
    return out


def _files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("results.json"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--threshold", type=float, default=1e-9)
    ap.add_argument("--show", type=int, default=40, help="changed figures to list (largest first)")
    ap.add_argument(
        "--law-test-counts",
        action="store_true",
        help="compare law tests as pass/fail counts per arm (positions chosen differently)",
    )
    args = ap.parse_args(argv)
    old_files, new_files = _files(args.old), _files(args.new)
    rep = Report()
    only = sorted(set(old_files) ^ set(new_files))
    for rel in sorted(set(old_files) & set(new_files)):
        old = _keyed(json.loads(old_files[rel].read_text(encoding="utf-8")), args.law_test_counts)
        new = _keyed(json.loads(new_files[rel].read_text(encoding="utf-8")), args.law_test_counts)
        walk(old, new, rel, [], rep, args.threshold)
    print(f"results.json pairs: {len(set(old_files) & set(new_files))}")
    for rel in only:
        print(f"  only in {'OLD' if rel in old_files else 'NEW'}: {rel}")
    print(f"verdict differences: {len(rep.verdicts)}")
    for here, a, b in rep.verdicts:
        print(f"  {here}: {a!r} -> {b!r}")
    print(f"other non-numeric differences: {len(rep.other)}")
    for here, a, b in rep.other[: args.show]:
        print(f"  {here}: {a!r} -> {b!r}")
    print(f"numeric figures compared: {rep.numeric} ({rep.identical} identical)")
    r, here, a, b = rep.largest
    print(f"largest relative change: {r:.3g}" + (f" at {here}: {a!r} -> {b!r}" if here else ""))
    print(f"figures changing by more than {args.threshold:g} relative: {len(rep.changed)}")
    for r, here, a, b in sorted(rep.changed, key=lambda t: -t[0])[: args.show]:
        print(f"  {r:.3g}  {here}: {a!r} -> {b!r}")
    if len(rep.changed) > args.show:
        print(f"  … {len(rep.changed) - args.show} more")
    differs = bool(only or rep.verdicts or rep.other or rep.identical < rep.numeric)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
