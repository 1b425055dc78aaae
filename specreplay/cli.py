"""The ``specreplay`` command line: parses options, calls the Python API, prints and writes.

Every command turns :class:`~specreplay.errors.SpecReplayError` into one line on stderr and exit
code 2, with no traceback. Progress bars go to stderr so stdout stays parseable. Heavy imports
(the toy model, arviz, matplotlib) happen inside the commands that need them, so ``--help`` is fast.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from specreplay.commands.cliparse import CheckedGroup
from specreplay.commands.progress import Phases
from specreplay.errors import SpecReplayError
from specreplay.pipelines.options import (
    CHOICE,
    DEPTHS_DEFAULT,
    DRAFTED,
    FAMILY_ALPHA,
    LEVEL,
    MARGIN_DEFAULT,
    MAX_DRAWS,
    MAX_DROPPED,
    MIN_REQUESTS,
    N_BOOT,
    POSITIONS,
    REPLICATES,
    REQUESTS,
    ROUNDS,
    SAMPLE_REQUESTS,
    SEED,
    SHARD_REQUESTS,
    SWEEP_N_BOOT,
    SYNTH_DEPTH,
    WORKERS,
    Compression,
    Estimator,
    Form,
    ShortRounds,
    Stratify,
    options_of,
)

__all__ = ["app"]

VERDICT_MINIMUM = 50
"""The verdict minimum, :data:`specreplay.stats.cr2.MIN_REQUESTS`, as ``--help`` says it (a test
holds the two equal: importing the statistics here would slow ``--help``)."""
NOMINAL_COVERAGE_SIZE = 200
"""The nominal-coverage size, :data:`specreplay.stats.studied.NOMINAL_REQUESTS` (tested equal)."""

app = typer.Typer(
    cls=CheckedGroup,  # numeric options bounded, usage errors one line (commands/cliparse.py)
    name="specreplay",
    help="Statistical replay and bootstrap simulator for speculative decoding.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        from specreplay import __version__

        typer.echo(f"specreplay {__version__}")
        raise typer.Exit()


COMPILING: frozenset[str] = frozenset(
    {"synth", "validate", "convert", "demo", "interval", "requalify", "sweep", "lawtest", "warmup"}
)
"""Commands that run Numba kernels (a cold cache compiles them first)."""

# Every numeric option is bounded and checked at parse time (commands/cliparse.py: an option
# with no min=/max= stops at int64 or ±2^53); the bounds, defaults and parsers are those of
# pipelines/options.py, which the Python API's constructors enforce too.


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Statistical replay and bootstrap simulator for speculative decoding."""
    from specreplay import numba_cache_dir
    from specreplay.replay.archive.filehash import new_run
    from specreplay.replay.archive.validated import new_run as validated_run

    new_run()  # the hashing a command reports, and the stamps it checks, are its own
    validated_run(honour=True)  # files a full check passed unchanged: not checked row by row

    if ctx.invoked_subcommand in COMPILING and "--help" not in sys.argv:
        cache = Path(numba_cache_dir())
        if not cache.is_dir() or not any(cache.rglob("*.nbi")):
            note = f"compiling kernels (first run only; cached in {cache}): about 30 s"
            typer.echo(note, err=True)


SeedOpt = Annotated[
    int,
    typer.Option(
        "--seed",
        help="Seed of every random draw (recorded in results.json).",
        min=SEED.lo,
        max=SEED.hi,
    ),
]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Also replace an archive folder specreplay wrote (synth, convert). Never a file, "
        "symlink or other folder specreplay did not write.",
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
CompressionOpt = Annotated[
    Compression | None,
    typer.Option(
        "--compression",
        help="Parquet: lz4 (default), zstd, snappy, uncompressed; Arrow IPC: uncompressed "
        "(default; can be memory-mapped), lz4, zstd; JSON Lines: none.",
    ),
]
BucketsOpt = Annotated[
    str,
    typer.Option(
        "--buckets",
        help="Context buckets NAME:LO-HI,NAME:<HI,NAME:>=LO (half-open, K = 1024).",
    ),
]

