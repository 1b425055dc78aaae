"""results.json: write a :class:`~specreplay.results.model.Result` and read it back.

See docs/outputs.md#resultsjson.

Writing walks the dataclasses in field order (enums as their values, tuples as lists, ``schema``
first; a field kept in memory only, such as ``Result.replicates``, is skipped, and so is a
field marked ``OMIT_NONE`` while it is None, such as ``Result.scrapes``); NaN is never written
(a figure that cannot be computed is ``null`` with its reason).
Reading checks the document against the shipped JSON Schema (``schemas/results-v1.json``) and
rebuilds the typed objects from their type hints, so ``read_result(write_result(r)) == r``. A key
this version does not know is an error naming the file and the key's JSON path, except at the top
level, where unknown keys are kept in ``Result.extra`` (SPEC: commands may add keys).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from specreplay.errors import SpecReplayError
from specreplay.results import model
from specreplay.results.model import OMIT_NONE, Result, written

__all__ = [
    "dump",
    "load",
    "load_results_schema",
    "read_result",
    "result_json",
    "validate_json",
    "write_result",
]


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


_HINTS: dict[str, dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    if cls.__name__ not in _HINTS:
        _HINTS[cls.__name__] = typing.get_type_hints(cls, vars(model))
    return _HINTS[cls.__name__]


def load(tp: Any, data: Any, where: str = "$") -> Any:
    """Rebuild a value of type ``tp`` from JSON data (the inverse of :func:`dump`)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if data is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return load(inner[0], data, where)
    if origin is tuple:
        item = get_args(tp)[0]
        return tuple(load(item, x, f"{where}[{i}]") for i, x in enumerate(_list(data, where)))
    if origin is dict:
        val = get_args(tp)[1]
        return {k: load(val, v, f"{where}.{k}") for k, v in _dict(data, where).items()}
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(data)
        except ValueError:
            raise SpecReplayError(f"{where}: {data!r} is not a {tp.__name__}") from None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _load_dataclass(tp, _dict(data, where), where)
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data


RENAMED: dict[tuple[str, str], str] = {("LawTest", "alpha"): "acceptance_rate"}
"""Keys renamed within contract v1, (class, old key) → new key: older files still read back."""


def _load_dataclass(cls: type[Any], data: dict[str, Any], where: str) -> Any:
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if written(f)}
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for old, value in data.items():
        key = RENAMED.get((cls.__name__, old), old)
        if key in names and key != "extra":
            kwargs[key] = load(hints[key], value, f"{where}.{key}")
        elif "extra" in names:
            extra[key] = value
        else:
            raise SpecReplayError(f"{where}: unknown key {key!r} in {cls.__name__}")
    if "extra" in names:
        kwargs["extra"] = extra
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise SpecReplayError(f"{where}: {cls.__name__}: {exc}") from None


def _list(data: Any, where: str) -> list[Any]:
    if not isinstance(data, list):
        raise SpecReplayError(f"{where}: expected a list, got {type(data).__name__}")
    return data


def _dict(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise SpecReplayError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def result_json(result: Result) -> str:
    """Return the results.json text of ``result``."""
    return json.dumps(dump(result), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_result(path: Path, result: Result) -> None:
    """Write ``result`` as results.json at ``path``."""
    path.write_text(result_json(result), encoding="utf-8")


def read_result(path: Path) -> Result:
    """Read a results.json written by this version back into a :class:`Result`.

    Raises
    ------
    SpecReplayError
        When the file is missing, is not JSON, breaks the shipped schema or holds an unknown key.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecReplayError(f"{path}: no such file (expected a results.json)") from None
    except json.JSONDecodeError as exc:
        raise SpecReplayError(f"{path}:line {exc.lineno}: not JSON: {exc.msg}") from None
    problems = validate_json(doc, load_results_schema())
    if problems:
        raise SpecReplayError(f"{path}: not a specreplay results.json: {problems[0]}")
    try:
        result: Result = _load_dataclass(Result, doc, "$")
    except SpecReplayError as err:
        raise SpecReplayError(f"{path}: {err.message}") from None
    return result


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
    (schema form), ``items``, ``enum``, ``anyOf`` and local ``$ref`` into ``$defs``; returns the
    list of violations (empty when valid).
    """
    return _validate(doc, schema, schema, where)


def _validate(doc: Any, schema: dict[str, Any], root: dict[str, Any], where: str) -> list[str]:
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        schema = root["$defs"][name]
    if "anyOf" in schema:
        tries = [_validate(doc, s, root, where) for s in schema["anyOf"]]
        return [] if any(not t for t in tries) else min(tries, key=len)
    errors: list[str] = []
    types_ = schema.get("type")
    if types_ is not None:
        names = [types_] if isinstance(types_, str) else list(types_)
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
                errors.extend(_validate(v, props[k], root, f"{where}.{k}"))
            elif isinstance(schema.get("additionalProperties"), dict):
                errors.extend(_validate(v, schema["additionalProperties"], root, f"{where}.{k}"))
    if isinstance(doc, list) and "items" in schema:
        for i, v in enumerate(doc):
            errors.extend(_validate(v, schema["items"], root, f"{where}[{i}]"))
    return errors
