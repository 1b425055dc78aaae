"""How the command line parses: every numeric option bounded, every usage error one line.

:class:`CheckedGroup` is the ``cls`` of the typer app. When typer builds the click group it walks
every command's parameters, so a new option is covered without being listed anywhere:

- **Numeric options** (annotation ``int`` or ``float``, alone or in a list) get
  :class:`BoundedNumber`, checked before typer's own coercion: the text must be an integer
  (``int``) or a finite number (``float``: ``nan``, ``inf`` and ``1e309``, which overflows to
  inf, are refused), within the declared ``min=``/``max=``; a missing bound is
  :data:`INT_BOUNDS` (the int64 the kernels and numpy hold) or :data:`FLOAT_BOUNDS` (±2^53: no
  quantity of this tool comes near, and past it a double no longer holds every integer). The
  seed declares its own ``max=2**64 - 1`` (a uint64). The refusal names the option, the value
  and the range: ``error: --seed 18446744073709551616: out of range (0 to 2^64-1)``. Every
  bound is a constant of :mod:`specreplay.pipelines.options`, and the check is its
  :func:`~specreplay.pipelines.options.check_number`, which the Python API's constructors call.
- **Enumerations** (an annotation among
  :data:`~specreplay.pipelines.options.CHOICE_FLAGS`: ``--estimator``, ``--stratify``,
  ``--format``, ``--compression``, ``--short-rounds``) are offered as choices in the help and
  parsed by :func:`~specreplay.pipelines.options.parse_choice`, with the API's message.
- **Usage errors** (an unknown option, a missing argument, a bad choice, the refusals above) are
  ONE line ``error: …`` on stderr with exit code 2, like the project's own errors, instead of
  click's usage block (Usage line, "Try --help", "Error: …"): one rule for every error a user
  sees. ``specreplay`` alone still prints the help.

Typer 0.29 coerces values through pydantic (``_TyperParameter.get_runtime_param``), not click
``ParamType`` objects; the check takes that runtime parameter's place and runs typer's after it.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

from typer import _click as click
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from specreplay.errors import SpecReplayError
from specreplay.pipelines.options import (
    CHOICE_FLAGS,
    FLOAT_BOUNDS,
    INT_BOUNDS,
    check_number,
    parse_choice,
)

__all__ = [
    "FLOAT_BOUNDS",
    "INT_BOUNDS",
    "BoundedNumber",
    "CheckedChoice",
    "CheckedGroup",
    "OneLineUsageError",
]


class OneLineUsageError(UsageError):
    """A usage error shown as one ``error: …`` line (exit code 2), without click's usage block."""

    def show(self, file: Any = None) -> None:
        """Print ``error: MESSAGE`` on stderr."""
        click.echo(f"error: {self.format_message()}", err=True)


def _one_line(err: UsageError) -> UsageError:
    if isinstance(err, OneLineUsageError | NoArgsIsHelpError):
        return err
    text = " ".join(err.format_message().split())
    return OneLineUsageError(text, ctx=err.ctx)


def option_name(param: click.Parameter) -> str:
    """Return the name a message gives a parameter: its long option, else its metavar or name."""
    opts: list[str] = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    if opts:
        return max(opts, key=len)
    return str(getattr(param, "human_readable_name", param.name))


@dataclass(frozen=True)
class BoundedNumber:
    """The runtime parameter of a numeric option: range check, then typer's coercion.

    Parameters
    ----------
    descriptor : typer._coercion.TypeDescriptor
        The parameter's type; typer's own coercion is built from it when first needed (as typer
        builds it lazily: a pydantic adapter per parameter would slow every start-up).
    integer : bool
        ``int`` (True) or ``float`` (False).
    lo, hi : int or float
        The closed range.
    """

    descriptor: Any
    integer: bool
    lo: float
    hi: float

    def check(self, value: Any, param: click.Parameter) -> None:
        """Raise :class:`OneLineUsageError` unless ``value`` is a number within the range."""
        try:
            check_number(option_name(param), value, self.lo, self.hi, self.integer)
        except SpecReplayError as err:
            raise OneLineUsageError(err.message) from None

    def coerce(self, value: Any, param: Any, ctx: click.Context) -> Any:
        """Check ``value`` (each item of a repeated option), then coerce it as typer does."""
        if value is not None:
            items = value if isinstance(value, list | tuple) else [value]
            for item in items:
                self.check(item, param)
        return _typer_coercion(self.descriptor).coerce(value, param=param, ctx=ctx)


