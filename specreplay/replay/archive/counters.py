"""Reading the depth screen's inputs: run-counter JSONL, vLLM metrics, the TOML config.

See docs/inputs.md#run-counters-and-vllm-scrapes.

**Run counters** (JSON Lines, one run a line): ``suite``, ``worker`` (strings), ``batch`` (B ≥ 1),
``context`` (nominal, integer ≥ 0), ``request_rounds`` (≥ 1), ``accepted_position`` (list of the
counts of rounds with A ≥ i for i = 1..k, 1 ≤ k; non-increasing, each ≤ request_rounds) and
``step_p50_ms`` (> 0). Other keys are ignored and never recorded.

**vLLM** Prometheus text exposition. The names are those vLLM registers in
``vllm/v1/spec_decode/metrics.py`` (``SpecDecodingProm``: prometheus_client Counters
``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_draft_tokens``,
``vllm:spec_decode_num_accepted_tokens`` and ``vllm:spec_decode_num_accepted_tokens_per_pos`` with
the extra label ``position`` = 0..num_speculative_tokens − 1), labelled ``model_name`` and
``engine`` (``vllm/v1/metrics/loggers.py``); prometheus_client exposes a Counter's samples with the
``_total`` suffix, the names read here. Both confirmed in vLLM's public code (vllm-project/vllm).
``observe_draft`` increments positions 0..accepted − 1 of one draft, so per-position counts are
already survivals: S_{i+1} = per_pos[i] / drafts, never a product. Two scrapes (before and after
a benchmark) are differenced series by series (a series that decreased or vanished, a reset, is an
error), then summed over the ``engine`` label sets of one ``model_name`` (``--engine`` keeps one
engine's series first). The latency histogram :data:`VLLM_LATENCY` is read the same way: its
``_bucket`` (label ``le``) and ``_count`` samples, differenced per series and summed per bound
(:func:`pair_counts`; :mod:`specreplay.stats.scrapes` takes its median). A vLLM run's rounds are
its drafts; its suite, worker, batch, context and step p50 come from a ``[[vllm]]`` entry of the
config (the step p50 from the histogram's median when the entry has none).

**Which parser reads a scrape.** prometheus_client parses it, after the ``curl -i`` headers
are skipped (below): its OpenMetrics parser (``prometheus_client.openmetrics.parser``, which
requires the final ``# EOF`` line) when the saved response's ``Content-Type`` is
``application/openmetrics-text``, or, with no ``Content-Type`` (a plain save), when the last
non-blank line is ``# EOF``; its Prometheus text-format parser (``prometheus_client.parser``,
``text/plain; version=0.0.4``, what vLLM's ``/metrics`` answers by default) otherwise. Blank lines
after an OpenMetrics ``# EOF`` are dropped first. A line either parser refuses is one error
naming the file and the line (``malformed labels {…}``, ``value '…' is not a number``, ``not a
Prometheus sample line``, ``not OpenMetrics text: …``); the checks below are this module's own.

A scrape that would give a silent wrong figure is refused, naming the file and the series
(issue 9): two ``model_name`` values without ``--model-name`` (summing them mixes two models'
acceptance); Δ``num_accepted_tokens`` ≠ Σ Δ``num_accepted_tokens_per_pos`` (the counts disagree);
*short proposals*, Δ``num_draft_tokens`` < Δ``num_drafts`` × positions (an n-gram drafter proposes
fewer tokens than the positions, so a per-position count is not a survival of rounds that drafted
the position: no survival and no depth screen, :func:`vllm_run` refuses them and its message gives
the mean acceptance length 1 + Δaccepted/Δdrafts, which stays exact; :func:`pair_counts` only
marks them, and ``screen`` without a config gives null per-position rates with the reason); a
vLLM V0 scrape (V0 series, no ``num_drafts``).
A scrape saved with ``curl -i`` has its HTTP headers skipped (up to the first blank line; a status
other than 200 is refused); line numbers stay those of the file.

**Config** (TOML, every key optional): ``trained_block``, ``depths``, ``h_ms`` (H indexed from
depth 0), ``[caps]`` and ``[draft_p50_ms]`` (tables keyed by batch size), ``[central]`` and
``[envelope]`` (``overlap``, ``overhead_ms``, ``slope``; scalars and lists), ``[[vllm]]`` entries
(``suite``, ``worker``, ``batch``, ``context``; ``step_p50_ms`` unless the scrapes hold the latency
histogram; ``before`` and ``after`` together or not at all — paths relative to the config file:
an entry that names them reads them from there, one that does not takes the command line's next
BEFORE AFTER pair). An unknown key is an error.

Every problem is a :class:`~specreplay.errors.SpecReplayError` naming the file and the line.
"""

