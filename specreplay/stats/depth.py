"""Which fixed depth is fastest: the cost model, tokens/s, P(best) and the best depth.

See docs/methods.md#the-sweep-cost-model-and-the-best-depth.

A sweep gives R(d) per depth (with its interval and its bootstrap replicates, one joint resample
of requests shared by every depth). A **cost model** (:class:`CostModel`: linear ``T0 + C·d`` or a
TOML table) prices a round at each depth in milliseconds, so tokens/s = 1000·R(d)/ms(d)
(:func:`tokens_per_s`, ESTIMATED). :func:`p_best` is the share of joint replicates in which each
depth has the most tokens/s (rank stability), and :func:`best_depth` the depth of the highest
central rate. Pure functions of numbers and arrays: no replay, no result types.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError

__all__ = ["CostModel", "best_depth", "p_best", "tokens_per_s"]


def _cost_table(text: str) -> dict[int, float]:
    """Read ``--cost FILE.toml``: ``ms_per_round`` maps depths ≥ 1 to finite ms > 0."""
    try:
        doc = tomllib.loads(Path(text).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise SpecReplayError(f"--cost {text}: not valid UTF-8") from None
    except (OSError, tomllib.TOMLDecodeError, ValueError) as e:
        raise SpecReplayError(f"--cost {text}: {e}") from None
    raw = doc.get("ms_per_round")
    if not isinstance(raw, dict) or not raw:
        raise SpecReplayError(f"--cost {text}: expected a table ms_per_round = {{1 = 2.1, …}}")
    table: dict[int, float] = {}
    for k, v in raw.items():
        depth_ok = k.isdigit() and k.isascii() and len(k) <= 3 and 1 <= int(k) <= 127
        ms_ok = type(v) in (int, float) and math.isfinite(v) and v > 0
        if not (depth_ok and ms_ok):
            raise SpecReplayError(
                f"--cost {text}: ms_per_round.{k} = {v!r}: depth 1..127 → finite ms > 0"
            )
        table[int(k)] = float(v)
    return table


@dataclass(frozen=True)
class CostModel:
    """Milliseconds per round at each depth: linear T0 + C·d, or a table (TOML)."""

    text: str
    t0: float | None = None
    slope: float | None = None
    table: dict[int, float] | None = None

    @staticmethod
    def parse(text: str) -> CostModel:
        """``linear:T0:C`` or a TOML file with ``ms_per_round = {1 = 2.1, 2 = 2.4, …}``.

        Examples
        --------
        >>> CostModel.parse("linear:1:0.05").ms(4)
        1.2
        """
        if text.startswith("linear:"):
            try:
                t0, c = (float(x) for x in text.split(":")[1:])
            except ValueError:
                raise SpecReplayError(f"--cost {text!r}: expected linear:T0:C (ms)") from None
            if not (math.isfinite(t0 + c) and t0 >= 0 and c >= 0 and t0 + c > 0):
                raise SpecReplayError(f"--cost {text!r}: T0 and C are finite ms ≥ 0, not both 0")
            return CostModel(text, t0=t0, slope=c)
        return CostModel(text, table=_cost_table(text))

    def ms(self, depth: int) -> float | None:
        """Milliseconds per round at ``depth`` (None where the table has no entry)."""
        if self.table is not None:
            return self.table.get(depth)
        assert self.t0 is not None and self.slope is not None
        return self.t0 + self.slope * depth


@overload
def tokens_per_s(tokens_per_round: float, ms: float) -> float: ...
@overload
def tokens_per_s(tokens_per_round: NDArray[np.float64], ms: float) -> NDArray[np.float64]: ...
def tokens_per_s(
    tokens_per_round: float | NDArray[np.float64], ms: float
) -> float | NDArray[np.float64]:
    """Return 1000·R/ms: tokens per second of ``tokens_per_round`` (R) at ``ms`` per round.

    Examples
    --------
    >>> tokens_per_s(2.5, 1.25)
    2000.0
    """
    return 1000.0 * tokens_per_round / ms


def p_best(replicates: Mapping[int, NDArray[np.float64]]) -> dict[int, float]:
    """Return, per depth, the share of replicates in which it has the most tokens/s.

    ``replicates`` maps each depth to its tokens/s replicates, one joint resample of requests
    shared by every depth (replicate b of every depth resamples the same requests). A replicate
    that is not finite at some depth is left out of every share; ties go to the lowest depth.

    Examples
    --------
    >>> p_best({1: np.array([1.0, 3.0, 2.0, np.nan]), 2: np.array([2.0, 1.0, 2.0, 5.0])})
    {1: 0.6666666666666666, 2: 0.3333333333333333}
    """
    ds = sorted(replicates)
    mat = np.stack([replicates[d] for d in ds], axis=1)
    ok = np.all(np.isfinite(mat), axis=1)
    wins = np.bincount(np.argmax(mat[ok], axis=1), minlength=len(ds)) / max(int(ok.sum()), 1)
    return dict(zip(ds, wins.tolist(), strict=True))


def best_depth(rates: Mapping[int, float | None]) -> int | None:
    """Return the depth of the highest central tokens/s (None without any depth).

    A depth without a rate (None) never wins; ties go to the lowest depth.

    Examples
    --------
    >>> best_depth({1: 1800.0, 2: 2218.2, 3: 488.0})
    2
    >>> best_depth({}) is None
    True
    """
    ds = sorted(rates)
    if not ds:
        return None
    return max(ds, key=lambda d: rates[d] or -math.inf)