MarginOpt = Annotated[
    str,
    typer.Option(
        "--margin",
        help="Equivalence margin m: relative to R_a with % (0.5%), or absolute in tokens/round "
        "(0.02).",
    ),
]
NBootOpt = Annotated[
    int,
    typer.Option(
        "--n-boot",
        help="Bootstrap resamples of the requests, for the BCa interval shown beside each Δ "
        "(the interval that decides a verdict is CR2's t interval: no resampling).",
        min=N_BOOT.lo,
        max=N_BOOT.hi,
    ),
]
StratifyOpt = Annotated[
    Stratify, typer.Option("--stratify", help="Strata of the bootstrap resamples (BCa, P(best)).")
]
LevelOpt = Annotated[
    float,
    typer.Option("--level", help="Confidence level of the intervals.", min=LEVEL.lo, max=LEVEL.hi),
]
MinRequestsOpt = Annotated[
    int,
    typer.Option(
        "--min-requests",
        help=f"Reporting minimum: a cell with fewer requests gets no Δ (null, with the reason). "
        f"Two more sizes act on a cell and are not options: the verdict minimum "
        f"({VERDICT_MINIMUM} requests: below it no EQUIVALENT, and DIFFERENT only where the CR2 "
        "and sign-flip tests both reject at α/2) "
        f"and the nominal-coverage size ({NOMINAL_COVERAGE_SIZE} requests: below it a Δ is "
        "marked small sample, with what the calibration study's 95% intervals covered at its "
        "size; docs/calibration.md).",
        min=MIN_REQUESTS.lo,
        max=MIN_REQUESTS.hi,
    ),
]
LoggingArmOpt = Annotated[
    str | None,
    typer.Option(
        "--logging-arm", metavar="ARM", help="Arm that drafted the archive, if it has no column."
    ),
]
ReferenceOpt = Annotated[
    str | None,
    typer.Option(
        "--reference", metavar="ARM", help="Arm the gain is measured against, e.g. greedy@5."
    ),
]
OutOpt = Annotated[Path, typer.Option("--out", help="Output folder.")]
CostOpt = Annotated[
    str | None,
    typer.Option(
        "--cost",
        help="Cost model, ms per round by depth: linear:T0:C, or a TOML file with "
        "ms_per_round = {1 = 2.1, …}; gives tokens/s, best depth, P(best).",
    ),
]
SweepArchiveArg = Annotated[
    Path,
    typer.Argument(metavar="ARCHIVE", help="Position-trace archive, or round traces (the proxy)."),
]
PolicyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        metavar="POLICY",
        help="Drafting policy for every --arm (repeatable; a quoted brace list expands): "
        "stop-below:TAU@D, stop-cum:TAU@D, depth-by-bucket:<4K=5/>=4K=3. With --cost: "
        "tokens/s and the held-out verdict against the best fixed depth.",
    ),
]
ReplicatesOpt = Annotated[
    int,
    typer.Option(
        "--replicates",
        help="Monte Carlo replicates per round.",
        min=REPLICATES.lo,
        max=REPLICATES.hi,
    ),
]
ShortRoundsOpt = Annotated[
    ShortRounds,
    typer.Option(
        "--short-rounds",
        help="A round recording fewer positions than an arm's depth: capped (default: a round "
        "the request's end or token limit cut short, marked capped or, without the mark, a "
        "request's last round, is left out of every sum and counted per cell under excluded; "
        "any other short round acts as under null), null (the cells holding it are null, with "
        "the count and the first such round) or exclude (every short round left out of every "
        "sum, for every arm, counted per cell under excluded).",
    ),
]
MaxDroppedOpt = Annotated[
    float,
    typer.Option(
        "--max-dropped",
        metavar="SHARE",
        help="A capture whose recorders dropped more than this share of its rounds as bad "
        "(NaN laws, laws not summing to 1, ids out of range: counted in CAPTURE.json) is "
        "refused, an engine bug being likely; 1 accepts any capture (docs/api.md#recorder).",
        min=MAX_DROPPED.lo,
        max=MAX_DROPPED.hi,
    ),
]
IgnoreOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ignore",
        metavar="GLOB",
        help="Skip the entries of a folder archive whose name (relative to the folder) matches "
        "GLOB, e.g. '_SUCCESS', '*.crc', '.*' (repeatable; case-sensitive; quote it). Any other "
        "entry that is not a shard or a known sidecar (SYNTH.json, CONVERT.json, CAPTURE.json) "
        "is an error; what was skipped is listed in results.json (inputs_ignored).",
    ),
]
RevalidateOpt = Annotated[
    bool,
    typer.Option(
        "--revalidate",
        help="Check every row of the archive again, even the files a full check of this "
        "validator passed unchanged (docs/scale.md#rows-validated-earlier); rewrites their marks.",
    ),
]
HashIdsOpt = Annotated[
    bool,
    typer.Option(
        "--hash-ids",
        help="Replace request ids by salted hashes (h:…) in every output; the salt is drawn "
        "per run and never written. Figures are unchanged.",
    ),
]
ByOpt = Annotated[
    str | None,
    typer.Option(
        "--by",
        metavar="COLUMN",
        help="A carried archive column (worker, run, suite, …; constant within a request): "
        "adds cells per value and per family × bucket × value.",
    ),
]
EstimatorOpt = Annotated[
    Estimator,
    typer.Option(
        "--estimator",
        help="auto (default: importance for every arm when the archive carries drafted_id and a "
        "logging law, else analytic, saying why; a comparison whose importance tails fail in a "
        "cell is INCONCLUSIVE there, with the figures), analytic (exact under the path "
        "assumption), montecarlo, or "
        "importance (reweights the archived drafts by the logging law: no path assumption; "
        "needs drafted_id, and emitted_q or the logging arm).",
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        help="Replay one shard per task on this running Dask cluster (e.g. tcp://10.0.0.5:8786; "
        "needs specreplay[dask]; workers read the archive at the same path). Gives up after "
        "10 s when no Dask scheduler answers there.",
    ),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        help="Replay one shard per task on a local Dask cluster of N worker processes "
        "(needs specreplay[dask]).",
        min=WORKERS.lo,
        max=WORKERS.hi,
    ),
]
CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        metavar="DIR",
        help="Per-shard result cache: shards already replayed with the same bytes, arms and "
        "options are not replayed again (with or without Dask).",
    ),
]
_NULL_FAILS = (
    "; with INCONCLUSIVE a null pooled verdict (too few requests, unsupported cell) exits 1 too."
)