from __future__ import annotations

import io
import math
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import (
    text_fd_to_metric_families as om_text_fd_to_metric_families,
)
from prometheus_client.parser import text_fd_to_metric_families
from prometheus_client.samples import Sample

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.sources import parse_json_line, text_lines
from specreplay.stats.screen import ScreenParams

__all__ = [
    "VLLM_LATENCY",
    "VLLM_METRICS",
    "VLLM_V0_METRICS",
    "CounterRun",
    "PairCounts",
    "ScrapePair",
    "ScreenConfig",
    "Series",
    "VllmEntry",
    "is_openmetrics",
    "is_prometheus_text",
    "pair_counts",
    "read_config",
    "read_counter_runs",
    "read_prometheus",
    "vllm_run",
]

_P = "vllm:spec_decode_"
VLLM_METRICS = {
    "drafts": _P + "num_drafts_total",  # first: the series every V1 scrape has
    "draft_tokens": _P + "num_draft_tokens_total",
    "accepted_tokens": _P + "num_accepted_tokens_total",
    "per_pos": _P + "num_accepted_tokens_per_pos_total",
}
"""The exposed sample names read (``_total``: prometheus_client's suffix for a Counter)."""
VLLM_V0_METRICS = (
    _P + "draft_acceptance_rate",
    _P + "efficiency",
    _P + "num_emitted_tokens_total",
)
"""Series only vLLM V0 exposes (its spec-decode gauges and emitted-token counter)."""
VLLM_LATENCY = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
"""The step-latency histograms, in order of preference: current V1 (``vllm/v1/metrics/loggers.py``
at 0.33.0, one observation per request per engine step), then older releases' name."""
_LATENCY_SAMPLES = {f"{h}_{s}": h for h in VLLM_LATENCY for s in ("bucket", "count")}
_HTTP_LIKE = re.compile(r"^HTTP/")
"""A line that claims to be a status line: it is read strictly (:data:`_HTTP_STATUS`) or refused."""
_HTTP_STATUS = re.compile(r"^HTTP/(?:1\.0|1\.1|2|3) (?P<status>[0-9]{3})(?: |\r?$)")
"""The status line ``curl -i`` writes on top of a saved response, read strictly (issue 17): the
version ``HTTP/1.0``, ``HTTP/1.1``, ``HTTP/2`` or ``HTTP/3``, one space, exactly three ASCII digits,
then a space or the end of the line (``HTTP/1.1 2000 OKAY`` is no status line)."""


@dataclass(frozen=True)
class CounterRun:
    """One benchmark run's counters; ``where`` is ``PATH:line N`` (or the two scrapes)."""

    where: str
    suite: str
    worker: str
    batch: int
    context: int
    request_rounds: int
    accepted_position: tuple[int, ...]
    step_p50_ms: float


@dataclass(frozen=True)
class VllmEntry:
    """A ``[[vllm]]`` config entry: the run's non-counter keys, and its scrapes when it names them.

    ``before``/``after`` are None when the entry takes the next scrape pair of the command line;
    ``step_p50_ms`` is None when the step time comes from the scrapes' latency histogram.
    """

    where: str
    before: Path | None
    after: Path | None
    suite: str
    worker: str
    batch: int
    context: int
    step_p50_ms: float | None


@dataclass(frozen=True)
class ScrapePair:
    """Two scrapes of one engine: before and after a benchmark."""

    before: Path
    after: Path


@dataclass(frozen=True)
class PairCounts:
    """The Δ of a scrape pair's spec-decode counters, summed over the engines kept.

    ``per_pos`` is None when the scrapes have no per-position counter; ``short`` marks short
    proposals (Δdraft_tokens < Δdrafts × positions: the per-position counts are not survivals).
    ``latency`` names the latency histogram read (None: none in the scrapes) and
    ``latency_buckets`` its differenced cumulative buckets (upper bound, Δcount).
    """

    pair: ScrapePair
    models: tuple[str, ...]
    engines: tuple[str, ...]
    drafts: int
    draft_tokens: int
    accepted: int
    per_pos: tuple[int, ...] | None
    short: bool
    latency: str | None
    latency_buckets: tuple[tuple[float, int], ...]
    latency_count: int


