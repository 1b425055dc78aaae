"""Replay estimators: per-round values of an arm for every depth 1..D.

See docs/methods.md#the-importance-estimator-and-its-weight.

:data:`ESTIMATORS` is the one place an estimator's name is looked up: the engine takes the
:class:`~specreplay.replay.estimators.base.Estimator` from it and never asks which one it is. A new
estimator is one module and one entry here.
"""

from __future__ import annotations

from typing import Final

from specreplay.errors import SpecReplayError
from specreplay.replay.estimators.analytic import AnalyticEstimator
from specreplay.replay.estimators.base import Estimator, RoundValues
from specreplay.replay.estimators.importance import ImportanceEstimator
from specreplay.replay.estimators.montecarlo import MonteCarloEstimator

__all__ = ["ESTIMATORS", "Estimator", "RoundValues", "get_estimator"]

ESTIMATORS: Final[dict[str, Estimator]] = {
    e.name: e for e in (AnalyticEstimator(), MonteCarloEstimator(), ImportanceEstimator())
}


def get_estimator(name: str) -> Estimator:
    """Return the registered estimator ``name``; raise SpecReplayError naming the known ones."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        known = " or ".join(ESTIMATORS)
        raise SpecReplayError(f"--estimator: {name!r} should be {known}") from None
