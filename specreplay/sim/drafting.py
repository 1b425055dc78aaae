"""Drafting policies: how far a drafter drafts in a round, as ``sweep --policy`` spells them.

See docs/commands.md#policies and docs/methods.md#policies-adaptive-drafting.

A **drafting policy** decides, round by round, how many positions L to draft (an arm's ``@DEPTH``
is the fixed policy L = DEPTH)::

    POLICY := "stop-below:" TAU "@" D
            | "stop-cum:" TAU "@" D
            | "depth-by-bucket:" RANGE "=" DEPTH ("/" RANGE "=" DEPTH)*
    RANGE  := LO "-" HI | "<" HI | ">=" LO          (the --buckets ranges, K = 1024)

``stop-below:τ@D`` drafts up to D positions and stops after the first drafted token whose
probability under the sampler's law is below τ; ``stop-cum:τ@D`` stops once the running product
of the drafted tokens' probabilities falls below τ. The token that triggers the stop is drafted
and verified; the round then gets its correction or bonus token as usual. ``depth-by-bucket``
drafts a fixed depth chosen by the round's ``context_tokens``, independently of the reporting
buckets.

Decisions
---------
- τ is a decimal in [0, 1]: τ = 0 never stops early (a probability is never below 0), τ > 1
  would always stop at once (write ``@1``). D and DEPTH are 1..127 as for arms.
- A ``depth-by-bucket`` table must cover every context length from 0 up, without gaps or
  overlaps: a round whose length no range holds would have no depth, and guessing one would be
  a figure nobody asked for. A round with no recorded context has no depth either: the replay
  leaves the policy null where such rounds are (docs/methods.md#policies-adaptive-drafting).
- Canonical forms: τ printed as Python's shortest round-trip repr minus a trailing ``.0``;
  a table's items in range order, token counts as :func:`~specreplay.sim.ranges.format_tokens`
  prints them. ``parse_policy(p.canonical) == p``.
- The table uses no braces or commas, so ``--policy`` brace expansion never splits it.

This module depends only on the standard library and :mod:`specreplay.sim.ranges`.

Examples
--------
>>> parse_policy("stop-below:0.10@5").canonical
'stop-below:0.1@5'
>>> parse_policy("depth-by-bucket:>=4K=3/<4K=5").canonical
'depth-by-bucket:<4K=5/>=4K=3'
>>> parse_policy("depth-by-bucket:<4K=5/>=4K=3").depth_at(5000)
3
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from specreplay.errors import SpecReplayError
from specreplay.sim.ranges import INF_TOKENS, RangeError, format_tokens, parse_range

__all__ = ["DepthByBucket", "DraftRule", "StopRule", "parse_policy"]

MAX_DEPTH = 127
_GRAMMAR = "stop-below:TAU@D, stop-cum:TAU@D or depth-by-bucket:RANGE=DEPTH/…"
_INT = re.compile(r"[0-9]+")
_FLOAT = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _fmt(x: float) -> str:
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


@dataclass(frozen=True)
class StopRule:
    """``stop-below:τ@D`` (``cumulative`` False) or ``stop-cum:τ@D`` (True).

    Attributes
    ----------
    tau : float
        The threshold τ in [0, 1].
    depth : int
        D, the most positions drafted in a round.
    cumulative : bool
        Whether the threshold applies to the running product of the drafted tokens'
        probabilities (``stop-cum``) rather than to each token's (``stop-below``).
    """

    tau: float
    depth: int
    cumulative: bool = False

    @property
    def name(self) -> str:
        """``stop-cum`` or ``stop-below``."""
        return "stop-cum" if self.cumulative else "stop-below"

    @property
    def canonical(self) -> str:
        """The canonical spelling (module docstring)."""
        return f"{self.name}:{_fmt(self.tau)}@{self.depth}"

    @property
    def max_depth(self) -> int:
        """The most positions a round drafts (the positions every round must record)."""
        return self.depth


@dataclass(frozen=True)
class DepthByBucket:
    """``depth-by-bucket:RANGE=DEPTH/…``: a fixed depth by the round's context length.

    Attributes
    ----------
    entries : tuple of (lo, hi, depth)
        Half-open ranges [lo, hi) in order, covering [0, int64 max) without gaps.
    """

    entries: tuple[tuple[int, int, int], ...]

    @property
    def canonical(self) -> str:
        """The canonical spelling (module docstring)."""
        items = []
        for lo, hi, d in self.entries:
            if lo == 0:
                rng = f"<{format_tokens(hi)}" if hi != INF_TOKENS else ">=0"
            elif hi == INF_TOKENS:
                rng = f">={format_tokens(lo)}"
            else:
                rng = f"{format_tokens(lo)}-{format_tokens(hi)}"
            items.append(f"{rng}={d}")
        return "depth-by-bucket:" + "/".join(items)

    @property
    def max_depth(self) -> int:
        """The deepest depth of the table."""
        return max(d for _, _, d in self.entries)

    def depth_at(self, context: int) -> int:
        """Return the depth of a round of ``context`` tokens (0 when unknown: context < 0)."""
        for lo, hi, d in self.entries:
            if lo <= context < hi:
                return d
        return 0


DraftRule = StopRule | DepthByBucket
"""A drafting policy other than a fixed depth."""


def _depth(text: str, token: str, spelled: str) -> int:
    if not _INT.fullmatch(token) or not 1 <= int(token) <= MAX_DEPTH:
        raise SpecReplayError(f"policy {spelled!r}: {text} {token!r} must be an integer 1..127")
    return int(token)


def _stop_rule(body: str, cumulative: bool, spelled: str) -> StopRule:
    tau_text, at, depth_text = body.rpartition("@")
    if not at:
        raise SpecReplayError(f"policy {spelled!r}: expected TAU@D (e.g. stop-below:0.1@5)")
    if not _FLOAT.fullmatch(tau_text):
        raise SpecReplayError(f"policy {spelled!r}: threshold {tau_text!r} is not a number")
    tau = float(tau_text)
    if not (math.isfinite(tau) and 0.0 <= tau <= 1.0):
        raise SpecReplayError(
            f"policy {spelled!r}: threshold {tau_text!r} must be in [0, 1] (a probability)"
        )
    return StopRule(tau, _depth("D", depth_text, spelled), cumulative)


def _table(body: str, spelled: str) -> DepthByBucket:
    rows: list[tuple[int, int, int]] = []
    for item in body.split("/"):
        rng, eq, d = item.rpartition("=")
        if not eq or not rng:
            raise SpecReplayError(f"policy {spelled!r}: item {item!r} should be RANGE=DEPTH")
        try:
            lo, hi = parse_range(rng, item)
        except RangeError as e:
            raise SpecReplayError(f"policy {spelled!r}: {e}") from None
        if lo >= hi:
            raise SpecReplayError(f"policy {spelled!r}: range {rng!r} is empty ({lo} >= {hi})")
        rows.append((lo, hi, _depth("DEPTH", d.strip(), spelled)))
    rows.sort()
    at = 0
    for lo, hi, _ in rows:
        if lo < at:
            raise SpecReplayError(f"policy {spelled!r}: ranges overlap at {format_tokens(lo)}")
        if lo > at:
            raise SpecReplayError(
                f"policy {spelled!r}: no range holds contexts {format_tokens(at)}-"
                f"{format_tokens(lo)} (the table must cover every length from 0 up)"
            )
        at = hi
    if at != INF_TOKENS:
        raise SpecReplayError(
            f"policy {spelled!r}: no range holds contexts >={format_tokens(at)} (the table must "
            "cover every length from 0 up)"
        )
    return DepthByBucket(tuple(rows))


def parse_policy(text: str) -> DraftRule:
    """Parse one drafting policy (module docstring); raise :class:`SpecReplayError` if bad.

    Examples
    --------
    >>> parse_policy("stop-cum:5e-2@8")
    StopRule(tau=0.05, depth=8, cumulative=True)
    >>> parse_policy("stop-below:1.5@5")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    specreplay.errors.SpecReplayError: policy 'stop-below:1.5@5': threshold '1.5' must be ...
    """
    if not isinstance(text, str):
        raise SpecReplayError(f"policy {text!r}: expected a string ({_GRAMMAR})")
    spelled = text
    text = text.strip()
    kind, colon, body = text.partition(":")
    if colon and kind in ("stop-below", "stop-cum"):
        return _stop_rule(body, kind == "stop-cum", spelled)
    if colon and kind == "depth-by-bucket":
        return _table(body, spelled)
    raise SpecReplayError(f"policy {spelled!r}: expected {_GRAMMAR}")
