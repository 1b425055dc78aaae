"""``--short-rounds capped|null|exclude``: what a round shorter than the arm's depth does.

See docs/inputs.md#position-traces-schema-v1.

A **short round** records fewer positions than the depth an arm drafts (e.g. 3 positions for an
arm ``@5``): the archive cannot say what positions 4 and 5 would have done, so that depth is
never extrapolated for it. Real engines cut the last round of nearly every request short (max
new tokens, end of text), so the choice matters.

``capped`` (the default, issue 16)
    The rounds the request's end or token limit cut short are left out as under ``exclude``
    (below the run's deepest arm, every arm and MEASURED, counted per cell): the rounds a
    recorder marked ``capped`` (schema v2), and where the archive has no mark (or a null) a
    request's last round (each file's requests' largest round number, scanned once). Every
    capture has them (a request's last round; a round whose draft the token budget capped); a
    drafter's own short proposals (vLLM's n-gram drafter proposes 2–4 tokens mid-request) are not
    capped and act as under ``null``. An archive whose rounds all reach the asked depth (synth's,
    the demo's) gives the same figures under every choice.
``null`` (docs/inputs.md#position-traces-schema-v1)
    Depth d is supported in a cell only when every round in it records ≥ d positions. A cell
    holding a short round has that arm's R, and every delta the arm enters, null, with the
    count and the first short round (file and row or line) as the reason; the other cells are
    computed as usual. The pooled cell holds every round, so it is null as soon as one round is
    short, and a ``--fail-on`` gate on the pooled verdict fails closed. Only when **every** round
    is short for an arm is the run refused (exit 2): no cell could be computed.
``exclude``
    Rounds recording fewer positions than the run's **deepest arm** are left out of every sum
    of the run, for every arm and for the archive's MEASURED figures, and counted per cell
    (``excluded``) and in results.json ``excluded``. One threshold for the whole run, not one
    per arm, so that every paired delta compares the same requests and the same rounds in both
    arms: an arm ``@3`` compared with an arm ``@5`` loses its rounds of 3 or 4 positions too.
    Computing each arm on its own kept rounds would pair, within a request, rounds of one arm
    with a superset of rounds of the other: the bootstrap would then resample requests whose
    two sides are not the same rounds, and Δ would mix the arms' difference with the dropped
    rounds' difference. A sweep's depths past the threshold keep the ``null`` rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from specreplay.replay.engine import ReplayResult
from specreplay.results.model import Cell
from specreplay.sim.arms import Arm
from specreplay.stats.support import ShortRounds, parse_short_rounds

__all__ = [
    "ShortRounds",
    "exclude_below",
    "parse_short_rounds",
    "short_rounds_assumptions",
    "short_rounds_excluded",
    "with_excluded_rounds",
]


def exclude_below(mode: ShortRounds, arms: Iterable[Arm]) -> int:
    """Return the replay's ``exclude_below``: the deepest arm's depth (``exclude``, ``capped``)."""
    if mode is ShortRounds.NULL:
        return 0
    return max((a.depth for a in arms), default=0)


_NULL = (
    'Short rounds (--short-rounds null, docs/inputs.md, "Position traces (schema v1)"): depth d '
    "is supported in a cell only when every round in it records at least d positions; a cell "
    "holding a shorter round has that "
    "arm's figures and deltas null, with the count and the first such round, so the pooled "
    "cell is null as soon as one round is short (a --fail-on gate on it fails closed)."
)


def short_rounds_assumptions(mode: ShortRounds, below: int) -> list[str]:
    """Return the assumption lines of the ``--short-rounds`` choice."""
    if mode is ShortRounds.NULL:
        return [_NULL]
    if mode is ShortRounds.CAPPED:
        return [
            "Capped rounds excluded (--short-rounds capped, the default): rounds recording "
            f"fewer than {below} positions (the run's deepest arm) because the request's end or "
            "token limit cut their draft short (marked capped by the recorder; where unmarked, "
            "a request's last round) are left out of every arm's and the MEASURED sums, and "
            "counted per cell under excluded; R describes rounds the drafter drafted in full. "
            "Other short rounds keep the null rule (--short-rounds exclude leaves them out too)."
        ]
    return [
        f"Short rounds excluded (--short-rounds exclude, a choice): rounds recording fewer than "
        f"{below} positions (the run's deepest arm) are left out of every arm's and the "
        "MEASURED sums, and counted per cell under excluded. Such rounds are mostly "
        "end-of-generation rounds (max new tokens, end of text), cut short by the engine rather "
        "than by the drafter; excluding them leaves out how requests end, so R describes full "
        "rounds only. One threshold for the whole run keeps every paired delta on the same "
        "requests and rounds in both arms."
    ]


def short_rounds_excluded(res: ReplayResult) -> list[dict[str, Any]]:
    """Return results.json ``excluded`` entries for the rounds ``exclude``/``capped`` left out."""
    if res.exclude_below <= 0 or not res.sums:
        return []
    s = next(iter(res.sums.values()))
    rounds = int(s.excluded.sum())
    if rounds == 0:
        return []
    requests = int(np.unique(s.request[s.excluded > 0]).shape[0])
    figures = {}
    m = res.measured.sums
    if "accepted" in res.columns and float(m.n.sum()) > 0:
        n, t = float(m.n.sum()), float(m.t.sum())
        figures = {
            "measured_R_kept": t / n,
            "measured_R_all": (t + float(s.excluded_t.sum())) / (n + float(rounds)),
        }
    return [
        {
            **figures,
            "reason": (
                f"--short-rounds capped: the request's end or token limit cut the round short "
                f"of {res.exclude_below} positions (the run's deepest arm)"
                if res.capped_only
                else f"--short-rounds exclude: round records fewer than {res.exclude_below} "
                "positions (the run's deepest arm)"
            ),
            "rounds": rounds,
            "requests": requests,
        }
    ]


def with_excluded_rounds(cells: Sequence[Cell], res: ReplayResult) -> tuple[Cell, ...]:
    """Set each cell's ``excluded`` (rounds ``exclude`` left out); unchanged under ``null``."""
    if res.exclude_below <= 0 or not res.sums:
        return tuple(cells)
    arm = res.arms[0]
    s = res.sums[arm.canonical]
    out = []
    for c in cells:
        family = c.family if c.family in res.families else None
        bucket = c.bucket if c.bucket in res.buckets.names else None
        m = res.cell_mask(arm, family, bucket)
        out.append(dataclasses.replace(c, excluded=int(s.excluded[m].sum())))
    return tuple(out)
