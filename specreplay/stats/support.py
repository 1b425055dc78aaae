"""The ``--short-rounds`` choice: what a round shorter than an arm's depth does.

See docs/inputs.md#position-traces-schema-v1.

A light module (no numpy, no polars) so that the command line can parse the option at its edge
without importing the replay; what each choice does is in :mod:`specreplay.pipelines.shortrounds`.
"""

from __future__ import annotations

import enum

from specreplay.errors import SpecReplayError

__all__ = ["ShortRounds", "parse_short_rounds"]


class ShortRounds(enum.StrEnum):
    """What a round recording fewer positions than an arm's depth does.

    ``CAPPED`` (the default, issue 16): a round the request's end or token limit cut short
    (marked ``capped``, or a request's last round where the archive has no mark) is left out of
    every sum of the run, counted per cell; any other short round acts as under ``NULL``.
    ``NULL`` (docs/inputs.md#position-traces-schema-v1): the cells holding it are null, with the
    count and the first such round. ``EXCLUDE``: it is left out of every sum of the run, counted per
    cell.
    """

    CAPPED = "capped"
    NULL = "null"
    EXCLUDE = "exclude"


def parse_short_rounds(text: str | ShortRounds) -> ShortRounds:
    """Parse ``--short-rounds`` (``capped``, ``null`` or ``exclude``, any case).

    Examples
    --------
    >>> parse_short_rounds("Exclude")
    <ShortRounds.EXCLUDE: 'exclude'>
    """
    if isinstance(text, ShortRounds):
        return text
    try:
        return ShortRounds(str(text).strip().lower())
    except ValueError:
        raise SpecReplayError(
            f"--short-rounds: {text!r} should be capped, null or exclude"
        ) from None
