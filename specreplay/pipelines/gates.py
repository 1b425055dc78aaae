"""``--fail-on`` gates: the exit status of a run from its pooled verdict.

See docs/methods.md#the-verdict-rule.

A gate fails closed: when INCONCLUSIVE is listed, a null pooled verdict (too few requests for
``--min-requests``, an unsupported cell) fails too, since nothing was shown to hold.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["INCONCLUSIVE", "fail_on_code"]

INCONCLUSIVE = "INCONCLUSIVE"


def fail_on_code(verdict: str | None, fail_on: Collection[str]) -> int:
    """Return 1 when the pooled ``verdict`` is listed in ``fail_on``, else 0.

    A null verdict (``None``) counts as INCONCLUSIVE.

    Examples
    --------
    >>> fail_on_code("DIFFERENT", {"DIFFERENT"}), fail_on_code("EQUIVALENT", {"DIFFERENT"})
    (1, 0)
    >>> fail_on_code(None, {"DIFFERENT", "INCONCLUSIVE"}), fail_on_code(None, {"DIFFERENT"})
    (1, 0)
    """
    return int((INCONCLUSIVE if verdict is None else verdict) in fail_on)
