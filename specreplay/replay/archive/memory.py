"""Observed arms held in memory: per-request rounds and retained tokens as arrays or a frame.

The in-memory twin of the per-request sums format (:mod:`specreplay.replay.archive.importers`), for
the Python API's ``interval`` (as ``scipy.stats.bootstrap`` takes arrays). One arm is

- a pair ``(rounds, retained_tokens)`` of 1-D arrays, one entry per request;
- a mapping with the keys ``rounds`` and ``retained_tokens`` (``tokens`` is accepted for the
  latter) and optionally ``request_id``, ``family`` and ``bucket``, each a 1-D sequence of the
  same length; any other key is an error (a misspelt key is never silently dropped);
- a polars DataFrame with those columns (other columns are ignored, as the file reader ignores
  extra columns).

A request retains 1 + A tokens per round (docs/methods.md#rounds-retained-tokens-and-r), so
``rounds`` are whole numbers ≥ 1 and ``retained_tokens`` finite numbers ≥ ``rounds`` (fractional
sums of a replay are accepted), as in a per-request sums file. Without ``family`` every request is
in the family ``all``; without ``bucket`` every round goes to the bucket ``unknown`` (context
unknown); a ``bucket`` names one of the run's buckets, and a request with ``request_id`` may then
have one row per bucket (without ids, each row is a request). ``request_id`` (strings, or integers
written as decimal strings) pairs the two arms by id; without it, in both arms, request i of A is
paired with request i of B and named ``str(i)``, and the arms must have the same length. Every
problem raises :class:`~specreplay.errors.SpecReplayError` naming the arm (A or B), the key and the
index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import polars as pl
from numpy.typing import ArrayLike, NDArray

from specreplay.errors import SpecReplayError
from specreplay.stats.armdata import ARM_SCHEMA, ArmData
from specreplay.stats.buckets import Buckets

__all__ = ["DEFAULT_FAMILY", "MEMORY_KIND", "ArmInMemory", "memory_arms"]

ArmInMemory = tuple[ArrayLike, ArrayLike] | Mapping[str, ArrayLike] | pl.DataFrame
"""One arm in memory: a (rounds, retained_tokens) pair, a mapping of columns or a frame."""

MEMORY_KIND: Final = "in-memory"
"""``ArmData.kind`` (and results.json ``sources``) of an arm given as arrays or a frame."""
DEFAULT_FAMILY: Final = "all"
"""The family of every request of an arm given without ``family``."""
_KEYS: Final = ("request_id", "family", "bucket", "rounds", "retained_tokens")
_ALIASES: Final = {"tokens": "retained_tokens"}


def memory_arms(
    data_a: object, data_b: object, *, names: tuple[str, str], buckets: Buckets
) -> tuple[ArmData, ArmData]:
    """Read arms A and B from memory (see the module docstring); return them as ArmData.

    Parameters
    ----------
    data_a, data_b : pair of arrays, mapping or polars.DataFrame
        The two arms.
    names : (str, str)
        The arms' labels in the result.
    buckets : Buckets
        The run's context buckets (a ``bucket`` value must name one of them).

    Raises
    ------
    SpecReplayError
        On a malformed arm, when one arm has ``request_id`` and the other has not, or when arms
        paired by position differ in length (the message gives both lengths).
    """
    cols = [_columns(d, side) for d, side in ((data_a, "A"), (data_b, "B"))]
    has_ids = ["request_id" in c for c in cols]
    if has_ids[0] != has_ids[1]:
        given = "A" if has_ids[0] else "B"
        raise SpecReplayError(
            f"request_id is given for arm {given} only: give it for both arms (paired by id) "
            "or neither (paired by position)"
        )
    if not has_ids[0]:
        n_a, n_b = (len(c["rounds"]) for c in cols)
        if n_a != n_b:
            raise SpecReplayError(
                f"arm A has {n_a} requests and arm B has {n_b}: arms without request_id are "
                "paired by position and need the same length (or give request_id to pair by id)"
            )
    return _arm(cols[0], "A", names[0], buckets), _arm(cols[1], "B", names[1], buckets)


def _columns(data: object, side: str) -> dict[str, Any]:
    """Return an arm's columns by key (``tokens`` renamed), each a 1-D sequence; check the keys."""
    if isinstance(data, pl.DataFrame):
        known = [k for k in data.columns if _ALIASES.get(k, k) in _KEYS]  # the rest is ignored
        data = {k: data.get_column(k).to_list() for k in known}
    if isinstance(data, Mapping):
        cols = {}
        for key, value in data.items():
            name = _ALIASES.get(str(key), str(key))
            if name not in _KEYS:
                raise SpecReplayError(
                    f"arm {side}: unknown key {key!r}; expected rounds, retained_tokens "
                    "(or tokens) and optionally request_id, family, bucket"
                )
            if name in cols:
                raise SpecReplayError(f"arm {side}: retained_tokens given twice (and as tokens)")
            cols[name] = value
    elif isinstance(data, tuple | list) and len(data) == 2:
        cols = {"rounds": data[0], "retained_tokens": data[1]}
    else:
        raise SpecReplayError(
            f"arm {side}: expected a path, a (rounds, retained_tokens) pair of arrays, a mapping "
            f"or a polars DataFrame, got {type(data).__name__}"
        )
    for key in ("rounds", "retained_tokens"):
        if key not in cols:
            raise SpecReplayError(f"arm {side}: no {key} given")
    lengths = {}
    for key, value in cols.items():
        arr = np.asarray(value, dtype=object)
        if arr.ndim != 1:
            raise SpecReplayError(f"arm {side}: {key} should be 1-D, got shape {arr.shape}")
        lengths[key] = arr.shape[0]
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k} {n}" for k, n in lengths.items())
        raise SpecReplayError(f"arm {side}: its columns differ in length ({shown})")
    if lengths["rounds"] == 0:
        raise SpecReplayError(f"arm {side}: no requests: an arm needs at least one round")
    return cols


