"""Token counts and context ranges, as ``--buckets`` and ``depth-by-bucket`` spell them.

See docs/commands.md#common-options.

A token count is a whole number, optionally with ``K`` = 1024 (``4K`` = 4096, ``1.5K`` = 1536);
a range is ``LO-HI`` (half-open [LO, HI)), ``<HI`` or ``>=LO``. The one reader of both, shared by
:mod:`specreplay.stats.buckets` (reporting buckets) and :mod:`specreplay.sim.drafting` (a depth
per context length), so the two options can never read the same text differently. ``what`` names
the option and item in every message. This module depends only on the standard library.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["INF_TOKENS", "RangeError", "format_tokens", "parse_range", "token_count"]

INF_TOKENS: Final[int] = 2**63 - 1
"""The open upper end of ``>=LO`` (int64's largest value)."""

_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kK]?)\s*$")


class RangeError(ValueError):
    """A token count or range that cannot be read; the message says why (caller adds the option)."""


def token_count(text: str, item: str) -> int:
    """Return the token count ``text`` (``4096``, ``4K``); ``item`` is quoted in errors."""
    m = _NUMBER.match(text)
    if m is None:
        raise RangeError(f"cannot read {text!r} in {item!r} as a token count (e.g. 4096 or 4K)")
    value = float(m.group(1)) * (1024 if m.group(2) else 1)
    if not value <= INF_TOKENS:  # also inf, from a number of more than 308 digits
        raise RangeError(f"{text!r} in {item!r} is more tokens than an int64 holds")
    if value != int(value):
        raise RangeError(f"{text!r} in {item!r} is not a whole number of tokens")
    return int(value)


def parse_range(rng: str, item: str) -> tuple[int, int]:
    """Return [lo, hi) of ``LO-HI``, ``<HI`` or ``>=LO`` (hi = :data:`INF_TOKENS` for ``>=``)."""
    rng = rng.strip()
    if rng.startswith(">="):
        return token_count(rng[2:], item), INF_TOKENS
    if rng.startswith("<"):
        return 0, token_count(rng[1:], item)
    if "-" in rng:
        a, _, b = rng.partition("-")
        return token_count(a, item), token_count(b, item)
    raise RangeError(f"range {rng!r} in {item!r} should be LO-HI, <HI or >=LO")


def format_tokens(n: int) -> str:
    """Return ``n`` as the shortest spelling :func:`token_count` reads back (``4096`` → ``4K``)."""
    return f"{n // 1024}K" if n and n % 1024 == 0 else str(n)
