"""What a results.json value may be beyond its type: counts, integer ranges, names, JSON values.

See docs/outputs.md#what-report-checks.

The typed model (:mod:`specreplay.results.model`) annotates its fields with these, and
:mod:`specreplay.results.schema` hands the model to pydantic, which reads them while it validates
a results.json and writes them into the shipped JSON Schema (``minimum``/``maximum``,
``pattern``). This module imports only the standard library: pydantic is imported when a
document is validated, never when a command merely builds a result.

Terms
-----
count
    A number of things (requests, rounds, rows, replicates, bytes…) or a position, depth or
    index: an integer from 0 to 2^63 − 1 (:data:`Count`), what cells.parquet's Int64 columns
    hold. The seed, which the kernels take as a uint64, is from 0 to 2^64 − 1 (:data:`Seed`); an
    integer within ``options`` from −2^63 to 2^64 − 1 (:data:`JsonValue`).
name
    An arm key, an arm, a cell's family, bucket, worker or group, a scrape pair's letter
    (:data:`Name`): text a table, a figure label or a console line shows, never a path; its
    rule is :func:`specreplay.names.name_problem` (the archive reader and the label options apply
    it too, so a command never writes a name ``report`` refuses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from specreplay.names import NAME_MAX, NAME_PATTERN, name_problem

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic_core import CoreSchema

__all__ = [
    "INT64_MAX",
    "NAME_MAX",
    "NAME_PATTERN",
    "Count",
    "IntRange",
    "JsonValue",
    "Name",
    "NameRule",
    "NoInteger",
    "Seed",
    "name_problem",
]

INT64_MAX = 2**63 - 1


class NameRule:
    """Annotation metadata: the string is a name (module docstring); pydantic checks it."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """Return the string schema followed by :func:`name_problem`."""
        from pydantic_core import PydanticCustomError, core_schema

        def check(text: str) -> str:
            problem = name_problem(text)
            if problem is not None:
                raise PydanticCustomError("name", "not a name: {problem}", {"problem": problem})
            return text

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        """Return the string's JSON Schema with the names' ``pattern``."""
        out: dict[str, Any] = handler(schema)
        out["pattern"] = NAME_PATTERN
        return out


class IntRange:
    """Annotation metadata: an integer from ``lo`` to ``hi`` (both included)."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """Return the integer schema bounded to [lo, hi] (JSON Schema minimum, maximum)."""
        from pydantic_core import core_schema

        return core_schema.int_schema(ge=self.lo, le=self.hi)


Count = Annotated[int, IntRange(0, INT64_MAX)]
"""A count: 0 … 2^63 − 1."""

Seed = Annotated[int, IntRange(0, 2**64 - 1)]
"""The seed, a uint64."""

Name = Annotated[str, NameRule()]
"""A name (module docstring)."""


class NoInteger:
    """Annotation metadata: a float read from a JSON number that is not an integer.

    In a JSON value an integer is read as an integer (:data:`JsonValue`), so one beyond its range
    is refused rather than read as a float that is no longer the number written.
    """

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """Return the float schema preceded by a check that the number is no integer."""
        from pydantic_core import PydanticCustomError, core_schema

        def check(value: Any) -> Any:
            if isinstance(value, int) and not isinstance(value, bool):
                raise PydanticCustomError("int_range", "an integer beyond 64 bits")
            return value

        return core_schema.no_info_before_validator_function(check, handler(source))


_JsonInt = Annotated[int, IntRange(-INT64_MAX - 1, 2**64 - 1)]
_JsonFloat = Annotated[float, NoInteger()]

type JsonValue = bool | _JsonInt | _JsonFloat | str | list[JsonValue] | dict[str, JsonValue] | None
"""A JSON value whose numbers are finite and whose integers fit in 64 bits (signed, or a seed)."""
