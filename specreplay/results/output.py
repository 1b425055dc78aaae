"""Writing a command's outputs: the atomic output folder, results.json, TABLES.md, cells.parquet.

SPEC §4: every command that computes writes into a temporary folder beside ``--out`` and swaps it
in when complete, so a killed run (SIGINT, or SIGTERM, which the CLI turns into an exception)
leaves no partial output, and a run removes the temporary folders that dead earlier runs left beside
``--out``. It refuses a non-empty folder that it did not write (no ``.specreplay-output`` marker)
unless ``--force``, and, even with ``--force``, a folder that is, contains or lies inside an input
of the run (real paths compared). The marker goes into report folders only, never into an archive
(``synth`` passes ``marker=False``), so an archive is never overwritten without ``--force``.
Figures carry their label; a null is written ``null`` in JSON and ``—`` in tables, with its
reason.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import numba
import polars as pl

from specreplay import __version__
from specreplay.errors import SpecReplayError

__all__ = [
    "MARKER",
    "RESULTS_SCHEMA",
    "cells_frame",
    "check_out",
    "environment",
    "fmt",
    "input_records",
    "load_results_schema",
    "output_dir",
    "results_document",
    "validate_json",
    "write_json",
]

MARKER = ".specreplay-output"
RESULTS_SCHEMA = "specreplay/results/v1"


@contextmanager
def output_dir(
    out: Path, *, force: bool, inputs: Sequence[Path] = (), marker: bool = True
) -> Iterator[Path]:
    """Yield a temporary folder beside ``out``; on success swap it in as ``out``.

    Parameters
    ----------
    out : Path
        The ``--out`` folder.
    force : bool
        Replace a non-empty ``out`` that specreplay did not write.
    inputs : sequence of Path
        The run's input paths: ``out`` may not be, contain or lie inside any of them.
    marker : bool
        Write the ``.specreplay-output`` marker (report folders); false for archives, which a
        later run may then replace only with ``force``.

    Raises
    ------
    SpecReplayError
        From :func:`check_out`, before any work is done, or when the folder cannot be written.
    """
    out = Path(out)
    _check_inputs(out, inputs)
    _check_creatable(out)
    target = Path(os.path.abspath(out))
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(target)  # may bring back a previous output, which the next check covers
        if tmp.exists():
            shutil.rmtree(tmp)
    except OSError as exc:
        raise SpecReplayError(f"--out {out}: cannot be created: {exc.strerror}") from None
    _check_foreign(out, force)
    try:
        try:
            tmp.mkdir()
            if marker:
                (tmp / MARKER).write_text("written by specreplay; safe to overwrite\n")
        except OSError as exc:
            raise SpecReplayError(f"--out {out}: cannot be created: {exc.strerror}") from None
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    with _signals_held():
        _swap_in(tmp, target)


def check_out(out: Path, *, force: bool, inputs: Sequence[Path] = ()) -> None:
    """Refuse an ``--out`` that would harm an input or another folder, before any work.

    In this order: ``out`` is, contains or lies inside an input (compared as real paths, symlinks
    resolved; refused even with ``force``); ``out`` lies under a regular file or in a folder
    without write permission; ``out`` is a file, or a non-empty folder without the marker, and
    ``force`` is false.

    Raises
    ------
    SpecReplayError
        One line naming ``--out`` and, for an input, that input.
    """
    out = Path(out)
    _check_inputs(out, inputs)
    _check_creatable(out)
    _check_foreign(out, force)


def _check_inputs(out: Path, inputs: Sequence[Path]) -> None:
    """Raise when ``out`` is, contains or lies inside an input (real paths, symlinks resolved)."""
    real = out.resolve()
    for given in inputs:
        inp = Path(given).resolve()
        if real == inp:
            how = "is"
        elif inp.is_relative_to(real):
            how = "contains"
        elif real.is_relative_to(inp):
            how = "lies inside"
        else:
            continue
        raise SpecReplayError(
            f"--out {out} {how} the input {given}; choose a folder outside the inputs "
            "(refused even with --force)"
        )


def _check_foreign(out: Path, force: bool) -> None:
    """Raise when ``out`` is a file or a non-empty folder without the marker, unless ``force``."""
    if out.exists() and not force:
        if not out.is_dir():
            raise SpecReplayError(f"{out}: exists and is not a folder (use --force to replace)")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise SpecReplayError(
                f"{out}: folder is not empty and was not written by specreplay "
                "(use --force to replace it)"
            )


def _check_creatable(out: Path) -> None:
    """Raise when ``out`` cannot be created: under a regular file, or no write permission."""
    target = Path(os.path.abspath(out))
    if not target.name:
        raise SpecReplayError(f"--out {out}: the root folder cannot be an output folder")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise SpecReplayError(f"--out {out}: cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecReplayError(f"--out {out}: cannot be created: no write permission in {parent}")


def _pid_alive(pid: int) -> bool:
    """Return whether process ``pid`` exists (one that cannot be probed counts as alive)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _remove_stale(target: Path) -> None:
    """Remove the temporary folders earlier runs left beside ``target`` (their PID is gone).

    ``.NAME.tmp-PID`` (an unfinished output) is deleted. ``.NAME.old-PID`` (the previous output,
    set aside during a swap) is deleted when ``target`` exists, and otherwise renamed back to
    ``target``: the run died between the two renames of the swap, before its output was in place.
    """
    if not target.parent.is_dir():
        return
    for path in target.parent.iterdir():
        for kind in ("tmp", "old"):
            prefix = f".{target.name}.{kind}-"
            pid_text = path.name.removeprefix(prefix)
            if pid_text == path.name or not pid_text.isdigit():
                continue
            pid = int(pid_text)
            if pid != os.getpid() and _pid_alive(pid):
                continue
            if kind == "old" and not target.exists() and not target.is_symlink():
                os.replace(path, target)
            elif path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def _swap_in(tmp: Path, target: Path) -> None:
    """Replace ``target`` by ``tmp`` with two renames, then delete the previous output."""
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    if target.exists() or target.is_symlink():
        os.replace(target, old)
    os.replace(tmp, target)
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    elif old.exists() or old.is_symlink():
        old.unlink()


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back during a swap; they are delivered when it is complete."""
    held = {signal.SIGINT, signal.SIGTERM}
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def sha256_file(path: Path) -> str:
    """Return the hex SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def input_records(files: Sequence[tuple[Path, int | None]]) -> list[dict[str, Any]]:
    """Return the ``inputs`` entries (path, sha256, bytes, rows) of the files read."""
    return [
        {"path": str(p), "sha256": sha256_file(p), "bytes": p.stat().st_size, "rows": rows}
        for p, rows in files
    ]