def _backend(scheduler: str | None, workers: int | None, cache: Path | None) -> Any:
    """``--scheduler``/``--workers``/``--cache`` as a checked Backend (one of the first two)."""
    from specreplay.replay.backend import Backend

    return Backend(scheduler=scheduler, workers=workers, cache=cache)


HASH_NOTE_SECONDS = 0.5
"""Hashing the inputs that took at least this long is reported on stderr."""


def _echo(text: str) -> None:
    """Print notes on stderr, then ``text``.

    The notes: input-hash cache entries that failed their check and were computed again, and
    what hashing the inputs for results.json cost when it took a while (digests not yet in the
    input-hash cache). What the per-shard cache reused (``--cache``) is on line 2 of ``text``
    (:func:`~specreplay.render.console.excluded_reused`).
    """
    from specreplay import cache_root
    from specreplay.replay.archive.filehash import hash_stats

    h = hash_stats()
    if h.recomputed:
        n = len(h.recomputed)
        names = ", ".join(dict.fromkeys(Path(p).name for p in h.recomputed))
        entries = "entry" if n == 1 else "entries"
        line = f"cache: {n} input-hash {entries} failed the check, recomputed ({names})"
        typer.echo(line, err=True)
    if h.computed and h.seconds >= HASH_NOTE_SECONDS:
        typer.echo(
            f"hashed {h.computed} input file{'s' if h.computed != 1 else ''} "
            f"({h.bytes_read / 2**30:.2f} GiB) in {h.seconds:.1f} s for results.json; the next "
            f"run takes the digests from {Path(cache_root()) / 'hashes'}",
            err=True,
        )
    typer.echo(text)


@contextmanager
def _user_errors(
    command: str, out: Path | None = None, *, revalidate: bool = False
) -> Iterator[None]:
    """Run ``command``'s body: say what it replaced and what stopped it, on stderr.

    ``revalidate`` (``--revalidate``): honour no "validated" mark this run, every row is checked
    (:mod:`specreplay.replay.archive.validated`).

    The project's error type becomes one line and exit code 2. SIGINT and SIGTERM unwind (the
    output's temporary folder is removed) and become one line and exit code 128 + the signal's
    number. Every earlier run's folder the command replaced is one line
    ``replaced OUT (written CREATED_UTC)``. A full disk or a file-size limit that escaped every
    write site (:mod:`specreplay.diskfull`) is one line too, naming the file or else ``out``, the
    command's output folder. A command that completes (exit 0, or 1 from a ``--fail-on``) prints
    one note per cache it could not write; one that fails prints only its error line.
    """
    from specreplay.diskfull import cache_notes, disk_errno, reset_cache_notes
    from specreplay.results.output import reset_swaps, swaps

    reset_swaps()
    reset_cache_notes()
    if revalidate:
        from specreplay.replay.archive.validated import force_full

        force_full()
    failed = True
    try:
        with _signals_unwind():
            yield
        failed = False
    except SpecReplayError as err:
        typer.echo(f"error: {err.message}", err=True)
        raise typer.Exit(code=2) from None
    except _Stopped as stop:
        done = [str(s.out) for s in swaps()]
        what = f"{', '.join(done)} written before it stopped" if done else "nothing written"
        line = f"error: {command} {stop.how} ({stop.name}); {what}, no partial output left"
        typer.echo(line, err=True)
        raise typer.Exit(code=128 + stop.signum) from None
    except (typer.Exit, typer.Abort):
        failed = False  # the command's own exit code (a --fail-on verdict): it completed
        raise
    except Exception as exc:
        code = disk_errno(exc)
        if code is None:
            raise
        typer.echo(f"error: {_disk_line(command, exc, out, code)}", err=True)
        raise typer.Exit(code=2) from None
    finally:
        for s in swaps():
            note = s.note()
            if note is not None:
                typer.echo(note, err=True)
        if not failed:
            for n in cache_notes():
                typer.echo(n.line(), err=True)


def _disk_line(command: str, exc: Exception, out: Path | None, code: int) -> str:
    """Return the line of a disk error no write site mapped: the file it names, else ``out``."""
    from specreplay.diskfull import cause, what_to_do

    named = exc.filename if isinstance(exc, OSError) and exc.filename else out
    where = f"{named}: " if named is not None else ""
    return (
        f"{where}{cause(code)} while writing; {command} stopped, no partial output left: "
        f"{what_to_do(code)}"
    )


