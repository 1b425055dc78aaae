"""Option checks shared by the command line and the Python API (a helper, not a verb).

The CLI's typer declarations bound the numeric options (``--n-boot`` ≥ 100, …); the API checks
the same bounds with :func:`at_least` and :func:`between`, naming the keyword. The checks typer
cannot express (``--stratify``, ``--fail-on``, ``--logging-arm``) live here once for both, with
the CLI's messages.
"""

from __future__ import annotations

import math

from specreplay.errors import SpecReplayError

__all__ = [
    "FAIL_ON_INTERVAL",
    "FAIL_ON_REQUALIFY",
    "SEED_MAX",
    "at_least",
    "between",
    "check_seed",
    "check_stratify",
    "logging_arm_option",
    "verdict_set",
]

FAIL_ON_INTERVAL = frozenset({"EQUIVALENT", "DIFFERENT", "INCONCLUSIVE"})
"""The pooled verdicts ``interval --fail-on`` accepts."""
FAIL_ON_REQUALIFY = frozenset({"QUALIFIED", "NOT QUALIFIED", "INCONCLUSIVE"})
"""The pooled requalifications ``requalify --fail-on`` accepts."""
SEED_MAX = 2**64 - 1
"""The largest seed: the kernels take it as a uint64 (``--seed``'s ``max=``, the API's check)."""


def check_stratify(stratify: str) -> str:
    """Return ``stratify`` when it is ``family`` or ``none``; raise otherwise."""
    if stratify not in ("family", "none"):
        raise SpecReplayError(f"--stratify: {stratify!r} should be family or none")
    return stratify


def verdict_set(text: str, allowed: frozenset[str] | set[str]) -> frozenset[str]:
    """Parse comma-separated ``--fail-on`` verdicts (any case); raise on an unknown one."""
    verdicts = {v.strip().upper() for v in text.split(",") if v.strip()}
    unknown = verdicts - allowed
    if unknown:
        raise SpecReplayError(f"--fail-on: unknown verdict(s) {sorted(unknown)}")
    return frozenset(verdicts)


def logging_arm_option(value: str | None) -> str | None:
    """Check ``--logging-arm`` when parsing options (a bad arm is an error, never ignored)."""
    if value is not None:
        from specreplay.sim.arms import parse_arm

        try:
            parse_arm(value)
        except SpecReplayError as err:
            raise SpecReplayError(f"--logging-arm {value!r}: {err.message}") from None
    return value


def at_least(name: str, value: float | None, lo: float) -> None:
    """Raise unless ``value`` (when given) is a number ≥ ``lo``; the message names ``name``."""
    if value is not None and not (math.isfinite(value) and value >= lo):
        raise SpecReplayError(f"{name}={value!r}: should be at least {lo:g}")


def between(name: str, value: float, lo: float, hi: float) -> None:
    """Raise unless ``lo`` ≤ ``value`` ≤ ``hi``; the message names ``name``."""
    if not (math.isfinite(value) and lo <= value <= hi):
        raise SpecReplayError(f"{name}={value!r}: should be between {lo:g} and {hi:g}")


def check_seed(seed: int) -> int:
    """Return ``seed`` when it is an integer from 0 to 2^64-1 (a uint64); raise otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise SpecReplayError(f"seed={seed!r}: should be an integer from 0 to 2^64-1")
    return seed
