"""Every option of every verb, defined once: its bound, default, parser and message.

The command line (:mod:`specreplay.cli`) and the Python API (:mod:`specreplay.api`) both build a
verb's options through ONE constructor here (``RequalifyOptions.build(...)`` and so on), which
parses every value once and enforces every bound; the pipelines then receive parsed values
(:class:`~specreplay.stats.compare.Margin`, :class:`~specreplay.stats.buckets.Buckets`,
:class:`~specreplay.sim.arms.Arm`, the enums below, ints), never the user's text. typer's
``min=``/``max=`` read the bounds below (:data:`N_BOOT` …), and the CLI's numeric check
(:mod:`specreplay.commands.cliparse`) and its enumerations call the same functions, so the CLI and
the API refuse a bad value with the same message.

Two groups are shared by the verbs, each field defined once: :class:`ReplayOptions` (buckets,
logging arm, estimator, replicates, seed, ``--by``, ``--hash-ids``, ``--short-rounds``,
``--ignore``) and :class:`BootstrapOptions` (margin, n_boot, stratify, level, min-requests).

Values: a **bare float margin is relative** in the API (``margin=0.005`` ≡ ``"0.5%"``, the
default's form); an absolute margin is ``Margin.absolute(0.01)``. :func:`parse_margin` reads the
CLI's text too, where a bare number (``--margin 0.01``) is absolute; the API refuses such a string
before it gets here (``specreplay.api``: a string margin carries its ``%``). Depths are ints, a
sequence of ints, or the CLI's
text (``"1..8"``, ``"1,2,4"``). The user's spelling (margin text, bucket spec, arm strings)
survives only in results.json's ``options`` (``Margin.text``, ``Buckets.spec``, ``Arm.spelled``).

A light module: the parsers import the statistics and the arm grammar when first called, so
``specreplay --help`` does not import NumPy.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from specreplay.errors import SpecReplayError
from specreplay.names import name_problem
from specreplay.replay.archive import dropped
from specreplay.stats.support import ShortRounds, parse_short_rounds

if TYPE_CHECKING:
    from specreplay.sim.arms import Arm
    from specreplay.sim.drafting import DraftRule
    from specreplay.stats.buckets import Buckets
    from specreplay.stats.compare import Margin
    from specreplay.stats.depth import CostModel

__all__ = [
    "CHOICE",
    "CHOICE_FLAGS",
    "DEFAULT_X_GRID",
    "DEPTHS_DEFAULT",
    "DRAFTED",
    "FAIL_ON_INTERVAL",
    "FAIL_ON_REQUALIFY",
    "FAMILY_ALPHA",
    "FLOAT_BOUNDS",
    "INT_BOUNDS",
    "LEVEL",
    "MARGIN_DEFAULT",
    "MAX_DRAWS",
    "MAX_DROPPED",
    "MIN_REQUESTS",
    "NOT_OPTIONS",
    "N_BOOT",
    "POSITIONS",
    "REPLICATES",
    "REQUESTS",
    "ROUNDS",
    "SAMPLE_REQUESTS",
    "SEED",
    "SHARD_REQUESTS",
    "SWEEP_N_BOOT",
    "SYNTH_DEPTH",
    "WORKERS",
    "BootstrapOptions",
    "BudgetOptions",
    "Compression",
    "Estimator",
    "Form",
    "IntervalOptions",
    "LawtestOptions",
    "Num",
    "ReplayOptions",
    "RequalifyOptions",
    "ScreenOptions",
    "ShortRounds",
    "Stratify",
    "SweepOptions",
    "ValidateOptions",
    "check_number",
    "expand_braces",
    "globs",
    "options_of",
    "parse_arm_value",
    "parse_buckets",
    "parse_choice",
    "parse_cost",
    "parse_depths",
    "parse_logging_arm",
    "parse_margin",
    "parse_policies",
    "show_bound",
    "verdict_set",
]


NOT_OPTIONS = frozenset(
    {
        "archive",
        "a",
        "b",
        "out",
        "force",
        "quiet",
        "progress",
        "scheduler",
        "workers",
        "cache",
        "revalidate",
    }
)
"""A front end's parameters that are not options of a verb's typed options: the inputs, the output
folder and its flags, progress, the backend and ``--revalidate`` (the command itself takes those:
none of them changes a figure)."""


def options_of(params: dict[str, Any]) -> dict[str, Any]:
    """Return a front end's parameters that a verb's options builder takes, by name.

    ``cli`` and ``api`` pass ``dict(locals())`` taken first thing in the verb's function, so
    neither restates the option block: the builder checks and parses every one.

    Examples
    --------
    >>> options_of({"archive": "a", "n_boot": 200, "out": None, "progress": True})
    {'n_boot': 200}
    """
    return {k: v for k, v in params.items() if k not in NOT_OPTIONS}


# -------------------------------------------------------------------------------------------------
# Numbers: one bound each, checked by the CLI's parser and by the constructors alike

INT_BOUNDS = (-(2**63), 2**63 - 1)
"""The range of an integer option that declares no bound of its own (int64)."""
FLOAT_BOUNDS = (-(2.0**53), 2.0**53)
"""The range of a float option that declares no bound (±2^53: past it a double skips integers)."""


def show_bound(v: float) -> str:
    """Return a bound as people read it: 2^64-1 rather than 18446744073709551615."""
    for k in (53, 63, 64):
        if v == 2**k - 1:
            return f"2^{k}-1"
        if abs(v) == 2**k:
            return f"{'-' if v < 0 else ''}2^{k}"
    return str(v) if isinstance(v, int) else f"{v:g}"


def _exact(value: Any, number: float) -> Fraction:
    """Return the number a text means, exactly (as a float, -(2^53 + 1) rounds onto -2^53)."""
    try:
        return Fraction(str(value).strip()) if isinstance(value, str) else Fraction(number)
    except ValueError:
        return Fraction(number)


def check_number(name: str, value: Any, lo: float, hi: float, integer: bool) -> Any:
    """Return ``value`` as an int (``integer``) or a float within [lo, hi]; raise otherwise.

    ``value`` is the CLI's text or a Python number. The message names ``name`` (the option),
    the value and the range: ``--seed 18446744073709551616: out of range (0 to 2^64-1)``.
    """
    where = f"{name} {value}"
    kind = "an integer" if integer else "a number"
    span = f"{show_bound(lo)} to {show_bound(hi)}"
    if isinstance(value, bool):
        raise SpecReplayError(f"{where}: not {kind} (range {span})")
    number: float | Fraction
    if integer:
        if isinstance(value, int):
            number = value
        else:
            try:
                number = int(str(value).strip())
            except ValueError:
                raise SpecReplayError(f"{where}: not {kind} (range {span})") from None
    else:
        try:
            number = float(value if isinstance(value, int | float) else str(value).strip())
        except (ValueError, OverflowError, TypeError):
            raise SpecReplayError(f"{where}: not {kind} (range {span})") from None
        if not math.isfinite(number):
            raise SpecReplayError(f"{where}: not a finite number (range {span})")
        number = _exact(value, float(number))
    if not lo <= number <= hi:
        raise SpecReplayError(f"{where}: out of range ({span})")
    return int(number) if integer else float(number)


@dataclass(frozen=True)
class Num:
    """A numeric option: its flag (which every message names), closed range and default."""

    flag: str
    lo: float
    hi: float
    default: Any = None
    integer: bool = True

    def check(self, value: Any) -> Any:
        """Return ``value`` as a number in range (None stays None); raise otherwise."""
        if value is None:
            return None
        return check_number(self.flag, value, self.lo, self.hi, self.integer)


# The largest sizes are lower than int64 because a larger one would not fail but run for days or
# exhaust memory (--replicates 2^63-1 spun in a kernel that no signal interrupts), or start that
# many processes.
SEED = Num("--seed", 0, 2**64 - 1, 0)
"""The seed: the kernels take it as a uint64."""
N_BOOT = Num("--n-boot", 100, 10**7, 10_000)
SWEEP_N_BOOT = 2000
"""``sweep``'s default ``--n-boot`` (per depth and arm)."""
LEVEL = Num("--level", 0.5, 0.999, 0.95, integer=False)
MIN_REQUESTS = Num("--min-requests", 2, INT_BOUNDS[1], 10)
REPLICATES = Num("--replicates", 2, 2**16, 16)
SAMPLE_REQUESTS = Num("--sample-requests", 1, INT_BOUNDS[1])
WORKERS = Num("--workers", 1, 256)
REQUESTS = Num("--requests", 1, 10**8, 2000)
ROUNDS = Num("--rounds", 1, 10**6, 64)
SHARD_REQUESTS = Num("--shard-requests", 1, 10**8, 250)
SYNTH_DEPTH = Num("--depth", 1, 127, 8)
"""Drafted positions per round of the built-in archive (synth, demo); why 8: sim/synth.py."""
POSITIONS = Num("--positions", 1, 10**6, 8)
MAX_DROPPED = Num("--max-dropped", 0, 1, dropped.MAX_DROPPED, integer=False)
"""The largest share of bad rounds a capture may have (:mod:`specreplay.replay.archive.dropped`)."""
MAX_DRAWS = Num("--max-draws", 1000, 10**12)
FAMILY_ALPHA = Num("--family-alpha", *FLOAT_BOUNDS, 1e-5, integer=False)
DRAFTED = Num("--drafted", 1, 1024)
CHOICE = Num("--choice", 0, INT_BOUNDS[1], 0)