class _Stopped(BaseException):
    """Raised by the SIGINT and SIGTERM handlers, so that ``output_dir`` removes its folder.

    ``how`` says what the signal did (interrupted, terminated).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.how = "interrupted" if signum == signal.SIGINT else "terminated"


@contextmanager
def _signals_unwind() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`_Stopped` while the command runs.

    Installed explicitly, so SIGINT unwinds even in a process started with it ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return

    def on_signal(signum: int, frame: object) -> None:
        raise _Stopped(signum)

    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, on_signal) for s in held}
    try:
        yield
    except KeyboardInterrupt:  # a SIGINT raised before the handler was in place
        raise _Stopped(signal.SIGINT) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# ---------------------------------------------------------------------------------------------


@app.command()
def synth(
    out: Annotated[
        Path, typer.Argument(metavar="OUT", help="Folder to write the archive shards into.")
    ],
    requests: Annotated[
        int,
        typer.Option("--requests", help="Number of requests.", min=REQUESTS.lo, max=REQUESTS.hi),
    ] = REQUESTS.default,
    rounds: Annotated[
        int, typer.Option("--rounds", help="Rounds per request.", min=ROUNDS.lo, max=ROUNDS.hi)
    ] = ROUNDS.default,
    shard_requests: Annotated[
        int,
        typer.Option(
            "--shard-requests",
            help="Requests per shard.",
            min=SHARD_REQUESTS.lo,
            max=SHARD_REQUESTS.hi,
        ),
    ] = SHARD_REQUESTS.default,
    depth: Annotated[
        int,
        typer.Option(
            "--depth",
            help="Positions the logging arm drafts per round (8: the built-in archive's).",
            min=SYNTH_DEPTH.lo,
            max=SYNTH_DEPTH.hi,
        ),
    ] = SYNTH_DEPTH.default,
    form: Annotated[
        Form | None, typer.Option("--format", help="Form of the shards (default: parquet).")
    ] = None,
    compression: CompressionOpt = None,
    seed: SeedOpt = SEED.default,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Log a synthetic position-trace archive from the built-in toy draft/target model pair.

    The logging arm top32:t0.7@8 (top32:t0.7@D with --depth D) drafts autoregressively and the
    target verifies by rejection sampling, as a serving engine would; every position's laws and
    decisions are recorded.
    """
    with _user_errors("synth", out):
        from specreplay.commands.synth import DEFAULT_FORM, run_synth

        with Phases(quiet) as phases:
            summary = run_synth(
                out,
                n_requests=requests,
                rounds=rounds,
                shard_requests=shard_requests,
                seed=seed,
                force=force,
                progress=phases,
                form=form.value if form is not None else DEFAULT_FORM,
                compression=compression.value if compression is not None else None,
                depth=depth,
            )
        typer.echo(summary)


@app.command()
def convert(
    archive: Annotated[
        Path,
        typer.Argument(
            metavar="ARCHIVE", help="Archive: Parquet, Arrow IPC or JSONL file, or shard folder."
        ),
    ],
    out: Annotated[
        Path, typer.Argument(metavar="OUT", help="Folder to write the converted shards into.")
    ],
    form: Annotated[
        Form, typer.Option("--format", help="Form to write (ipc: Arrow IPC).")
    ] = Form.IPC,
    compression: CompressionOpt = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
    ignore: IgnoreOpt = None,
) -> None:
    """Validate every row of an archive, then rewrite it in another form, bit for bit.

    One shard per input shard (same stem, new suffix) in OUT, plus a CONVERT.json manifest.
    The first invalid row stops it with exit code 2 and nothing written.
    """
    with _user_errors("convert", out):
        from specreplay.commands.convert import run_convert

        with Phases(quiet) as phases:
            summary = run_convert(
                archive,
                out,
                form=form.value,
                compression=compression.value if compression is not None else None,
                force=force,
                progress=phases,
                ignore=tuple(ignore or ()),
            )
        typer.echo(summary)


@app.command()
def validate(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="ARCHIVE", help="Archive: Parquet file, JSONL file or shard folder."
        ),
    ],
    all_errors: Annotated[
        bool, typer.Option("--all", help="List every error, not only the first 20.")
    ] = False,
    buckets: BucketsOpt = "",
    logging_arm: LoggingArmOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Also write results.json/TABLES.md/cells here.")
    ] = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
    hash_ids: HashIdsOpt = False,
    ignore: IgnoreOpt = None,
    max_dropped: MaxDroppedOpt = MAX_DROPPED.default,
) -> None:
    """Check an archive against schema v1; report its counts, MEASURED R and survival.

    R is the retained tokens per round (vLLM's mean acceptance length); survival P(A ≥ j) the
    share of rounds whose first j drafts were all accepted (vLLM's per-position acceptance rate
    at position j − 1). Exit status 0 when valid, 2 with up to 20 error lines (all with --all)
    otherwise.
    """
    with _user_errors("validate", out):
        from specreplay.commands.validate import run_validate
        from specreplay.pipelines.options import ValidateOptions

        opts = ValidateOptions.build(
            all_errors=all_errors,
            buckets=buckets,
            logging_arm=logging_arm,
            hash_ids=hash_ids,
            ignore=ignore,
            max_dropped=max_dropped,
        )
        with Phases(quiet) as phases:
            ok, text = run_validate(path, opts, out=out, force=force, progress=phases)
        if not ok:
            typer.echo(text, err=True)
            raise typer.Exit(code=2)
        typer.echo(text)


