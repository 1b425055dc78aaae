"""Reading the depth screen's inputs (SPEC §2.3): run-counter JSONL, vLLM metrics, the TOML config.

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
error), then summed over every ``model_name``/``engine`` label set. A vLLM run's rounds are its
drafts; its suite, worker, batch, context and step p50 come from a ``[[vllm]]`` entry of the
config.

**Config** (TOML, every key optional): ``trained_block``, ``depths``, ``h_ms`` (H indexed from
depth 0), ``[caps]`` and ``[draft_p50_ms]`` (tables keyed by batch size), ``[central]`` and
``[envelope]`` (``overlap``, ``overhead_ms``, ``slope``; scalars and lists), ``[[vllm]]`` entries
(``before``, ``after`` — paths relative to the config file, which must also be given as inputs —
``suite``, ``worker``, ``batch``, ``context``, ``step_p50_ms``). An unknown key is an error.

Every problem is a :class:`~specreplay.errors.SpecReplayError` naming the file and the line.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.replay.archive.sources import parse_json_line, text_lines
from specreplay.stats.screen import ScreenParams

__all__ = [
    "VLLM_METRICS",
    "CounterRun",
    "ScreenConfig",
    "Series",
    "VllmEntry",
    "is_prometheus_text",
    "read_config",
    "read_counter_runs",
    "read_prometheus",
    "vllm_run",
]

_P = "vllm:spec_decode_"
VLLM_METRICS = {
    "drafts": _P + "num_drafts_total",
    "draft_tokens": _P + "num_draft_tokens_total",
    "accepted_tokens": _P + "num_accepted_tokens_total",
    "per_pos": _P + "num_accepted_tokens_per_pos_total",
}
"""The exposed sample names read (``_total``: prometheus_client's suffix for a Counter)."""


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
    """A ``[[vllm]]`` config entry: two scrapes and the run's non-counter keys."""

    before: Path
    after: Path
    suite: str
    worker: str
    batch: int
    context: int
    step_p50_ms: float


@dataclass(frozen=True)
class ScreenConfig:
    """The parsed config: the screen's assumptions and the vLLM runs."""

    params: ScreenParams
    vllm: tuple[VllmEntry, ...]


_RUN_KEYS = ("suite", "worker", "batch", "context", "request_rounds", "accepted_position",
             "step_p50_ms")  # fmt: skip


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
    """Read a run-counter JSONL file (SPEC §2.3); one :class:`CounterRun` per non-blank line."""
    runs = []
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:line {lineno}"
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


_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+-?\d+)?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def is_prometheus_text(path: Path) -> bool:
    """Tell whether the file's first non-blank line is a ``#`` comment or a ``vllm:`` sample."""
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    return line.startswith("#") or line.startswith("vllm:")
    except OSError:
        return False
    return False


def _labels(text: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text.rstrip()):
        m = _LABEL.match(text, pos)
        if m is None:
            raise SpecReplayError(f"{where}: malformed labels {{{text}}}")
        out[m.group(1)] = m.group(2)
        pos = m.end()
    return out


Series = tuple[str, tuple[tuple[str, str], ...]]
"""A sample's name and its sorted label pairs."""


def read_prometheus(path: Path) -> dict[Series, float]:
    """Read a Prometheus text scrape: the vLLM spec-decode samples, one value per series.

    Returns ``{(sample name, sorted labels): value}`` for the names of :data:`VLLM_METRICS`.
    Every non-comment line must be a sample line; a malformed one is an error naming its line.
    """
    wanted = set(VLLM_METRICS.values())
    out: dict[Series, float] = {}
    for lineno, line in _lines(path):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:line {lineno}"
        m = _SAMPLE.match(line)
        if m is None:
            raise SpecReplayError(f"{where}: not a Prometheus sample line")
        labels = _labels(m.group("labels") or "", where)
        try:
            value = float(m.group("value"))
        except ValueError:
            raise SpecReplayError(f"{where}: value {m.group('value')!r} is not a number") from None
        name = m.group("name")
        if name not in wanted:
            continue
        if not math.isfinite(value) or value < 0 or value != int(value):
            raise SpecReplayError(f"{where}: {name} should be a whole count ≥ 0, got {value!r}")
        if name == VLLM_METRICS["per_pos"] and not labels.get("position", "").isdigit():
            raise SpecReplayError(f'{where}: {name} needs a label position="0", "1", …')
        series = (name, tuple(sorted(labels.items())))
        if series in out:
            raise SpecReplayError(f"{where}: {name} repeats a series (same labels)")
        out[series] = value
    return out


def _describe(series: Series) -> str:
    return series[0] + "{" + ",".join(f'{k}="{v}"' for k, v in series[1]) + "}"


def vllm_run(entry: VllmEntry) -> CounterRun:
    """Difference two scrapes into one run: rounds = drafts, survivals = per-position counts."""
    where = f"{entry.before} → {entry.after}"
    before, after = read_prometheus(entry.before), read_prometheus(entry.after)
    # Difference each series (model_name, engine[, position]) first, then sum: a reset of one
    # engine cannot hide behind another's growth.
    for series, value in before.items():
        if series not in after or after[series] < value:
            raise SpecReplayError(
                f"{entry.after}: {_describe(series)} "
                f"{'is missing' if series not in after else 'decreased'} since {entry.before} "
                "(a counter reset?)"
            )
    delta: dict[tuple[str, int | None], float] = {}
    for (name, labels), value in after.items():
        pos = int(dict(labels)["position"]) if name == VLLM_METRICS["per_pos"] else None
        delta[(name, pos)] = delta.get((name, pos), 0.0) + value - before.get((name, labels), 0.0)
    drafts_key = (VLLM_METRICS["drafts"], None)
    if drafts_key not in delta:
        raise SpecReplayError(f"{entry.after}: no {VLLM_METRICS['drafts']} sample")
    drafts = int(delta[drafts_key])
    if drafts < 1:
        raise SpecReplayError(f"{where}: no drafts between the two scrapes")
    pp = VLLM_METRICS["per_pos"]
    positions = sorted(p for (n, p) in delta if n == pp and p is not None)
    if not positions or positions != list(range(len(positions))):
        raise SpecReplayError(f"{entry.after}: {pp} should have positions 0..k−1, got {positions}")
    # S_{i+1} = per_pos[i] / drafts: vLLM's per-position counts are survivals already.
    per_pos = [int(delta[(pp, p)]) for p in positions]
    return CounterRun(
        where=where,
        suite=entry.suite,
        worker=entry.worker,
        batch=entry.batch,
        context=entry.context,
        request_rounds=drafts,
        accepted_position=_survivals(per_pos, drafts, where, "per-position accepted"),
        step_p50_ms=entry.step_p50_ms,
    )


_TOP = {"trained_block", "depths", "h_ms", "caps", "draft_p50_ms", "central", "envelope", "vllm"}
_KNOBS = {"overlap", "overhead_ms", "slope"}
_VLLM = {"before", "after", "suite", "worker", "batch", "context", "step_p50_ms"}


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
    missing = sorted(_VLLM - set(e))
    if missing:
        raise SpecReplayError(f"{where}: missing key(s) {missing}")
    return VllmEntry(
        before=path.parent / _str(e["before"], "before", where),
        after=path.parent / _str(e["after"], "after", where),
        suite=_str(e["suite"], "suite", where),
        worker=_str(e["worker"], "worker", where),
        batch=_int(e["batch"], "batch", where, 1),
        context=_int(e["context"], "context", where, 0),
        step_p50_ms=_pos(e["step_p50_ms"], "step_p50_ms", where),
    )
