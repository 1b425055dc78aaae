"""How the command line parses: every numeric option bounded, every usage error one line.

:class:`CheckedGroup` is the ``cls`` of the typer app. When typer builds the click group it walks
every command's parameters, so a new option is covered without being listed anywhere:

- **Numeric options** (annotation ``int`` or ``float``, alone or in a list) get
  :class:`BoundedNumber` as their parser: the text must be an integer
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

Only typer's public API is used (``typer``, ``typer.core``; never ``typer._click`` nor
``typer._coercion``: tests/test_private_imports.py fails on any private module of another
package): a checked option gets typer's own
``parser=`` hook (its ``OptionInfo.parser``, the documented way to give an option a custom type),
set on a copy of the parameter's type descriptor, and typer builds its coercion from it as it does
for any option; a usage error is recognised as what click documents it to be, a
:class:`typer.TyperException` with exit code 2, and re-raised as a :class:`typer.BadParameter`
(click's usage error that typer exports) that prints one line.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

import typer
from typer.core import TyperGroup

from specreplay.errors import SpecReplayError
from specreplay.pipelines.options import (
    CHOICE_FLAGS,
    FLOAT_BOUNDS,
    INT_BOUNDS,
    check_number,
    parse_choice,
    show_bound,
)

__all__ = [
    "FLOAT_BOUNDS",
    "INT_BOUNDS",
    "BoundedNumber",
    "CheckedChoice",
    "CheckedGroup",
    "OneLineUsageError",
]

USAGE_EXIT_CODE = 2
"""The exit code of click's usage errors (``UsageError.exit_code``), and of the project's."""


class OneLineUsageError(typer.BadParameter):
    """A usage error shown as one ``error: …`` line (exit code 2), without click's usage block."""

    def format_message(self) -> str:
        """Return the message alone (click's would prefix ``Invalid value: ``)."""
        return self.message

    def show(self, file: Any = None) -> None:
        """Print ``error: MESSAGE`` on stderr."""
        typer.echo(f"error: {self.format_message()}", err=True)


def _is_usage_error(err: typer.TyperException) -> bool:
    """Whether ``err`` is click's usage error (exit code 2), which typer does not export."""
    return getattr(err, "exit_code", None) == USAGE_EXIT_CODE


def _one_line(err: typer.TyperException) -> typer.TyperException:
    # the bare command's help is raised as a usage error too (click's NoArgsIsHelpError); it is
    # recognised by name, as typer's own rich_utils.rich_format_error does, and left to print
    if isinstance(err, OneLineUsageError) or type(err).__name__ == "NoArgsIsHelpError":
        return err
    text = " ".join(err.format_message().split())
    return OneLineUsageError(text, ctx=getattr(err, "ctx", None))


def option_name(param: Any) -> str:
    """Return the name a message gives a parameter: its long option, else its metavar or name."""
    opts: list[str] = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    if opts:
        return max(opts, key=len)
    return str(getattr(param, "human_readable_name", param.name))


@dataclass(frozen=True)
class BoundedNumber:
    """The parser of a numeric option: an int or a finite float within the range, or refused.

    Typer calls it with each value's text (each item of a repeated option) and with the default;
    it returns the number :func:`~specreplay.pipelines.options.check_number` reads, so the CLI and
    the Python API accept the same numbers with the same message.

    Parameters
    ----------
    name : str
        The option as messages name it (``--seed``).
    integer : bool
        ``int`` (True) or ``float`` (False).
    lo, hi : int or float
        The closed range.
    """

    name: str
    integer: bool
    lo: float
    hi: float

    def __call__(self, value: Any) -> Any:
        """Return ``value`` as a number in range; raise :class:`OneLineUsageError` otherwise."""
        if isinstance(value, str) and not value.isascii():
            # int() reads other scripts' digits ('٣' is 3); typer's own coercion, which ran
            # after this check before, refused them: a number on the command line is ASCII
            kind = "an integer" if self.integer else "a number"
            span = f"{show_bound(self.lo)} to {show_bound(self.hi)}"
            raise OneLineUsageError(f"{self.name} {value}: not {kind} (range {span})")
        try:
            return check_number(self.name, value, self.lo, self.hi, self.integer)
        except SpecReplayError as err:
            raise OneLineUsageError(err.message) from None


@dataclass(frozen=True)
class CheckedChoice:
    """The parser of an enumeration: the options module's parser and message.

    typer would offer the members as choices with click's message; this keeps the one message
    the Python API gives too (``--stratify: 'bucket' should be family or none``).
    """

    enum_type: type[enum.StrEnum]

    def __call__(self, value: Any) -> Any:
        """Return the member ``value`` names; one usage line otherwise."""
        try:
            return parse_choice(self.enum_type, value)
        except SpecReplayError as err:
            raise OneLineUsageError(err.message) from None


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


def _parser_of(param: Any, annotation: Any) -> BoundedNumber | CheckedChoice | None:
    """Return the parser a parameter gets (None: typer's own coercion stays)."""
    if annotation in CHOICE_FLAGS:
        return CheckedChoice(annotation)
    kind = _numeric_kind(annotation)
    if kind is None:
        return None
    lo, hi = INT_BOUNDS if kind is int else FLOAT_BOUNDS
    lo = param.min if param.min is not None else lo
    hi = param.max if param.max is not None else hi
    return BoundedNumber(option_name(param), kind is int, lo, hi)


def _give_parser(param: Any, parser: BoundedNumber | CheckedChoice) -> None:
    """Make ``parser`` the parameter's ``parser=``, on copies (the declaration is shared).

    The descriptor is typer's frozen dataclass of the parameter's annotation and its
    ``OptionInfo``/``ArgumentInfo``; typer builds the coercion from it when the value is first
    processed, so a parser set here is the one typer calls.
    """
    info = copy.copy(param.type_descriptor.parameter_info)
    info.parser = parser
    param.type_descriptor = dataclasses.replace(param.type_descriptor, parameter_info=info)


def bound_numbers(commands: Mapping[str, Any]) -> None:
    """Give every numeric parameter of ``commands`` (and of their subgroups) a BoundedNumber.

    And every enumeration the options module knows (:data:`CHOICE_FLAGS`) a CheckedChoice.
    """
    for command in commands.values():
        sub = getattr(command, "commands", None)
        if isinstance(sub, Mapping):
            bound_numbers(sub)
        for param in command.params:
            p: Any = param  # a typer parameter: min, max, metavar, type_descriptor
            annotation = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            if p.metavar is None and getattr(p, "param_type_name", "") == "option":
                p.metavar = _metavar(annotation)
            parser = _parser_of(p, annotation)
            # a parser already there is ours (typer builds a group more than once) or the
            # option's own parser=, which stays
            if parser is not None and p.type_descriptor.parameter_info.parser is None:
                _give_parser(p, parser)


class CheckedGroup(TyperGroup):
    """The app's click group: numeric options bounded, usage errors one line (module docstring)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        bound_numbers(self.commands)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: Any = None,
        **extra: Any,
    ) -> Any:
        """Parse the group's own options; a usage error is one line."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except typer.TyperException as err:
            if not _is_usage_error(err):
                raise
            raise _one_line(err) from None

    def invoke(self, ctx: Any) -> Any:
        """Parse and run a command; a usage error (its parsing too) is one line."""
        try:
            return super().invoke(ctx)
        except typer.TyperException as err:
            if not _is_usage_error(err):
                raise
            raise _one_line(err) from None
