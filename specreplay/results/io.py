"""results.json: write a :class:`~specreplay.results.model.Result`; read one as untrusted input.

See docs/outputs.md#resultsjson and docs/outputs.md#what-report-checks.

Writing walks the dataclasses in field order (enums as their values, tuples as lists, ``schema``
first, the keys of ``Result.extra`` last; a field kept in memory only, such as
``Result.replicates``, is skipped, and so is a field marked ``OMIT_NONE`` while it is None, such as
``Result.scrapes``); NaN is never written (a figure that cannot be computed is ``null`` with its
reason).

Reading (:func:`read_result`, :func:`parse_result`) trusts nothing in the file, and checks in this
order, before anything is rendered:

1. the file: a regular file of at most :data:`MAX_BYTES` (read no further), UTF-8;
2. the document, by pydantic (:mod:`specreplay.results.schema`) while it parses: JSON nested at
   most :data:`MAX_DEPTH` deep (pydantic-core's parser stops deeper, so no recursion error),
   strict types, finite numbers, counts, integer ranges, names, known keys only at every level
   (the top level's are :class:`Result`'s fields and the keys of
   :class:`~specreplay.results.model.ResultExtra`), and the ``options`` entries a renderer reads;
3. no object holds a key twice (a second reader might keep the other value);
4. what its command always writes is there (:func:`shape_problem`: cells, the pooled one first;
   an interval's two arms and b-vs-a delta; the options its renderers read);
5. cross-references resolve (:func:`reference_problem`): every arm a delta names is an arm of its
   cell (the run-level ``path_bias`` delta: of the pooled cell), every arm named by a depth,
   policy, survival, off-path, importance or best-depth entry is a key of its cell's ``arms``,
   the fixed-sequence steps and the held-out policy choices name run arms, a scrape delta names
   scrape pairs read.

A failure is one :class:`~specreplay.errors.SpecReplayError` naming the file, the field as a JSON
path (``$.cells[3].deltas[0].b``) and what is wrong. Older files of contract v1 still read: a key
renamed within v1 is read under its older name (:data:`~specreplay.results.schema.RENAMED`), and
a field with a default may be absent. ``read_result(write_result(r)) == r``, byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreplay.errors import SpecReplayError
from specreplay.results.model import (
    OMIT_NONE,
    REQUIRED_OPTIONS,
    Cell,
    Delta,
    Level,
    OptionsRead,
    Result,
    ResultExtra,
    Role,
    written,
)

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "dump",
    "parse_result",
    "read_result",
    "reference_problem",
    "result_json",
    "shape_problem",
    "write_result",
]

MAX_BYTES = 128 * 2**20
"""The largest results.json read (128 MiB): a requalify cell takes about 30 KB (depth 5, with
survival, off-path and importance figures), so this holds some 4,000 cells (a ``--by`` run of 50
families × 5 buckets × 10 values has 2,800), and its parse stays within a few GB of memory."""

MAX_DEPTH = 201
"""The deepest nesting of arrays and objects read (pydantic-core's JSON parser; results.json
itself nests 6 deep)."""


def dump(obj: Any) -> Any:
    """Return ``obj`` as JSON-ready data (dataclasses → dicts in field order)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {
            f.name: dump(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if written(f) and not (f.metadata.get(OMIT_NONE) and getattr(obj, f.name) is None)
        }
        extra = out.pop("extra", None)
        if isinstance(obj, Result):
            out = {"schema": out.pop("schema"), **out, **(extra or {})}
        return out
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, tuple | list):
        return [dump(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): dump(v) for k, v in obj.items()}
    return obj


CHECK_WRITTEN = "SPECREPLAY_CHECK_WRITTEN"
"""Environment variable: when set (the test suite sets it), every results.json text built is read
back as ``report`` reads it, and one it would refuse is a RuntimeError (a bug of the writer)."""


