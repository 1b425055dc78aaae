"""The typed result model: what a command found, as frozen dataclasses.

See docs/outputs.md#resultsjson.

A command builds one :class:`Result`; results.json is that object written out
(:mod:`specreplay.results.io`), and every renderer (TABLES.md, cells.parquet, plots) is a function
of it alone, so a saved result can always be re-rendered (``specreplay report``). No layer edits a
result another built: builders make new objects (``dataclasses.replace``).

Terms. A **cell** is one slice of the requests: ``pooled``, a ``family``, a context ``bucket`` or a
``family×bucket``. Per cell: one :class:`ArmFigure` per arm (R, retained tokens per round), the
paired :class:`Delta` of two arms (looked up by its :class:`Role`, never by position), the
per-position :class:`Survival` P(A ≥ j), the :class:`Offpath` rates, the :class:`DepthFigure` slots
of the depth sweep (issue 6), for ``requalify`` the :class:`Requalification` and, for an importance
replay, the :class:`ImportanceDiagnostic` of each arm and depth, for ``budget`` the cell's
:class:`Budget` (and the run's :class:`Sensitivity` rows); a ``screen`` cell
(docs/methods.md#the-screens-rate-sp2) is keyed by ``batch``, ``context`` and ``worker`` and carries
its :class:`ScreenFigures`. With ``--by COLUMN`` (a carried archive column, constant within a
request) a ``by`` cell pools one value of the column over families and buckets and a
``family×bucket×by`` cell is one family × bucket × value; both name the value in ``group`` ({column:
value}, null in every other cell). ``excluded`` counts the cell's rounds that ``--short-rounds
exclude`` left out (null without that option). A figure that cannot be computed is ``None`` with its
``null_reason``. Every figure carries its :class:`Label`.

Fields are always written, ``null`` where they do not apply (so a program reading results.json
finds the same keys in every delta); their order is the order of the dataclass fields. The
exceptions are :attr:`Result.replicates`, which a run keeps in memory only (:func:`written`), and
``screen``'s :attr:`Result.scrapes` (:class:`ScrapeFigures`, what two vLLM scrapes measure) and
:attr:`Result.scrape_delta` (:class:`ScrapeDelta`), and :attr:`Result.validation`
(:class:`InputValidation`, a command that read a position archive), left out while None
(``OMIT_NONE``).

What results.json may hold is declared here and nowhere else (docs/outputs.md#what-report-checks):
the fields' annotations say what a value may be beyond its type (:data:`Count`, :data:`Seed`,
:data:`Name`, from :mod:`specreplay.results.constraints`); the top-level keys a command adds
beside the fields (``Result.extra``) are :class:`ResultExtra`'s, each with its structure
(``capture``: :class:`CaptureSummary`); ``environment`` is an :class:`Environment`, and the
``options`` a renderer reads are :class:`OptionsRead`'s. :mod:`specreplay.results.schema` hands
them to pydantic, which checks a results.json read back and writes the shipped JSON Schema.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, NotRequired, Protocol, TypedDict

from specreplay.errors import SpecReplayError
from specreplay.results.backend import backend_line
from specreplay.results.constraints import Count, Name, Seed

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "REPRS",
    "REQUIRED_OPTIONS",
    "SCHEMA_ID",
    "VIEWS",
    "ArchiveSummary",
    "ArmFigure",
    "BCa",
    "BitsStep",
    "Bonferroni",
    "Budget",
    "CacheEntry",
    "CaptureSummary",
    "Cell",
    "Command",
    "CoverageAtSize",
    "CredibleInterval",
    "Delta",
    "DepthFigure",
    "DraftMassOutside",
    "Environment",
    "Excluded",
    "FewestBits",
    "ImportanceDiagnostic",
    "InputFile",
    "InputIgnored",
    "InputValidation",
    "IntervalMethod",
    "KeptMass",
    "KeptMasses",
    "Label",
    "LawTest",
    "Level",
    "Margin",
    "Offpath",
    "OptionsRead",
    "PolicyAgainst",
    "PolicyChoice",
    "PolicyDelta",
    "PolicyFigure",
    "PolicyHeldOut",
    "ReplayBackend",
    "Replicates",
    "Requalification",
    "Result",
    "ResultExtra",
    "Role",
    "ScrapeDelta",
    "ScrapeFigures",
    "ScreenCentral",
    "ScreenEnvelope",
    "ScreenFigures",
    "Sensitivity",
    "ShardCacheReport",
    "StepTime",
    "Survival",
    "Tost",
    "written",
]

SCHEMA_ID = "specreplay/results/v1"


class Label(StrEnum):
    """Where a figure comes from (docs/outputs.md)."""

    MEASURED = "MEASURED"
    SIMULATED = "SIMULATED"
    ESTIMATED = "ESTIMATED"


class Level(StrEnum):
    """The level of a cell."""

    POOLED = "pooled"
    FAMILY = "family"
    BUCKET = "bucket"
    FAMILY_BUCKET = "family×bucket"
    SCREEN = "screen"
    BY = "by"
    FAMILY_BUCKET_BY = "family×bucket×by"


class Role(StrEnum):
    """What a paired delta Δ = R_b − R_a is for (docs/outputs.md#resultsjson)."""

    B_VS_A = "b-vs-a"
    CANDIDATE_VS_BASELINE = "candidate-vs-baseline"
    CANDIDATE_VS_REFERENCE = "candidate-vs-reference"
    PATH_BIAS = "path-bias"
    PATH_BIAS_IMPORTANCE = "path-bias-importance"
    DEPTH_VS_REFERENCE = "depth-vs-reference"


def _role(role: Role | str) -> Role:
    """Return ``role`` as a :class:`Role`; one line naming the valid roles otherwise."""
    try:
        return Role(role)
    except ValueError:
        valid = ", ".join(r.value for r in Role)
        raise SpecReplayError(f"role {role!r}: not a delta role; the roles: {valid}") from None


@dataclass(frozen=True)
class InputFile:
    """A file the command read: path, SHA-256, size in bytes, rows (None when not counted)."""

    path: str
    sha256: str
    bytes: Count
    rows: Count | None


@dataclass(frozen=True)
class InputIgnored:
    """An entry of an input folder that ``--ignore GLOB`` skipped: its path and the glob."""

    path: str
    glob: str


@dataclass(frozen=True)
class InputValidation:
    """How the run's position-archive files were validated (docs/scale.md#rows-validated-earlier).

    ``files`` the archive files the run read; ``validated_earlier`` those whose rows were not
    checked again (a "validated" mark of this validator matched: the replay's guards only);
    ``validator`` the hash of the validator's sources
    (:func:`specreplay.replay.archive.validated.validator_hash`).
    """

    files: Count
    validated_earlier: Count
    validator: str


OMIT_NONE = "omit_none"
"""Metadata key of a field left out of results.json while it is None (a key only one command has:
``screen``'s ``scrapes`` and ``scrape_delta``), so no other command's results.json changes."""


@dataclass(frozen=True)
class Excluded:
    """Rows, rounds or requests left out under an option (or the default), with the reason.

    ``measured_R_kept``, ``measured_R_all`` (present only for rounds ``--short-rounds`` left
    out, in an archive with ``accepted``): the MEASURED R over the rounds kept and over every
    round, so the served figure stays beside the one the comparison used.
    """

    reason: str
    rows: Count | None = None
    rounds: Count | None = None
    requests: Count | None = None
    measured_R_kept: float | None = field(default=None, metadata={OMIT_NONE: True})
    measured_R_all: float | None = field(default=None, metadata={OMIT_NONE: True})


@dataclass(frozen=True)
class ArmFigure:
    """R (retained tokens per round) of one arm in one cell.

    ``lo``/``hi``: R's studentized interval at ``level`` (requests resampled as for the deltas);
    null where the cell's delta is null (too few requests) and where the arm's figure comes from
    no paired comparison (e.g. a requalification's analytic replay). ``tail_width`` and
    ``tail_limit`` (present only where R is bounded over a truncated law, schema v2): the mean
    over the cell's rounds of the width of the range R can take whatever the mass outside the
    candidates does (R is its midpoint; ``lo``/``hi`` include it), and of the most that width
    can be, Σ_j (d − j + 1)·min(1 − kept target mass, 1 − kept draft mass).
    """

    R: float | None
    n_rounds: Count
    label: Label
    mcse: float | None
    null_reason: str | None
    estimator: str | None = None
    lo: float | None = None
    hi: float | None = None
    level: float | None = None
    tail_width: float | None = field(default=None, metadata={OMIT_NONE: True})
    tail_limit: float | None = field(default=None, metadata={OMIT_NONE: True})


@dataclass(frozen=True)
class BCa:
    """BCa interval of Δ and of Δ/R_a, with its bias correction z0 and acceleration."""

    lo: float | None
    hi: float | None
    rel_lo: float | None
    rel_hi: float | None
    acceleration: float | None
    z0: float | None
    null_reason: str | None


@dataclass(frozen=True)
class Bonferroni:
    """Family-wise interval at level 1 − α/m (m: deltas of the same level)."""

    level: float
    lo: float
    hi: float
    rel_lo: float
    rel_hi: float


@dataclass(frozen=True)
class Tost:
    """The (1 − 2α) interval of the equivalence test and the margin it is judged against."""

    alpha: float
    margin: float
    kind: str
    text: str
    lo: float
    hi: float
    level: float


@dataclass(frozen=True)
class CredibleInterval:
    """An ArviZ HDI or ETI of the bootstrap replicates (Δ and Δ/R_a) at ``prob``."""

    prob: float
    lo: float
    hi: float
    rel_lo: float
    rel_hi: float


@dataclass(frozen=True)
class CoverageAtSize:
    """What the calibration study measured at a cell's size (the small-sample flag, issue 10).

    ``coverage``: the lowest coverage of the 95% interval over every setting of the study at
    ``n_requests``, the largest studied size ≤ the cell's requests; ``mc_se`` its Monte Carlo
    standard error; ``setting`` the setting where it was measured.
    """

    coverage: float
    mc_se: float
    n_requests: Count
    setting: str


@dataclass(frozen=True)
class IntervalMethod:
    """The interval behind every verdict of a run and the thresholds the study set for it.

    ``method`` its name (e.g. ``cr2-eff``), ``description`` one line on what it is; below
    ``min_requests`` requests, or ``min_differing`` requests whose (n, t) differ between the
    arms, a cell is INCONCLUSIVE, never EQUIVALENT; ``study`` the command and seed that
    reproduce the calibration table.
    """

    method: str
    description: str
    min_requests: Count
    min_differing: Count
    study: str


@dataclass(frozen=True)
class Delta:
    """A paired delta Δ = R_b − R_a of one cell with its intervals, tests and verdict.

    ``df``: the t interval's degrees of freedom; ``n_differing``: the cell's requests whose
    (n, t) differ between the arms; ``small_sample`` (with ``coverage_at_size``): the cell is
    below the size at which the calibration study shows nominal coverage; ``estimator``: the
    replay estimator both SIMULATED sides used (one per delta, so a paired Δ never carries a
    difference of path biases; ``analytic − importance`` for the diagnostic that compares the
    two); ``verdict_reason``: why the verdict is what it is where a rule beyond the interval
    decided or qualified it (too few differing requests, identical inputs, ``--estimator
    auto``'s tail diagnostics, a tail width); ``tail_width`` (present only then): where an
    arm's R is bounded over a truncated law (schema v2, docs/methods.md#truncated-laws-schema-v2),
    the width of the range Δ can take whatever the mass outside the candidates does: ``point``
    is its midpoint and every interval is widened by half of it.
    """

    a: Name
    b: Name
    role: Role
    point: float | None
    rel: float | None
    lo: float | None
    hi: float | None
    rel_lo: float | None
    rel_hi: float | None
    method: str
    level: float
    adjusted: bool
    bca: BCa | None
    bonferroni: Bonferroni | None
    tost: Tost | None
    p_difference: float | None
    p_equivalence: float | None
    verdict: str | None
    smallest_equivalent_margin: float | None
    requests_for_margin: Count | None
    n_boot: Count
    n_boot_valid: Count | None
    warning: str | None
    label: Label
    null_reason: str | None
    smallest_equivalent_margin_kind: str | None = None
    p_equivalence_adj: float | None = None
    p_difference_adj: float | None = None
    tests_in_level: Count | None = None
    verdict_null_reason: str | None = None
    requests_for_margin_null_reason: str | None = None
    hdi: CredibleInterval | None = None
    eti: CredibleInterval | None = None
    depth: Count | None = None
    df: float | None = None
    n_differing: Count | None = None
    small_sample: bool | None = None
    coverage_at_size: CoverageAtSize | None = None
    estimator: str | None = None
    verdict_reason: str | None = None
    tail_width: float | None = field(default=None, metadata={OMIT_NONE: True})


@dataclass(frozen=True)
class Survival:
    """P(A ≥ j) of one arm at position j in one cell."""

    arm: Name
    position: Count
    value: float | None
    label: Label
    null_reason: str | None
    rounds: Count | None = None


@dataclass(frozen=True)
class Offpath:
    """Off-path rates of one arm: accepted tokens ≠ the archived draft; evaluated after one."""

    arm: Name
    accepted_offpath_share: float | None
    evaluated_offpath_share: float | None
    label: Label
    null_reason: str | None


@dataclass(frozen=True)
class ImportanceDiagnostic:
    """Tail diagnostics of one arm's policy ratio at one depth in one cell.

    See docs/methods.md#the-importance-estimator-and-its-weight.

    ``ess`` = (Σ r)²/Σ r² and ``ess_share`` = ess / ``rounds`` of the policy ratio r_k =
    Π_{j≤k} q^s_j/q^L_j over the cell's rounds that recorded ``depth`` positions; ``pareto_k`` its
    right-tail Pareto k̂ (PSIS, r_eff = 1); ``khat_threshold`` = min(1 − 1/log10 rounds, 0.7);
    ``warning`` every threshold crossed (k̂ > 0.7, k̂ above the sample-size threshold, ESS share
    < 0.1); ``null_reason`` why ``ess`` or ``pareto_k`` is null (the logging arm: "ratio
    constant (the logging arm)", with ESS = rounds); ``bound_ratio`` the largest exact per-round
    bound of r_k (Π_{j≤k} max_x q^s_j(x)/q^L_j(x)) over the cell's rounds divided by their mean
    r_k; ``moment_ratio`` the largest exact per-round second-moment bound of r_k
    (Π_{j≤k} Σ_x q^s_j(x)²/q^L_j(x)) divided by the squared mean r_k, the size beside k̂'s shape
    that ``--estimator auto`` reads (both null with no ratio, or past float64's range: a
    logging probability too small for the ratio it gives, which the rule reads as > 10).
    """

    arm: Name
    depth: Count
    rounds: Count
    ess: float | None
    ess_share: float | None
    pareto_k: float | None
    khat_threshold: float | None
    warning: str | None
    label: Label
    null_reason: str | None
    bound_ratio: float | None = None
    moment_ratio: float | None = None


@dataclass(frozen=True)
class DepthFigure:
    """R of one arm at one fixed depth (the depth sweep's slot).

    See docs/methods.md#the-sweep-cost-model-and-the-best-depth, docs/outputs.md#resultsjson.
    ``tail_width``, ``tail_limit`` as :class:`ArmFigure`'s (``lo``/``hi`` include the width; the
    best depth and ``p_best`` read the midpoints).
    """

    arm: Name
    depth: Count
    R: float | None
    lo: float | None
    hi: float | None
    label: Label
    supported: bool
    null_reason: str | None
    tokens_per_s: float | None = None
    tokens_per_s_lo: float | None = None
    tokens_per_s_hi: float | None = None
    p_best: float | None = None
    round_ms: float | None = None
    rank: Count | None = None
    gain: float | None = None
    gain_lo: float | None = None
    gain_hi: float | None = None
    tail_width: float | None = field(default=None, metadata={OMIT_NONE: True})
    tail_limit: float | None = field(default=None, metadata={OMIT_NONE: True})


@dataclass(frozen=True)
class PolicyFigure:
    """R, E[L] and tokens/s of one arm's sampler drafting by one policy (``sweep --policy``).

    See docs/methods.md#policies-adaptive-drafting, docs/outputs.md#resultsjson. ``policy`` is
    the canonical spelling; ``E_L`` the positions drafted per round; ``round_ms`` the expected
    cost of a round under ``--cost``; ``tokens_per_s_null_reason`` why a cost table cannot price
    it; the rest as a :class:`DepthFigure`'s (``p_best`` over the arm's depths and policies).
    """

    arm: Name
    policy: Name
    E_L: float | None
    R: float | None
    lo: float | None
    hi: float | None
    label: Label
    supported: bool
    null_reason: str | None
    tokens_per_s: float | None = None
    tokens_per_s_lo: float | None = None
    tokens_per_s_hi: float | None = None
    p_best: float | None = None
    round_ms: float | None = None
    tokens_per_s_null_reason: str | None = None


@dataclass(frozen=True)
class ScreenFigures:
    """The per-cell inputs of the depth screen, in ms; T_B MEASURED, the rest config.

    See docs/methods.md#the-screens-rate-sp2.

    ``step_p50_ms`` is T_B (median over runs of each run's step p50) with the runs' extrema;
    ``draft_p50_ms`` D_B; ``cap`` c_B; ``e_ref_ms`` the central e_ref; ``runs`` and ``suites``
    the runs pooled into the cell; ``rounds`` their Σ request_rounds.
    """

    cap: Count
    draft_p50_ms: float
    e_ref_ms: float
    step_p50_ms: float
    step_p50_min_ms: float
    step_p50_max_ms: float
    runs: Count
    rounds: Count
    suites: tuple[str, ...]
    label: Label


@dataclass(frozen=True)
class StepTime:
    """The step time two scrapes' latency histogram gives: MEASURED (binned).

    See docs/commands.md#screen.

    ``metric`` is the histogram read (``vllm:inter_token_latency_seconds``, or
    ``vllm:time_per_output_token_seconds`` in older vLLM); ``observations`` its Δ count between
    the scrapes; ``median_ms`` the median of the differenced buckets by linear interpolation
    within the bucket, as Prometheus' ``histogram_quantile(0.5, …)`` computes it (null with the
    reason when it is NaN there). It pools every step of every request: it is not SP2's median
    per-request step p50.
    """

    metric: str
    observations: Count
    median_ms: float | None
    label: Label
    binned: bool
    null_reason: str | None


@dataclass(frozen=True)
class ScrapeFigures:
    """What two vLLM scrapes measure by themselves (docs/commands.md#screen), MEASURED.

    ``name`` is the pair's letter (A, B, … in the order read: ``[[vllm]]`` entries, the command
    line's other pairs, then ``--vs``); ``model_name`` the model read (``--model-name``, or the
    only one the scrapes hold), ``engine`` the ``--engine`` kept (None: every engine summed),
    ``engines`` the engine labels summed. Counts are the Δ between ``before`` and ``after``:
    ``drafts`` (rounds), ``draft_tokens``, ``accepted_tokens``. ``mean_acceptance_length`` = 1 +
    accepted/drafts (R); ``draft_acceptance_rate`` = accepted/draft_tokens; ``per_position``
    vLLM's "Per-position acceptance rate" (survivals P(A ≥ j), position j = label + 1), values
    null with ``per_position_null_reason`` for short proposals or a scrape without the
    per-position counter. ``step`` is the latency histogram's median when the scrapes hold it.
    """

    name: Name
    before: str
    after: str
    model_name: str | None
    engine: str | None
    engines: tuple[str, ...]
    drafts: Count
    draft_tokens: Count
    accepted_tokens: Count
    mean_acceptance_length: float
    draft_acceptance_rate: float | None
    per_position: tuple[Survival, ...]
    per_position_null_reason: str | None
    label: Label
    step: StepTime | None


@dataclass(frozen=True)
class ScrapeDelta:
    """Δ of the mean acceptance length between two scrape pairs (``screen … --vs …``).

    See docs/commands.md#screen.

    ``point`` = R_b − R_a (MEASURED, exact from the counts). ``se`` = √(se_a² + se_b²) with
    se = √(Var(A)/N) per side, Var(A) = Σ_i (2i − 1)·S_i − (Σ_i S_i)² per round: it treats rounds
    as independent, and rounds cluster by request, so it is a LOWER BOUND of the real SE
    (``se_is_lower_bound``); null with ``se_null_reason`` when a side has no survivals.
    """

    a: Name
    b: Name
    point: float
    se: float | None
    se_a: float | None
    se_b: float | None
    var_a: float | None
    var_b: float | None
    se_is_lower_bound: bool
    label: Label
    se_null_reason: str | None


@dataclass(frozen=True)
class Requalification:
    """QUALIFIED / NOT QUALIFIED / INCONCLUSIVE, or None with the reason.

    See docs/methods.md#requalification.
    """

    verdict: str | None
    because: str | None
    label: Label
    null_reason: str | None


@dataclass(frozen=True)
class Budget:
    """Break-even added cost of one cell, ms per round; ESTIMATED.

    See docs/methods.md#the-budget-break-even-cost.

    ``break_even_ms`` = ``price_ms``·``delta_lo``/``r0``; ``remaining_ms`` = ``break_even_ms`` −
    ``known_ms`` (the sum of the known added costs); both null, with the reason, when Δ_lo ≤ 0
    (nothing to spend) or the gain's interval is null.
    """

    r0: float | None
    delta_lo: float | None
    price_ms: float
    known_ms: float
    break_even_ms: float | None
    remaining_ms: float | None
    label: Label
    null_reason: str | None


@dataclass(frozen=True)
class Sensitivity:
    """Conditional rate r_0·(1 + g)·τ/(τ + x) at one extra cost x; ESTIMATED.

    See docs/methods.md#the-budget-break-even-cost.
    """

    rate: float
    tau_ms: float
    gain: float
    extra_ms: float
    rate_with_extra: float
    rel_change: float
    label: Label


@dataclass(frozen=True)
class Cell:
    """Every figure of one cell (see the module docstring)."""

    level: Level
    family: Name | None
    bucket: Name | None
    n_requests: Count
    arms: dict[Name, ArmFigure]
    deltas: tuple[Delta, ...] = ()
    depths: tuple[DepthFigure, ...] = ()
    policies: tuple[PolicyFigure, ...] = ()
    survival: tuple[Survival, ...] = ()
    offpath: tuple[Offpath, ...] = ()
    requalification: Requalification | None = None
    null_reason: str | None = None
    importance: tuple[ImportanceDiagnostic, ...] = ()
    best_depth: dict[Name, Count] | None = None
    budget: Budget | None = None
    batch: Count | None = None
    context: Count | None = None
    worker: Name | None = None
    screen: ScreenFigures | None = None
    group: dict[Name, Name] | None = None
    excluded: Count | None = None

    def __repr__(self) -> str:
        """At most 20 lines: name, size, R per arm, deltas (:mod:`specreplay.results.summary`)."""
        return REPRS["Cell"](self)

    def delta(self, role: Role | str) -> Delta | None:
        """Return the cell's delta of ``role`` (None when it has none).

        ``role``: a :class:`Role` or its spelling (``"candidate-vs-baseline"``); a name that is
        no role raises :class:`~specreplay.errors.SpecReplayError` with the valid ones.
        """
        r = _role(role)
        return next((d for d in self.deltas if d.role == r), None)

    def best_depth_figure(self, arm: str) -> DepthFigure | None:
        """Return ``arm``'s figure at its best depth (``best_depth``; None without one)."""
        best = (self.best_depth or {}).get(arm)
        return next((d for d in self.depths if d.arm == arm and d.depth == best), None)

    @property
    def name(self) -> str:
        """The cell as a person names it: pooled, a family, ``bucket B`` or ``F × B``."""
        if self.level == Level.POOLED:
            return "pooled"
        if self.level == Level.FAMILY:
            return str(self.family)
        if self.level == Level.BUCKET:
            return f"bucket {self.bucket}"
        if self.level == Level.SCREEN:
            return f"B{self.batch} × context {self.context} × {self.worker}"
        by = " × ".join(f"{k}={v}" for k, v in (self.group or {}).items())
        if self.level == Level.BY:
            return by
        if self.level == Level.FAMILY_BUCKET_BY:
            return f"{self.family} × {self.bucket} × {by}"
        return f"{self.family} × {self.bucket}"


@dataclass(frozen=True)
class LawTest:
    """One law test of an arm at one position, or a null one with its reason.

    See docs/methods.md#law-tests.
    """

    arm: Name
    position: Count
    tv: float | None
    p_adj: float | None
    passed: bool | None
    label: Label
    null_reason: str | None = None
    request: str | None = None
    round: Count | None = None
    acceptance_rate: float | None = None
    draws: Count | None = None
    statistic: float | None = None
    df: Count | None = None
    p_value: float | None = None
    power: float | None = None
    underpowered: bool | None = None
    merged_categories: tuple[Count, ...] | None = None
    categories: Count | None = None
    method: str | None = None
    draws_rule: str | None = None


@dataclass(frozen=True)
class KeptMass:
    """One law's mass on the kept candidates over an archive's positions (``validate``).

    ``min``, ``p01``, ``p10``, ``median``: the smallest kept mass and its 1%, 10% and 50%
    quantiles (to 1e-4); ``below_099``: the share of positions whose kept mass is below 0.99.
    """

    positions: Count
    min: float
    p01: float
    p10: float
    median: float
    below_099: float


@dataclass(frozen=True)
class KeptMasses:
    """The draft's (Σ ``emitted_q``) and the target's (Σ ``target_probs``) kept mass.

    ``tails_recorded``: the archive records the mass outside the candidates (schema v2's
    ``draft_tail``, ``target_tail``), so the replay knows what it does not see; False (schema
    v1): ``emitted_q`` holds the logging law renormalised on the candidates, and whatever a
    truncating capture left out is unknown. ``draft`` is None without ``emitted_q``.
    """

    draft: KeptMass | None
    target: KeptMass | None
    tails_recorded: bool


@dataclass(frozen=True)
class ShortRoundCounts:
    """What a default run does with an archive's short rounds (``validate``; issue 16).

    ``depth``: the most positions any round records (the depth a run of the logging arm asks);
    ``short`` of ``rounds`` record fewer. A default run (``--short-rounds capped``) leaves out
    ``capped_marked`` (marked ``capped``: the request's end or token limit) and
    ``last_unmarked`` (a request's last round, where the mark is unknown), and keeps
    ``kept_short`` (the drafter's own short proposals: the cells holding them are null past
    their length); ``shortest``: the fewest positions a round records.
    """

    depth: Count
    rounds: Count
    short: Count
    capped_marked: Count
    last_unmarked: Count
    kept_short: Count
    shortest: Count


@dataclass(frozen=True)
class ArchiveSummary:
    """The shape of a position-trace archive, as ``validate`` and ``demo`` describe it."""

    files: Count
    rows: Count
    requests: Count
    rounds: Count
    positions: Count
    requests_by_family: dict[Name, Count]
    rounds_by_bucket: dict[Name, Count]
    min_depth: Count
    max_depth: Count
    logging_arm: Name | None
    optional_columns: tuple[str, ...]
    carried_columns: tuple[str, ...]
    kept_mass: KeptMasses | None = field(default=None, metadata={OMIT_NONE: True})
    short_rounds: ShortRoundCounts | None = field(default=None, metadata={OMIT_NONE: True})


class Replicates(Protocol):
    """The joint bootstrap replicates behind a result's headline comparison, kept in memory.

    A pipeline that bootstraps comparisons (``interval``: b-vs-a; ``requalify``:
    candidate-vs-baseline; ``sweep``: each depth against the reference depth) sets
    :attr:`Result.replicates` to an object with this method
    (:class:`specreplay.stats.arviz_bridge.ComparisonReplicates`, ``DepthReplicates``);
    results.json never holds them, so a result read back from disk has none.
    """

    def tree(self) -> Any:
        """Return the replicates as an ArviZ ``DataTree`` (group ``posterior``)."""
        ...


IN_MEMORY = "in_memory"
"""Metadata key of a dataclass field that is never written to results.json (nor read from it)."""


def written(f: dataclasses.Field[Any]) -> bool:
    """Return whether the dataclass field ``f`` is part of results.json (not in memory only)."""
    return not f.metadata.get(IN_MEMORY, False)


# -- What results.json holds beside the dataclasses' fields (checked by results.schema) ----------

Command = Literal[
    "budget",
    "convert",
    "demo",
    "interval",
    "lawtest",
    "requalify",
    "screen",
    "sweep",
    "synth",
    "validate",
]
"""The commands that write a results.json (``synth`` and ``convert``: their SYNTH.json), the
values ``command`` may take."""


class Environment(TypedDict):
    """``environment``: the versions and the Numba threads of the run."""

    python: str
    numba: str
    polars: str
    numpy: NotRequired[str]
    threads: Count


class Margin(TypedDict):
    """An equivalence margin as results.json shows it (``options.margin``, ``fewest_bits``)."""

    margin: float
    kind: Literal["relative", "absolute"]
    text: str


class ScreenCentral(TypedDict):
    """``options.central`` of ``screen``: the central assumption of the rate model."""

    overlap: float
    overhead_ms: float
    slope: float


class ScreenEnvelope(TypedDict):
    """``options.envelope`` of ``screen``: the values the band spans."""

    overlap: list[float]
    overhead_ms: list[float]
    slope: list[float]


class OptionsRead(TypedDict, total=False):
    """The entries of ``options`` that a renderer reads, with their types.

    ``options`` records the command line as given: any other entry is an option name
    (``[a-z][a-z0-9_]*``, at most 64 characters) with a JSON value (finite numbers, 64-bit
    integers), shown as recorded and never interpreted.
    """

    margin: Margin
    buckets: str | None
    cost: str | None
    estimator: str | None
    estimator_used: str | None
    estimator_reason: str | None
    stratify: str | None
    min_requests: Count | None
    family_alpha: float
    reference_depth: Count | None
    by: str | None
    candidate: str | None
    baseline: str | None
    reference: str | None
    depths: list[Count]
    policies: list[str]
    price_ms: float
    requests: Count
    positions: Count
    counters: list[str]
    config: str | None
    central: ScreenCentral
    envelope: ScreenEnvelope
    replicates: Count | None
    archive: str | None
    path: str | None
    a: str | None
    b: str | None


REQUIRED_OPTIONS: dict[str, tuple[str, ...]] = {
    "interval": ("margin",),
    "requalify": ("margin", "candidate", "baseline"),
    "lawtest": ("family_alpha",),
    "demo": ("requests",),
    "budget": ("price_ms",),
}
"""The ``options`` entries each command's results.json holds, which its renderers read."""


class CacheEntry(TypedDict):
    """``cache``: input-hash cache entries that failed their check and were recomputed."""

    recomputed: Count
    recomputed_files: list[str]


class DraftMassOutside(TypedDict):
    """``capture.draft_mass_outside``: the draft mass a capture left outside the candidates."""

    positions: Count
    mean: float
    max: float
    renormalised: bool


class CaptureSummary(TypedDict):
    """``capture`` (``validate`` of a folder a recorder wrote): the writers' counts, summed.

    The one declaration of the object (:func:`specreplay.pipelines.validate.capture_summary`
    builds it): a key added there is added here, or report refuses the results.json.
    """

    writers: Count
    sample: list[float]
    writers_open: Count
    writers_failed: Count
    requests_seen: Count
    requests_sampled: Count
    requests_incomplete: Count
    rounds_offered: Count
    rounds_recorded: Count
    rounds_dropped_queue_full: Count
    rows: Count
    draft_mass_outside: NotRequired[DraftMassOutside]
    rounds_dropped_bad: NotRequired[Count]
    rounds_dropped_after_bad: NotRequired[Count]
    dropped_reasons: NotRequired[dict[str, Count]]


class ShardCacheReport(TypedDict):
    """``replay_backend.cache``: what ``--cache`` did (``rejected_files``: before issue 17)."""

    folder: str
    shards: Count
    reused: Count
    replayed: Count
    replayed_files: list[str]
    recomputed: NotRequired[Count]
    recomputed_files: NotRequired[list[str]]
    rejected: NotRequired[Count]
    rejected_files: NotRequired[list[str]]


class ReplayBackend(TypedDict):
    """``replay_backend``: where a requalify or sweep replayed its shards."""

    runner: Literal["local", "dask"]
    scheduler: str | None
    workers: Count | None
    tasks: Count | None
    cache: ShardCacheReport | None


class BitsStep(TypedDict):
    """One step of the fixed-sequence test of ``fewest_bits``."""

    arm: Name
    bits: Count | None
    verdict: str | None


class FewestBits(TypedDict):
    """``fewest_bits`` (``sweep --baseline``): the fewest dyadic bits that stay EQUIVALENT."""

    baseline: Name
    margin: Margin
    sequence: list[BitsStep]
    fewest_bits_equivalent: Name | None
    stopped_at: Name | None
    label: Literal["SIMULATED"]
    null_reason: str | None


class PolicyAgainst(TypedDict):
    """A held-out policy's Δ tokens/s against one fixed depth."""

    depth: Count
    lo: float | None
    rel_lo: float | None
    margin_tokens_per_s: float


class PolicyDelta(TypedDict):
    """Δ tokens/s of a policy against a fixed depth (``in_sample``; ``held_out`` adds more)."""

    policy: Name
    depth: Count
    tokens_per_s_policy: float
    tokens_per_s_depth: float
    delta_tokens_per_s: float
    lo: float | None
    hi: float | None
    rel_lo: float | None
    rel_hi: float | None
    n_requests: Count
    interval_method: str
    label: NotRequired[str]


class PolicyHeldOut(PolicyDelta):
    """The held-out half's Δ, against every depth, and its verdict."""

    against: list[PolicyAgainst]
    differing_requests: Count
    margin_tokens_per_s: float
    verdict: Literal["PAYS", "DOES NOT PAY", "INCONCLUSIVE"]
    verdict_reason: str | None


class PolicyChoice(TypedDict):
    """One arm's entry of ``policy_choice`` (``sweep --policy``; null with the reason)."""

    arm: Name
    label: Literal["ESTIMATED"]
    null_reason: str | None
    selected_policy: NotRequired[Name]
    selected_depth: NotRequired[Count]
    held_out: NotRequired[PolicyHeldOut]
    in_sample: NotRequired[PolicyDelta]


class ResultExtra(TypedDict, total=False):
    """The top-level keys a command adds beside :class:`Result`'s fields (``Result.extra``).

    The one list of them: a key no command writes is refused by ``report``.
    """

    cache: CacheEntry
    capture: CaptureSummary
    fewest_bits: FewestBits
    policy_choice: list[PolicyChoice]
    replay_backend: ReplayBackend
    written_by: Literal["specreplay"]


_HEADLINE_ROLE: dict[str, Role] = {"interval": Role.B_VS_A}
"""The delta whose pooled verdict is a command's headline (``requalify`` has its own object)."""


@dataclass(frozen=True)
class Result:
    """What one command found: the whole of results.json (docs/outputs.md#resultsjson).

    ``replicates`` (not written, not compared) holds the joint bootstrap replicates of the run's
    headline comparison when the run was made in this process (:meth:`to_arviz`).
    """

    command: str
    version: str
    created_utc: str
    seed: Seed
    environment: dict[str, Any]
    inputs: tuple[InputFile, ...]
    options: dict[str, Any]
    assumptions: tuple[str, ...]
    excluded: tuple[Excluded, ...]
    arms: tuple[Name, ...]
    law_tests: tuple[LawTest, ...]
    cells: tuple[Cell, ...]
    schema: str = SCHEMA_ID
    requalification: Requalification | None = None
    logging_arm: Name | None = None
    path_bias: Delta | None = None
    sources: dict[Name, str] | None = None
    archive: ArchiveSummary | None = None
    outputs: tuple[InputFile, ...] | None = None
    sensitivity: tuple[Sensitivity, ...] | None = None
    columns_not_read: tuple[str, ...] | None = None
    inputs_ignored: tuple[InputIgnored, ...] = ()
    validation: InputValidation | None = field(default=None, metadata={OMIT_NONE: True})
    interval_method: IntervalMethod | None = None
    scrapes: tuple[ScrapeFigures, ...] | None = field(default=None, metadata={OMIT_NONE: True})
    scrape_delta: ScrapeDelta | None = field(default=None, metadata={OMIT_NONE: True})
    extra: dict[str, Any] = field(default_factory=dict)
    replicates: Replicates | None = field(
        default=None, compare=False, repr=False, metadata={IN_MEMORY: True}
    )

    def __repr__(self) -> str:
        """At most 20 lines: the command, arms, cells, pooled verdicts, where the rest is.

        (:mod:`specreplay.results.summary`, through :data:`REPRS`; the dataclass repr spelled
        out every cell.)
        """
        return REPRS["Result"](self)

    @property
    def pooled(self) -> Cell:
        """The pooled cell (the first one)."""
        return self.cells[0]

    @property
    def verdict(self) -> str | None:
        """The run's headline verdict, or None where the command has none.

        - ``requalify``: the pooled requalification, QUALIFIED / NOT QUALIFIED / INCONCLUSIVE
          (``result.requalification.verdict``; None with its ``null_reason`` there);
        - ``interval``: the pooled b-vs-a verdict, EQUIVALENT / DIFFERENT / INCONCLUSIVE
          (``result.pooled.delta(Role.B_VS_A).verdict``; None with the delta's ``null_reason``);
        - every other command: None. A sweep answers with a best depth per arm
          (``cell.best_depth``), a law test with ``passed`` per test (``result.law_tests``),
          ``screen``, ``budget`` and ``validate`` with figures: none of them decides between
          two arms, so none has a verdict to put here.
        """
        if self.command == "requalify":
            return self.requalification.verdict if self.requalification is not None else None
        role = _HEADLINE_ROLE.get(self.command)
        if role is None or not self.cells:
            return None
        d = self.pooled.delta(role)
        return d.verdict if d is not None else None

    def to_arviz(self) -> Any:
        """Return the joint bootstrap replicates of the headline comparison as a DataTree.

        One chain of ``n_boot`` draws per cell, in the ArviZ group ``posterior``: ``delta``
        (Δ = R_b − R_a), ``rel`` (Δ/R_a) and ``rb`` (R_b), dims (chain, draw, cell), the
        ``cell`` coordinate naming each cell (``pooled``, a family, a bucket, ``family ×
        bucket``); every request of a replicate is drawn once for all cells, so the cells'
        draws are joint. ``interval``: the b-vs-a comparison; ``requalify``: the
        candidate-vs-baseline one. ``sweep``: ``R`` (R at each depth), ``delta`` and ``rel``
        (against the arm's reference depth), dims (chain, draw, arm, depth, cell), one joint
        resample for every arm and depth (the draws behind ``p_best``). NaN marks a replicate
        with no rounds in a cell, or a depth that is unsupported. A cell whose draws are the
        pooled cell's (it holds every request: the only bucket, the only family) is left out,
        named in the tree's ``attrs["cells_left_out"]``; ``attrs["ci_prob"]`` is the run's
        interval level, ArviZ 1.x's name for it: ``az.summary(tree,
        ci_prob=tree.attrs["ci_prob"])`` shows the report's 95% (ArviZ's default is 0.89).

        Raises
        ------
        SpecReplayError
            For a result read back from results.json (the replicates are not written) and for
            a command that keeps none.

        Examples
        --------
        >>> from pathlib import Path
        >>> from specreplay import api
        >>> data = Path("tests/data/medusa-mtbench")
        >>> stem = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
        >>> res = api.interval(data / f"medusa-vicuna-7b-v1.3-{stem}",
        ...                    data / f"medusa-vicuna-13b-v1.3-{stem}",
        ...                    question_file=data / "question.jsonl", n_boot=2000)
        >>> tree = res.to_arviz()
        >>> tree["posterior"]["delta"].sizes["draw"], res.verdict, tree.attrs["ci_prob"]
        (2000, 'DIFFERENT', 0.95)
        """
        if self.replicates is None:
            if self.command not in ("interval", "requalify", "sweep"):
                raise SpecReplayError(
                    f"to_arviz: a {self.command} result has no bootstrap replicates (interval, "
                    "requalify and sweep results have)"
                )
            raise SpecReplayError("replicates are not stored; rerun through the API")
        return self.replicates.tree()

    @property
    def backend_line(self) -> str | None:
        """Where the shards were replayed and what the cache did, as one line; None when local.

        Read from the ``replay_backend`` entry the run recorded (:mod:`specreplay.results.backend`),
        so a result read back from results.json says the same as the fresh one.
        """
        return backend_line(self.extra.get("replay_backend"))

    def to_polars(self, view: str = "cells") -> pl.DataFrame:
        """Return a tabular view of this result as a polars frame.

        Parameters
        ----------
        view : str
            ``cells`` (default: the rows of cells.parquet), ``arms``, ``deltas``, ``depths``,
            ``survival`` or ``law_tests``; :mod:`specreplay.results.views` documents each
            view's columns.

        Raises
        ------
        SpecReplayError
            For a view that does not exist.
        """
        make = VIEWS.get(view)
        if make is None:
            raise SpecReplayError(f"view={view!r}: should be one of {', '.join(VIEWS)}")
        return make(self)


REPRS: dict[str, Callable[[Any], str]] = {}
"""The reprs of :class:`Result` and :class:`Cell` by class name, registered by
:mod:`specreplay.results.summary` (imported by the package, as the views are: no import cycle).
"""

VIEWS: dict[str, Callable[[Result], pl.DataFrame]] = {}
"""``Result.to_polars`` views by name, registered by :mod:`specreplay.results.views`.

The package imports that module, so the views are there whenever a result exists; the registry
keeps this module free of imports from the rest of the results layer (no import cycle).
"""
