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
import re
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specreplay.errors import SpecReplayError

__all__ = ["DEFAULT_BUCKETS", "UNBUCKETED", "UNKNOWN", "Buckets"]

DEFAULT_BUCKETS: Final[str] = "<4K:<4K,4K-16K:4K-16K,16K-32K:16K-32K,32K-64K:32K-64K,>=64K:>=64K"
UNBUCKETED: Final[str] = "unbucketed"
UNKNOWN: Final[str] = "unknown"
_INF: Final[int] = np.iinfo(np.int64).max
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kK]?)\s*$")


def _number(text: str, item: str) -> int:
    m = _NUMBER.match(text)
    if m is None:
        raise SpecReplayError(
            f"--buckets: cannot read {text!r} in {item!r} as a token count (e.g. 4096 or 4K)"
        )
    value = float(m.group(1)) * (1024 if m.group(2) else 1)
    if not value <= _INF:  # also inf, from a number of more than 308 digits
        raise SpecReplayError(f"--buckets: {text!r} in {item!r} is more tokens than an int64 holds")
    if value != int(value):
        raise SpecReplayError(f"--buckets: {text!r} in {item!r} is not a whole number of tokens")
    return int(value)


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
            rng = rng.strip()
            if rng.startswith(">="):
                lo, hi = _number(rng[2:], item), _INF
            elif rng.startswith("<"):
                lo, hi = 0, _number(rng[1:], item)
            elif "-" in rng:
                a, _, b = rng.partition("-")
                lo, hi = _number(a, item), _number(b, item)
            else:
                raise SpecReplayError(
                    f"--buckets: range {rng!r} in {item!r} should be LO-HI, <HI or >=LO"
                )
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
