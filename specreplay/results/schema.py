"""The JSON Schema of results.json, derived from the typed model (docs/outputs.md#resultsjson).

:func:`results_schema` walks :class:`~specreplay.results.model.Result` and its nested dataclasses
(one ``$defs`` entry each; ``null`` allowed where the type is optional; enums as their values), so
the schema cannot drift from the model. Every field is written, but only fields without a default
are required: a field added later with a default (``None``) leaves results.json files written
before it valid, and :func:`~specreplay.results.io.read_result` fills in the default. The
shipped ``schemas/results-v1.json`` is its output, and a test checks they are equal. After a change
to the model, regenerate it with ``python -m specreplay.results.schema``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import types
import typing
from importlib import resources
from typing import Any, Union

from specreplay.results import model
from specreplay.results.model import SCHEMA_ID, Result, written

__all__ = ["SCHEMA_PATH", "results_schema", "schema_text", "shipped_text"]

SCHEMA_PATH = "schemas/results-v1.json"

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    Any: {},
}

_ENVIRONMENT = {
    "type": "object",
    "required": ["python", "numba", "polars", "threads"],
    "properties": {
        "python": {"type": "string"},
        "numba": {"type": "string"},
        "polars": {"type": "string"},
        "threads": {"type": "integer"},
    },
}


def _type(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        inner = _type(next(a for a in typing.get_args(tp) if a is not type(None)), defs)
        if "$ref" in inner:
            return {"anyOf": [inner, {"type": "null"}]}
        kind = inner["type"]
        return {**inner, "type": [*([kind] if isinstance(kind, str) else kind), "null"]}
    if origin is tuple:
        return {"type": "array", "items": _type(typing.get_args(tp)[0], defs)}
    if origin is dict:
        value = typing.get_args(tp)[1]
        if value is Any:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": _type(value, defs)}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"type": "string", "enum": [m.value for m in tp]}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp.__name__ not in defs:
            defs[tp.__name__] = None  # placeholder against recursion
            hints = typing.get_type_hints(tp, vars(model))
            fields = [f for f in dataclasses.fields(tp) if f.name != "extra" and written(f)]
            names = [f.name for f in fields]
            defs[tp.__name__] = {
                "type": "object",
                "required": [f.name for f in fields if _required(f)],
                "properties": {n: _type(hints[n], defs) for n in names},
            }
        return {"$ref": f"#/$defs/{tp.__name__}"}
    return dict(_SCALARS[tp])


def _required(f: dataclasses.Field[Any]) -> bool:
    """Say whether a field is required: one with a default may be absent in older files."""
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def results_schema() -> dict[str, Any]:
    """Return the JSON Schema of results.json v1 built from the typed model."""
    defs: dict[str, Any] = {}
    _type(Result, defs)
    root = defs.pop("Result")
    root["properties"]["schema"] = {"type": "string", "enum": [SCHEMA_ID]}
    root["properties"]["environment"] = _ENVIRONMENT
    root["required"] = [
        "schema",
        "command",
        "version",
        "created_utc",
        "seed",
        "environment",
        "inputs",
        "options",
        "assumptions",
        "excluded",
        "arms",
        "law_tests",
        "cells",
    ]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": 'specreplay results.json, contract v1 (docs/outputs.md, "results.json")',
        **root,
        "$defs": defs,
    }


def schema_text() -> str:
    """Return the schema as the shipped file holds it."""
    return json.dumps(results_schema(), indent=1, ensure_ascii=False) + "\n"


def shipped_text() -> str:
    """Return the shipped schema file's text."""
    return resources.files("specreplay").joinpath(SCHEMA_PATH).read_text(encoding="utf-8")


if __name__ == "__main__":  # python -m specreplay.results.schema > specreplay/schemas/...
    sys.stdout.write(schema_text())