@app.command()
def demo(
    out: OutOpt = Path("specreplay-out/demo"),
    requests: Annotated[
        int,
        typer.Option(
            "--requests",
            help="Requests in the built-in archive.",
            min=REQUESTS.lo,
            max=REQUESTS.hi,
        ),
    ] = REQUESTS.default,
    estimator: EstimatorOpt = Estimator.AUTO,
    n_boot: NBootOpt = N_BOOT.default,
    seed: SeedOpt = SEED.default,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Generate the built-in synthetic archive and tell its story, verdicts first.

    Writes OUT/archive (the archive), OUT/results.json, OUT/TABLES.md and OUT/cells.parquet, and
    one folder per chapter (requalify, bits-dyadicN, lawtest). --n-boot 1000 gives a quicker,
    coarser tour.
    """
    with _user_errors("demo", out):
        from specreplay.commands.demo import run_demo

        with Phases(quiet) as phases:
            text = run_demo(
                out,
                n_requests=requests,
                n_boot=n_boot,
                seed=seed,
                estimator=estimator,
                force=force,
                progress=phases,
            )
        typer.echo(text)


@app.command()
def interval(
    a: Annotated[
        Path,
        typer.Argument(
            metavar="A",
            help="Arm A, the baseline (a in Δ = R_b − R_a): round traces, per-request "
            "sums, a Spec-Bench or a Medusa answer file.",
        ),
    ],
    b: Annotated[Path, typer.Argument(metavar="B", help="Arm B, in any of the same forms.")],
    question_file: Annotated[
        Path | None,
        typer.Option("--question-file", help="FastChat question.jsonl (categories for Medusa)."),
    ] = None,
    margin: MarginOpt = MARGIN_DEFAULT,
    fail_on: Annotated[
        str,
        typer.Option(
            "--fail-on",
            help="Comma-separated pooled verdicts that make the exit status 1 "
            "(EQUIVALENT, DIFFERENT, INCONCLUSIVE)" + _NULL_FAILS,
        ),
    ] = "",
    n_boot: NBootOpt = N_BOOT.default,
    stratify: StratifyOpt = Stratify.FAMILY,
    level: LevelOpt = LEVEL.default,
    min_requests: MinRequestsOpt = MIN_REQUESTS.default,
    drop_unpaired: Annotated[
        bool,
        typer.Option(
            "--drop-unpaired", help="Leave out requests present in one arm only (counted)."
        ),
    ] = False,
    buckets: BucketsOpt = "",
    choice: Annotated[
        int,
        typer.Option("--choice", help="Spec-Bench choices[] index.", min=CHOICE.lo, max=CHOICE.hi),
    ] = CHOICE.default,
    drafted: Annotated[
        int | None,
        typer.Option(
            "--drafted",
            help="Depth drafted per round, when the input does not say.",
            min=DRAFTED.lo,
            max=DRAFTED.hi,
        ),
    ] = None,
    name_a: Annotated[str | None, typer.Option("--name-a", help="Label of arm A.")] = None,
    name_b: Annotated[str | None, typer.Option("--name-b", help="Label of arm B.")] = None,
    out: OutOpt = Path("specreplay-out/interval"),
    seed: SeedOpt = SEED.default,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
    hash_ids: HashIdsOpt = False,
    ignore: IgnoreOpt = None,
) -> None:
    """Paired interval of Δ = R_b − R_a by family × context bucket, with verdicts.

    R is the retained tokens per round (vLLM's mean acceptance length) of arm A (a) and arm B
    (b). Requests are paired by id and are the clusters. The interval that decides each verdict
    is cr2-eff-hall: a CR2 (Bell-McCaffrey) variance, a t with effective degrees of freedom and
    Hall's skewness correction (docs/methods.md); each Δ's method field names the interval
    printed, and a bootstrap BCa interval is shown beside it. Prints the pooled verdict first;
    writes results.json, TABLES.md, cells.parquet and forest.png into --out.
    """
    params = dict(locals())  # the parameters, before any other name is bound
    with _user_errors("interval", out):
        from specreplay.commands.interval import run_interval
        from specreplay.pipelines.options import IntervalOptions

        opts = IntervalOptions.build(**options_of(params))
        with Phases(quiet) as phases:
            text, code = run_interval(a, b, opts, out=out, force=force, progress=phases)
        typer.echo(text)
        if code:
            raise typer.Exit(code=code)


@app.command()
def screen(
    counters: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="INPUTS",
            help="Run-counter JSON Lines files and vLLM Prometheus scrapes, the scrapes in BEFORE "
            "AFTER pairs (curl -s http://HOST:PORT/metrics > before.prom; the benchmark; the "
            'same > after.prom; docs/inputs.md, "Run counters and vLLM scrapes").',
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="screen.toml: [draft_p50_ms] (D_B per batch), [caps], h_ms, depths, "
            "[central], [envelope] grids, [[vllm]] runs. Adds the ESTIMATED depth screen to "
            "the scrapes' MEASURED figures.",
        ),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option(
            "--model-name",
            help="Screen this model_name's series of the vLLM scrapes (needed when a scrape "
            "holds two models: they are never summed).",
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help='Keep this engine label\'s series of the vLLM scrapes (engine="0", "1", …); '
            "by default every engine is summed.",
        ),
    ] = None,
    vs: Annotated[
        tuple[Path, Path] | None,
        typer.Option(
            "--vs",
            metavar="BEFORE_B AFTER_B",
            help="A second scrape pair: Δ of the mean acceptance length (R_B − R_A) and its "
            "round-independent SE, a lower bound.",
        ),
    ] = None,
    out: OutOpt = Path("specreplay-out/screen"),
    force: ForceOpt = False,
    quiet: QuietOpt = False,  # accepted like every command's; it draws no progress bar
) -> None:
    """MEASURED R from two vLLM scrapes (vLLM's mean acceptance length); --config: depth screen.

    Per scrape pair, in vLLM's names: the mean acceptance length (R), the per-position
    acceptance rates (survival), the draft acceptance rate, drafts (rounds) and the binned
    median step time. Per (batch, context, worker) with --config: pooled survivals
    S_i, central rate_B(d) and its assumption envelope, gain over the nominal cap and rank;
    UNSUPPORTED past the trained block or the cap. Writes results.json, TABLES.md and
    cells.parquet into --out.
    """
    with _user_errors("screen", out):
        from specreplay.commands.screen import run_screen
        from specreplay.pipelines.options import ScreenOptions

        opts = ScreenOptions.build(model_name=model_name, engine=engine, vs=vs)
        typer.echo(run_screen(counters or [], config=config, out=out, force=force, opts=opts))


@app.command()
def requalify(
    archive: Annotated[
        Path,
        typer.Argument(metavar="ARCHIVE", help="Position-trace archive (file or shard folder)."),
    ],
    baseline: Annotated[
        str, typer.Option("--baseline", metavar="ARM", help="Arm in production, e.g. top32:t0.7@5.")
    ],
    candidate: Annotated[
        str,
        typer.Option("--candidate", metavar="ARM", help="Changed arm, e.g. top32:t0.7:dyadic24@5."),
    ],
    reference: ReferenceOpt = None,
    estimator: EstimatorOpt = Estimator.AUTO,
    replicates: ReplicatesOpt = REPLICATES.default,
    margin: MarginOpt = MARGIN_DEFAULT,
    fail_on: Annotated[
        str,
        typer.Option(
            "--fail-on",
            help="Comma-separated pooled requalifications that exit 1 (QUALIFIED, "
            "'NOT QUALIFIED', INCONCLUSIVE)" + _NULL_FAILS,
        ),
    ] = "",
    families: Annotated[
        str | None, typer.Option("--families", help="Replay only these families (comma-separated).")
    ] = None,
    sample_requests: Annotated[
        int | None,
        typer.Option(
            "--sample-requests",
            help="Replay a seeded sample of N requests.",
            min=SAMPLE_REQUESTS.lo,
            max=SAMPLE_REQUESTS.hi,
        ),
    ] = None,
    n_boot: NBootOpt = N_BOOT.default,
    stratify: StratifyOpt = Stratify.FAMILY,
    level: LevelOpt = LEVEL.default,
    min_requests: MinRequestsOpt = MIN_REQUESTS.default,
    buckets: BucketsOpt = "",
    logging_arm: LoggingArmOpt = None,
    out: OutOpt = Path("specreplay-out/requalify"),
    seed: SeedOpt = SEED.default,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
    hash_ids: HashIdsOpt = False,
    by: ByOpt = None,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
    cache: CacheOpt = None,
    short_rounds: ShortRoundsOpt = ShortRounds.CAPPED,
    ignore: IgnoreOpt = None,
    revalidate: RevalidateOpt = False,
    max_dropped: MaxDroppedOpt = MAX_DROPPED.default,
) -> None:
    """Replay an archive under baseline and candidate arms and requalify the change.

    Prints the verdict first: QUALIFIED when the candidate's R (retained tokens per round) is
    EQUIVALENT to the baseline's and its law test passes, NOT QUALIFIED when DIFFERENT or the law
    test fails, else INCONCLUSIVE. The interval that decides Δ's verdict is cr2-eff-hall (a CR2
    variance with requests as clusters, a t with effective degrees of freedom, Hall's skewness
    correction); each Δ's method field names the interval printed. Line 2 says what the run
    excluded or reused; then Δ per family, the gain over --reference, the path-bias diagnostic,
    the estimator's weights and the law tests (every cell and survival in TABLES.md).
    """
    params = dict(locals())  # the parameters, before any other name is bound
    with _user_errors("requalify", out, revalidate=revalidate):
        from specreplay.commands.requalify import run_requalify
        from specreplay.pipelines.options import RequalifyOptions

        opts = RequalifyOptions.build(**options_of(params))
        backend = _backend(scheduler, workers, cache)
        with Phases(quiet) as phases:
            text, code, result = run_requalify(
                archive, opts, out=out, force=force, progress=phases, backend=backend
            )
        _echo(text)
        if code:
            raise typer.Exit(code=code)


@app.command()
def sweep(
    archive: SweepArchiveArg,
    arm: Annotated[
        list[str] | None,
        typer.Option(
            "--arm",
            metavar="ARM",
            help="Arm (repeatable; its @DEPTH is the reference depth); a quoted "
            "brace list expands: 'top32:t0.7:dyadic{8,12,16}@5'. Position traces only: "
            "round traces give the survival truncation proxy.",
        ),
    ] = None,
    depths: Annotated[
        str, typer.Option("--depths", help="Depths: 1..8, or 1,2,4 (1..3,6).")
    ] = DEPTHS_DEFAULT,
    policy: PolicyOpt = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            help="Arm the dyadic arms are requalified against: the fewest "
            "bits that stay EQUIVALENT, by fixed-sequence testing from the most bits.",
        ),
    ] = None,
    margin: MarginOpt = MARGIN_DEFAULT,
    estimator: EstimatorOpt = Estimator.AUTO,
    replicates: ReplicatesOpt = REPLICATES.default,
    cost: CostOpt = None,
    n_boot: Annotated[
        int,
        typer.Option(
            "--n-boot",
            help="Bootstrap resamples (per depth and arm).",
            min=N_BOOT.lo,
            max=N_BOOT.hi,
        ),
    ] = SWEEP_N_BOOT,
    stratify: StratifyOpt = Stratify.FAMILY,
    level: LevelOpt = LEVEL.default,
    min_requests: MinRequestsOpt = MIN_REQUESTS.default,
    buckets: BucketsOpt = "",
    logging_arm: LoggingArmOpt = None,
    out: OutOpt = Path("specreplay-out/sweep"),
    seed: SeedOpt = SEED.default,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
    hash_ids: HashIdsOpt = False,
    by: ByOpt = None,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
    cache: CacheOpt = None,
    short_rounds: ShortRoundsOpt = ShortRounds.CAPPED,
    ignore: IgnoreOpt = None,
    revalidate: RevalidateOpt = False,
    max_dropped: MaxDroppedOpt = MAX_DROPPED.default,
) -> None:
    """R (retained tokens per round) at every fixed depth per arm and cell from one replay pass.

    See docs/methods.md, "The sweep: cost model and the best depth".

    Each arm's own @DEPTH is the reference for paired Δ; depths past the recorded positions are
    UNSUPPORTED, never extrapolated. With --cost: tokens/s per depth (ESTIMATED), the best depth
    per cell and the bootstrap probability that each depth is best.
    """
    params = dict(locals())  # the parameters, before any other name is bound
    params["arms"] = params.pop("arm") or ()
    params["policies"] = params.pop("policy") or ()
    with _user_errors("sweep", out, revalidate=revalidate):
        from specreplay.commands.sweep import run_sweep
        from specreplay.pipelines.options import SweepOptions

        opts = SweepOptions.build(**options_of(params))
        backend = _backend(scheduler, workers, cache)
        with Phases(quiet) as phases:
            text, result = run_sweep(
                archive, opts, out=out, force=force, progress=phases, backend=backend
            )
        _echo(text)


@app.command()
def warmup(quiet: QuietOpt = False) -> None:
    """Compile and cache every kernel now (a tiny demo in a temporary folder): after pip install."""
    with _user_errors("warmup"):
        import shutil
        import tempfile
        import time

        from specreplay import numba_cache_dir
        from specreplay.commands.demo import run_demo
        from specreplay.diskfull import NUMBA_CACHE, cache_notes
        from specreplay.replay.archive import rowcheck

        t0 = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix="specreplay-warmup-"))
        try:
            with Phases(quiet) as phases:
                run_demo(
                    tmp / "demo",
                    n_requests=8,
                    seed=0,
                    force=True,
                    n_boot=200,
                    progress=phases,
                )
            rowcheck.compile_rules()  # the exact row rules: a clean archive never calls them
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        seconds = time.perf_counter() - t0
        if any(n.cache == NUMBA_CACHE for n in cache_notes()):  # the note says why
            where = f"not all cached in {numba_cache_dir()}"
            typer.echo(f"kernels compiled, {where}: the next run compiles again ({seconds:.0f} s)")
        else:
            typer.echo(f"kernels compiled and cached in {numba_cache_dir()} ({seconds:.0f} s)")


@app.command()
def lawtest(
    archive: Annotated[
        Path | None,
        typer.Argument(
            metavar="ARCHIVE", help="Optional archive: also test sampled positions of it."
        ),
    ] = None,
    arm: Annotated[
        list[str] | None,
        typer.Option(
            "--arm",
            metavar="ARM",
            help="Arm to test (repeatable); default: the built-in toy suite.",
        ),
    ] = None,
    positions: Annotated[
        int,
        typer.Option(
            "--positions",
            help="Archive positions tested per arm.",
            min=POSITIONS.lo,
            max=POSITIONS.hi,
        ),
    ] = POSITIONS.default,
    family_alpha: Annotated[
        float,
        typer.Option("--family-alpha", help="Family-wise alpha (Holm over the tests that run)."),
    ] = FAMILY_ALPHA.default,
    max_draws: Annotated[
        int | None,
        typer.Option(
            "--max-draws",
            help="Cap on Monte Carlo draws per test (power below 0.99 "
            "is then reported as underpowered).",
            min=MAX_DRAWS.lo,
            max=MAX_DRAWS.hi,
        ),
    ] = None,
    fail_on_fail: Annotated[
        bool, typer.Option("--fail-on-fail", help="Exit 1 when a law test fails.")
    ] = False,
    buckets: BucketsOpt = "",
    logging_arm: LoggingArmOpt = None,
    out: OutOpt = Path("specreplay-out/lawtest"),
    seed: SeedOpt = SEED.default,
    force: ForceOpt = False,
    quiet: QuietOpt = False,  # accepted like every command's; lawtest draws no progress bar
    hash_ids: HashIdsOpt = False,
    ignore: IgnoreOpt = None,
    revalidate: RevalidateOpt = False,
) -> None:
    """Test that an arm's verifier keeps the target law (exact TV and a Monte Carlo G-test).

    A matched verifier (the q used to verify is the q sampled from) must pass; a mismatched one
    such as top32:t0.7:dyadic8/float64@5 is detected wherever it is detectable at the draws
    chosen for 0.99 power against its exact total-variation distance.
    """
    with _user_errors("lawtest", out, revalidate=revalidate):
        from specreplay.commands.lawtest import run_lawtest
        from specreplay.pipelines.options import LawtestOptions

        opts = LawtestOptions.build(
            arms=arm or (),
            positions=positions,
            seed=seed,
            family_alpha=family_alpha,
            max_draws=max_draws,
            buckets=buckets,
            logging_arm=logging_arm,
            hash_ids=hash_ids,
            ignore=ignore,
        )
        text, ok = run_lawtest(opts, archive=archive, out=out, force=force)
        typer.echo(text)
        if fail_on_fail and not ok:
            raise typer.Exit(code=1)


@app.command()
def report(
    run_dir: Annotated[
        Path,
        typer.Argument(metavar="RUN_DIR", help="A run's output folder (holding results.json)."),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the re-rendered run here instead of in place."),
    ] = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,  # accepted like every command's; it draws no progress bar
) -> None:
    """Re-render TABLES.md, cells.parquet and the plots of a run from its results.json alone.

    Needs no archive or other input: every figure comes from results.json. Every folder at or
    below RUN_DIR holding a results.json is rendered (a demo's sub-runs too).
    """
    with _user_errors("report", out or run_dir):
        from specreplay.commands.report import run_report

        typer.echo(run_report(run_dir, out=out, force=force))


@app.command()
def budget(
    price_ms: Annotated[
        float, typer.Option("--price-ms", help="T: the policy's price, ms per round.")
    ],
    base: Annotated[
        float | None,
        typer.Option("--base", help="R_0: the reference's R (retained tokens per round)."),
    ] = None,
    delta_lo: Annotated[
        float | None,
        typer.Option("--delta-lo", help="Δ_lo: lower interval bound of the gain (tokens/round)."),
    ] = None,
    known: Annotated[
        list[float] | None,
        typer.Option(
            "--known", metavar="MS", help="A known added cost, ms per round (repeatable)."
        ),
    ] = None,
    source: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="A requalify results.json (or its folder): R_0 and Δ_lo per pooled and family "
            "cell, from the candidate-vs-reference delta.",
        ),
    ] = None,
    rate: Annotated[
        float | None, typer.Option("--rate", help="Sensitivity: historical rate r_0, tokens/s.")
    ] = None,
    tau_ms: Annotated[
        float | None, typer.Option("--tau-ms", help="Sensitivity: historical ms per round τ.")
    ] = None,
    gain: Annotated[
        float | None, typer.Option("--gain", help="Sensitivity: relative gain g (0.0832).")
    ] = None,
    x_grid: Annotated[
        str, typer.Option("--x-grid", help="Sensitivity: extra costs x, ms (comma-separated).")
    ] = "0,1,3",
    out: OutOpt = Path("specreplay-out/budget"),
    force: ForceOpt = False,
    quiet: QuietOpt = False,  # accepted like every command's; it draws no progress bar
) -> None:
    """Break-even added cost T·Δ_lo/R_0 of a gain and what remains after known costs (ESTIMATED).

    With --from, per pooled and family cell of a requalify run with --reference; with --rate,
    --tau-ms and --gain, the sensitivity table r_0·(1 + g)·τ/(τ + x) over --x-grid. Δ_lo ≤ 0
    gives a null budget with the reason. Writes results.json, TABLES.md and cells.parquet.
    """
    with _user_errors("budget", out):
        from specreplay.commands.budget import BudgetOptions, run_budget

        opts = BudgetOptions.build(
            price_ms=price_ms,
            base=base,
            delta_lo=delta_lo,
            known=known or (),
            source=source,
            rate=rate,
            tau_ms=tau_ms,
            gain=gain,
            x_grid=x_grid,
        )
        typer.echo(run_budget(opts, out=out, force=force))


if __name__ == "__main__":  # python -m specreplay.cli
    app()
