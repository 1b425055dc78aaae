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
  and the range: ``error: --seed 18446744073709551616: out of range (0 to 2^64-1)``.
- **Usage errors** (an unknown option, a missing argument, a bad choice, the refusals above) are
  ONE line ``error: …`` on stderr with exit code 2, like the project's own errors, instead of
  click's usage block (Usage line, "Try --help", "Error: …"): one rule for every error a user
  sees. ``specreplay`` alone still prints the help.

Typer 0.29 coerces values through pydantic (``_TyperParameter.get_runtime_param``), not click
``ParamType`` objects; the check takes that runtime parameter's place and runs typer's after it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, get_args, get_origin

from typer import _click as click
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

__all__ = ["FLOAT_BOUNDS", "INT_BOUNDS", "BoundedNumber", "CheckedGroup", "OneLineUsageError"]

INT_BOUNDS = (-(2**63), 2**63 - 1)
"""The range of an integer option that declares no ``min=``/``max=`` (int64)."""
FLOAT_BOUNDS = (-(2.0**53), 2.0**53)
"""The range of a float option that declares no ``min=``/``max=``."""


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


def _show(v: float) -> str:
    """Return a bound as people read it: 2^64-1 rather than 18446744073709551615."""
    for k in (53, 63, 64):
        if v == 2**k - 1:
            return f"2^{k}-1"
        if abs(v) == 2**k:
            return f"{'-' if v < 0 else ''}2^{k}"
    return str(v) if isinstance(v, int) else f"{v:g}"


def _exact(value: Any, number: float) -> Fraction:
    """Return the number a text means, exactly (as a float, -(2^53 + 1) rounds onto -2^53)."""
    try:
        return Fraction(str(value).strip()) if isinstance(value, str) else Fraction(number)
    except ValueError:
        return Fraction(number)


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

    @property
    def range_text(self) -> str:
        """``LO to HI`` as the messages print it."""
        return f"{_show(self.lo)} to {_show(self.hi)}"

    def check(self, value: Any, param: click.Parameter) -> None:
        """Raise :class:`OneLineUsageError` unless ``value`` is a number within the range."""
        name = f"{option_name(param)} {value}"
        kind = "an integer" if self.integer else "a number"
        if isinstance(value, bool):
            raise OneLineUsageError(f"{name}: not {kind} (range {self.range_text})")
        number: float | Fraction
        if self.integer:
            if isinstance(value, int):
                number = value
            else:
                try:
                    number = int(str(value).strip())
                except ValueError:
                    raise OneLineUsageError(
                        f"{name}: not {kind} (range {self.range_text})"
                    ) from None
        else:
            try:
                number = float(value if isinstance(value, int | float) else str(value).strip())
            except (ValueError, OverflowError):
                raise OneLineUsageError(f"{name}: not {kind} (range {self.range_text})") from None
            if not math.isfinite(number):
                raise OneLineUsageError(f"{name}: not a finite number (range {self.range_text})")
            number = _exact(value, float(number))
        if not self.lo <= number <= self.hi:
            raise OneLineUsageError(f"{name}: out of range ({self.range_text})")

    def coerce(self, value: Any, param: Any, ctx: click.Context) -> Any:
        """Check ``value`` (each item of a repeated option), then coerce it as typer does."""
        if value is not None:
            items = value if isinstance(value, list | tuple) else [value]
            for item in items:
                self.check(item, param)
        return _typer_coercion(self.descriptor).coerce(value, param=param, ctx=ctx)


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


def bound_numbers(commands: Mapping[str, click.Command]) -> None:
    """Give every numeric parameter of ``commands`` (and of their subgroups) a BoundedNumber."""
    for command in commands.values():
        sub = getattr(command, "commands", None)
        if isinstance(sub, Mapping):
            bound_numbers(sub)
        for param in command.params:
            p: Any = param  # a typer parameter: min, max, type_descriptor, its runtime param
            kind = _numeric_kind(getattr(getattr(p, "type_descriptor", None), "annotation", None))
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
