"""The estimator interface: per-round values of one arm over one batch, for any estimator.

Terms (docs/methods.md#rounds-retained-tokens-and-r,
docs/methods.md#the-importance-estimator-and-its-weight). An **estimator** turns a batch of archived
rounds and an arm into, per round and per depth d = 1..D, the retained tokens E[1 + A] the arm would
keep when drafting d positions (``t``), the variance of that per-round value (``var``: Monte Carlo
error; 0 for an exact estimator), the survival P(A ≥ k) (``surv``) and the off-path counts. Every
estimator returns the same :class:`RoundValues`, so the accumulation, the sums and everything after
them never ask which estimator ran. A new estimator is one module defining an :class:`Estimator` and
one entry in :data:`specreplay.replay.estimators.ESTIMATORS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from specreplay.replay.archive.batch import RoundBatch
from specreplay.sim.arms import Arm
from specreplay.sim.policy import LawCache

__all__ = ["Estimator", "RoundValues"]


@dataclass(frozen=True)
class RoundValues:
    """Per-round values of one arm for one batch (n rounds, n_pos position rows, depths 1..D).

    Attributes
    ----------
    depth : int32, (n,)
        Positions replayed in the round: min(recorded positions, D).
    t : float64, (n, D)
        E[1 + A] at depth d (column d − 1), the estimator's per-round value; NaN past the
        round's depth.
    var : float64, (n, D)
        Variance of that per-round value (Monte Carlo: sample variance over replicates / M);
        0 for an exact estimator.
    surv : float64, (n, D)
        P(A ≥ k) (column k − 1); NaN past the round's depth.
    offpath : float64, (n, 4)
        Per round, at its full depth: [accepted positions, accepted off the archived token,
        evaluated positions, evaluated positions reached through an off-path prefix].
    flag : int8, (n_pos,)
        Per position row, the arm's law flags (:data:`~specreplay.sim.policy.FLAG_K_EXCEEDS`,
        :data:`~specreplay.sim.policy.FLAG_NO_SUPPORT`, and for the importance estimator
        :data:`~specreplay.sim.policy.FLAG_LOGGING_SUPPORT`); zeros when not known.
    ratio : float64, (n, D), or None
        Importance estimator only: the **policy ratio** r_k = Π_{j≤k} q^s_j(x_j)/q^L_j(x_j) of the
        archived drafted tokens (column k − 1; NaN past the round's depth), the input of the tail
        diagnostics (ESS, Pareto k̂; docs/methods.md#tail-diagnostics-ess-and-pareto-k-hat). None
        for the other estimators.
    bound : float64, (n, D), or None
        Importance estimator only: the exact per-round bound of r_k, b_k = Π_{j≤k} max_x
        q^s_j(x)/q^L_j(x) over the candidates of logging probability > 0 (column k − 1; NaN
        past the round's depth). None for the other estimators.
    moment : float64, (n, D), or None
        Importance estimator only: m_k = Π_{j≤k} Σ_x q^s_j(x)²/q^L_j(x) over the same
        candidates, the product of the positions' exact second moments of the ratio factor
        (NaN past the round's depth). None for the other estimators.
    width : float64, (n, D), or None
        A figure bounded over a truncated law (schema v2; :mod:`specreplay.replay.truncation`):
        per round, the width of the range E[1 + A] can take whatever the mass outside the
        candidates does; ``t`` and ``surv`` are then the range's midpoints (NaN past the round's
        depth). None where the figure does not depend on that mass.
    limit : float64, (n, D), or None
        With ``width``: per round, Σ_{j≤d} (d − j + 1)·min(1 − Σp_j, 1 − Σq_j), the most the
        width can be (Σp_j, Σq_j the kept target and logging mass at position j).
    """

    depth: NDArray[np.int32]
    t: NDArray[np.float64]
    var: NDArray[np.float64]
    surv: NDArray[np.float64]
    offpath: NDArray[np.float64]
    flag: NDArray[np.int8]
    ratio: NDArray[np.float64] | None = None
    bound: NDArray[np.float64] | None = None
    moment: NDArray[np.float64] | None = None
    width: NDArray[np.float64] | None = None
    limit: NDArray[np.float64] | None = None


class Estimator(ABC):
    """One replay estimator: a name, a replicate rule and a per-batch call.

    See docs/methods.md#the-monte-carlo-estimator.
    """

    name: ClassVar[str]
    """Registry name, as ``--estimator`` spells it."""

    columns: ClassVar[frozenset[str] | None] = None
    """Optional archive columns its ``rounds`` reads (None: every column, the safe default for
    an estimator that does not say); the replay reads no other optional column."""

    def replicates_used(self, replicates: int) -> int:
        """Return the replicates M this estimator runs for ``replicates`` requested (0: exact).

        Raises :class:`~specreplay.errors.SpecReplayError` when ``replicates`` is unusable.
        """
        return 0

    @abstractmethod
    def rounds(
        self,
        batch: RoundBatch,
        arm: Arm,
        cache: LawCache,
        *,
        seed: int,
        replicates: int,
        max_depth: int,
        logging: Arm | None = None,
    ) -> RoundValues:
        """Return the per-round values of ``arm`` over ``batch``.

        Parameters
        ----------
        batch : RoundBatch
            Whole rounds, including ``emitted_q`` (the logging law, when archived).
        arm : Arm
        cache : LawCache
            The batch's policy and quantized laws, shared by the arms of one pass.
        seed : int
            Seed of every draw (common to all arms).
        replicates : int
            :meth:`replicates_used` of the run.
        max_depth : int
            D: depths 1..D are evaluated.
        logging : Arm, optional
            The archive's logging arm (its logging_arm column, else ``--logging-arm``), None
            when unknown; only an estimator that reweights by the logging law reads it.
        """