@dataclass(frozen=True)
class ScreenConfig:
    """The parsed config: the screen's assumptions and the vLLM runs."""

    params: ScreenParams
    vllm: tuple[VllmEntry, ...]


_RUN_KEYS = (
    "suite",
    "worker",
    "batch",
    "context",
    "request_rounds",
    "accepted_position",
    "step_p50_ms",
)


def _int(value: Any, key: str, where: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise SpecReplayError(f"{where}: {key} should be an integer ≥ {lo}, got {value!r}")
    return value


def _finite(value: Any) -> bool:
    """Tell whether ``value`` is a finite int or float (a bool is neither).

    An int past float's range is not finite (``math.isfinite`` would raise OverflowError).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _lines(path: Path) -> list[tuple[int, str]]:
    """Return (1-based physical line, text) of a file's lines, split at newlines only.

    ``str.splitlines`` would also split at U+2028, form feeds and other separators that JSON
    strings may hold, so a line number would no longer be the line an editor shows.
    """
    try:
        with path.open("rb") as fh:
            lines = list(text_lines(fh))
    except OSError as exc:
        raise SpecReplayError(f"{path}: cannot read: {exc.strerror}") from None
    out = []
    for lineno, line in lines:
        if line is None:
            raise SpecReplayError(f"{path}:line {lineno}: not valid UTF-8")
        out.append((lineno, line.rstrip("\r\n")))
    return out


def _pos(value: Any, key: str, where: str) -> float:
    if not _finite(value) or value <= 0:
        raise SpecReplayError(f"{where}: {key} should be a finite number > 0, got {value!r}")
    return float(value)


def _str(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecReplayError(f"{where}: {key} should be a non-empty string, got {value!r}")
    return value


def _survivals(counts: Any, rounds: int, where: str, key: str) -> tuple[int, ...]:
    if not isinstance(counts, list) or not counts:
        raise SpecReplayError(f"{where}: {key} should be a non-empty list of counts")
    out = tuple(_int(c, f"{key}[{i}]", where, 0) for i, c in enumerate(counts))
    for i, c in enumerate(out):
        if c > rounds:
            raise SpecReplayError(
                f"{where}: {key}[{i}] = {c} exceeds the rounds ({rounds}): counts are rounds "
                "with A ≥ i, at most one per round"
            )
        if i and c > out[i - 1]:
            raise SpecReplayError(
                f"{where}: {key} should be non-increasing (survival counts: rounds with A ≥ i), "
                f"got {list(out)}"
            )
    return out


def read_counter_runs(path: Path) -> list[CounterRun]:
    """Read a run-counter JSONL file; one :class:`CounterRun` per non-blank line.

    See docs/inputs.md#run-counters-and-vllm-scrapes.
    """
    runs: list[CounterRun] = []
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:line {lineno}"
        if not runs and _HTTP_LIKE.match(line):
            raise SpecReplayError(
                f"{where}: an HTTP response (saved with curl -i?), not run-counter JSON Lines"
            )
        row, problem = parse_json_line(line)
        if problem is not None:
            raise SpecReplayError(f"{where}: not JSON: {problem.removeprefix('invalid JSON: ')}")
        if not isinstance(row, dict):
            raise SpecReplayError(f"{where}: expected a JSON object")
        missing = [k for k in _RUN_KEYS if k not in row]
        if missing:
            raise SpecReplayError(f"{where}: missing key(s) {missing} of a run-counter row")
        rounds = _int(row["request_rounds"], "request_rounds", where, 1)
        runs.append(
            CounterRun(
                where=where,
                suite=_str(row["suite"], "suite", where),
                worker=_str(row["worker"], "worker", where),
                batch=_int(row["batch"], "batch", where, 1),
                context=_int(row["context"], "context", where, 0),
                request_rounds=rounds,
                accepted_position=_survivals(
                    row["accepted_position"], rounds, where, "accepted_position"
                ),
                step_p50_ms=_pos(row["step_p50_ms"], "step_p50_ms", where),
            )
        )
    if not runs:
        raise SpecReplayError(f"{path}: no run-counter rows")
    return runs


def is_prometheus_text(path: Path) -> bool:
    """Tell whether the file's first non-blank line is a ``#`` comment or a ``vllm:`` sample.

    HTTP headers on top (a scrape saved with ``curl -i``) are skipped up to the first blank line.
    """
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            headers = False
            for line in fh:
                if headers:
                    headers = bool(line.strip())  # the blank line that ends the headers
                elif _HTTP_LIKE.match(line):
                    headers = True  # read strictly, or refused, by _body_lines
                elif line.strip():
                    return line.startswith("#") or line.startswith("vllm:")
    except OSError:
        return False
    return False


@dataclass(frozen=True)
class _Body:
    """A scrape less its HTTP headers: its lines (physical numbers kept) and declared type."""

    lines: list[tuple[int, str]]
    content_type: str | None
    """The last response's ``Content-Type`` (lower case) when saved with ``curl -i``."""


def _content_type(headers: list[tuple[int, str]]) -> str | None:
    """Return the ``Content-Type`` of a block of HTTP header lines (lower case), if any."""
    for _, line in headers:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-type":
            return value.strip().lower()
    return None


def _body_lines(path: Path) -> _Body:
    """Return the lines of a scrape less HTTP headers on top (``curl -i``); line numbers kept.

    Each header block (``curl -iL`` saves one per redirect, ``100 Continue`` one more) ends at a
    blank line. The last response's status must be 200: any other holds no metrics, and is
    refused naming its status and line; a line that starts ``HTTP/`` but is no strict status line
    (:data:`_HTTP_STATUS`) is refused with the line. Its ``Content-Type`` header, if any, is kept.
    """
    lines = _lines(path)
    status: tuple[int, str] | None = None
    content_type: str | None = None
    while True:
        first = next((i for i, (_, t) in enumerate(lines) if t.strip()), None)
        m = _HTTP_STATUS.match(lines[first][1]) if first is not None else None
        if first is not None and m is None and _HTTP_LIKE.match(lines[first][1]):
            no, text = lines[first]
            raise SpecReplayError(
                f"{path}:line {no}: not an HTTP status line ({text.rstrip()!r}: it must be "
                "HTTP/1.0, HTTP/1.1, HTTP/2 or HTTP/3, a space, three digits, then a space or "
                "the end of the line)"
            )
        if first is None or m is None:
            break
        status = (lines[first][0], m.group("status"))
        end = next((i for i in range(first + 1, len(lines)) if not lines[i][1].strip()), None)
        content_type = _content_type(lines[first + 1 : end])
        lines = lines[end + 1 :] if end is not None else []
    if status is not None and (status[1] != "200" or not lines):
        what = f"status {status[1]}" if status[1] != "200" else "no metrics after its headers"
        raise SpecReplayError(
            f"{path}:line {status[0]}: an HTTP response with {what} (saved with curl -i?), "
            "not a metrics scrape"
        )
    return _Body(lines, content_type)


def is_openmetrics(content_type: str | None, lines: list[tuple[int, str]]) -> bool:
    """Tell whether a scrape body is OpenMetrics text (module docstring: which parser reads what).

    The ``Content-Type`` a ``curl -i`` save carries decides when present
    (``application/openmetrics-text``); without one, a last non-blank line ``# EOF`` does.

    Examples
    --------
    >>> is_openmetrics(None, [(1, "a_total 1"), (2, "# EOF"), (3, "")])
    True
    >>> is_openmetrics("text/plain; version=0.0.4", [(1, "a_total 1"), (2, "# EOF")])
    False
    """
    if content_type is not None:
        return content_type.split(";")[0].strip() == "application/openmetrics-text"
    last = next((t.strip() for _, t in reversed(lines) if t.strip()), "")
    return last == "# EOF"


class _NumberedText(io.StringIO):
    """A scrape body for prometheus_client's parsers, knowing the physical line they are on."""

    def __init__(self, lines: list[tuple[int, str]]) -> None:
        super().__init__("".join(t + "\n" for _, t in lines))
        self._numbers = [n for n, _ in lines]
        self._read = 0

    # typeshed types _io._IOBase.__next__ as bytes, which StringIO's own str overrides
    def __next__(self) -> str:  # type: ignore[override]
        line = super().__next__()
        self._read += 1
        return line

    @property
    def lineno(self) -> int:
        """The physical line the parser read last (the last line once it is past the end)."""
        return self._numbers[min(self._read, len(self._numbers)) - 1] if self._numbers else 1


def _parser_message(exc: ValueError, line: str, openmetrics: bool) -> str:
    """Turn a prometheus_client parser error on ``line`` into this module's message."""
    text = str(exc)
    if text.startswith("Invalid labels: "):
        return f"malformed labels {{{text.removeprefix('Invalid labels: ')}}}"
    value = re.fullmatch(r"(?:could not convert string to float|Invalid value): (.*)", text)
    if value is not None and value.group(1) not in (repr(line.strip()), "''"):
        return f"value {value.group(1)} is not a number"
    if not openmetrics and line.lstrip().startswith("#"):
        return "malformed comment line (# HELP NAME TEXT, # TYPE NAME TYPE)"
    if not openmetrics or value is not None or text.startswith("invalid metric name"):
        return "not a Prometheus sample line"
    return f"not OpenMetrics text: {text.removesuffix(': ' + line) or 'invalid line'}"


def _samples(path: Path, body: _Body) -> list[tuple[int, Sample]]:
    """Parse a scrape body with prometheus_client; every sample with its physical line.

    Both parsers read lines in order and yield every sample in line order (a family is yielded
    when the next one starts), so the n-th sample is the n-th sample line. The OpenMetrics
    parser drops a series repeated within its family, which is an error here.
    """
    lines = body.lines
    openmetrics = is_openmetrics(body.content_type, lines)
    if openmetrics:  # blank lines after # EOF carry nothing (OpenMetrics forbids them)
        while lines and not lines[-1][1].strip():
            lines = lines[:-1]
        parse: Callable[[TextIO], Iterable[Metric]] = om_text_fd_to_metric_families
    else:
        parse = text_fd_to_metric_families
    fd = _NumberedText(lines)
    try:
        samples = [smp for family in parse(fd) for smp in family.samples]
    except ValueError as exc:
        text = dict(lines).get(fd.lineno, "")
        if str(exc) == "Missing # EOF at end":
            raise SpecReplayError(
                f"{path}:line {fd.lineno}: OpenMetrics text without its final # EOF line "
                "(truncated?)"
            ) from None
        message = _parser_message(exc, text, openmetrics)
        raise SpecReplayError(f"{path}:line {fd.lineno}: {message}") from None
    numbers = [n for n, t in lines if t.strip() and not t.lstrip().startswith("#")]
    if len(numbers) != len(samples):  # the OpenMetrics parser dropped a repeated series
        raise SpecReplayError(f"{path}: repeats a series (same labels) within a metric family")
    return list(zip(numbers, samples, strict=True))


Series = tuple[str, tuple[tuple[str, str], ...]]
"""A sample's name and its sorted label pairs."""


def read_prometheus(path: Path) -> dict[Series, float]:
    """Read a vLLM scrape: the spec-decode samples, one value per series.

    Returns ``{(sample name, sorted labels): value}`` for the names of :data:`VLLM_METRICS` and
    the ``_bucket`` and ``_count`` samples of :data:`VLLM_LATENCY`. prometheus_client parses the
    text (module docstring: which parser reads which form); a line it refuses is an error naming
    its line, and so is a wanted sample that is not a whole count, lacks its ``position`` (or
    ``le``) label or repeats a series.
    """
    wanted = set(VLLM_METRICS.values()) | set(_LATENCY_SAMPLES)
    out: dict[Series, float] = {}
    v0 = False
    for lineno, sample in _samples(path, _body_lines(path)):
        where = f"{path}:line {lineno}"
        name, labels, value = sample.name, sample.labels, float(sample.value)
        v0 = v0 or name in VLLM_V0_METRICS
        if name not in wanted:
            continue
        if not math.isfinite(value) or value < 0 or value != int(value):
            raise SpecReplayError(f"{where}: {name} should be a whole count ≥ 0, got {value!r}")
        if name == VLLM_METRICS["per_pos"] and not labels.get("position", "").isdigit():
            raise SpecReplayError(f'{where}: {name} needs a label position="0", "1", …')
        if name.endswith("_bucket") and _le(labels.get("le")) is None:
            raise SpecReplayError(f'{where}: {name} needs a label le="0.05", …, "+Inf"')
        series = (name, tuple(sorted(labels.items())))
        if series in out:
            raise SpecReplayError(f"{where}: {name} repeats a series (same labels)")
        out[series] = value
    if v0 and not any(name == VLLM_METRICS["drafts"] for name, _ in out):
        raise SpecReplayError(
            f"{path}: a vLLM V0 scrape; screen reads V1 counters ({VLLM_METRICS['drafts']})"
        )
    return out


def _le(text: str | None) -> float | None:
    """Return a bucket's upper bound (``le`` label), or None when it is not a number."""
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _describe(series: Series) -> str:
    return series[0] + "{" + ",".join(f'{k}="{v}"' for k, v in series[1]) + "}"


def _one_engine(samples: dict[Series, float], path: Path, engine: str) -> dict[Series, float]:
    """Keep the series whose ``engine`` label is ``engine`` (``--engine``); none is an error."""
    kept = {s: v for s, v in samples.items() if dict(s[1]).get("engine") == engine}
    drafts = VLLM_METRICS["drafts"]
    if not any(n == drafts for n, _ in kept):
        found = sorted({dict(lb).get("engine", "") for n, lb in samples if n == drafts})
        listed = ", ".join(repr(x) for x in found) or "none"
        raise SpecReplayError(
            f'{path}: no {drafts}{{engine="{engine}"}} series (--engine; the scrape has engine '
            f"{listed})"
        )
    return kept


def _one_model(
    samples: dict[Series, float], path: Path, model: str | None, engine: str | None = None
) -> dict[Series, float]:
    """Keep the series of one ``model_name``: ``model``, or the only one the scrape holds.

    ``engine`` first keeps one engine's series (``--engine``). Two ``model_name`` values without
    ``model`` are refused, naming the series: summed, they would give a figure of neither model.
    """
    if engine is not None:
        samples = _one_engine(samples, path, engine)
    names = {
        n: sorted({dict(labels).get("model_name", "") for m, labels in samples if m == n})
        for n in VLLM_METRICS.values()
    }
    if model is None:
        for name, models in names.items():
            if len(models) > 1:
                raise SpecReplayError(
                    f"{path}: {name} holds {len(models)} model_name values "
                    f"({', '.join(repr(x) for x in models)}): pass --model-name NAME to screen "
                    "one (summed, they would mix the models' acceptance)"
                )
        return samples
    kept = {s: v for s, v in samples.items() if dict(s[1]).get("model_name") == model}
    drafts = VLLM_METRICS["drafts"]
    if not any(n == drafts for n, _ in kept):
        found = ", ".join(repr(x) for x in names[drafts]) or "none"
        raise SpecReplayError(
            f'{path}: no {drafts}{{model_name="{model}"}} series (--model-name; the scrape has '
            f"model_name {found})"
        )
    return kept


def pair_counts(
    pair: ScrapePair, model_name: str | None = None, engine: str | None = None
) -> PairCounts:
    """Difference two scrapes: the spec-decode counters and the latency histogram's buckets.

    ``model_name`` picks one model's series (``--model-name``), ``engine`` one engine's
    (``--engine``); without ``model_name`` a scrape must hold one ``model_name``. Each series
    (model_name, engine[, position | le]) is differenced first, then summed over engines: a reset
    of one engine cannot hide behind another's growth. Accepted tokens are cross-checked against
    the per-position counts, and draft tokens against drafts × positions (module docstring);
    short proposals are marked, not refused (:func:`vllm_run` refuses them).
    """
    where = f"{pair.before} → {pair.after}"
    before = _one_model(read_prometheus(pair.before), pair.before, model_name, engine)
    after = _one_model(read_prometheus(pair.after), pair.after, model_name, engine)
    for series, value in before.items():
        if series not in after or after[series] < value:
            raise SpecReplayError(
                f"{pair.after}: {_describe(series)} "
                f"{'is missing' if series not in after else 'decreased'} since {pair.before} "
                "(a counter reset?)"
            )
    pp = VLLM_METRICS["per_pos"]
    delta: dict[tuple[str, float | None], float] = {}
    for (name, labels), value in after.items():
        lab = dict(labels)
        sub = int(lab["position"]) if name == pp else _le(lab.get("le"))
        delta[(name, sub)] = delta.get((name, sub), 0.0) + value - before.get((name, labels), 0.0)
    for key in ("drafts", "draft_tokens", "accepted_tokens"):
        if (VLLM_METRICS[key], None) not in delta:
            raise SpecReplayError(f"{pair.after}: no {VLLM_METRICS[key]} sample")
    drafts = int(delta[(VLLM_METRICS["drafts"], None)])
    if drafts < 1:
        raise SpecReplayError(f"{where}: no drafts between the two scrapes")
    positions = sorted(int(p) for (n, p) in delta if n == pp and p is not None)
    if positions and positions != list(range(len(positions))):
        raise SpecReplayError(f"{pair.after}: {pp} should have positions 0..k−1, got {positions}")
    # S_{i+1} = per_pos[i] / drafts: vLLM's per-position counts are survivals already.
    per_pos = tuple(int(delta[(pp, p)]) for p in positions) or None
    accepted = int(delta[(VLLM_METRICS["accepted_tokens"], None)])
    draft_tokens = int(delta[(VLLM_METRICS["draft_tokens"], None)])
    short = per_pos is not None and _cross_check(pair, drafts, per_pos, accepted, draft_tokens)
    latency = next((h for h in VLLM_LATENCY if (f"{h}_count", None) in delta), None)
    buckets = tuple(
        sorted(
            (float(le), int(v))
            for (n, le), v in delta.items()
            if latency is not None and n == f"{latency}_bucket" and le is not None
        )
    )
    kept = [dict(lb) for n, lb in after if n == VLLM_METRICS["drafts"]]
    return PairCounts(
        pair=pair,
        models=tuple(sorted({lb.get("model_name", "") for lb in kept})),
        engines=tuple(sorted({lb.get("engine", "") for lb in kept})),
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted=accepted,
        per_pos=per_pos,
        short=short,
        latency=latency,
        latency_buckets=buckets,
        latency_count=int(delta[(f"{latency}_count", None)]) if latency is not None else 0,
    )


def vllm_run(entry: VllmEntry, counts: PairCounts, step_p50_ms: float) -> CounterRun:
    """One depth-screen run from a scrape pair's counts: rounds = drafts, survivals = per_pos.

    ``step_p50_ms`` is the entry's own, or the latency histogram's binned median. Short
    proposals and scrapes without the per-position counter are refused: the depth screen needs
    survivals.
    """
    pair = counts.pair
    where = f"{pair.before} → {pair.after}"
    pp = VLLM_METRICS["per_pos"]
    if counts.per_pos is None:
        raise SpecReplayError(f"{pair.after}: {pp} should have positions 0..k−1, got []")
    if counts.short:
        k = len(counts.per_pos)
        mal = 1 + counts.accepted / counts.drafts  # exact whatever the proposal lengths
        raise SpecReplayError(
            f"{pair.after} (since {pair.before}): short proposals: Δ{VLLM_METRICS['draft_tokens']}"
            f" = {counts.draft_tokens} < Δ{VLLM_METRICS['drafts']} × {k} positions = "
            f"{counts.drafts * k} (an n-gram drafter?): per-position counts are not survivals, "
            "so no depth screen; the mean acceptance length 1 + Δaccepted/Δdrafts = "
            f"{mal:.4f} is exact (screen without --config gives the MEASURED figures)"
        )
    return CounterRun(
        where=where,
        suite=entry.suite,
        worker=entry.worker,
        batch=entry.batch,
        context=entry.context,
        request_rounds=counts.drafts,
        accepted_position=_survivals(
            list(counts.per_pos), counts.drafts, where, "per-position accepted"
        ),
        step_p50_ms=step_p50_ms,
    )


def _cross_check(
    pair: ScrapePair, drafts: int, per_pos: tuple[int, ...], accepted: int, draft_tokens: int
) -> bool:
    """Refuse deltas whose counts disagree; return whether the proposals were short."""
    where = f"{pair.after} (since {pair.before})"
    if accepted != sum(per_pos):
        raise SpecReplayError(
            f"{where}: Δ{VLLM_METRICS['accepted_tokens']} = {accepted} but Σ Δ"
            f"{VLLM_METRICS['per_pos']} = {sum(per_pos)}: the counters disagree"
        )
    k = len(per_pos)
    if draft_tokens > drafts * k:
        raise SpecReplayError(
            f"{where}: Δ{VLLM_METRICS['draft_tokens']} = {draft_tokens} > "
            f"Δ{VLLM_METRICS['drafts']} × {k} positions = {drafts * k}: "
            f"{VLLM_METRICS['per_pos']} misses positions"
        )
    return draft_tokens < drafts * k


_TOP = {"trained_block", "depths", "h_ms", "caps", "draft_p50_ms", "central", "envelope", "vllm"}
_KNOBS = {"overlap", "overhead_ms", "slope"}
_VLLM = {"before", "after", "suite", "worker", "batch", "context", "step_p50_ms"}
_VLLM_REQUIRED = {"suite", "worker", "batch", "context"}


def _table(value: Any, where: str, allowed: set[str] | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecReplayError(f"{where}: should be a table")
    unknown = sorted(set(value) - allowed) if allowed is not None else []
    if unknown:
        raise SpecReplayError(f"{where}: unknown key(s) {unknown}; known: {sorted(allowed or ())}")
    return value


def _fraction(value: Any, where: str, hi: float | None = 1.0) -> float:
    if not _finite(value) or value < 0 or (hi is not None and value > hi):
        bound = f"in [0, {hi}]" if hi is not None else "≥ 0"
        raise SpecReplayError(f"{where}: should be a number {bound}, got {value!r}")
    return float(value)


def _by_batch(value: Any, where: str, cast: Any) -> tuple[tuple[int, Any], ...]:
    out = []
    for k, v in _table(value, where).items():
        if not k.isdigit() or int(k) < 1:
            raise SpecReplayError(f"{where}: keys are batch sizes (integers ≥ 1), got {k!r}")
        out.append((int(k), cast(v, f"{where}.{k}")))
    return tuple(sorted(out))


def _knobs(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    got: dict[str, Any] = {}
    central = _table(cfg.get("central", {}), f"{path}: [central]", _KNOBS)
    envelope = _table(cfg.get("envelope", {}), f"{path}: [envelope]", _KNOBS)
    for key, hi in (("overlap", 1.0), ("overhead_ms", None), ("slope", None)):
        if key in central:
            got[key] = _fraction(central[key], f"{path}: central.{key}", hi)
        if key in envelope:
            grid = envelope[key]
            if not isinstance(grid, list) or not grid:
                raise SpecReplayError(f"{path}: envelope.{key} should be a non-empty list")
            name = "overlap_grid" if key == "overlap" else key.replace("_ms", "") + "_grid"
            got[name] = tuple(_fraction(x, f"{path}: envelope.{key}", hi) for x in grid)
    return got


def read_config(path: Path | None) -> ScreenConfig:
    """Read the screen's TOML config (module docstring); ``None`` gives the SPEC defaults."""
    if path is None:
        return ScreenConfig(params=ScreenParams(), vllm=())
    try:
        cfg = _table(tomllib.loads(path.read_text(encoding="utf-8")), f"{path}", _TOP)
    except tomllib.TOMLDecodeError as exc:
        raise SpecReplayError(f"{path}: not TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecReplayError(f"{path}: cannot read: {exc}") from None
    kw: dict[str, Any] = _knobs(cfg, path)
    if "trained_block" in cfg:
        kw["trained_block"] = _int(cfg["trained_block"], "trained_block", str(path), 1)
    if "depths" in cfg:
        ds = cfg["depths"]
        if not isinstance(ds, list) or not ds:
            raise SpecReplayError(f"{path}: depths should be a non-empty list of integers ≥ 1")
        kw["depths"] = tuple(sorted({_int(d, "depths", str(path), 1) for d in ds}))
    if "h_ms" in cfg:
        h = cfg["h_ms"]
        if not isinstance(h, list) or len(h) < 2:
            raise SpecReplayError(f"{path}: h_ms should list H[0], H[1], … (ms)")
        kw["h_ms"] = tuple(_fraction(x, f"{path}: h_ms", None) for x in h)
    if "caps" in cfg:
        kw["caps"] = _by_batch(cfg["caps"], f"{path}: [caps]", lambda v, w: _int(v, "cap", w, 1))
    if "draft_p50_ms" in cfg:
        kw["draft_p50_ms"] = _by_batch(
            cfg["draft_p50_ms"], f"{path}: [draft_p50_ms]", lambda v, w: _pos(v, "D_B", w)
        )
    entries = cfg.get("vllm", [])
    if not isinstance(entries, list):
        raise SpecReplayError(f"{path}: vllm should be an array of tables ([[vllm]])")
    vllm = tuple(_vllm_entry(e, f"{path}: [[vllm]] #{i + 1}", path) for i, e in enumerate(entries))
    return ScreenConfig(params=ScreenParams(**kw), vllm=vllm)


def _vllm_entry(e: Any, where: str, path: Path) -> VllmEntry:
    e = _table(e, where, _VLLM)
    missing = sorted(_VLLM_REQUIRED - set(e))
    if missing:
        raise SpecReplayError(f"{where}: missing key(s) {missing}")
    if ("before" in e) != ("after" in e):
        raise SpecReplayError(
            f"{where}: give both before and after (the entry names its scrapes), or neither "
            "(it takes the next BEFORE AFTER pair of the command line)"
        )
    named = "before" in e
    return VllmEntry(
        where=where,
        before=path.parent / _str(e["before"], "before", where) if named else None,
        after=path.parent / _str(e["after"], "after", where) if named else None,
        suite=_str(e["suite"], "suite", where),
        worker=_str(e["worker"], "worker", where),
        batch=_int(e["batch"], "batch", where, 1),
        context=_int(e["context"], "context", where, 0),
        step_p50_ms=_pos(e["step_p50_ms"], "step_p50_ms", where) if "step_p50_ms" in e else None,
    )