def _numbers(values: Any, side: str, key: str) -> NDArray[np.float64]:
    """Return ``values`` as finite float64; raise naming the first bad entry."""
    raw = np.asarray(values)
    if raw.dtype.kind in "iuf":
        out = raw.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(out))
        if bad.size:
            i = int(bad[0])
            raise SpecReplayError(f"arm {side}: {key}[{i}] = {raw[i]!r} is not a finite number")
        return out
    for i, v in enumerate(np.asarray(values, dtype=object)):
        if not isinstance(v, int | float | np.integer | np.floating) or isinstance(v, bool):
            raise SpecReplayError(f"arm {side}: {key}[{i}] = {v!r} is not a number")
    return _numbers(np.asarray(values, dtype=np.float64), side, key)


def _arm(cols: dict[str, Any], side: str, name: str, buckets: Buckets) -> ArmData:
    """Check one arm's columns (the per-request sums rules) and return its ArmData."""
    n = _numbers(cols["rounds"], side, "rounds")
    t = _numbers(cols["retained_tokens"], side, "retained_tokens")
    bad = np.flatnonzero((n != np.floor(n)) | (n < 1))
    if bad.size:
        i = int(bad[0])
        raise SpecReplayError(f"arm {side}: rounds[{i}] = {_num(n[i])}: must be a whole number ≥ 1")
    bad = np.flatnonzero(t < n)
    if bad.size:
        i = int(bad[0])
        raise SpecReplayError(
            f"arm {side}: retained_tokens[{i}] = {_num(t[i])} is less than rounds = "
            f"{_num(n[i])} (each round retains at least 1 token)"
        )
    size = n.shape[0]
    ids = _strings(cols.get("request_id"), side, "request_id", [str(i) for i in range(size)])
    families = _strings(cols.get("family"), side, "family", [DEFAULT_FAMILY] * size)
    unknown = buckets.names[buckets.unknown_code]
    names = _strings(cols.get("bucket"), side, "bucket", [unknown] * size)
    for i, b in enumerate(names):
        if b not in buckets.names:
            raise SpecReplayError(
                f"arm {side}: bucket[{i}] = {b!r} is not a bucket of the run "
                f"({', '.join(buckets.names)})"
            )
    _check_requests(ids, families, names, side)
    order = {b: i for i, b in enumerate(buckets.names)}
    sums = (
        pl.DataFrame({"request_id": ids, "family": families, "bucket": names, "n": n, "t": t})
        .with_columns(_b=pl.col("bucket").replace_strict(order, return_dtype=pl.Int32()))
        .sort("request_id", "_b")
        .select(pl.col(c).cast(dt) for c, dt in ARM_SCHEMA.items())
    )
    notes = [f"in-memory arm {name}: per-request sums"]
    if "bucket" not in cols:
        notes.append(f"in-memory arm {name}: context unknown, rounds go to bucket '{unknown}'")
    if "family" not in cols:
        notes.append(f"in-memory arm {name}: no family given, so one family '{DEFAULT_FAMILY}'")
    return ArmData(name=name, kind=MEMORY_KIND, sums=sums, label="MEASURED", notes=notes)


def _strings(values: Any, side: str, key: str, default: list[str]) -> list[str]:
    """Return ``values`` as strings (integers in decimal), or ``default`` when not given."""
    if values is None:
        return default
    out = []
    for i, v in enumerate(np.asarray(values, dtype=object)):
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_):
            out.append(str(int(v)))
        else:
            raise SpecReplayError(f"arm {side}: {key}[{i}] = {v!r} should be a string")
    return out


def _check_requests(ids: list[str], families: list[str], buckets: list[str], side: str) -> None:
    """Raise on a repeated (request_id, bucket) or a request whose family changes."""
    first: dict[tuple[str, str], int] = {}
    family: dict[str, tuple[str, int]] = {}
    for i, (r, f, b) in enumerate(zip(ids, families, buckets, strict=True)):
        if (r, b) in first:
            raise SpecReplayError(
                f"arm {side}: duplicate request_id {r!r} at index {i} "
                f"(first at index {first[(r, b)]})"
            )
        first[(r, b)] = i
        f0, i0 = family.setdefault(r, (f, i))
        if f != f0:
            raise SpecReplayError(
                f"arm {side}: request {r!r} has family {f!r} at index {i} but {f0!r} at index "
                f"{i0} (a request's family is constant)"
            )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))
