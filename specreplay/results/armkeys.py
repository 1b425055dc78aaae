"""Arm keys of results.json split into the plain arm and what their suffix says (issue 11, item 5).

results.json names a cell's companion figures by the arm and a suffix in parentheses, and keeps
those keys (they are part of contract v1):

``ARM (MEASURED)``
    The logging arm as the archive recorded it: the MEASURED side of the ``path-bias`` delta.
``ARM (analytic)``, ``ARM (importance)``, ``ARM (montecarlo)``
    The arm replayed by an estimator other than the run's own: a side of the
    ``path-bias-importance`` delta.
``ARM@D (reference depth)``
    In a sweep, the arm at its own (reference) depth compared with itself: the b side of its
    ``depth-vs-reference`` delta at that depth.

The tabular views (``Result.to_polars`` and cells.parquet, :mod:`specreplay.results.views`) show
the plain arm and put the suffix's meaning in the ``label``, ``estimator`` and ``role`` columns.
A key that is one of the run's own arms (``Result.arms``) is never split, so an arm a user named
``eagle (B)`` or ``x (MEASURED)`` stays whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from specreplay.results.model import Label, Result, Role

__all__ = ["ESTIMATOR_SUFFIXES", "ArmKey", "arm_splitter", "split_arm"]

ESTIMATOR_SUFFIXES = ("analytic", "importance", "montecarlo")
"""The replay estimators a companion arm's suffix can name."""

_TAGS = "|".join(("MEASURED", *ESTIMATOR_SUFFIXES, "reference depth"))
_SUFFIX = re.compile(rf"(.+) \(({_TAGS})\)")


@dataclass(frozen=True)
class ArmKey:
    """An arm key of results.json split: the plain ``arm`` and what its suffix says.

    ``label`` MEASURED for ``(MEASURED)``; ``estimator`` the estimator an ``(analytic)``,
    ``(importance)`` or ``(montecarlo)`` suffix names; ``role`` the delta the companion figure
    belongs to (``path-bias``, ``path-bias-importance``, ``depth-vs-reference``). All None for
    a plain key.
    """

    arm: str
    label: Label | None = None
    estimator: str | None = None
    role: Role | None = None


def split_arm(key: str, own: Collection[str] = ()) -> ArmKey:
    """Split an arm key of results.json; a key in ``own`` (the run's arms) stays whole.

    Examples
    --------
    >>> split_arm("top32:t0.7@5 (MEASURED)")
    ArmKey(arm='top32:t0.7@5', label=<Label.MEASURED: 'MEASURED'>, estimator=None, role=<Role.PATH_BIAS: 'path-bias'>)
    >>> split_arm("top32:t0.7@5 (analytic)").estimator
    'analytic'
    >>> split_arm("eagle (B)"), split_arm("x (MEASURED)", own=["x (MEASURED)"]).arm
    (ArmKey(arm='eagle (B)', label=None, estimator=None, role=None), 'x (MEASURED)')
    """  # noqa: E501
    m = _SUFFIX.fullmatch(key)
    if key in own or m is None:
        return ArmKey(key)
    arm, tag = m.group(1), m.group(2)
    if tag == "MEASURED":
        return ArmKey(arm, label=Label.MEASURED, role=Role.PATH_BIAS)
    if tag == "reference depth":
        return ArmKey(arm, role=Role.DEPTH_VS_REFERENCE)
    return ArmKey(arm, estimator=tag, role=Role.PATH_BIAS_IMPORTANCE)


def arm_splitter(result: Result) -> Callable[[str], ArmKey]:
    """Return :func:`split_arm` bound to ``result``'s own arms."""
    own = frozenset(result.arms)
    return lambda key: split_arm(key, own)
