"""Scale: issue 18's targets (issue 13's runs), every figure in one run, before and after a change.

What it runs (fresh process each; page cache, Numba cache and input-hash cache warm: one untimed
run first; best of ``--repeats``, default 2; every checkout's modules byte-compiled first, as
``pip install`` does, so no run compiles Python sources: a checkout run with
``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile about 110 modules in each process, 0.4 to
0.8 s of its start-up here):

- **requalify** of a 10,240,000-position archive (32,000 requests, 128 shards), 3 arms, every
  option at its default: ``specreplay requalify ARCHIVE --baseline top32:t0.7@5 --candidate
  top32:t0.7:dyadic24@5 --reference greedy@5``, from Arrow IPC, zstd Parquet and lz4 Parquet. Wall
  time, CPU time (user + system, of the child), **peak private memory** (the largest ``RssAnon``
  of /proc/PID/status, sampled every 20 ms: resident memory less file-backed pages, so a
  memory-mapped archive does not count) and the **stages** the run reports
  (``SPECREPLAY_TIMINGS``, :mod:`specreplay.timing`);
- the same IPC run with validation forced (``--revalidate``: a first run on a capture), on the
  checkouts whose ``requalify --help`` offers the option (none before issue 18, item 1);
- **polars alone**: polars reading the columns that run needs into memory
  (``scan_ipc``/``scan_parquet(files).select(cols).collect()``), in a fresh process;
- the same requalify of a **2,000,000-position** archive from IPC against polars alone, with its
  **fixed costs**: the stages ``start-up`` (process start to the first stage), ``comparisons and
  law tests`` and ``plots and files``;
- ``specreplay demo`` **warm** (what ``make demo`` runs once the venv exists); with ``--before``,
  the two versions' demo results.json compared figure by figure (``bench/compare_results.py``).

Each stages table ends with **outside every stage**: the wall time less the top-level stages
(:data:`TOP_LEVEL`), so nothing of a run hides: what is left is opening the archive (its first
batch read and validated, the input-hash lookup), the console text and the interpreter's exit
(and, for a checkout without the start-up stage, the start-up too).

``--before REV`` runs every timed command also on git revision REV (a temporary worktree of this
repository, its own Numba cache, warmed first), alternating the two, so each figure has its
before and after from the same run. The archives are written once, by this checkout.

Disk: the forms are built one at a time from the zstd Parquet archive (``synth``), each converted
form deleted after it is measured, so the run needs the zstd archive plus the largest other form:
about 8 + 11 GB at 10.24 M positions (the bench estimates it from a 20-request sample and stops
when the folder has less). ``--keep DIR`` keeps every form in DIR and reuses what is there.

Targets (issue 18, item 5; every bar a ratio to polars alone on the same form in the same run):
10.24 M IPC ≤ 1.5× (12 s is the aim, not the bar), the same with validation forced ≤ 2×; 2 M
IPC ≤ 3×; zstd and lz4 Parquet ≤ 1.5×; at 2 M start-up ≤ 1.0 s, comparisons and law tests
≤ 0.5 s, plots and files ≤ 0.5 s (item 3); demo warm ≤ 10 s; peak private memory ≤ 1.5 GiB; the
demo's figures equal to the baseline's.

Run: ``python bench/scale.py [--before REV]`` (``--positions 2000000 --forms "Arrow IPC"
--no-demo`` for a quicker look).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ARMS = ["--baseline", "top32:t0.7@5", "--candidate", "top32:t0.7:dyadic24@5",
        "--reference", "greedy@5"]  # fmt: skip
POSITIONS_PER_REQUEST = 64 * 5  # synth --depth 5, as measured in docs/ (its default is 8)
SHARD_REQUESTS = 250  # 32,000 requests → 128 shards
SMALL_POSITIONS = 2_000_000
FORMS = {  # name: (synth/convert options, file suffix, polars scan)
    "Arrow IPC": (["--format", "ipc"], ".arrow", "scan_ipc"),
    "zstd Parquet": (["--format", "parquet", "--compression", "zstd"], ".parquet", "scan_parquet"),
    "lz4 Parquet": (["--format", "parquet", "--compression", "lz4"], ".parquet", "scan_parquet"),
}
REVALIDATE = "validation forced"  # the row of the IPC run with --revalidate
TARGET_VS_POLARS = {"Arrow IPC": 1.5, REVALIDATE: 2.0, "zstd Parquet": 1.5, "lz4 Parquet": 1.5,
                    "small": 3.0}  # fmt: skip
TARGET_FIXED = {"start-up": 1.0, "comparisons and law tests": 0.5, "plots and files": 0.5}
"""The fixed costs at 2 M positions (issue 18, item 3), seconds of wall time."""
TARGET_PEAK = 1.5 * 2**30
TARGET_DEMO = 10.0
TOP_LEVEL = ("start-up", "replaying", "tail check (auto)", "resampling",
             "comparisons and law tests", "plots and files")  # fmt: skip
"""The stages no other stage holds (the phases of a run, and start-up before them)."""
OUTSIDE = "outside every stage"
NEEDED = ["request_id", "family", "context_tokens", "round", "position", "cand_ids",
          "draft_logprobs", "target_probs", "drafted_id", "accepted", "logging_arm",
          "emitted_q"]  # fmt: skip
HERE = Path(__file__).resolve().parent.parent


@dataclass
class Checkout:
    """A source tree the timed commands run from (this one, or a worktree of ``--before``)."""

    name: str
    root: Path
    cache: Path

    def env(self, timings: Path | None = None) -> dict[str, str]:
        env = dict(os.environ, PYTHONPATH=str(self.root), NUMBA_CACHE_DIR=str(self.cache))
        if timings is not None:
            env["SPECREPLAY_TIMINGS"] = str(timings)
        return env

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "specreplay.cli", *args]

    def byte_compile(self) -> None:
        """Write the package's bytecode, as ``pip install`` does (none is left to compile)."""
        cmd = [sys.executable, "-m", "compileall", "-q", str(self.root / "specreplay")]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)

    def offers(self, command: str, option: str) -> bool:
        """Whether ``command --help`` of this checkout mentions ``option``."""
        out = subprocess.run(self.cli(command, "--help"), env=self.env(), cwd=self.root,
                             capture_output=True, text=True, check=True)  # fmt: skip
        return option in out.stdout


