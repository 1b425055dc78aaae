"""``--hash-ids``: request ids replaced by salted hashes in every output.

See docs/commands.md#privacy-and-grouping.

An :class:`IdHasher` holds a salt drawn per run (``os.urandom(16)``) and never written anywhere;
an id ``r`` becomes ``h:`` + the first 16 hex digits of keyed BLAKE2b(r, key=salt). The same id
gets the same hash within a run (so an output still links a request's entries together), a
different one in another run, and without the salt the hash cannot be inverted by hashing
candidate ids.

:func:`hash_result` is the one place where it is applied: on the typed result, just before it is
written (results.json, then TABLES.md, cells.parquet and the plots, which are functions of the
result alone, and the text a command prints). It rewrites

- every string field named ``request``, ``request_id`` or ``request_ids`` (and the items of a
  tuple field of that name), in every dataclass of the result, whatever the nesting, so a field
  added later (a law-test row's request) is covered by its name alone;
- every quoted occurrence (``'id'`` or ``"id"``, the way messages quote ids) of an id of the run
  in every other string (reasons, warnings, assumptions, options, extra), which covers messages
  written into an output.

Design decisions
----------------
- Hashing ids for output changes no number: request keys (Monte Carlo uniforms, bootstrap
  resamples, the seeded request sample) are computed from the ids as read, before any output.
- Messages on stderr (a bad-input error names the file, the row and the request, as
docs/inputs.md#position-traces-schema-v1
  asks) are not outputs: they go to the person running the command and are not hashed; an
  error writes no output folder at all.
- Unquoted ids inside free text are not searched for: a short id such as a Spec-Bench question
  number (``81``) would match digits of unrelated figures.
- ``options.hash_ids`` records that hashing was on; the salt is in no output.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Iterable
from enum import Enum
from typing import Any

from specreplay.results.model import Result, written

__all__ = ["ID_FIELDS", "IdHasher", "hash_result"]

ID_FIELDS = frozenset({"request", "request_id", "request_ids"})
"""Dataclass fields whose strings are request ids, wherever they appear in a result."""

_QUOTED = re.compile(r"""'([^'\n]*)'|"([^"\n]*)\"""")


class IdHasher:
    """Salted hashes of request ids (see the module docstring).

    Parameters
    ----------
    ids : iterable of str
        The request ids of the run's inputs (quoted occurrences in free text are replaced).
    salt : bytes, optional
        16 bytes; drawn with ``os.urandom`` when not given (tests pass one to check it is not
        written).
    """

    def __init__(self, ids: Iterable[str] = (), salt: bytes | None = None) -> None:
        self._salt = os.urandom(16) if salt is None else salt
        self._ids = frozenset(str(i) for i in ids)

    def __call__(self, request_id: str) -> str:
        """Return ``h:`` and 16 hex digits of the keyed BLAKE2b hash of ``request_id``."""
        digest = hashlib.blake2b(str(request_id).encode(), key=self._salt, digest_size=8)
        return "h:" + digest.hexdigest()

    def text(self, s: str) -> str:
        """Replace every quoted id of the run inside a free-text string."""
        if not self._ids or ("'" not in s and '"' not in s):
            return s

        def swap(m: re.Match[str]) -> str:
            inner = m.group(1) if m.group(1) is not None else m.group(2)
            if inner not in self._ids:
                return m.group(0)
            q = m.group(0)[0]
            return f"{q}{self(inner)}{q}"

        return _QUOTED.sub(swap, s)


def hash_result(result: Result, hasher: IdHasher | None) -> Result:
    """Return ``result`` with its request ids hashed (or as it is when ``hasher`` is None).

    Records ``options.hash_ids`` either way.
    """
    options = {**result.options, "hash_ids": hasher is not None}
    result = dataclasses.replace(result, options=options)
    if hasher is None:
        return result
    out: Result = _walk(result, hasher, False)
    return out


def _walk(obj: Any, h: IdHasher, is_id: bool) -> Any:
    """Rebuild ``obj`` with ids hashed; ``is_id`` when it sits in a field of :data:`ID_FIELDS`."""
    if isinstance(obj, Enum):  # labels, levels, roles: a StrEnum is a str, never an id
        return obj
    if isinstance(obj, str):
        return h(obj) if is_id else h.text(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {
            f.name: _walk(getattr(obj, f.name), h, f.name in ID_FIELDS)
            for f in dataclasses.fields(obj)
            if written(f)  # in-memory replicates name cells, never requests
        }
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, dict):
        return {_walk(k, h, False): _walk(v, h, k in ID_FIELDS) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(_walk(v, h, is_id) for v in obj)
    if isinstance(obj, list):
        return [_walk(v, h, is_id) for v in obj]
    return obj