def environment() -> dict[str, Any]:
    """Return the ``environment`` entry of results.json."""
    return {
        "python": platform.python_version(),
        "numba": numba.__version__,
        "polars": pl.__version__,
        "numpy": __import__("numpy").__version__,
        "threads": int(numba.get_num_threads()),
    }


def results_document(
    *,
    command: str,
    seed: int,
    inputs: list[dict[str, Any]],
    options: dict[str, Any],
    assumptions: list[str],
    excluded: list[dict[str, Any]],
    arms: list[str],
    cells: list[dict[str, Any]],
    law_tests: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Assemble a results.json document following the v1 contract (extra keys appended)."""
    doc: dict[str, Any] = {
        "schema": RESULTS_SCHEMA,
        "command": command,
        "version": __version__,
        "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seed": seed,
        "environment": environment(),
        "inputs": inputs,
        "options": options,
        "assumptions": assumptions,
        "excluded": excluded,
        "arms": arms,
        "law_tests": law_tests or [],
        "cells": cells,
    }
    doc.update(extra)
    return doc


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write a JSON document (NaN is never written: nulls carry reasons instead)."""
    path.write_text(json.dumps(doc, indent=2, allow_nan=False, ensure_ascii=False) + "\n")


def cells_frame(cells: list[dict[str, Any]]) -> pl.DataFrame:
    """Flatten cells into the long table of SPEC §4 (one row per figure)."""
    rows: list[dict[str, Any]] = []
    for c in cells:
        base = {"level": c["level"], "family": c["family"], "bucket": c["bucket"]}
        for arm, v in c["arms"].items():
            rows.append(
                base
                | {
                    "kind": "R",
                    "arm": arm,
                    "depth": None,
                    "value": v["R"],
                    "label": v["label"],
                    "null_reason": v["null_reason"],
                }
            )
            rows.append(
                base
                | {
                    "kind": "n_rounds",
                    "arm": arm,
                    "depth": None,
                    "value": float(v["n_rounds"]),
                    "label": "MEASURED",
                    "null_reason": None,
                }
            )
        for s in c.get("survival", []):
            rows.append(
                base
                | {
                    "kind": "survival",
                    "arm": s["arm"],
                    "depth": s["position"],
                    "value": s["value"],
                    "label": s["label"],
                    "null_reason": s["null_reason"],
                }
            )
        for d in c.get("deltas", []):
            rows.append(
                base
                | {
                    "kind": "delta",
                    "arm": None,
                    "arm_a": d["a"],
                    "arm_b": d["b"],
                    "depth": None,
                    "value": d["point"],
                    "lo": d["lo"],
                    "hi": d["hi"],
                    "method": d["method"],
                    "level_conf": d["level"],
                    "label": d["label"],
                    "null_reason": d["null_reason"],
                }
            )
    schema = {
        "level": pl.String,
        "family": pl.String,
        "bucket": pl.String,
        "kind": pl.String,
        "arm": pl.String,
        "arm_a": pl.String,
        "arm_b": pl.String,
        "depth": pl.Int64,
        "value": pl.Float64,
        "lo": pl.Float64,
        "hi": pl.Float64,
        "method": pl.String,
        "level_conf": pl.Float64,
        "label": pl.String,
        "null_reason": pl.String,
    }
    return pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema)