def result_json(result: Result) -> str:
    """Return the results.json text of ``result`` (checked under :data:`CHECK_WRITTEN`)."""
    text = json.dumps(dump(result), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
    if os.environ.get(CHECK_WRITTEN):
        try:
            parse_result(text.encode("utf-8"), f"{result.command}'s results.json")
        except SpecReplayError as err:
            raise RuntimeError(f"specreplay wrote what report refuses: {err.message}") from None
    return text


def write_result(path: Path, result: Result) -> None:
    """Write ``result`` as results.json at ``path``."""
    path.write_text(result_json(result), encoding="utf-8")


def read_result(path: Path) -> Result:
    """Read a results.json, checking it as untrusted input (module docstring).

    Raises
    ------
    SpecReplayError
        One line naming the file, the field and what is wrong: a missing file, not a regular
        file, above :data:`MAX_BYTES`, not UTF-8, not JSON, nested deeper than
        :data:`MAX_DEPTH`, or a document this version does not write.
    """
    return parse_result(_read_bytes(path), str(path))


def _read_bytes(path: Path) -> bytes:
    try:
        with open(path, "rb", opener=_no_block) as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise SpecReplayError(f"{path}: not a regular file (expected a results.json)")
            if st.st_size > MAX_BYTES:
                raise SpecReplayError(_too_big(path, st.st_size))
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise SpecReplayError(f"{path}: no such file (expected a results.json)") from None
    except IsADirectoryError:
        raise SpecReplayError(f"{path}: not a regular file (expected a results.json)") from None
    except OSError as exc:
        raise SpecReplayError(f"{path}: cannot be read: {exc.strerror}") from None
    if len(data) > MAX_BYTES:  # grew while read
        raise SpecReplayError(_too_big(path, len(data)))
    return data


def _no_block(path: str, flags: int) -> int:
    """Open without blocking on a FIFO (it is then refused as not a regular file)."""
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def _too_big(path: Path, size: int) -> str:
    return (
        f"{path}: {size:,} bytes, above the {MAX_BYTES // 2**20} MiB a results.json may have "
        "(report reads no larger file)"
    )


def parse_result(data: bytes, name: str = "results.json") -> Result:
    """Return the :class:`Result` of the results.json bytes ``data`` (module docstring).

    ``name`` names the file in the messages.

    Raises
    ------
    SpecReplayError
        ``NAME: $.PATH: what is wrong`` (or ``NAME: not UTF-8 …``, ``NAME: not JSON: …``).
    """
    from pydantic import ValidationError

    from specreplay.results.schema import adapter, options_adapter

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecReplayError(f"{name}: not UTF-8 (byte {exc.start:,})") from None
    try:
        doc = adapter().validate_json(text)
        read = {k: v for k, v in doc["options"].items() if k in OptionsRead.__annotations__}
        options_adapter().validate_python({"options": read})
    except ValidationError as exc:
        raise SpecReplayError(f"{name}: {_describe(exc, text)}") from None
    order = _keys_once(text, name)
    fields = {f.name for f in dataclasses.fields(Result) if written(f)}
    result = Result(
        **{k: v for k, v in doc.items() if k in fields},
        extra={k: doc[k] for k in order if k in ResultExtra.__annotations__},
    )
    problem = shape_problem(result) or reference_problem(result)
    if problem is not None:
        raise SpecReplayError(f"{name}: {problem}")
    return result


def _describe(exc: ValidationError, text: str) -> str:
    """Return pydantic's first problem with ``text`` as ``$.PATH: what is wrong (got …)``.

    The location is walked through the parsed document, so a union's member tags (``int``,
    ``list[…]``) never show as keys.
    """
    from pydantic_core import from_json

    errors = exc.errors(include_url=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        why = str(first.get("ctx", {}).get("error", first["msg"]))
        if "recursion limit" in why:
            why += f" (arrays and objects nest at most {MAX_DEPTH} deep)"
        return f"not JSON: {why}"
    doc = from_json(text, allow_inf_nan=True)
    found = [(_path(e["loc"], doc, e["type"] in _MISSING), e) for e in errors]
    # the deepest location first; there, a value's problem before a union member's type
    (where, _), err = max(found, key=lambda f: (f[0][1], not f[1]["type"].endswith("_type")))
    return f"{where}: {_what(err)}"


_MESSAGES = {
    "extra_forbidden": "unknown key (this version does not write it)",
    "unexpected_keyword_argument": "unknown key (this version does not write it)",
    "missing": "missing (a required key)",
    "missing_argument": "missing (a required key)",
    "finite_number": "not a finite number",
}
_MISSING = ("missing", "missing_argument")


def _what(err: Any) -> str:
    msg = str(_MESSAGES.get(err["type"], err["msg"]))
    if err["type"] in _MISSING:
        return msg
    value = err.get("input")
    if isinstance(value, dict | list):
        return f"{msg} (got an {'object' if isinstance(value, dict) else 'array'})"
    shown = json.dumps(value, ensure_ascii=True, allow_nan=True)
    return f"{msg} (got {shown[:60]}{'…' if len(shown) > 60 else ''})"


def _path(loc: tuple[Any, ...], doc: Any, missing: bool) -> tuple[str, int]:
    """Return the JSON path of pydantic's ``loc`` in ``doc`` and its depth.

    A part that is not in the document is a union member's tag (skipped), except the last part
    of a ``missing`` error: the key that is missing.
    """
    out, depth, node = "$", 0, doc
    for i, part in enumerate(loc):
        if part == "[key]":
            return out + " (the key)", depth
        here = (isinstance(node, dict) and isinstance(part, str) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        )
        if not here and not (missing and i == len(loc) - 1):
            continue
        out += f"[{part}]" if isinstance(part, int) else _key(part)
        depth += 1
        if here:
            node = node[part]
    return out, depth


def _key(key: str) -> str:
    return f".{key}" if key.isidentifier() else f"[{json.dumps(key, ensure_ascii=True)}]"


def _keys_once(text: str, name: str) -> list[str]:
    """Return the top-level keys in document order; refuse an object that holds a key twice."""
    twice: list[tuple[int, str]] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for k, v in items:
            if k in seen:
                twice.append((id(seen), k))
            seen[k] = v
        return seen

    doc = json.loads(text, object_pairs_hook=pairs)  # nesting already bounded by MAX_DEPTH
    if twice:
        where = _find(doc, twice[0][0], "$") or "$"
        raise SpecReplayError(f"{name}: {where}: the key {twice[0][1]!r} appears twice")
    return list(doc)


def _find(node: Any, target: int, where: str) -> str | None:
    """Return the JSON path of the object whose ``id`` is ``target`` (None when absent)."""
    if id(node) == target:
        return where
    if isinstance(node, dict):
        items: list[tuple[str, Any]] = [(_key(k), v) for k, v in node.items()]
    elif isinstance(node, list):
        items = [(f"[{i}]", v) for i, v in enumerate(node)]
    else:
        return None
    for step, child in items:
        found = _find(child, target, where + step)
        if found is not None:
            return found
    return None


def shape_problem(result: Result) -> str | None:
    """Return what ``result`` lacks that its command always writes and renders (or None).

    Every command but ``lawtest`` has cells, the pooled one first (``screen``: a screen cell;
    none when it read scrapes alone; ``synth`` and ``convert``, whose manifests SYNTH.json and
    CONVERT.json are results, have none);
    ``interval`` has two arms and a ``b-vs-a`` delta in its pooled cell, ``validate`` and
    ``demo`` their logging arm; ``options`` holds the command's
    :data:`~specreplay.results.model.REQUIRED_OPTIONS` (``lawtest`` on an archive: ``positions``).
    """
    cmd = result.command
    scrapes_alone = cmd == "screen" and result.scrapes is not None  # vLLM's figures, no cell
    no_cells = cmd in ("lawtest", "synth", "convert") or scrapes_alone
    if not result.cells and not no_cells:
        return f"$.cells: empty (a {cmd} result has the pooled cell first)"
    if result.cells and cmd != "screen" and result.pooled.level != Level.POOLED:
        return f"$.cells[0].level: {result.pooled.level.value} (the first cell is the pooled one)"
    arms = {"interval": (2, 2), "validate": (1, None), "demo": (1, None)}.get(cmd)
    if arms is not None and not arms[0] <= len(result.arms) <= (arms[1] or len(result.arms)):
        want = "two arms" if cmd == "interval" else "its logging arm"
        return f"$.arms: {len(result.arms)} arms (a {cmd} result has {want})"
    if cmd == "interval" and result.pooled.delta(Role.B_VS_A) is None:
        return "$.cells[0].deltas: no b-vs-a delta (an interval result has one)"
    need = REQUIRED_OPTIONS.get(cmd, ())
    if cmd == "lawtest" and result.options.get("archive"):
        need = (*need, "positions")
    missing = [k for k in need if k not in result.options]
    if missing:
        return f"$.options.{missing[0]}: missing (a {cmd} result records it)"
    return None


def reference_problem(result: Result) -> str | None:
    """Return the first cross-reference of ``result`` that does not resolve (module docstring)."""
    for i, cell in enumerate(result.cells):
        problem = _cell_problem(cell, f"$.cells[{i}]", result.command)
        if problem is not None:
            return problem
    if result.path_bias is not None and result.cells:
        for side in ("a", "b"):
            arm = getattr(result.path_bias, side)
            if arm not in result.pooled.arms:
                return f"$.path_bias.{side}: {arm!r} is not an arm of the pooled cell"
    return _run_problem(result)


def _cell_problem(cell: Cell, where: str, command: str) -> str | None:
    arms = cell.arms
    for j, d in enumerate(cell.deltas):
        for side, arm in _delta_arms(d, command):
            if arm not in arms:
                return f"{where}.deltas[{j}].{side}: {getattr(d, side)!r} is not an arm of its cell"
    named = [
        *((f"depths[{j}]", x.arm) for j, x in enumerate(cell.depths)),
        *((f"policies[{j}]", x.arm) for j, x in enumerate(cell.policies)),
        *((f"survival[{j}]", x.arm) for j, x in enumerate(cell.survival)),
        *((f"offpath[{j}]", x.arm) for j, x in enumerate(cell.offpath)),
        *((f"importance[{j}]", x.arm) for j, x in enumerate(cell.importance)),
    ]
    for field, arm in named:
        if arm not in arms:
            return f"{where}.{field}.arm: {arm!r} is not an arm of its cell"
    for arm in cell.best_depth or {}:
        if arm not in arms:
            return f"{where}.best_depth: {arm!r} is not an arm of its cell"
    return None


def _delta_arms(d: Delta, command: str) -> list[tuple[str, str]]:
    """Return the (side, arm of the cell) a delta names.

    A sweep's ``depth-vs-reference`` delta compares arm ``a`` at its reference depth with the
    same arm at ``depth``: ``b`` is ``a`` spelled at that depth (``top32:t0.7@3``), or
    ``a (reference depth)`` at the reference depth itself, so ``b`` names the arm ``a``. A
    ``budget`` cell carries the reference arm only (the candidate's R is its Δ): ``a``.
    """
    if command == "budget":
        return [("a", d.a)]
    if d.role == Role.DEPTH_VS_REFERENCE:
        base = d.a.rsplit("@", 1)[0]
        at_depth = f"{base}@{d.depth}" if d.depth is not None else None
        b = d.a if d.b in (at_depth, f"{d.a} (reference depth)") else d.b
        return [("a", d.a), ("b", b)]
    return [("a", d.a), ("b", d.b)]


def _run_problem(result: Result) -> str | None:
    arms = set(result.arms)
    bits = result.extra.get("fewest_bits")
    for j, step in enumerate(bits["sequence"] if bits else ()):
        if step["arm"] not in arms:
            return f"$.fewest_bits.sequence[{j}].arm: {step['arm']!r} is not an arm of the run"
    for j, choice in enumerate(result.extra.get("policy_choice") or ()):
        if choice["arm"] not in arms:
            return f"$.policy_choice[{j}].arm: {choice['arm']!r} is not an arm of the run"
    if result.scrape_delta is not None:
        names = {s.name for s in result.scrapes or ()}
        for side in ("a", "b"):
            if getattr(result.scrape_delta, side) not in names:
                pair = getattr(result.scrape_delta, side)
                return f"$.scrape_delta.{side}: {pair!r} is not a scrape pair of the run"
    return None