# -------------------------------------------------------------------------------------------------
# Enumerations: the CLI offers them as choices; the API takes a member or its value


class Estimator(enum.StrEnum):
    """``--estimator``: how a replay computes R (:mod:`specreplay.replay.choice` for auto)."""

    AUTO = "auto"
    ANALYTIC = "analytic"
    MONTECARLO = "montecarlo"
    IMPORTANCE = "importance"


class Stratify(enum.StrEnum):
    """``--stratify``: the bootstrap's resampling strata."""

    FAMILY = "family"
    NONE = "none"


class Form(enum.StrEnum):
    """``--format``: the form of an archive's shards (synth, convert)."""

    PARQUET = "parquet"
    IPC = "ipc"
    JSONL = "jsonl"


class Compression(enum.StrEnum):
    """``--compression``: every codec of some form (which form takes which: the writer checks)."""

    LZ4 = "lz4"
    ZSTD = "zstd"
    SNAPPY = "snappy"
    UNCOMPRESSED = "uncompressed"
    NONE = "none"


def _or_list(values: Sequence[str]) -> str:
    return " or ".join(values) if len(values) == 2 else ", ".join(values[:-1]) + " or " + values[-1]


def parse_choice[E: enum.StrEnum](enum_type: type[E], value: Any) -> E:
    """Return the member of ``enum_type`` that ``value`` (a member or its value, any case) names.

    Raises
    ------
    SpecReplayError
        Naming the option: ``--stratify: 'bucket' should be family or none``.
    """
    if isinstance(value, enum_type):
        return value
    if enum_type is ShortRounds:
        return parse_short_rounds(value)  # type: ignore[return-value]
    flag, names = CHOICE_FLAGS[enum_type], [m.value for m in enum_type]
    if isinstance(value, str):
        try:
            return enum_type(value.strip().lower())
        except ValueError:
            pass
    if enum_type is Form:
        raise SpecReplayError(f"{flag} {value!r}: expected one of {', '.join(names)}")
    if enum_type is Compression:
        raise SpecReplayError(f"{flag} {value!r}: expected one of {', '.join(names)}")
    raise SpecReplayError(f"{flag}: {value!r} should be {_or_list(names)}")


