"""The Python API: every specreplay operation as a function returning a typed result.

A notebook calls these instead of shelling out to the ``specreplay`` command line. Each function
takes the options of the CLI verb of the same name, with the same defaults, as Python values or
the CLI's text: arms as strings such as ``"top32:t0.7:dyadic24@5"``, ``estimator`` and
``stratify`` as :class:`Estimator` and :class:`Stratify` members or their names (``"auto"``),
depths as ints, buckets as ``"NAME:LO-HI,…"``. ``margin=`` means the same whatever its type:
relative to R_a, as the default ``"0.5%"`` is. A float is relative (``margin=0.005`` is
``"0.5%"``), a string carries its ``%`` (``"0.5%"``), and the one absolute spelling, in
tokens/round, is ``Margin.absolute(0.01)``; a string without its unit (``"0.5"``) is refused,
since on the command line, where every value is text, the bare number ``--margin 0.01`` is
absolute. The main inputs are positional, every option is keyword-only.
Each verb's options are parsed and checked once, by the constructor the CLI calls too
(:mod:`specreplay.pipelines.options`), so both refuse a bad value with the same message. Each
returns the :class:`~specreplay.results.model.Result` the CLI writes as results.json (``synth``
returns a :class:`~specreplay.commands.synth.SynthArchive`), with tabular views through
:meth:`Result.to_polars() <specreplay.results.model.Result.to_polars>` (``"cells"``: the rows of
cells.parquet; ``"arms"``, ``"deltas"``, ``"depths"``, ``"survival"``, ``"law_tests"``: see
:mod:`specreplay.results.views`).

Design decisions:

- **Outputs are optional.** ``out=None`` (the default) writes nothing; ``out=PATH`` writes the
  folder the CLI writes (results.json, TABLES.md, cells.parquet, plots) with the same atomic swap
  and the same refusals (never a file, symlink or non-empty folder specreplay did not write;
  ``force`` adds only the archive folders ``synth``/``convert`` wrote; never a folder that is,
  contains or lies inside an input), checked before any work. ``synth`` always writes (its
  output is the archive); ``report`` re-renders a run folder in place, or writes a result into
  ``out``.
- **Errors raise.** Bad input or options raise :class:`~specreplay.errors.SpecReplayError` with
  the one-line message the CLI prints (naming the file and row, or the option by its CLI flag
  and the value: ``n_boot=50`` raises ``--n-boot 50: out of range (100 to 10000000)``); the CLI
  turns that into exit code 2, the API lets it propagate; a value of the wrong type
  (``margin=object()``, ``n_boot="x"``) is a SpecReplayError too, never a TypeError.
  ``validate`` raises :class:`~specreplay.errors.InvalidArchive`, which also holds every error
  line. ``fail_on`` does not raise: it is recorded in ``options`` as the CLI records it; read
  the verdict instead.
- ``hash_ids=True`` (validate, requalify, sweep, interval, lawtest) replaces every request id in
  the result by a salted hash, as ``--hash-ids`` does, so nothing written from it names a
  request; ``by="COLUMN"`` (requalify, sweep) adds the cells of ``--by COLUMN``.
- **No progress** unless ``progress=True``: then on stderr, as on the CLI (a bar on a terminal,
  plain ``specreplay: h:mm:ss …`` lines elsewhere, e.g. a notebook or a log).
- **Two front ends, one implementation.** This module and :mod:`specreplay.cli` both sit on top
  of :mod:`specreplay.commands` and never import each other (import-linter layers
  ``specreplay.cli | specreplay.api``): each verb's module exposes the function that builds its
  result, which the CLI path (``run_*``, adding the terminal text and the exit code) and this
  module call. typer is never imported here. ``demo`` (a tour: synth, requalify, sweep,
  lawtest and budget in one pass) and ``warmup`` stay command-line only.

Examples
--------
A small end-to-end session (60 requests: a few seconds once the kernels are compiled):

>>> import shutil, tempfile
>>> from pathlib import Path
>>> from specreplay import api
>>> tmp = Path(tempfile.mkdtemp())
>>> archive = api.synth(tmp / "archive", requests=60, rounds=16)
>>> archive.rows, archive.logging_arm
(7680, 'top32:t0.7@8')
>>> rq = api.requalify(archive.path, baseline="top32:t0.7@8",
...                    candidate="top32:t0.7:dyadic24@8", n_boot=200)
>>> rq.requalification.verdict, rq.requalification.label.value
('QUALIFIED', 'SIMULATED')
>>> round(rq.pooled.arms["top32:t0.7@8"].R, 4)
3.2627
>>> cells = rq.to_polars()  # the rows of cells.parquet
>>> cells.shape
(2100, 28)
>>> cells.columns[:6]
['level', 'family', 'bucket', 'n_requests', 'kind', 'arm']
>>> deltas = rq.to_polars("deltas")
>>> deltas.filter(level="pooled").select("role", "verdict", "label").rows()[0]
('candidate-vs-baseline', 'EQUIVALENT', 'SIMULATED')
>>> sw = api.sweep(archive.path, arms=["top32:t0.7@8"], depths="2,4", n_boot=200)
>>> pooled = sw.to_polars("depths").filter(level="pooled").sort("depth")
>>> [(d, round(r, 4), label) for d, r, label in pooled.select("depth", "R", "label").rows()]
[(2, 2.2746, 'SIMULATED'), (4, 2.8928, 'SIMULATED')]
>>> _ = api.requalify(tmp / "nowhere", baseline="top32:t0.7@8", candidate="greedy@8")
Traceback (most recent call last):
...
specreplay.errors.SpecReplayError: .../nowhere: no such file or directory
>>> shutil.rmtree(tmp)
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specreplay.commands.budget import DEFAULT_X_GRID, BudgetOptions, budget_inputs, budget_run
from specreplay.commands.convert import ConvertedArchive, convert_archive
from specreplay.commands.interval import interval_inputs, interval_memory_result, interval_result
from specreplay.commands.progress import progress_bar
from specreplay.commands.report import rerender
from specreplay.commands.requalify import requalify_run
from specreplay.commands.screen import screen_inputs, screen_result
from specreplay.commands.sweep import sweep_run
from specreplay.commands.synth import DEFAULT_FORM, SynthArchive, synth_archive
from specreplay.commands.validate import validate_result
from specreplay.errors import InvalidArchive, SpecReplayError
from specreplay.pipelines.lawtest import lawtest_result
from specreplay.pipelines.options import (
    CHOICE,
    DEPTHS_DEFAULT,
    FAMILY_ALPHA,
    LEVEL,
    MARGIN_DEFAULT,
    MAX_DROPPED,
    MIN_REQUESTS,
    N_BOOT,
    POSITIONS,
    REPLICATES,
    REQUESTS,
    ROUNDS,
    SEED,
    SHARD_REQUESTS,
    SWEEP_N_BOOT,
    SYNTH_DEPTH,
    WORKERS,
    Compression,
    Estimator,
    Form,
    IntervalOptions,
    LawtestOptions,
    RequalifyOptions,
    ScreenOptions,
    ShortRounds,
    Stratify,
    SweepOptions,
    ValidateOptions,
    options_of,
    parse_choice,
)
from specreplay.render.files import write_run
from specreplay.replay.archive.filehash import new_run
from specreplay.replay.archive.memory import ArmInMemory
from specreplay.replay.archive.validated import new_run as validated_run
from specreplay.replay.backend import Backend
from specreplay.replay.scan import Progress, no_progress
from specreplay.results import io
from specreplay.results.model import Result
from specreplay.results.output import check_out
from specreplay.sim.arms import Arm
from specreplay.stats.buckets import Buckets
from specreplay.stats.compare import Margin

__all__ = [
    "ConvertedArchive",
    "Estimator",
    "InvalidArchive",
    "Margin",
    "Result",
    "ShortRounds",
    "SpecReplayError",
    "Stratify",
    "SynthArchive",
    "budget",
    "convert",
    "interval",
    "lawtest",
    "read_result",
    "report",
    "requalify",
    "screen",
    "sweep",
    "synth",
    "validate",
]

PathLike = str | os.PathLike[str]
MarginLike = str | float | Margin
"""A margin: a percentage of R_a (``"0.5%"``), a relative float (``0.005``), or a Margin."""
ArmLike = str | Arm


def _with_level(params: dict[str, Any]) -> dict[str, Any]:
    """Return a verb's parameters with ``confidence_level`` (scipy's name) as ``level``.

    Both given and different: one line (no silent choice between them).
    """
    given = params.pop("confidence_level", None)
    if given is None:
        return params
    if params["level"] not in (LEVEL.default, given):
        raise SpecReplayError(
            f"level={params['level']!r} and confidence_level={given!r}: give one "
            "(confidence_level is scipy's name for level)"
        )
    return {**params, "level": given}


def _with_unit(params: dict[str, Any]) -> dict[str, Any]:
    """Return a verb's parameters with ``margin`` checked: a number as text must carry its ``%``.

    On the command line a bare number (``--margin 0.01``) is absolute; in Python a float is
    relative, so the text ``"0.01"`` would mean the opposite of the number ``0.01``: it is
    refused, naming the two spellings that say what is meant. Other strings go to the options'
    parser (``"-1"``, ``"x"``: the CLI's message).
    """
    margin = params.get("margin")
    if isinstance(margin, str) and re.fullmatch(r"\s*(\d+(\.\d*)?|\.\d+)\s*", margin):
        text = margin.strip()
        raise SpecReplayError(
            f"margin={margin!r}: a number as text needs its unit: '{text}%' is relative to R_a "
            f"(as the float {float(text) / 100:g}); an absolute margin, in tokens/round, is "
            f"Margin.absolute({text})"
        )
    return params


def _api_params(params: dict[str, Any]) -> dict[str, Any]:
    """Return a verb's parameters as the options' constructor takes them (level, margin)."""
    return _with_unit(_with_level(params))


def _bar(progress: bool) -> Progress:
    """Return the progress factory: a bar on stderr when asked for, else nothing."""
    if not progress:
        return no_progress
    return lambda what, total: progress_bar(False, what, total)


def _before(
    out: PathLike | None, force: bool, inputs: Sequence[Path], *, revalidate: bool = False
) -> Path | None:
    """Start the run, check ``out`` before any work (as the CLI does); return it as a Path.

    ``revalidate``: as ``--revalidate``, check every row (honour no "validated" mark).
    """
    new_run()  # the stamps the run checks its inputs against are its own
    validated_run(honour=not revalidate)
    if out is None:
        return None
    check_out(Path(out), force=force, inputs=inputs)
    return Path(out)


def _after(result: Result, out: Path | None, force: bool, inputs: Sequence[Path]) -> Result:
    """Write ``result``'s output folder when ``out`` is given; return the result."""
    if out is not None:
        write_run(result, out, force=force, inputs=inputs)
    return result


def _backend(scheduler: str | None, workers: int | None, cache: PathLike | None) -> Backend:
    """Return who replays the shards (``--scheduler``, ``--workers``, ``--cache``), checked.

    A Dask cluster (``scheduler``: the ADDRESS of a running one, or ``workers``: N for a local
    one; not both) and the per-shard cache folder ``cache``. What they did is in
    ``result.extra["replay_backend"]`` (results.json ``replay_backend``:
    :mod:`specreplay.replay.backend`).
    """
    path = Path(cache) if cache is not None else None
    return Backend(scheduler=scheduler, workers=WORKERS.check(workers), cache=path)


def synth(
    out: PathLike,
    *,
    requests: int = REQUESTS.default,
    rounds: int = ROUNDS.default,
    shard_requests: int = SHARD_REQUESTS.default,
    seed: int = SEED.default,
    force: bool = False,
    progress: bool = False,
    format: str | Form = DEFAULT_FORM,
    compression: str | Compression | None = None,
    depth: int = SYNTH_DEPTH.default,
) -> SynthArchive:
    """Log a synthetic position-trace archive from the toy model pair into ``out``.

    As ``specreplay synth OUT``: the logging arm top32:t0.7@8 (``@depth``: 8 is the built-in
    archive's) drafts, the target verifies by rejection sampling; shards of ``shard_requests``
    requests and a SYNTH.json manifest. ``format``: parquet, ipc (Arrow IPC) or jsonl;
    ``compression``: the form's codec (None: lz4 for Parquet, uncompressed Arrow IPC). Always
    writes (the archive is the output); ``force`` replaces an archive folder specreplay wrote (its
    SYNTH.json or CONVERT.json says so).

    Returns
    -------
    SynthArchive
        The folder, its shards, the counts and the logging arm.
    """
    return synth_archive(
        Path(out),
        n_requests=REQUESTS.check(requests),
        rounds=ROUNDS.check(rounds),
        shard_requests=SHARD_REQUESTS.check(shard_requests),
        seed=SEED.check(seed),
        force=force,
        progress=_bar(progress),
        form=parse_choice(Form, format).value,
        compression=_codec(compression),
        depth=SYNTH_DEPTH.check(depth),
    )


def _codec(compression: str | Compression | None) -> str | None:
    """Return the compression named (None: the form's default); the writer checks the form."""
    return None if compression is None else parse_choice(Compression, compression).value


def convert(
    archive: PathLike,
    out: PathLike,
    *,
    format: str | Form = Form.IPC,
    compression: str | Compression | None = None,
    force: bool = False,
    progress: bool = False,
    ignore: str | Sequence[str] = (),
) -> ConvertedArchive:
    """Validate every row of ``archive``, then write it into the folder ``out`` in ``format``.

    As ``specreplay convert ARCHIVE OUT``: ``format`` ipc (Arrow IPC, the default), parquet or
    jsonl; one shard per input shard (same stem, new suffix) and a CONVERT.json manifest. The
    first invalid row raises :class:`~specreplay.errors.SpecReplayError` and nothing is written;
    ``force`` replaces an archive folder specreplay wrote (never one it did not write).
    ``ignore``: as ``--ignore``, globs of the folder's entries to skip.

    Returns
    -------
    ConvertedArchive
        The folder, its shards, rows, sizes before and after, and the seconds taken.
    """
    new_run()
    return convert_archive(
        Path(archive),
        Path(out),
        form=parse_choice(Form, format).value,
        compression=_codec(compression),
        force=force,
        progress=_bar(progress),
        ignore=(ignore,) if isinstance(ignore, str) else tuple(ignore),
    )


def validate(
    path: PathLike,
    *,
    all_errors: bool = False,
    buckets: str | Buckets = "",
    logging_arm: ArmLike | None = None,
    out: PathLike | None = None,
    force: bool = False,
    progress: bool = False,
    hash_ids: bool = False,
    ignore: str | Sequence[str] = (),
    max_dropped: float = MAX_DROPPED.default,
) -> Result:
    """Check an archive against schema v1; return its counts, MEASURED R and survival.

    As ``specreplay validate PATH``. ``result.archive`` describes the archive; the cells hold
    the MEASURED R of its logging arm by family × bucket. ``ignore``: as ``--ignore`` (globs
    of a folder's entries to skip; ``result.inputs_ignored`` lists what was skipped).
    ``max_dropped``: as ``--max-dropped`` (docs/api.md#recorder).

    Raises
    ------
    InvalidArchive
        When the archive has errors: ``.errors`` holds up to 20 lines (every one with
        ``all_errors``), each naming the file and row.
    SpecReplayError
        When a capture's recorders dropped more than ``max_dropped`` of its rounds as bad.
    """
    p = Path(path)
    opts = ValidateOptions.build(
        all_errors=all_errors,
        buckets=buckets,
        logging_arm=logging_arm,
        hash_ids=hash_ids,
        ignore=ignore,
        max_dropped=max_dropped,
    )
    target = _before(out, force, [p])
    result = validate_result(p, opts, progress=_bar(progress))
    return _after(result, target, force, [p])


def requalify(
    archive: PathLike,
    *,
    baseline: ArmLike,
    candidate: ArmLike,
    reference: ArmLike | None = None,
    estimator: Estimator | str = Estimator.AUTO,
    replicates: int = REPLICATES.default,
    margin: MarginLike = MARGIN_DEFAULT,
    fail_on: str | Sequence[str] = "",
    families: str | Sequence[str] | None = None,
    sample_requests: int | None = None,
    n_boot: int = N_BOOT.default,
    stratify: Stratify | str = Stratify.FAMILY,
    level: float = LEVEL.default,
    confidence_level: float | None = None,
    min_requests: int = MIN_REQUESTS.default,
    buckets: str | Buckets = "",
    logging_arm: ArmLike | None = None,
    seed: int = SEED.default,
    out: PathLike | None = None,
    force: bool = False,
    progress: bool = False,
    by: str | None = None,
    hash_ids: bool = False,
    scheduler: str | None = None,
    workers: int | None = None,
    cache: PathLike | None = None,
    short_rounds: ShortRounds | str = ShortRounds.CAPPED,
    ignore: str | Sequence[str] = (),
    revalidate: bool = False,
    max_dropped: float = MAX_DROPPED.default,
) -> Result:
    """Replay an archive under baseline and candidate arms and requalify the change.

    As ``specreplay requalify ARCHIVE --baseline … --candidate …``: ``result.requalification``
    is QUALIFIED / NOT QUALIFIED / INCONCLUSIVE (or null with the reason); each cell holds R per
    arm (SIMULATED), the deltas by :class:`~specreplay.results.model.Role`, survival and the
    law tests. ``families``: comma-separated or a sequence. ``scheduler``, ``workers``,
    ``cache``: as ``--scheduler``, ``--workers``, ``--cache`` (:func:`_backend`). ``ignore``:
    as ``--ignore`` (``result.inputs_ignored`` lists what was skipped). ``max_dropped``: as
    ``--max-dropped`` (a capture with more bad rounds is refused). ``revalidate``: as
    ``--revalidate``, check every row again. ``short_rounds``:
    ``capped`` (the default), ``null`` or ``exclude``, as ``--short-rounds``
    (:mod:`specreplay.pipelines.shortrounds`). ``confidence_level``: ``level`` as
    ``scipy.stats.bootstrap`` spells it.
    """
    params = _api_params(dict(locals()))  # the parameters, before any other name is bound
    a = Path(archive)
    opts = RequalifyOptions.build(**options_of(params))
    backend = _backend(scheduler, workers, cache)
    target = _before(out, force, [a], revalidate=revalidate)
    result = requalify_run(a, opts, progress=_bar(progress), backend=backend)
    return _after(result, target, force, [a])


def sweep(
    archive: PathLike,
    *,
    arms: ArmLike | Sequence[ArmLike] = (),
    depths: str | int | Sequence[int] = DEPTHS_DEFAULT,
    policies: str | Sequence[str] = (),
    baseline: ArmLike | None = None,
    margin: MarginLike = MARGIN_DEFAULT,
    estimator: Estimator | str = Estimator.AUTO,
    replicates: int = REPLICATES.default,
    cost: str | None = None,
    n_boot: int = SWEEP_N_BOOT,
    stratify: Stratify | str = Stratify.FAMILY,
    level: float = LEVEL.default,
    confidence_level: float | None = None,
    min_requests: int = MIN_REQUESTS.default,
    buckets: str | Buckets = "",
    logging_arm: ArmLike | None = None,
    seed: int = SEED.default,
    out: PathLike | None = None,
    force: bool = False,
    progress: bool = False,
    by: str | None = None,
    hash_ids: bool = False,
    scheduler: str | None = None,
    workers: int | None = None,
    cache: PathLike | None = None,
    short_rounds: ShortRounds | str = ShortRounds.CAPPED,
    ignore: str | Sequence[str] = (),
    revalidate: bool = False,
    max_dropped: float = MAX_DROPPED.default,
) -> Result:
    """R at every fixed depth per arm and cell from one replay pass.

    See docs/methods.md#the-sweep-cost-model-and-the-best-depth.

    As ``specreplay sweep ARCHIVE --arm …``: ``arms`` are the ``--arm`` values (one string or a
    sequence; brace lists expand), ``depths`` an int, a sequence of ints, ``"1..8"`` or ``"1,2,4"``.
    Each cell's ``depths`` hold R per arm and depth (``to_polars("depths")``); round traces give
    the survival truncation proxy. ``scheduler``, ``workers``, ``cache``: as ``--scheduler``,
    ``--workers``, ``--cache`` (:func:`_backend`). ``ignore``: as ``--ignore``.
    ``max_dropped``: as ``--max-dropped``. ``short_rounds``: as ``--short-rounds``.
    ``revalidate``: as ``--revalidate``, check every row again.
    ``policies``: the ``--policy`` values (one string or a sequence; brace lists expand); each
    cell's ``policies`` then hold them (docs/methods.md#policies-adaptive-drafting).
    """
    params = _api_params(dict(locals()))  # the parameters, before any other name is bound
    params["arms"] = (arms,) if isinstance(arms, str | Arm) else arms
    a = Path(archive)
    opts = SweepOptions.build(**options_of(params))
    backend = _backend(scheduler, workers, cache)
    target = _before(out, force, [a], revalidate=revalidate)
    result = sweep_run(a, opts, progress=_bar(progress), backend=backend)
    return _after(result, target, force, [a])


def interval(
    a: PathLike | ArmInMemory,
    b: PathLike | ArmInMemory,
    *,
    question_file: PathLike | None = None,
    margin: MarginLike = MARGIN_DEFAULT,
    fail_on: str | Sequence[str] = "",
    n_boot: int = N_BOOT.default,
    stratify: Stratify | str = Stratify.FAMILY,
    level: float = LEVEL.default,
    confidence_level: float | None = None,
    min_requests: int = MIN_REQUESTS.default,
    drop_unpaired: bool = False,
    buckets: str | Buckets = "",
    choice: int = CHOICE.default,
    drafted: int | None = None,
    name_a: str | None = None,
    name_b: str | None = None,
    seed: int = SEED.default,
    out: PathLike | None = None,
    force: bool = False,
    progress: bool = False,
    hash_ids: bool = False,
    ignore: str | Sequence[str] = (),
) -> Result:
    """Paired bootstrap interval of Δ = R_b − R_a by family × context bucket, with verdicts.

    As ``specreplay interval A B``: each input is round traces, per-request sums, a Spec-Bench
    or a Medusa answer file; the pooled verdict is ``result.verdict``. ``ignore``: as
    ``--ignore``, globs of entries of an input folder to skip. ``result.to_arviz()`` gives the
    bootstrap replicates as an ArviZ DataTree.

    Or both arms in memory, as ``scipy.stats.bootstrap`` takes arrays: per request, rounds and
    retained tokens as a ``(rounds, retained_tokens)`` pair of 1-D arrays, a mapping with those
    keys (optionally ``request_id``, ``family``, ``bucket``) or a polars DataFrame with those
    columns; paired by ``request_id`` when given, else by position (same length required).
    The figures are those of the same requests in a per-request sums file
    (:mod:`specreplay.replay.archive.memory`); the arms are named ``name_a``/``name_b`` or A, B.

    >>> res = interval(([10, 12, 9], [31.0, 40.0, 25.0]), ([10, 11, 9], [33.0, 41.0, 27.0]),
    ...                n_boot=200, min_requests=2)
    >>> res.arms, round(res.pooled.arms["B"].R - res.pooled.arms["A"].R, 4)
    (('A', 'B'), 0.2699)
    """
    params = _api_params(dict(locals()))  # the parameters, before any other name is bound
    opts = IntervalOptions.build(**options_of(params))
    if not (isinstance(a, str | os.PathLike) and isinstance(b, str | os.PathLike)):
        target = _before(out, force, [])
        return _after(
            interval_memory_result(a, b, opts, progress=_bar(progress)), target, force, []
        )
    pa, pb = Path(a), Path(b)
    inputs = interval_inputs(pa, pb, opts)
    target = _before(out, force, inputs)
    result = interval_result(pa, pb, opts, progress=_bar(progress))
    return _after(result, target, force, inputs)


def screen(
    counters: Sequence[PathLike] = (),
    *,
    config: PathLike | None = None,
    model_name: str | None = None,
    engine: str | None = None,
    vs: Sequence[PathLike] | None = None,
    out: PathLike | None = None,
    force: bool = False,
) -> Result:
    """Mean acceptance length from two vLLM scrapes; with ``config``, the SP2 depth screen.

    As ``specreplay screen [COUNTERS | BEFORE AFTER]… [--config screen.toml] [--model-name NAME]
    [--engine N] [--vs BEFORE_B AFTER_B]``: ``result.scrapes`` holds each scrape pair's
    MEASURED figures, ``result.scrape_delta`` the ``vs`` comparison, and with a config one cell
    per (batch, context, worker) with its ``depths`` (``to_polars("depths")``) and ``screen``
    inputs.
    """
    opts = ScreenOptions.build(
        model_name=model_name, engine=engine, vs=[Path(p) for p in vs] if vs is not None else None
    )
    paths = [Path(p) for p in counters]
    cfg = Path(config) if config is not None else None
    inputs = screen_inputs(paths, cfg, opts)
    target = _before(out, force, inputs)
    return _after(screen_result(paths, cfg, opts=opts), target, force, inputs)


def budget(
    *,
    price_ms: float,
    base: float | None = None,
    delta_lo: float | None = None,
    known: Sequence[float] = (),
    source: PathLike | None = None,
    rate: float | None = None,
    tau_ms: float | None = None,
    gain: float | None = None,
    x_grid: str = DEFAULT_X_GRID,
    out: PathLike | None = None,
    force: bool = False,
) -> Result:
    """Break-even added cost T·Δ_lo/R_0 of a gain and what remains after known costs.

    As ``specreplay budget --price-ms T``: from ``base`` (R_0) and ``delta_lo`` (Δ_lo), or per
    pooled and family cell of a requalify results.json or its folder (``source``: the CLI's
    ``--from``); ``known`` the ``--known`` costs; ``rate``, ``tau_ms`` and ``gain`` ask for the
    sensitivity table (``result.sensitivity``). All figures ESTIMATED.
    """
    opts = BudgetOptions.build(
        price_ms=price_ms,
        base=base,
        delta_lo=delta_lo,
        known=known,
        source=Path(source) if source is not None else None,
        rate=rate,
        tau_ms=tau_ms,
        gain=gain,
        x_grid=x_grid,
    )
    inputs = budget_inputs(opts)
    target = _before(out, force, inputs)
    return _after(budget_run(opts), target, force, inputs)


def lawtest(
    archive: PathLike | None = None,
    *,
    arms: ArmLike | Sequence[ArmLike] = (),
    positions: int = POSITIONS.default,
    family_alpha: float = FAMILY_ALPHA.default,
    max_draws: int | None = None,
    buckets: str | Buckets = "",
    logging_arm: ArmLike | None = None,
    seed: int = SEED.default,
    out: PathLike | None = None,
    force: bool = False,
    hash_ids: bool = False,
    ignore: str | Sequence[str] = (),
    revalidate: bool = False,
) -> Result:
    """Test that an arm's verifier keeps the target law (exact TV and a Monte Carlo G-test).

    As ``specreplay lawtest [ARCHIVE] --arm …``: without arms the built-in toy suite; with an
    archive also ``positions`` of its positions per arm. ``result.law_tests`` (or
    ``to_polars("law_tests")``) holds each test; ``passed`` is False for a failed one.
    ``ignore``: as ``--ignore``, globs of entries of the archive's folder to skip.
    ``revalidate``: as ``--revalidate``, check every row again.
    """
    opts = LawtestOptions.build(
        arms=(arms,) if isinstance(arms, str | Arm) else arms,
        positions=positions,
        seed=seed,
        family_alpha=family_alpha,
        max_draws=max_draws,
        buckets=buckets,
        logging_arm=logging_arm,
        hash_ids=hash_ids,
        ignore=ignore,
    )
    path = Path(archive) if archive is not None else None
    inputs = [path] if path is not None else []
    target = _before(out, force, inputs, revalidate=revalidate)
    result = lawtest_result(opts, archive=path)
    return _after(result, target, force, inputs)


def read_result(path: PathLike) -> Result:
    """Read a results.json (or the run folder holding one) back into its typed result.

    Raises
    ------
    SpecReplayError
        When the file is missing, unreadable or not a results.json this version writes: one
        line naming the file, the field's JSON path and what is wrong
        (docs/outputs.md#what-report-checks).
    """
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    return io.read_result(p)


def report(
    run: PathLike | Result, *, out: PathLike | None = None, force: bool = False
) -> dict[Path, Result]:
    """Re-render a run's TABLES.md, cells.parquet and plots; return {folder written: result}.

    Given a folder, as ``specreplay report RUN_DIR [--out DIR]``: every results.json at or below
    it is rendered again, in place, or into ``out`` keeping the sub-folders. Given a result (say
    one computed with ``out=None``), writes its output folder into ``out`` (required), as the
    command that made it would have.
    """
    if isinstance(run, Result):
        if out is None:
            raise SpecReplayError("report: a result needs out=, the folder to write it into")
        inputs = [Path(f.path) for f in run.inputs if Path(f.path).exists()]
        write_run(run, Path(out), force=force, inputs=inputs)
        return {Path(out): run}
    done = rerender(Path(run), out=Path(out) if out is not None else None, force=force)
    return {folder: result for folder, result, _ in done}