def fmt(value: float | None, digits: int = 4) -> str:
    """Format a figure for a table: ``—`` for null."""
    return "—" if value is None else f"{value:.{digits}f}"


def load_results_schema() -> dict[str, Any]:
    """Return the shipped JSON Schema of results.json v1."""
    text = resources.files("specreplay").joinpath("schemas/results-v1.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def validate_json(doc: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Check ``doc`` against the subset of JSON Schema the shipped schema uses.

    Supports ``type`` (string or list), ``required``, ``properties``, ``additionalProperties``
    (schema form), ``items`` and ``enum``; returns the list of violations (empty when valid).
    """
    errors: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        ok = any(
            isinstance(doc, _TYPES[t])
            and not (t in ("integer", "number") and isinstance(doc, bool))
            for t in names
        )
        if not ok:
            return [f"{where}: expected {names}, got {type(doc).__name__}"]
    if "enum" in schema and doc not in schema["enum"]:
        errors.append(f"{where}: {doc!r} not in {schema['enum']}")
    if isinstance(doc, dict):
        errors.extend(f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in doc)
        props = schema.get("properties", {})
        for k, v in doc.items():
            if k in props:
                errors.extend(validate_json(v, props[k], f"{where}.{k}"))
            elif isinstance(schema.get("additionalProperties"), dict):
                errors.extend(validate_json(v, schema["additionalProperties"], f"{where}.{k}"))
    if isinstance(doc, list) and "items" in schema:
        for i, v in enumerate(doc):
            errors.extend(validate_json(v, schema["items"], f"{where}[{i}]"))
    return errors