CHOICE_FLAGS: dict[type[enum.StrEnum], str] = {
    Estimator: "--estimator",
    Stratify: "--stratify",
    Form: "--format",
    Compression: "--compression",
    ShortRounds: "--short-rounds",
}
"""Every enumeration an option takes, and the option's flag (the CLI checks them by type)."""

# -------------------------------------------------------------------------------------------------
# Parsers of the other values

MARGIN_DEFAULT = "0.5%"
"""The default margin: half a percent of R_a."""
DEPTHS_DEFAULT = "1..8"
"""``sweep``'s default depths."""
FAIL_ON_INTERVAL = frozenset({"EQUIVALENT", "DIFFERENT", "INCONCLUSIVE"})
"""The pooled verdicts ``interval --fail-on`` accepts."""
FAIL_ON_REQUALIFY = frozenset({"QUALIFIED", "NOT QUALIFIED", "INCONCLUSIVE"})
"""The pooled requalifications ``requalify --fail-on`` accepts."""
_MARGIN_HELP = "should be a positive number of tokens/round (0.02) or a percentage of R_a (0.5%)"


def parse_margin(value: Any) -> Margin:
    """Return ``value`` as a :class:`~specreplay.stats.compare.Margin`.

    A string is the CLI's text (``"0.5%"`` relative to R_a, ``"0.02"`` tokens/round); a bare
    float is RELATIVE (``0.005`` ≡ ``"0.5%"``); a Margin is itself.

    Examples
    --------
    >>> parse_margin(0.005) == parse_margin("0.5%")
    True
    """
    from specreplay.stats.compare import Margin
    from specreplay.stats.compare import parse_margin as parse_text

    if isinstance(value, Margin):
        return value
    if isinstance(value, str):
        return parse_text(value)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and math.isfinite(value) and value > 0:
        return Margin(float(value), True, f"{100 * value:.12g}%")
    raise SpecReplayError(f"--margin: {value!r} {_MARGIN_HELP}")


def parse_buckets(value: Any) -> Buckets:
    """Return ``--buckets`` parsed (empty or None: the default buckets)."""
    from specreplay.stats.buckets import DEFAULT_BUCKETS, Buckets

    if isinstance(value, Buckets):
        return value
    if value is None or value == "":
        return Buckets.parse(DEFAULT_BUCKETS)
    if not isinstance(value, str):
        raise SpecReplayError(f"--buckets: {value!r} should be NAME:LO-HI, NAME:<HI or NAME:>=LO")
    return Buckets.parse(value)


def parse_arm_value(flag: str, value: Any) -> Arm:
    """Return an arm option's value (text or Arm) as an Arm; a bad one names ``flag``."""
    from specreplay.sim.arms import Arm, parse_arm_option

    return value if isinstance(value, Arm) else parse_arm_option(flag, value)


def parse_logging_arm(value: Any) -> Arm | None:
    """Return ``--logging-arm`` as an Arm (None stays None): ``--logging-arm 'x': …`` else."""
    from specreplay.sim.arms import Arm, parse_arm

    if value is None or isinstance(value, Arm):
        return value
    try:
        return parse_arm(value)
    except SpecReplayError as err:
        raise SpecReplayError(f"--logging-arm {value!r}: {err.message}") from None


def expand_braces(text: str, flag: str = "--arm") -> list[str]:
    """Expand ``{a,b,…}`` groups of an ``--arm`` or ``--policy`` (cartesian product, in order).

    Examples
    --------
    >>> expand_braces("top32:t0.7:dyadic{8,16}@5")
    ['top32:t0.7:dyadic8@5', 'top32:t0.7:dyadic16@5']
    """
    m = re.search(r"\{([^{}]*)\}", text)
    if m is None:
        if "{" in text or "}" in text:
            raise SpecReplayError(f"{flag} {text!r}: unbalanced brace")
        return [text]
    parts = m.group(1).split(",")
    if any(not p for p in parts):
        raise SpecReplayError(f"{flag} {text!r}: empty alternative in {{{m.group(1)}}}")
    out: list[str] = []
    for p in parts:
        out += expand_braces(text[: m.start()] + p + text[m.end() :], flag)
    return out