@dataclass
class Timed:
    """Best wall time, its CPU time and stages, and the largest peak private memory."""

    wall: float = float("inf")
    cpu: float = float("inf")
    peak: int = 0
    stages: dict[str, float] = field(default_factory=dict)


def outside(t: Timed) -> float:
    """The wall time outside every top-level stage (:data:`TOP_LEVEL`) of the best run."""
    return t.wall - sum(t.stages.get(s, 0.0) for s in TOP_LEVEL)


def run(cmd: list[str], env: dict[str, str], cwd: Path = HERE) -> tuple[float, int, float]:
    """Run ``cmd`` in ``cwd``; return (wall seconds, peak RssAnon in bytes, CPU seconds).

    CPU is the child's user + system time (``RUSAGE_CHILDREN`` before and after: the bench
    runs one child at a time).

    ``cwd`` is the checkout's root: ``python -m`` puts the working folder first on the module
    path, ahead of PYTHONPATH, so a child started elsewhere would import that folder's package.
    """
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        status = Path(f"/proc/{proc.pid}/status")
        while not done.is_set():
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("RssAnon:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
            except OSError:
                return
            time.sleep(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    done.set()
    th.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.decode()[-2000:]}")
    return wall, peak, cpu


def timed(co: Checkout, args: list[str], best: Timed, scratch: Path) -> None:
    """Run the command once more on ``co``; keep the best wall time and its stages."""
    stages = scratch / f"timings-{co.name}.json"
    stages.unlink(missing_ok=True)
    wall, peak, cpu = run(co.cli(*args), co.env(stages), co.root)
    best.peak = max(best.peak, peak)
    if wall < best.wall:
        best.wall, best.cpu = wall, cpu
        best.stages = json.loads(stages.read_text().splitlines()[-1]) if stages.exists() else {}


def polars_alone(folder: Path, suffix: str, scan: str) -> float:
    """Seconds for polars to read the needed columns into memory, in a fresh process."""
    code = (
        "import sys, time, pathlib, polars as pl\n"
        f"files = sorted(str(p) for p in pathlib.Path({str(folder)!r}).iterdir()"
        f" if p.suffix == {suffix!r})\n"
        "t = time.perf_counter()\n"
        f"df = pl.{scan}(files).select({NEEDED!r}).collect()\n"
        "print(time.perf_counter() - t, df.height)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


def warm_pages(folder: Path) -> None:
    for p in folder.iterdir():
        with p.open("rb") as fh:
            while fh.read(1 << 24):
                pass


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def build(here: Checkout, folder: Path, form: str, requests: int, source: Path | None) -> None:
    """Write ``folder`` in ``form``: synth (``source`` None) or convert ``source`` (reused)."""
    if (folder / "SYNTH.json").exists() or (folder / "CONVERT.json").exists():
        return
    opts = FORMS[form][0]
    t0 = time.perf_counter()
    if source is None:
        cmd = here.cli("synth", str(folder), "--requests", str(requests),
                       "--shard-requests", str(SHARD_REQUESTS), "--depth", "5", "-q",
                       *opts)  # fmt: skip
    else:
        cmd = here.cli("convert", str(source), str(folder), "-q", *opts)
    subprocess.run(cmd, check=True, env=here.env(), cwd=here.root)
    print(f"wrote {form} ({folder.name}): {size_of(folder) / 2**30:.2f} GiB in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip


def bytes_per_position(here: Checkout, root: Path) -> dict[str, float]:
    """Bytes per position of each form, from a 20-request sample."""
    sample = root / "sample"
    out = {}
    zstd = sample / "zstd"
    build(here, zstd, "zstd Parquet", 20, None)
    for form in FORMS:
        folder = zstd if form == "zstd Parquet" else sample / form.split()[0].lower()
        build(here, folder, form, 20, None if folder is zstd else zstd)
        out[form] = size_of(folder) / (20 * POSITIONS_PER_REQUEST)
    shutil.rmtree(sample)
    return out


def measure(checkouts: list[Checkout], folder: Path, form: str, repeats: int, scratch: Path,
            extra: tuple[str, ...] = (), alone: float | None = None,
            ) -> tuple[dict[str, Timed], float]:  # fmt: skip
    """Requalify ``folder`` on every checkout (alternating) and polars alone on it.

    ``extra``: more options of the requalify; ``alone``: polars' time already measured.
    """
    suffix, scan = FORMS[form][1], FORMS[form][2]
    warm_pages(folder)
    args = ["requalify", str(folder), *ARMS, *extra, "--out", str(scratch / "out"), "--force",
            "-q"]  # fmt: skip
    best = {co.name: Timed() for co in checkouts}
    for co in checkouts:
        run(co.cli(*args), co.env(), co.root)  # untimed: fills the hash cache
    for _ in range(repeats):
        for co in checkouts:
            timed(co, args, best[co.name], scratch)
    if alone is None:
        alone = min(polars_alone(folder, suffix, scan) for _ in range(repeats))
    for co in checkouts:
        b = best[co.name]
        what = " ".join(["requalify", *extra])
        print(f"  {co.name}: {what} {b.wall:.2f} s wall, {b.cpu:.2f} s CPU "
              f"({b.wall / alone:.2f}× polars alone {alone:.2f} s), peak private "
              f"{b.peak / 2**30:.2f} GiB", flush=True)  # fmt: skip
    return best, alone


def demo_warm(checkouts: list[Checkout], repeats: int, scratch: Path) -> dict[str, Timed]:
    """Time ``specreplay demo`` warm on every checkout, each writing its own folder."""
    best = {co.name: Timed() for co in checkouts}
    args = {co.name: ["demo", "--out", str(scratch / f"demo-{i}"), "--force", "-q"]
            for i, co in enumerate(checkouts)}  # fmt: skip
    for co in checkouts:
        run(co.cli(*args[co.name]), co.env(), co.root)
    for _ in range(repeats):
        for co in checkouts:
            timed(co, args[co.name], best[co.name], scratch)
    return best


def demo_figures(scratch: Path) -> str:
    """``bench/compare_results.py`` of the before's demo against the after's (its summary)."""
    cmd = [sys.executable, str(HERE / "bench" / "compare_results.py"), str(scratch / "demo-0"),
           str(scratch / "demo-1")]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    verdict_ = "equal" if out.returncode == 0 else "NOT equal"
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    return f"demo results.json, before against after: {verdict_}\n" + "\n".join(lines[-6:])


def before_checkout(rev: str, scratch: Path) -> Checkout:
    """A worktree of ``rev`` with its own Numba cache, its kernels compiled (untimed)."""
    root = scratch / "before"
    subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", "-q", str(root), rev],
                   check=True)  # fmt: skip
    co = Checkout(f"before ({rev})", root, scratch / "numba-before")
    print(f"warming {co.name}'s kernels ...", flush=True)
    subprocess.run(co.cli("warmup", "-q"), check=True, env=co.env(), cwd=root)
    return co


def check_imports(co: Checkout) -> None:
    """Stop unless a child started for ``co`` imports ``co``'s own package."""
    code = "import specreplay; print(specreplay.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env=co.env(), cwd=co.root,
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    if not Path(out).resolve().is_relative_to(co.root.resolve()):
        raise SystemExit(f"{co.name} imports {out}, not its own tree {co.root}")
    print(f"{co.name}: {out}", flush=True)


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "not met"


def _cell(t: Timed | None, alone: float | None = None) -> str:
    if t is None or t.wall == float("inf"):
        return "–"
    ratio = f"{t.wall / alone:.2f}×, " if alone else ""
    return f"{t.wall:.2f} s ({ratio}CPU {t.cpu:.2f} s)"


def report(checkouts: list[Checkout], rows: dict[str, tuple[dict[str, Timed], float]],
           demo: dict[str, Timed], positions: int, repeats: int) -> None:  # fmt: skip
    """Print the targets, the fixed costs and the stages tables (Markdown, for docs/scale.md)."""
    names = [co.name for co in checkouts]
    last = names[-1]
    print(f"\n{positions:,} positions, 3 arms, default options, {os.cpu_count()} cores, "
          f"best of {repeats} (wall; its CPU time, user + system):\n")  # fmt: skip
    print("| run | " + " | ".join(names) + " | polars alone | target |")
    print("|---|" + "---|" * len(names) + "---|---|")
    for form, (best, alone) in rows.items():
        label = {"small": f"{SMALL_POSITIONS:,} positions, Arrow IPC",
                 REVALIDATE: f"{form}: Arrow IPC, --revalidate"}.get(form, form)  # fmt: skip
        cells = " | ".join(_cell(best.get(n), alone) for n in names)
        aim = ""
        if form in TARGET_VS_POLARS and last in best:
            bar = TARGET_VS_POLARS[form]
            aim = f"≤ {bar:g}× polars: {verdict(best[last].wall / alone, bar)}"
        print(f"| {label} | {cells} | {alone:.2f} s | {aim} |")
    peak = {n: max((b[n].peak for b, _ in rows.values() if n in b), default=0) for n in names}
    print("| peak private memory | " + " | ".join(f"{peak[n] / 2**30:.2f} GiB" for n in names)
          + f" | | ≤ 1.5 GiB: {verdict(peak[last], TARGET_PEAK)} |")  # fmt: skip
    if demo:
        print("| `specreplay demo`, warm | " + " | ".join(_cell(demo[n]) for n in names)
              + f" | | ≤ {TARGET_DEMO:g} s: {verdict(demo[last].wall, TARGET_DEMO)} |")  # fmt: skip
    if "small" in rows:
        small = rows["small"][0]
        print(f"\nFixed costs at {SMALL_POSITIONS:,} positions (seconds of wall time, the best "
              "run's stages):\n")  # fmt: skip
        print("| stage | " + " | ".join(names) + " | target |")
        print("|---|" + "---|" * len(names) + "---|")
        for s, bar in TARGET_FIXED.items():
            cells = " | ".join(
                f"{small[n].stages[s]:.2f}" if s in small[n].stages else "–" for n in names
            )
            got = small[last].stages.get(s)
            aim = f"≤ {bar:g} s: {verdict(got, bar)}" if got is not None else f"≤ {bar:g} s"
            print(f"| {s} | {cells} | {aim} |")
    for form, (best, _) in rows.items():
        stages = sorted({s for n in best for s in best[n].stages})
        if not stages:
            continue
        print(f"\nStages, {form} (seconds; SPECREPLAY_TIMINGS):\n")
        print("| stage | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for s in stages:
            cells = " | ".join(
                f"{best[n].stages[s]:.2f}" if n in best and s in best[n].stages else "–"
                for n in names
            )
            print(f"| {s} | {cells} |")
        cells = " | ".join(f"{outside(best[n]):.2f}" if n in best else "–" for n in names)
        print(f"| {OUTSIDE} (wall − {', '.join(TOP_LEVEL)}) | {cells} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=10_240_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="folder for the archives, kept (reused if there)")
    ap.add_argument("--before", metavar="REV", help="also time git revision REV, alternating")
    ap.add_argument("--forms", default=",".join(FORMS), help="comma-separated subset of the forms")
    ap.add_argument("--no-demo", action="store_true", help="skip the warm demo")
    args = ap.parse_args()
    forms = [f.strip() for f in args.forms.split(",")]
    unknown = set(forms) - set(FORMS)
    if unknown:
        raise SystemExit(f"--forms: unknown {sorted(unknown)}; choose from {list(FORMS)}")
    requests = max(1, args.positions // POSITIONS_PER_REQUEST)
    positions = requests * POSITIONS_PER_REQUEST
    scratch = Path(tempfile.mkdtemp(prefix="specreplay-scale-"))
    root = args.keep or scratch / "archives"
    root.mkdir(parents=True, exist_ok=True)
    here = Checkout("after", HERE, Path(os.environ.get("NUMBA_CACHE_DIR", scratch / "numba")))
    checkouts = [here]
    try:
        per = bytes_per_position(here, root)
        biggest = max(per[f] for f in forms if f != "zstd Parquet") if len(forms) > 1 else 0.0
        need = positions * (per["zstd Parquet"] + biggest) + SMALL_POSITIONS * per["Arrow IPC"]
        have = shutil.disk_usage(root).free
        sizes = ", ".join(f"{f} {per[f] * positions / 1e9:.1f} GB" for f in FORMS)
        print(f"{positions:,} positions: {sizes}; this run needs about {need / 1e9:.1f} GB at "
              f"once, {have / 1e9:.1f} GB free")  # fmt: skip
        if need > have and args.keep is None:
            raise SystemExit("not enough free disk: use --positions or --keep on a larger disk")
        if args.before:
            checkouts = [before_checkout(args.before, scratch), here]
        subprocess.run(here.cli("warmup", "-q"), check=True, env=here.env(), cwd=here.root)
        for co in checkouts:
            check_imports(co)
            co.byte_compile()
        rows: dict[str, tuple[dict[str, Timed], float]] = {}
        small_src = root / "small-zstd"
        small = root / "small-ipc"
        build(here, small_src, "zstd Parquet", SMALL_POSITIONS // POSITIONS_PER_REQUEST, None)
        build(here, small, "Arrow IPC", 0, small_src)
        print(f"{SMALL_POSITIONS:,} positions, Arrow IPC:", flush=True)
        rows["small"] = measure(checkouts, small, "Arrow IPC", args.repeats, scratch)
        if args.keep is None:
            shutil.rmtree(small_src)
            shutil.rmtree(small)
        zstd = root / "zstd"
        build(here, zstd, "zstd Parquet", requests, None)
        for form in forms:
            folder = zstd if form == "zstd Parquet" else root / form.split()[0].lower()
            build(here, folder, form, requests, None if folder is zstd else zstd)
            print(f"{positions:,} positions, {form}:", flush=True)
            rows[form] = measure(checkouts, folder, form, args.repeats, scratch)
            forcing = [co for co in checkouts if co.offers("requalify", "--revalidate")]
            if form == "Arrow IPC" and forcing:
                print(f"{positions:,} positions, {form}, validation forced:", flush=True)
                alone = rows[form][1]
                rows[REVALIDATE] = measure(forcing, folder, form, args.repeats, scratch,
                                           ("--revalidate",), alone)  # fmt: skip
            if args.keep is None and folder is not zstd:
                shutil.rmtree(folder)
        demo = {} if args.no_demo else demo_warm(checkouts, args.repeats, scratch)
        report(checkouts, rows, demo, positions, args.repeats)
        if demo and len(checkouts) == 2:
            print("\n" + demo_figures(scratch))
    finally:
        if args.before:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force",
                            str(scratch / "before")], check=False)  # fmt: skip
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