@dataclass(frozen=True)
class CheckedChoice:
    """The runtime parameter of an enumeration: the options module's parser and message.

    typer would offer the members as choices with click's message; this keeps the one message
    the Python API gives too (``--stratify: 'bucket' should be family or none``).
    """

    enum_type: type[enum.StrEnum]

    def coerce(self, value: Any, param: Any, ctx: click.Context) -> Any:
        """Return the member ``value`` names (None stays None); one usage line otherwise."""
        if value is None:
            return None
        try:
            return parse_choice(self.enum_type, value)
        except SpecReplayError as err:
            raise OneLineUsageError(err.message) from None


@functools.cache
def _typer_coercion(descriptor: Any) -> Any:
    """Typer's runtime parameter for ``descriptor``, built once."""
    from typer._coercion import build_runtime_param

    return build_runtime_param(descriptor)


def _numeric_kind(annotation: Any) -> type | None:
    """``int`` or ``float`` for a numeric annotation (alone or in a list), else None."""
    if get_origin(annotation) in (list, tuple):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        return _numeric_kind(args[0]) if len(set(args)) == 1 else None
    if annotation is bool:
        return None
    if isinstance(annotation, type) and issubclass(annotation, int):
        return int
    if isinstance(annotation, type) and issubclass(annotation, float):
        return float
    return None


_METAVARS: dict[Any, str] = {int: "INTEGER", float: "FLOAT", str: "TEXT", Path: "PATH"}


def _metavar(annotation: Any) -> str | None:
    """Return click's standard metavar of an option: TEXT, INTEGER, FLOAT, PATH or [A|B|…]."""
    if get_origin(annotation) in (list, tuple):
        inner = _metavar(get_args(annotation)[0])
        return f"{inner}..." if inner else None
    if annotation in CHOICE_FLAGS:
        return "[" + "|".join(m.value for m in annotation) + "]"
    return _METAVARS.get(annotation)


def bound_numbers(commands: Mapping[str, click.Command]) -> None:
    """Give every numeric parameter of ``commands`` (and of their subgroups) a BoundedNumber.

    And every enumeration the options module knows (:data:`CHOICE_FLAGS`) a CheckedChoice.
    """
    for command in commands.values():
        sub = getattr(command, "commands", None)
        if isinstance(sub, Mapping):
            bound_numbers(sub)
        for param in command.params:
            p: Any = param  # a typer parameter: min, max, type_descriptor, its runtime param
            annotation = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            if p.metavar is None and getattr(p, "param_type_name", "") == "option":
                p.metavar = _metavar(annotation)
            if annotation in CHOICE_FLAGS:
                p._runtime_param = CheckedChoice(annotation)
                continue
            kind = _numeric_kind(annotation)
            if kind is None or isinstance(getattr(p, "_runtime_param", None), BoundedNumber):
                continue
            lo, hi = INT_BOUNDS if kind is int else FLOAT_BOUNDS
            lo = p.min if p.min is not None else lo
            hi = p.max if p.max is not None else hi
            p._runtime_param = BoundedNumber(p.type_descriptor, kind is int, lo, hi)


class CheckedGroup(TyperGroup):
    """The app's click group: numeric options bounded, usage errors one line (module docstring)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        bound_numbers(self.commands)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """Parse the group's own options; a usage error is one line."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except UsageError as err:
            raise _one_line(err) from None

    def invoke(self, ctx: click.Context) -> Any:
        """Parse and run a command; a usage error (its parsing too) is one line."""
        try:
            return super().invoke(ctx)
        except UsageError as err:
            raise _one_line(err) from None
