"""The validator and the JSON Schema of results.json, both pydantic's reading of the typed model.

See docs/outputs.md#resultsjson and docs/outputs.md#what-report-checks.

One source of truth: :func:`document_type` turns :class:`~specreplay.results.model.Result` into
the document results.json is (its written fields, ``schema`` first; ``command`` one of
:data:`~specreplay.results.model.Command`; ``environment`` an
:class:`~specreplay.results.model.Environment`; the top-level keys of
:class:`~specreplay.results.model.ResultExtra` beside them), and pydantic validates a file against
it (:func:`adapter`) and writes its JSON Schema (:func:`results_schema`). The shipped
``schemas/results-v1.json`` is that schema, and a test checks they are equal; after a change to
the model, regenerate it with ``python -m specreplay.results.schema``.

The rules (:data:`CONFIG`): strict types (no ``"1"`` for 1, no 1.5 nor ``true`` for an integer;
an integer is accepted where a number is), finite numbers everywhere, known keys only at every
level (a dataclass's fields, a declared object's keys), counts, integer ranges and names as
:mod:`specreplay.results.constraints` states them. Every field is written, but only fields
without a default are required: a field added later with a default (``None``) leaves results.json
files written before it valid, and reading fills in the default. ``options`` holds the command
line as given: the entries renderers read are typed (:class:`~specreplay.results.model.OptionsRead`,
checked by :func:`options_adapter`), any other is an option name with a JSON value.

pydantic is imported here, and this module only where a results.json is read or its schema
written: a command that only writes one never imports it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import typing
from importlib import resources
from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict

from pydantic import AliasChoices, AliasGenerator, ConfigDict, TypeAdapter, with_config
from pydantic import StringConstraints as _Text

from specreplay.results import model
from specreplay.results.constraints import JsonValue
from specreplay.results.model import (
    SCHEMA_ID,
    Command,
    Environment,
    OptionsRead,
    Result,
    ResultExtra,
    written,
)

__all__ = [
    "CONFIG",
    "OPTION_NAME",
    "RENAMED",
    "SCHEMA_PATH",
    "adapter",
    "document_type",
    "options_adapter",
    "read_part",
    "results_schema",
    "schema_text",
    "shipped_text",
]

SCHEMA_PATH = "schemas/results-v1.json"

RENAMED: dict[str, tuple[str, ...]] = {"acceptance_rate": ("alpha",)}
"""Keys renamed within contract v1, new key → the older keys it was written as (LawTest's
``alpha``): older files still read back. A file holding both is refused (the older is unknown)."""

OPTION_NAME = r"^[a-z][a-z0-9_]{0,63}$"
"""An entry name of ``options``: an option's name as results.json spells it."""


def _alias(name: str) -> str | AliasChoices:
    old = RENAMED.get(name)
    return AliasChoices(name, *old) if old else name


CONFIG = ConfigDict(
    strict=True,
    allow_inf_nan=False,
    extra="forbid",
    alias_generator=AliasGenerator(validation_alias=_alias),
)
"""The rules every object of the document is read with (module docstring)."""

_OptionName = Annotated[str, _Text(pattern=OPTION_NAME)]


def document_type() -> type:
    """Return the document results.json is, as a TypedDict pydantic validates (module docstring).

    Reading it gives a dict holding the typed objects; :func:`~specreplay.results.io.read_result`
    makes the :class:`Result` of it.
    """
    hints = typing.get_type_hints(Result, vars(model), include_extras=True)
    wire: dict[str, Any] = {
        "schema": Literal[SCHEMA_ID],
        "command": Command,
        "environment": Environment,
        "options": dict[_OptionName, JsonValue],
    }
    keys: dict[str, Any] = {"schema": Required[wire["schema"]]}
    for f in dataclasses.fields(Result):
        if not written(f) or f.name in ("extra", "schema"):
            continue
        tp = wire.get(f.name, hints[f.name])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        keys[f.name] = Required[tp] if required else NotRequired[tp]
    extra = typing.get_type_hints(ResultExtra, vars(model), include_extras=True)
    keys.update({k: NotRequired[tp] for k, tp in extra.items()})
    make: Any = TypedDict  # built from the model at run time (mypy reads a static TypedDict)
    doc: type = with_config(CONFIG)(make("Result", keys))
    return doc


@functools.cache
def adapter() -> TypeAdapter[Any]:
    """Return the validator of the whole document (built once)."""
    return TypeAdapter(document_type())


@with_config(CONFIG)
class _Options(TypedDict):
    options: OptionsRead


@functools.cache
def options_adapter() -> TypeAdapter[_Options]:
    """Return the validator of ``{"options": …}`` holding the entries a renderer reads.

    Those entries of a document's ``options`` (:class:`~specreplay.results.model.OptionsRead`)
    are checked again for their declared types once the document is read (the document's own
    rule reads every entry as a JSON value); an error's location starts at ``options``.
    """
    return TypeAdapter(_Options)


def read_part[T](tp: type[T], data: Any) -> T:
    """Return the ``tp`` (a dataclass of the model: a Cell, a LawTest) that JSON data describes.

    By the document's rules (:data:`CONFIG`), so ``read_part(Cell, json of dump(cell)) == cell``.
    """
    adapter: TypeAdapter[list[T]] = TypeAdapter(list[tp], config=CONFIG)  # type: ignore[valid-type]
    parts = adapter.validate_json(json.dumps([data], allow_nan=False))
    return parts[0]


def results_schema() -> dict[str, Any]:
    """Return the JSON Schema of results.json v1, pydantic's reading of the typed model."""
    schema = adapter().json_schema()
    schema.pop("title", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": 'specreplay results.json, contract v1 (docs/outputs.md, "results.json")',
        **schema,
    }


def schema_text() -> str:
    """Return the schema as the shipped file holds it."""
    return json.dumps(results_schema(), indent=1, ensure_ascii=False) + "\n"


def shipped_text() -> str:
    """Return the shipped schema file's text."""
    return resources.files("specreplay").joinpath(SCHEMA_PATH).read_text(encoding="utf-8")


if __name__ == "__main__":  # python -m specreplay.results.schema > specreplay/schemas/...
    sys.stdout.write(schema_text())