def parse_policies(values: str | Sequence[Any]) -> tuple[DraftRule, ...]:
    """Return the ``--policy`` values (text or parsed) brace-expanded, distinct by canonical."""
    from specreplay.sim.drafting import DepthByBucket, StopRule, parse_policy

    texts = (values,) if isinstance(values, str) else tuple(values)
    out: dict[str, DraftRule] = {}
    for text in texts:
        if isinstance(text, StopRule | DepthByBucket):
            out.setdefault(text.canonical, text)
            continue
        for one in expand_braces(text, "--policy"):
            try:
                rule = parse_policy(one)
            except SpecReplayError as err:
                raise SpecReplayError(f"--policy: {err.message}") from None
            out.setdefault(rule.canonical, rule)
    return tuple(out.values())


def _small_int(digits: str) -> int:
    """Return ASCII ``digits`` as an int, 10⁵ for more than 4 significant digits.

    Such a number is out of range anyway, and ``int()`` refuses more than 4,300 digits.
    """
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 4 else 10**5


def parse_depths(value: Any) -> tuple[int, ...]:
    """Return sorted distinct depths 1..127 from ``1..8``, ``1,2,4``, ``1..3,6``, an int or ints.

    Examples
    --------
    >>> parse_depths("1..3,6"), parse_depths([4, 2]), parse_depths(5)
    ((1, 2, 3, 6), (2, 4), (5,))
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, str):
        items = list(value) if isinstance(value, Iterable) else None
        if items is None or not all(isinstance(d, int) and not isinstance(d, bool) for d in items):
            raise SpecReplayError(f"--depths {value!r}: expected 1..8 or 1,2,4")
        value = ",".join(map(str, items))
    depths: set[int] = set()
    for part in value.split(","):
        m = re.fullmatch(r"\s*([0-9]+)\s*(?:\.\.\s*([0-9]+)\s*)?", part)
        if m is None:
            raise SpecReplayError(f"--depths {value!r}: expected 1..8 or 1,2,4")
        lo = _small_int(m.group(1))
        hi = _small_int(m.group(2)) if m.group(2) else lo
        if lo < 1 or hi < lo or hi > 127:
            raise SpecReplayError(f"--depths {value!r}: depths are 1..127, low to high")
        depths.update(range(lo, hi + 1))
    return tuple(sorted(depths))


def parse_cost(value: str | None) -> CostModel | None:
    """Return ``--cost`` (``linear:T0:C`` or a TOML file) as a cost model; None stays None."""
    if value is None or value == "":
        return None
    from specreplay.stats.depth import CostModel

    if not isinstance(value, str):
        raise SpecReplayError(f"--cost {value!r}: expected linear:T0:C (ms) or a TOML file")
    return CostModel.parse(value)


def verdict_set(value: str | Iterable[str], allowed: frozenset[str]) -> frozenset[str]:
    """Parse ``--fail-on`` verdicts (comma-separated, or a sequence; any case)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    verdicts = {str(v).strip().upper() for v in items if str(v).strip()}
    unknown = verdicts - allowed
    if unknown:
        raise SpecReplayError(f"--fail-on: unknown verdict(s) {sorted(unknown)}")
    return frozenset(verdicts)


