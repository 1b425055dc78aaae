"""Context buckets: which bucket a round falls in, by its target context length.

See docs/commands.md#common-options.

A bucket specification is a comma-separated list of ``NAME:RANGE`` items where RANGE is
``LO-HI`` (half-open [LO, HI)), ``<HI`` or ``>=LO``; numbers may use ``K`` = 1024 (``4K`` = 4096).
Overlapping ranges are an error. A context in no range goes to the bucket ``unbucketed`` (counted in
pooled and family cells, excluded from bucket cells); an input without a context goes to
``unknown``.

Examples
--------
>>> b = Buckets.parse("short:<4K,long:>=4K")
>>> [b.names[c] for c in b.assign([100, 4096])]
['short', 'long']
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specreplay.errors import SpecReplayError
from specreplay.sim.ranges import INF_TOKENS, RangeError, parse_range

__all__ = ["DEFAULT_BUCKETS", "UNBUCKETED", "UNKNOWN", "Buckets"]

DEFAULT_BUCKETS: Final[str] = "<4K:<4K,4K-16K:4K-16K,16K-32K:16K-32K,32K-64K:32K-64K,>=64K:>=64K"
UNBUCKETED: Final[str] = "unbucketed"
UNKNOWN: Final[str] = "unknown"
_INF: Final[int] = INF_TOKENS


def _range(rng: str, item: str) -> tuple[int, int]:
    """[lo, hi) of one item's range (:func:`specreplay.sim.ranges.parse_range`, errors named)."""
    try:
        return parse_range(rng, item)
    except RangeError as e:
        raise SpecReplayError(f"--buckets: {e}") from None


@dataclass(frozen=True)
class Buckets:
    """Named half-open context ranges.

    Attributes
    ----------
    names : tuple of str
        Bucket names in specification order, then ``unbucketed`` and ``unknown``; a bucket code is
        an index into this tuple.
    lo, hi : tuple of int
        The range [lo, hi) of each user bucket (hi = int64 max for ``>=LO``).
    spec : str
        The specification as given.
    """

    names: tuple[str, ...]
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    spec: str

    @property
    def n_user(self) -> int:
        """Number of user-defined buckets (codes 0..n_user-1)."""
        return len(self.lo)

    @property
    def unbucketed_code(self) -> int:
        """Code of the ``unbucketed`` bucket."""
        return self.n_user

    @property
    def unknown_code(self) -> int:
        """Code of the ``unknown`` bucket."""
        return self.n_user + 1

    @classmethod
    def parse(cls, spec: str = DEFAULT_BUCKETS) -> Buckets:
        """Parse a bucket specification; raise :class:`SpecReplayError` on a bad one."""
        names: list[str] = []
        ranges: list[tuple[int, int]] = []
        for raw in spec.split(","):
            item = raw.strip()
            if not item:
                continue
            name, sep, rng = item.rpartition(":")
            name = name.strip()
            if not sep or not name:
                raise SpecReplayError(
                    f"--buckets: {item!r} should be NAME:LO-HI, NAME:<HI or NAME:>=LO"
                )
            if name in (UNBUCKETED, UNKNOWN) or name in names:
                raise SpecReplayError(f"--buckets: bucket name {name!r} is reserved or repeated")
            lo, hi = _range(rng, item)
            if lo >= hi:
                raise SpecReplayError(f"--buckets: range of {name!r} is empty ({lo} >= {hi})")
            names.append(name)
            ranges.append((lo, hi))
        if not names:
            raise SpecReplayError("--buckets: no bucket given")
        order = sorted(range(len(ranges)), key=lambda i: ranges[i])
        for i, j in itertools.pairwise(order):
            if ranges[j][0] < ranges[i][1]:
                raise SpecReplayError(f"--buckets: ranges of {names[i]!r} and {names[j]!r} overlap")
        return cls(
            names=(*names, UNBUCKETED, UNKNOWN),
            lo=tuple(r[0] for r in ranges),
            hi=tuple(r[1] for r in ranges),
            spec=spec,
        )

    def assign(self, context: ArrayLike) -> NDArray[np.int32]:
        """Return the bucket code of each context length (negative means unknown).

        Parameters
        ----------
        context : array_like of int, shape (n,)
            Target context lengths; a negative value stands for a missing context.
        """
        ctx = np.asarray(context, dtype=np.int64)
        codes = np.full(ctx.shape, self.unbucketed_code, dtype=np.int32)
        for code, (lo, hi) in enumerate(zip(self.lo, self.hi, strict=True)):
            codes[(ctx >= lo) & (ctx < hi)] = code
        codes[ctx < 0] = self.unknown_code
        return codes
