"""Typed tail diagnostics of an importance replay, per cell, arm and depth (SPEC §3.2).

For each arm replayed with the importance estimator and each depth k = 1..its D, a cell's
:class:`~specreplay.results.model.ImportanceDiagnostic` comes from the replay's per-(request,
bucket) sums of the policy ratio r_k (Σ r, Σ r², min, max: the ESS) and from its kept largest
ratios per finest cell (:mod:`specreplay.replay.tails`: the Pareto k̂), through
:func:`specreplay.stats.importance_diag.diagnose`. Other estimators produce none (empty tuple).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from specreplay.replay.engine import ReplayResult
from specreplay.results.model import ImportanceDiagnostic, Label
from specreplay.sim.arms import Arm
from specreplay.stats.importance_diag import diagnose

__all__ = ["importance_diagnostics"]


def importance_diagnostics(
    res: ReplayResult,
    arm: Arm,
    mask: NDArray[np.bool_],
    fam_idx: tuple[int, ...],
    bucket_idx: tuple[int, ...],
) -> tuple[ImportanceDiagnostic, ...]:
    """Return the diagnostics of ``arm`` at depths 1..D over one cell (empty unless importance).

    Parameters
    ----------
    res : ReplayResult
    arm : Arm
    mask : bool, (k,)
        The cell's rows of the arm's (request, bucket) sums.
    fam_idx, bucket_idx : tuple of int
        The finest cells the cell pools (family and bucket codes of ``res``).
    """
    if res.estimator != "importance":
        return ()
    s = res.sums[arm.canonical]
    tail = res.tails[arm.canonical]
    out = []
    for k in range(1, arm.depth + 1):
        values, dropped = tail.cell(fam_idx, bucket_idx, k)
        d = diagnose(
            n=int(s.n[mask].sum() - s.short[mask, k - 1].sum()),
            ratio_sum=float(s.ratio_sum[mask, k - 1].sum()),
            ratio_sq=float(s.ratio_sq[mask, k - 1].sum()),
            ratio_min=float(s.ratio_min[mask, k - 1].min(initial=np.inf)),
            ratio_max=float(s.ratio_max[mask, k - 1].max(initial=-np.inf)),
            tail=values,
            dropped=dropped,
        )
        out.append(
            ImportanceDiagnostic(
                arm=arm.canonical,
                depth=k,
                rounds=d.rounds,
                ess=d.ess,
                ess_share=d.ess_share,
                pareto_k=d.pareto_k,
                khat_threshold=d.khat_threshold,
                warning=d.warning,
                label=Label.SIMULATED,
                null_reason=d.null_reason,
            )
        )
    return tuple(out)
