"""Names: the text a results.json shows as an arm, a family, a value or a label (never a path).

See docs/outputs.md#what-report-checks. A name (an arm key, an arm, a cell's family, bucket,
worker or group, a carried column's value, an ``interval`` label) may not be longer than 256
characters (it may be empty: the transformers adapter's default family is ``""``), nor hold a
NUL or any other control character (C0, DEL, C1, U+2028, U+2029: a line break would also split
the one-line messages), a backslash, a ``..`` segment (``..`` alone or between ``/``), nor start
with ``/``. An inner ``/`` stays legal: the canonical form of an arm with a different verifier
is ``top32:t0.7:dyadic8/float64@5`` (docs/commands.md#arms), and a carried column's value may
be ``org/model``.

``report`` refuses a results.json holding a name that breaks the rule
(:mod:`specreplay.results.constraints`), so the rule is also applied where names enter: the
archive reader refuses a family or ``--by`` value that is no name at its row, and the label
options refuse one at once; a command never writes a results.json that ``report`` refuses.
This module imports only the standard library (the archive reader and the front ends use it).
"""

from __future__ import annotations

import re

__all__ = ["NAME_MAX", "NAME_PATTERN", "name_problem"]

NAME_MAX = 256

_CONTROL = "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029"
NAME_PATTERN = rf"^(?!/)(?!\.\.(?:/|$))(?!.*/\.\.(?:/|$))[^{_CONTROL}\\]{{0,{NAME_MAX}}}$"
"""The names' grammar (module docstring) as a regular expression, as the JSON Schema states it."""

_NAME = re.compile(NAME_PATTERN)
_BAD_CHAR = re.compile(f"[{_CONTROL}\\\\]")


def name_problem(text: str) -> str | None:
    """Return what makes ``text`` no name (module docstring), or None for a name.

    Examples
    --------
    >>> name_problem("top32:t0.7:dyadic8/float64@5") is None
    True
    >>> name_problem("../../../evil")
    "a '..' segment (a name may not be a path)"
    """
    if _NAME.match(text):
        return None
    if len(text) > NAME_MAX:
        return f"{len(text)} characters (a name has at most {NAME_MAX})"
    bad = _BAD_CHAR.search(text)
    if bad is not None:
        return f"holds {bad.group()!r} (a name holds no backslash nor control character)"
    if text.startswith("/"):
        return "starts with '/' (a name may not be a path)"
    return "a '..' segment (a name may not be a path)"