def globs(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """``--ignore`` as a tuple of globs (one string is one glob, not its characters)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _families(value: str | Sequence[str] | None) -> frozenset[str] | None:
    """``--families``: comma-separated, or a sequence of names (None or empty: every family)."""
    names = value.split(",") if isinstance(value, str) else value
    if names is not None and not (
        isinstance(names, Sequence | frozenset | set) and all(isinstance(f, str) for f in names)
    ):
        raise SpecReplayError(f"--families: {value!r} should be comma-separated family names")
    return frozenset(f.strip() for f in names) if names else None


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise SpecReplayError(f"--{name.replace('_', '-')}: {value!r} should be True or False")
    return value


def _split(raw: dict[str, Any], *groups: type) -> list[dict[str, Any]]:
    """Split keyword options among ``groups`` (dataclasses) by field name; refuse unknown ones."""
    parts: list[dict[str, Any]] = []
    left = dict(raw)
    for g in groups:
        names = {f.name for f in dataclasses.fields(g)}
        parts.append({k: left.pop(k) for k in list(left) if k in names})
    if left:
        raise TypeError(f"unexpected option(s): {', '.join(sorted(left))}")
    return parts


# -------------------------------------------------------------------------------------------------
# The two groups


@dataclass(frozen=True)
class BootstrapOptions:
    """The bootstrap and verdict options (interval, requalify, sweep), each parsed.

    ``margin`` the equivalence margin; ``n_boot`` resamples; ``stratify`` the strata;
    ``level`` the confidence level; ``min_requests`` cells with fewer requests are null.
    """

    margin: Margin
    n_boot: int
    stratify: Stratify
    level: float
    min_requests: int

    @classmethod
    def build(
        cls,
        *,
        margin: Any = MARGIN_DEFAULT,
        n_boot: Any = N_BOOT.default,
        stratify: Any = Stratify.FAMILY,
        level: Any = LEVEL.default,
        min_requests: Any = MIN_REQUESTS.default,
    ) -> Self:
        """Parse and check every value (the one constructor of the CLI and the API)."""
        return cls(
            margin=parse_margin(margin),
            n_boot=N_BOOT.check(n_boot),
            stratify=parse_choice(Stratify, stratify),
            level=LEVEL.check(level),
            min_requests=MIN_REQUESTS.check(min_requests),
        )

    def to_json(self) -> dict[str, Any]:
        """Return the group's entries of results.json ``options`` (the margin as spelled)."""
        return {
            "margin": self.margin.to_json(),
            "n_boot": self.n_boot,
            "stratify": self.stratify.value,
            "level": self.level,
            "min_requests": self.min_requests,
        }


@dataclass(frozen=True)
class ReplayOptions:
    """How an archive is replayed (requalify, sweep), each value parsed.

    ``buckets`` context buckets; ``logging_arm`` the arm that drafted an archive without the
    column; ``estimator``; ``replicates`` Monte Carlo replicates per round; ``seed``; ``by`` a
    carried column giving extra cells (:mod:`specreplay.pipelines.grouping`); ``hash_ids``
    request ids hashed in every output (:mod:`specreplay.results.privacy`); ``short_rounds``
    (:mod:`specreplay.pipelines.shortrounds`); ``ignore`` globs of folder entries to skip;
    ``max_dropped`` the largest share of bad rounds a capture may have
    (:mod:`specreplay.replay.archive.dropped`).
    """

    buckets: Buckets
    logging_arm: Arm | None
    estimator: Estimator
    replicates: int
    seed: int
    by: str | None
    hash_ids: bool
    short_rounds: ShortRounds
    ignore: tuple[str, ...]
    max_dropped: float = MAX_DROPPED.default

    @classmethod
    def build(
        cls,
        *,
        buckets: Any = "",
        logging_arm: Any = None,
        estimator: Any = Estimator.AUTO,
        replicates: Any = REPLICATES.default,
        seed: Any = SEED.default,
        by: str | None = None,
        hash_ids: bool = False,
        short_rounds: Any = ShortRounds.CAPPED,
        ignore: str | Sequence[str] | None = (),
        max_dropped: Any = MAX_DROPPED.default,
    ) -> Self:
        """Parse and check every value (the one constructor of the CLI and the API)."""
        if by is not None and not isinstance(by, str):
            raise SpecReplayError(f"--by: {by!r} should be a column name")
        from specreplay.pipelines.grouping import check_by

        check_by(by)
        return cls(
            buckets=parse_buckets(buckets),
            logging_arm=parse_logging_arm(logging_arm),
            estimator=parse_choice(Estimator, estimator),
            replicates=REPLICATES.check(replicates),
            seed=SEED.check(seed),
            by=by,
            hash_ids=_flag(hash_ids, "hash_ids"),
            short_rounds=parse_choice(ShortRounds, short_rounds),
            ignore=globs(ignore),
            max_dropped=MAX_DROPPED.check(max_dropped),
        )

    @property
    def logging_arm_text(self) -> str | None:
        """The logging arm as the user spelled it (the archive reader's option, results.json)."""
        return self.logging_arm.spelled if self.logging_arm is not None else None

    def to_json(self) -> dict[str, Any]:
        """Return the group's entries of results.json ``options`` (spellings kept)."""
        return {
            "short_rounds": self.short_rounds.value,
            "estimator": self.estimator.value,
            "replicates": self.replicates,
            "buckets": self.buckets.spec,
            "logging_arm": self.logging_arm_text,
            "by": self.by,
            "hash_ids": self.hash_ids,
        }


# -------------------------------------------------------------------------------------------------
# The verbs


@dataclass(frozen=True)
class RequalifyOptions:
    """Every option of ``specreplay requalify`` (the demo builds its own), parsed.

    ``fail_on`` the pooled requalifications that exit 1; ``families`` and ``sample_requests``
    select requests after the one pass (the rest is counted under ``excluded``);
    ``law_positions`` archive positions law-tested per arm.
    """

    baseline: Arm
    candidate: Arm
    reference: Arm | None
    fail_on: frozenset[str]
    families: frozenset[str] | None
    sample_requests: int | None
    law_positions: int
    replay: ReplayOptions
    boot: BootstrapOptions

    @classmethod
    def build(
        cls,
        *,
        baseline: Any,
        candidate: Any,
        reference: Any = None,
        fail_on: str | Iterable[str] = "",
        families: str | Sequence[str] | None = None,
        sample_requests: Any = None,
        law_positions: int = POSITIONS.default,
        **options: Any,
    ) -> Self:
        """Parse every option; ``options`` are the fields of the two groups, by name."""
        replay, boot = _split(options, ReplayOptions, BootstrapOptions)
        base = parse_arm_value("--baseline", baseline)
        cand = parse_arm_value("--candidate", candidate)
        if base.canonical == cand.canonical:
            raise SpecReplayError(f"baseline and candidate are the same arm ({base.canonical})")
        return cls(
            baseline=base,
            candidate=cand,
            reference=parse_arm_value("--reference", reference) if reference else None,
            fail_on=verdict_set(fail_on, FAIL_ON_REQUALIFY),
            families=_families(families),
            sample_requests=SAMPLE_REQUESTS.check(sample_requests),
            law_positions=POSITIONS.check(law_positions),
            replay=ReplayOptions.build(**replay),
            boot=BootstrapOptions.build(**boot),
        )

    def to_json(self, archive: Path) -> dict[str, Any]:
        """Return the ``options`` entry of results.json."""
        r, b = self.replay.to_json(), self.boot.to_json()
        return {
            "archive": str(archive),
            "short_rounds": r["short_rounds"],
            "baseline": self.baseline.spelled,
            "candidate": self.candidate.spelled,
            "reference": self.reference.spelled if self.reference is not None else None,
            "estimator": r["estimator"],
            "replicates": r["replicates"],
            "margin": b["margin"],
            "fail_on": sorted(self.fail_on),
            "families": sorted(self.families) if self.families else None,
            "sample_requests": self.sample_requests,
            "n_boot": b["n_boot"],
            "stratify": b["stratify"],
            "level": b["level"],
            "min_requests": b["min_requests"],
            "buckets": r["buckets"],
            "logging_arm": r["logging_arm"],
            "by": r["by"],
            "hash_ids": r["hash_ids"],
        }


@dataclass(frozen=True)
class SweepOptions:
    """Every option of ``specreplay sweep``, parsed.

    ``arms`` the ``--arm`` values brace-expanded, distinct by canonical form, in order
    (``arms_spelled`` as given, for results.json); ``depths``; ``baseline`` the arm the dyadic
    arms are requalified against; ``cost`` the cost model (ms per round by depth); ``policies``
    the ``--policy`` values brace-expanded, distinct by canonical form
    (docs/methods.md#policies-adaptive-drafting).
    """

    arms: tuple[Arm, ...]
    arms_spelled: tuple[str, ...]
    depths: tuple[int, ...]
    baseline: Arm | None
    cost: CostModel | None
    replay: ReplayOptions
    boot: BootstrapOptions
    policies: tuple[DraftRule, ...] = ()

    @classmethod
    def build(
        cls,
        *,
        arms: str | Sequence[Any] = (),
        depths: Any = DEPTHS_DEFAULT,
        baseline: Any = None,
        cost: str | None = None,
        policies: str | Sequence[str] = (),
        **options: Any,
    ) -> Self:
        """Parse every option; ``options`` are the fields of the two groups, by name."""
        options.setdefault("n_boot", SWEEP_N_BOOT)
        rules = parse_policies(policies)
        replay, boot = _split(options, ReplayOptions, BootstrapOptions)
        texts = (arms,) if isinstance(arms, str) else tuple(arms)
        parsed: dict[str, Arm] = {}
        for text in texts:
            for one in expand_braces(text) if isinstance(text, str) else [text]:
                arm = parse_arm_value("--arm", one)
                parsed.setdefault(arm.canonical, arm)
        return cls(
            arms=tuple(parsed.values()),
            arms_spelled=tuple(t if isinstance(t, str) else t.spelled for t in texts),
            depths=parse_depths(depths),
            baseline=parse_arm_value("--baseline", baseline) if baseline else None,
            cost=parse_cost(cost),
            replay=ReplayOptions.build(**replay),
            boot=BootstrapOptions.build(**boot),
            policies=rules,
        )

    def to_json(self, archive: Path) -> dict[str, Any]:
        """Return the ``options`` entry of results.json."""
        r, b = self.replay.to_json(), self.boot.to_json()
        return {
            "short_rounds": r["short_rounds"],
            "archive": str(archive),
            "arms": list(self.arms_spelled),
            "depths": list(self.depths),
            "baseline": self.baseline.spelled if self.baseline is not None else None,
            "margin": b["margin"],
            "estimator": r["estimator"],
            "replicates": r["replicates"],
            "cost": self.cost.text if self.cost is not None else None,
            "policies": [p.canonical for p in self.policies],
            "n_boot": b["n_boot"],
            "stratify": b["stratify"],
            "level": b["level"],
            "min_requests": b["min_requests"],
            "buckets": r["buckets"],
            "logging_arm": r["logging_arm"],
            "by": r["by"],
            "hash_ids": r["hash_ids"],
        }


@dataclass(frozen=True)
class IntervalOptions:
    """Every option of ``specreplay interval`` but the two inputs and the output folder.

    ``fail_on`` the pooled verdicts that exit 1 (a null verdict counts as INCONCLUSIVE);
    ``choice`` and ``drafted`` apply to Spec-Bench (and ``choice`` to Medusa) inputs,
    ``question_file`` to Medusa ones; ``names`` label arms A and B (default: the inputs'
    names); ``hash_ids`` hashes request ids in every output. Round traces carry no grouping
    columns: ``--by`` is for position traces (requalify, sweep). ``ignore``: ``--ignore``
    globs, entries of an input folder to skip (results.json ``inputs_ignored``).
    """

    question_file: Path | None
    fail_on: frozenset[str]
    drop_unpaired: bool
    buckets: Buckets
    choice: int
    drafted: int | None
    names: tuple[str | None, str | None]
    seed: int
    hash_ids: bool
    ignore: tuple[str, ...]
    boot: BootstrapOptions

    @classmethod
    def build(
        cls,
        *,
        question_file: str | Path | None = None,
        fail_on: str | Iterable[str] = "",
        drop_unpaired: bool = False,
        buckets: Any = "",
        choice: Any = CHOICE.default,
        drafted: Any = None,
        name_a: str | None = None,
        name_b: str | None = None,
        seed: Any = SEED.default,
        hash_ids: bool = False,
        ignore: str | Sequence[str] | None = (),
        **boot: Any,
    ) -> Self:
        """Parse every option; ``boot`` are the fields of :class:`BootstrapOptions`."""
        (group,) = _split(boot, BootstrapOptions)
        return cls(
            question_file=Path(question_file) if question_file is not None else None,
            fail_on=verdict_set(fail_on, FAIL_ON_INTERVAL),
            drop_unpaired=_flag(drop_unpaired, "drop_unpaired"),
            buckets=parse_buckets(buckets),
            choice=CHOICE.check(choice),
            drafted=DRAFTED.check(drafted),
            names=(_label(name_a, "--name-a"), _label(name_b, "--name-b")),
            seed=SEED.check(seed),
            hash_ids=_flag(hash_ids, "hash_ids"),
            ignore=globs(ignore),
            boot=BootstrapOptions.build(**group),
        )

    def to_json(self, path_a: Path | None, path_b: Path | None) -> dict[str, Any]:
        """Return the ``options`` entry of results.json (paths null for arms given in memory)."""
        b = self.boot.to_json()
        return {
            "a": str(path_a) if path_a is not None else None,
            "b": str(path_b) if path_b is not None else None,
            "question_file": str(self.question_file) if self.question_file else None,
            "margin": b["margin"],
            "fail_on": sorted(self.fail_on),
            "n_boot": b["n_boot"],
            "stratify": b["stratify"],
            "level": b["level"],
            "min_requests": b["min_requests"],
            "drop_unpaired": self.drop_unpaired,
            "buckets": self.buckets.spec,
            "choice": self.choice,
            "drafted": self.drafted,
        }


@dataclass(frozen=True)
class LawtestOptions:
    """Every option of ``specreplay lawtest`` but the archive and the output folder.

    ``arms`` the arms to test (none: the built-in toy suite; ``arms_spelled`` as given);
    ``positions`` archive positions tested per arm; ``family_alpha`` Holm's family-wise alpha;
    ``max_draws`` the cap on Monte Carlo draws per test.
    """

    arms: tuple[Arm, ...]
    arms_spelled: tuple[str, ...]
    positions: int
    family_alpha: float
    max_draws: int | None
    buckets: Buckets
    logging_arm: Arm | None
    seed: int
    hash_ids: bool
    ignore: tuple[str, ...]

    @classmethod
    def build(
        cls,
        *,
        arms: str | Sequence[Any] = (),
        positions: Any = POSITIONS.default,
        family_alpha: Any = FAMILY_ALPHA.default,
        max_draws: Any = None,
        buckets: Any = "",
        logging_arm: Any = None,
        seed: Any = SEED.default,
        hash_ids: bool = False,
        ignore: str | Sequence[str] | None = (),
    ) -> Self:
        """Parse and check every value (the one constructor of the CLI and the API)."""
        texts = (arms,) if isinstance(arms, str) else tuple(arms)
        return cls(
            arms=tuple(parse_arm_value("--arm", a) for a in texts),
            arms_spelled=tuple(a if isinstance(a, str) else a.spelled for a in texts),
            positions=POSITIONS.check(positions),
            family_alpha=FAMILY_ALPHA.check(family_alpha),
            max_draws=MAX_DRAWS.check(max_draws),
            buckets=parse_buckets(buckets),
            logging_arm=parse_logging_arm(logging_arm),
            seed=SEED.check(seed),
            hash_ids=_flag(hash_ids, "hash_ids"),
            ignore=globs(ignore),
        )


@dataclass(frozen=True)
class ValidateOptions:
    """Every option of ``specreplay validate`` but the archive and the output folder.

    ``max_errors`` error lines before it stops (None: every one, ``--all``); ``max_dropped``
    the largest share of bad rounds a capture may have (:mod:`specreplay.replay.archive.dropped`).
    """

    max_errors: int | None
    buckets: Buckets
    logging_arm: Arm | None
    hash_ids: bool
    ignore: tuple[str, ...]
    max_dropped: float = MAX_DROPPED.default

    @classmethod
    def build(
        cls,
        *,
        all_errors: bool = False,
        buckets: Any = "",
        logging_arm: Any = None,
        hash_ids: bool = False,
        ignore: str | Sequence[str] | None = (),
        max_dropped: Any = MAX_DROPPED.default,
    ) -> Self:
        """Parse and check every value (the one constructor of the CLI and the API)."""
        return cls(
            max_errors=None if _flag(all_errors, "all") else 20,
            buckets=parse_buckets(buckets),
            logging_arm=parse_logging_arm(logging_arm),
            hash_ids=_flag(hash_ids, "hash_ids"),
            ignore=globs(ignore),
            max_dropped=MAX_DROPPED.check(max_dropped),
        )


DEFAULT_X_GRID = "0,1,3"
"""Extra costs (ms per round) of the budget's sensitivity table: the seed's columns."""


def _float(flag: str, value: Any) -> float:
    """Return a float option of the budget: finite, within ±2^53 (the CLI's parse-time check)."""
    return float(check_number(flag, value, *FLOAT_BOUNDS, integer=False))


def _positive(flag: str, value: Any) -> float | None:
    if value is None:
        return None
    number = _float(flag, value)
    if not number > 0:
        raise SpecReplayError(f"{flag}: {number:g} should be a positive number")
    return number


def _grid(text: str) -> tuple[float, ...]:
    """``--x-grid``: comma-separated extra costs ≥ 0 ms."""
    try:
        grid = tuple(float(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise SpecReplayError(
            f"--x-grid: {text!r} should be comma-separated ms, e.g. 0,1,3"
        ) from None
    if not grid or any(not (math.isfinite(x) and x >= 0) for x in grid):
        raise SpecReplayError(f"--x-grid: {text!r} should list extra costs ≥ 0 ms")
    return grid


@dataclass(frozen=True)
class BudgetOptions:
    """Every option of ``specreplay budget`` but the output folder, checked.

    Either ``base`` (R_0) and ``delta_lo`` (Δ_lo) or ``source`` (a requalify results.json);
    ``price_ms`` is T; ``known_ms`` the known added costs; ``rate``, ``tau_ms`` and ``gain`` (all
    three or none) ask for the sensitivity table over ``x_grid`` (parsed; None: no table).
    """

    price_ms: float
    base: float | None
    delta_lo: float | None
    known_ms: tuple[float, ...]
    source: Path | None
    rate: float | None
    tau_ms: float | None
    gain: float | None
    x_grid: tuple[float, ...] | None

    @classmethod
    def build(
        cls,
        *,
        price_ms: Any,
        base: Any = None,
        delta_lo: Any = None,
        known: Iterable[Any] = (),
        source: str | Path | None = None,
        rate: Any = None,
        tau_ms: Any = None,
        gain: Any = None,
        x_grid: str = DEFAULT_X_GRID,
    ) -> Self:
        """Check every option (the one constructor of the CLI and the API).

        Raises
        ------
        SpecReplayError
            A bound broken, or options that do not go together (``--from`` with ``--base``).
        """
        price = _positive("--price-ms", price_ms)
        assert price is not None
        r0 = _positive("--base", base)
        known_ms = tuple(_float("--known", k) for k in known)
        for k in known_ms:
            if not k >= 0:
                raise SpecReplayError(f"--known: {k:g} should be a cost ≥ 0 ms")
        lo = _float("--delta-lo", delta_lo) if delta_lo is not None else None
        if source is not None and (r0 is not None or lo is not None):
            raise SpecReplayError(
                "--from reads R_0 and Δ_lo: give it without --base and --delta-lo"
            )
        if source is None and (r0 is None or lo is None):
            raise SpecReplayError("give --base and --delta-lo, or --from a requalify results.json")
        sens = {"--rate": rate, "--tau-ms": tau_ms, "--gain": gain}
        given = [k for k, v in sens.items() if v is not None]
        if given and len(given) < 3:
            missing = [k for k in sens if k not in given]
            raise SpecReplayError(f"the sensitivity table needs {', '.join(missing)} too")
        r, tau = _positive("--rate", rate), _positive("--tau-ms", tau_ms)
        g = _float("--gain", gain) if gain is not None else None
        if g is not None and not g > -1:
            raise SpecReplayError(f"--gain: {g:g} should be a relative gain > -1")
        return cls(
            price_ms=price,
            base=r0,
            delta_lo=lo,
            known_ms=known_ms,
            source=Path(source) if source is not None else None,
            rate=r,
            tau_ms=tau,
            gain=g,
            x_grid=_grid(x_grid) if given else None,
        )

    def to_json(self) -> dict[str, Any]:
        """Return the ``options`` entry of results.json."""
        return {
            "base": self.base,
            "delta_lo": self.delta_lo,
            "price_ms": self.price_ms,
            "known_ms": list(self.known_ms),
            "from": str(self.source) if self.source is not None else None,
            "rate": self.rate,
            "tau_ms": self.tau_ms,
            "gain": self.gain,
            "x_grid": list(self.x_grid) if self.x_grid is not None else None,
        }


def _label_value(flag: str, value: Any) -> str | None:
    """Return a Prometheus label value to match (``--model-name``, ``--engine``), non-empty."""
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool) or not str(value):
        raise SpecReplayError(f"{flag}: should be a non-empty label value, got {value!r}")
    return str(value)


@dataclass(frozen=True)
class ScreenOptions:
    """The scrape options of ``specreplay screen``, checked.

    ``model_name`` and ``engine`` keep one model's and one engine's series of every vLLM scrape
    (None: the only model; every engine summed); ``vs`` is the (BEFORE, AFTER) pair compared
    with the command line's pair (``--vs``), or None.
    """

    model_name: str | None
    engine: str | None
    vs: tuple[Path, Path] | None

    @classmethod
    def build(
        cls,
        *,
        model_name: Any = None,
        engine: Any = None,
        vs: Sequence[str | Path] | None = None,
    ) -> Self:
        """Check every option (the one constructor of the CLI and the API).

        Raises
        ------
        SpecReplayError
            An empty label value, or ``--vs`` without exactly two scrapes.
        """
        pair: tuple[Path, Path] | None = None
        if vs is not None and len(vs) > 0:
            if isinstance(vs, str | Path) or len(vs) != 2:
                given = [str(vs)] if isinstance(vs, str | Path) else [str(x) for x in vs]
                raise SpecReplayError(
                    f"--vs: takes two scrapes, BEFORE_B AFTER_B; got {len(given)} "
                    f"({' '.join(given)})"
                )
            pair = (Path(vs[0]), Path(vs[1]))
        return cls(
            model_name=_label_value("--model-name", model_name),
            engine=_label_value("--engine", engine),
            vs=pair,
        )


def _label(value: str | None, flag: str) -> str | None:
    """Return an arm's label option, refused when it is no name (:mod:`specreplay.names`)."""
    problem = None if value is None else name_problem(value)
    if problem is not None:
        raise SpecReplayError(f"{flag} {value!r}: not a name: {problem}")
    return value
