"""Issue 7, item 5: the small things a user trips over (each checked where it shows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specreplay import __version__, kernel_sources_hash
from specreplay.cli import app

MEDUSA = Path(__file__).parent / "data" / "medusa-mtbench"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3"


def test_version_prints_the_package_version() -> None:
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.strip() == f"specreplay {__version__}"


def test_the_version_has_one_source() -> None:
    """SemVer 0.y.z, written once (specreplay.__version__, which hatch reads for the metadata)."""
    import importlib.metadata
    import re
    import tomllib

    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"]["path"] == "specreplay/__init__.py"
    assert re.fullmatch(r"0\.\d+\.\d+", __version__)
    assert importlib.metadata.version("specreplay") == __version__


def test_synth_says_request_and_shard_in_the_singular_when_there_is_one(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["synth", str(tmp_path / "a"), "--requests", "1", "--rounds",
                                   "2", "-q"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "wrote 1 request × 2 rounds" in res.stdout and "in 1 shard to" in res.stdout


def test_synth_depth_sets_the_logging_arm_and_the_positions(tmp_path: Path) -> None:
    """The built-in archive drafts 8 positions (issue 14); ``--depth``/``depth=`` another D."""
    import polars as pl

    from specreplay import api

    res = CliRunner().invoke(app, ["synth", str(tmp_path / "a"), "--requests", "2", "--rounds",
                                   "3", "--depth", "3", "-q"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "× 3 positions (18 rows)" in res.stdout and "logging arm top32:t0.7@3" in res.stdout
    frame = pl.read_parquet(sorted((tmp_path / "a").glob("*.parquet")))
    assert frame.height == 18 and frame["position"].max() == 3
    default = api.synth(tmp_path / "b", requests=2, rounds=3)
    assert (default.positions, default.rows, default.logging_arm) == (8, 48, "top32:t0.7@8")
    manifest = json.loads((tmp_path / "b" / "SYNTH.json").read_text())
    assert manifest["options"]["depth"] == 8 and manifest["arms"] == ["top32:t0.7@8"]


def test_the_demo_is_at_the_built_in_depth_and_prices_a_round_there() -> None:
    """The demo's arms are at the archive's depth 8 (the logging arm is the baseline), its sweep
    runs 1..8, and its budget price is the cost model's ms per round at depth 8."""
    from specreplay.pipelines import demo
    from specreplay.pipelines.options import SYNTH_DEPTH
    from specreplay.sim.arms import parse_arm
    from specreplay.stats.depth import CostModel

    assert demo.DEMO_DEPTH == SYNTH_DEPTH.default == 8
    for arm in (demo.DEMO_BASELINE, demo.DEMO_CANDIDATE, demo.DEMO_REFERENCE, demo.DEMO_MISMATCHED):
        assert parse_arm(arm).depth == 8, arm
    assert CostModel.parse(demo.DEMO_COST).ms(demo.DEMO_DEPTH) == pytest.approx(
        demo.DEMO_PRICE_MS, rel=1e-12
    )


def test_every_command_accepts_quiet() -> None:
    from specreplay.cli import app as cli

    commands = sorted(
        c.name or getattr(c.callback, "__name__", "") for c in cli.registered_commands
    )
    assert len(commands) == 12  # convert joined in issue 8
    for cmd in commands:
        res = CliRunner().invoke(app, [cmd, "--help"], env={"COLUMNS": "200"})
        assert "-q" in res.stdout, cmd


def test_an_absolute_margin_above_half_of_r_is_flagged(tmp_path: Path) -> None:
    """--margin 5 on R ≈ 2.6 means 5 tokens/round: every delta says so, and how to write 5%."""
    res = CliRunner().invoke(app, [
        "interval", str(MEDUSA / f"medusa-vicuna-7b-v1.3-{STEM}.jsonl"),
        str(MEDUSA / f"medusa-vicuna-13b-v1.3-{STEM}.jsonl"), "--question-file",
        str(MEDUSA / "question.jsonl"), "--margin", "5", "--out", str(tmp_path / "o"), "-q",
        "--n-boot", "300",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    warning = doc["cells"][0]["deltas"][0]["warning"]
    assert "exceeds half of R_a" in warning and "5%" in warning


def test_help_shows_arm_not_a_python_type() -> None:
    for cmd in ("lawtest", "sweep"):
        res = CliRunner().invoke(app, [cmd, "--help"], env={"COLUMNS": "200"})
        assert "--arm ARM" in res.stdout and "list[str]" not in res.stdout, cmd
    res = CliRunner().invoke(app, ["budget", "--help"], env={"COLUMNS": "200"})
    assert "--known MS" in res.stdout and "list[float]" not in res.stdout


def test_usage_lines_name_arguments_in_capitals() -> None:
    """Typer writes a required argument {NAME} and an optional one [NAME]; never {out}."""
    usage = {
        "synth": "{OUT}", "validate": "{ARCHIVE}", "interval": "{A} {B}",
        "requalify": "{ARCHIVE}", "lawtest": "[ARCHIVE]", "sweep": "{ARCHIVE}",
        "report": "{RUN_DIR}", "screen": "[INPUTS]...",  # optional: a config may name every scrape
    }  # fmt: skip
    for cmd, args in usage.items():
        res = CliRunner().invoke(app, [cmd, "--help"], env={"COLUMNS": "200"})
        assert f"Usage: specreplay {cmd} [OPTIONS] {args}" in res.stdout, cmd


def test_validate_out_says_where_it_wrote(tmp_path: Path) -> None:
    arch = tmp_path / "a"
    assert CliRunner().invoke(app, ["synth", str(arch), "--requests", "2", "--rounds", "2",
                                    "-q"]).exit_code == 0  # fmt: skip
    res = CliRunner().invoke(app, ["validate", str(arch), "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    assert res.stdout.rstrip().endswith(f"Outputs: {tmp_path / 'v'}/ (results.json, TABLES.md, "
                                        "cells.parquet, REPORT.md)")  # fmt: skip
    assert (tmp_path / "v" / "results.json").exists()


def test_law_table_says_underpowered_and_holm_over_those_that_ran() -> None:
    from specreplay.pipelines.document import new_result
    from specreplay.render.tables import lawtest_table
    from specreplay.results.model import Label, LawTest

    tests = (
        LawTest("a@3", 1, 0.02, 1.0, True, Label.SIMULATED, draws=100, power=0.2,
                underpowered=True),
        LawTest("a@3", 2, 0.0, 1.0, True, Label.SIMULATED, draws=10_000, power=0.99,
                underpowered=False),
        LawTest("a@3", 3, None, None, None, Label.SIMULATED, null_reason="no candidates"),
    )  # fmt: skip
    result = new_result(command="lawtest", seed=0, inputs=(), options={"family_alpha": 1e-5},
                        assumptions=[], law_tests=tests)  # fmt: skip
    text = lawtest_table(result)
    assert text.startswith("LAW TESTS: 2 ran, 0 failed (G-test, Holm at family-wise α = 1e-05 "
                           "over the 2 that ran; 1 of the 3 listed could not run")  # fmt: skip
    rows = [ln for ln in text.splitlines() if ln.startswith("| a@3")]
    assert "underpowered" in rows[0] and rows[1].rstrip(" |").endswith("pass")


def test_json_errors_never_say_at_at(tmp_path: Path) -> None:
    bad = tmp_path / "a.jsonl"
    bad.write_text('{"request_id": "abc\n')
    res = CliRunner().invoke(app, ["validate", str(bad)])
    assert res.exit_code == 2
    assert "Unterminated string starting at column 16" in res.output
    assert "at at" not in res.output


def test_default_arm_labels_are_short(tmp_path: Path) -> None:
    """Without --name-a/--name-b the 80-character Medusa stems become what differs."""
    res = CliRunner().invoke(app, [
        "interval", str(MEDUSA / f"medusa-vicuna-7b-v1.3-{STEM}.jsonl"),
        str(MEDUSA / f"medusa-vicuna-13b-v1.3-{STEM}.jsonl"), "--question-file",
        str(MEDUSA / "question.jsonl"), "--out", str(tmp_path / "o"), "-q", "--n-boot", "200",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].endswith("— vicuna-13b vs vicuna-7b")


# Run in a fresh interpreter: imports specreplay, compiles two cached kernels (stats/tfast first,
# which imports nothing of sim/ or replay/, then one in sim/), then imports every module of the
# package and lists where each cached kernel's cache lives (numba picks it when the kernel is
# decorated). The environment is compared before that walk: polars, which the walk imports, sets
# _RJEM_MALLOC_CONF itself.
_CACHE_PROBE = """
import importlib, json, os, pkgutil
before = dict(os.environ)
import specreplay
after_import = dict(os.environ)
import numpy as np
from numba.core import config
from numba.core.caching import FunctionCache
from numba.core.registry import CPUDispatcher
from specreplay.stats.tfast import t_cdf_many
t_cdf_many(np.array([2.0]), np.array([5.0]))
from specreplay.sim.rng import uniform_py
uniform_py(1, 2, 3, 4, 5)
after_compile = dict(os.environ)
paths = {}
for m in pkgutil.walk_packages(specreplay.__path__, "specreplay."):
    for name, obj in vars(importlib.import_module(m.name)).items():
        cache = getattr(obj, "_cache", None)
        if isinstance(obj, CPUDispatcher) and isinstance(cache, FunctionCache):
            paths[f"{obj.py_func.__module__}.{name}"] = cache.cache_path
print(json.dumps({"env_after_import": after_import == before,
                  "env_after_compile": after_compile == before,
                  "config": config.CACHE_DIR, "in_effect": specreplay.numba_cache_dir(),
                  "paths": paths}))
"""


@pytest.mark.parametrize("callers", [False, True], ids=["default", "callers-NUMBA_CACHE_DIR"])
def test_numba_cache_dir_is_set_without_touching_the_environment(
    tmp_path: Path, callers: bool
) -> None:
    """``import specreplay`` changes no environment variable; every cached kernel of the package
    caches in one directory (the caller's NUMBA_CACHE_DIR, else the user cache default), and the
    compiled kernels' files land there."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(tmp_path / "home")
    key = f"{__version__}-{kernel_sources_hash()[:16]}"
    expected = tmp_path / "home" / ".cache" / "specreplay" / "numba" / key
    if callers:
        expected = tmp_path / "callers-cache"
        env["NUMBA_CACHE_DIR"] = str(expected)
    out = subprocess.run([sys.executable, "-c", _CACHE_PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    doc = json.loads(out)
    assert doc["env_after_import"] and doc["env_after_compile"]
    assert doc["config"] == doc["in_effect"] == str(expected)
    # the walk found the kernels of sim, stats and replay (80 today), every one under `expected`
    packages = {k.split(".")[1] for k in doc["paths"]}
    assert packages == {"sim", "stats", "replay"} and len(doc["paths"]) >= 50
    assert {k: p for k, p in doc["paths"].items() if Path(p).parent != expected} == {}
    # numba names a cache file MODULE.FUNCTION-LINE.pyXY.nbi, in a folder per source folder
    written = {p.name.split("-")[0] for p in expected.rglob("*.nbi")}
    assert {"rng._uniform_one", "tfast.t_cdf_many"} <= written


def test_every_cached_kernel_module_sets_the_cache_dir_first() -> None:
    """A module defining ``@njit(cache=True)`` kernels calls ``use_numba_cache()`` itself, at
    module level, before its first kernel: so its kernels cache in the chosen directory whatever
    is imported first (the packages' ``__init__`` no longer do it: they must import without
    Numba, for the vLLM plugin)."""
    import ast

    import specreplay

    root = Path(specreplay.__file__).parent
    uncovered, kernel_modules = [], 0
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        first_kernel = min(
            (
                node.lineno
                for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef)
                for dec in node.decorator_list
                if isinstance(dec, ast.Call)
                for kw in dec.keywords
                if kw.arg == "cache" and isinstance(kw.value, ast.Constant) and kw.value.value
            ),
            default=None,
        )
        if first_kernel is None:
            continue
        kernel_modules += 1
        calls = [
            n.lineno
            for n in tree.body
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
            and getattr(n.value.func, "id", "") == "use_numba_cache"
        ]  # fmt: skip
        if not calls or min(calls) > first_kernel:
            uncovered.append(str(path.relative_to(root)))
    assert kernel_modules >= 20
    assert uncovered == []


def test_a_cold_cache_is_announced_on_stderr(tmp_path: Path) -> None:
    cold = tmp_path / "cache"
    res = CliRunner().invoke(app, ["synth", str(tmp_path / "a"), "--requests", "1", "--rounds",
                                   "1", "-q"], env={"NUMBA_CACHE_DIR": str(cold)})  # fmt: skip
    assert res.exit_code == 0, res.output
    assert f"compiling kernels (first run only; cached in {cold})" in res.stderr
    assert "compiling" not in res.stdout


def test_warmup_compiles_and_says_where() -> None:
    res = CliRunner().invoke(app, ["warmup", "-q"])
    assert res.exit_code == 0, res.output
    assert "kernels compiled and cached in" in res.stdout


def test_interval_says_where_the_bucket_cells_are(small_archive: Path, tmp_path: Path) -> None:
    from test_sweep import _round_traces_of

    rounds, _ = _round_traces_of(small_archive, tmp_path)
    res = CliRunner().invoke(app, ["interval", str(rounds), str(rounds), "--name-a", "A",
                                   "--name-b", "B", "--out", str(tmp_path / "o"), "-q",
                                   "--n-boot", "200", "--min-requests", "2"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    n = sum(c["level"] in ("bucket", "family×bucket") for c in doc["cells"])
    assert n > 0
    assert f"{n} bucket and family × bucket cells are in {tmp_path / 'o'}/TABLES.md" in res.stdout


def test_law_rows_name_their_request_and_round(small_archive: Path, tmp_path: Path) -> None:
    """Archive law tests say where they are: the k rows of smallest seeded hash, found again."""
    import numpy as np
    import polars as pl

    from specreplay.sim.rng import STREAM_LAW_POSITIONS, request_key, uniform_bits

    res = CliRunner().invoke(app, ["lawtest", str(small_archive), "--arm", "top32:t0.7@5",
                                   "--positions", "6", "--max-draws", "2000", "--seed", "3",
                                   "--out", str(tmp_path / "o"), "-q"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    got = [(t["request"], t["round"], t["position"]) for t in doc["law_tests"]
           if t["round"] is not None]  # the toy positions come first, with neither  # fmt: skip
    shards = small_archive / "*.parquet"  # a TraceWriter folder also holds CAPTURE.json
    rows = pl.read_parquet(shards).select("request_id", "round", "position").rows()
    bits = [
        int(uniform_bits(np.uint64(3), request_key(r), np.int64(n), np.int64(p),
                         np.int64(STREAM_LAW_POSITIONS)))
        for r, n, p in rows
    ]  # fmt: skip
    expected = [rows[i] for i in np.argsort(np.array(bits, dtype=np.uint64), kind="stable")[:6]]
    assert sorted(got) == sorted(expected)
    assert len(set(got)) == 6  # two rows at "position 1" are told apart
    r, n, p = got[0]
    assert f"| {p} (request {r}, round {n}) |" in (tmp_path / "o" / "TABLES.md").read_text()


def test_law_tests_write_acceptance_rate_and_older_files_still_read(
    small_archive: Path, tmp_path: Path
) -> None:
    """``alpha`` is now ``acceptance_rate``; a results.json written before (with ``alpha``, without
    the fields added later with defaults) still validates and reads back."""
    import dataclasses

    from specreplay.results import model
    from specreplay.results.io import read_result
    from specreplay.results.schema import results_schema

    res = CliRunner().invoke(app, ["lawtest", "--arm", "top32:t0.7@5", "--max-draws", "2000",
                                   "--out", str(tmp_path / "o"), "-q"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    rates = [t["acceptance_rate"] for t in doc["law_tests"]]
    assert all("alpha" not in t for t in doc["law_tests"]) and all(
        0 < a <= 1 for a in rates if a is not None
    )
    assert sum(a is not None for a in rates) >= 1
    for t in doc["law_tests"]:
        t["alpha"] = t.pop("acceptance_rate")
        del t["request"], t["round"]
    old = tmp_path / "old" / "results.json"
    old.parent.mkdir()
    old.write_text(json.dumps(doc))
    back = read_result(old)
    assert [t.acceptance_rate for t in back.law_tests] == rates
    assert all(t.request is None for t in back.law_tests)
    for name, spec in results_schema()["$defs"].items():
        cls = getattr(model, name, None)
        if not dataclasses.is_dataclass(cls):
            continue  # an enum, a declared object of Result.extra, a JSON value
        fields = dataclasses.fields(cls)
        required = [f.name for f in fields if f.name != "extra"
                    and f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]  # fmt: skip
        assert spec.get("required", []) == required, name


def test_synth_manifest_never_names_the_temporary_folder(tmp_path: Path) -> None:
    """SYNTH.json is written inside ``.NAME.tmp-PID`` and renamed: it names shards by file name."""
    arch = tmp_path / "arch"
    res = CliRunner().invoke(app, ["synth", str(arch), "--requests", "5", "--rounds", "2",
                                   "--shard-requests", "2", "-q"])  # fmt: skip
    assert res.exit_code == 0, res.output
    text = (arch / "SYNTH.json").read_text()
    assert ".tmp-" not in text and str(tmp_path) not in text
    outputs = json.loads(text)["outputs"]
    assert sorted(o["path"] for o in outputs) == sorted(p.name for p in arch.glob("*.parquet"))
    assert len(outputs) == 3


def test_one_shard_moves_the_progress_bar_before_it_ends(tmp_path: Path) -> None:
    """A one-shard, one-batch archive reports a share of its positions after each arm."""
    import polars as pl

    from specreplay.replay.engine import replay_archive
    from specreplay.sim.arms import parse_arm

    arch = tmp_path / "a"
    assert CliRunner().invoke(app, ["synth", str(arch), "--requests", "6", "--rounds", "3",
                                    "-q"]).exit_code == 0  # fmt: skip
    rows = pl.scan_parquet(arch / "*.parquet").select(pl.len()).collect().item()
    calls: list[int] = []
    arms = [parse_arm(a) for a in ("top32:t0.7@5", "greedy@5", "top32:t0.7:dyadic8@5")]
    replay_archive(arch, arms, progress=calls.append)
    assert sum(calls) == rows == 6 * 3 * 8  # synth's default depth 8
    assert len(calls) == 4 and calls[0] == rows // 4  # three arms, then the companion's share


def test_outputs_line_lists_exactly_the_files_written(small_archive: Path, tmp_path: Path) -> None:
    """The last line names every file the run wrote (REPORT.md and each plot), and only those."""
    runs = {
        "rq": ["requalify", str(small_archive), "--baseline", "top32:t0.7@5", "--candidate",
               "top32:t0.7:dyadic24@5", "--n-boot", "200", "--min-requests", "2"],
        "law": ["lawtest", "--arm", "top32:t0.7@5", "--max-draws", "2000"],
        "iv": ["interval", str(MEDUSA / f"medusa-vicuna-7b-v1.3-{STEM}.jsonl"),
               str(MEDUSA / f"medusa-vicuna-13b-v1.3-{STEM}.jsonl"), "--question-file",
               str(MEDUSA / "question.jsonl"), "--n-boot", "300"],
    }  # fmt: skip
    for name, argv in runs.items():
        out = tmp_path / name
        res = CliRunner().invoke(app, [*argv, "--out", str(out), "-q"])
        assert res.exit_code == 0, res.output
        listed = res.stdout.rstrip().splitlines()[-1]
        assert listed.startswith(f"Outputs: {out}/ ("), listed
        names = listed.split(" (", 1)[1].rstrip(")").split(", ")
        on_disk = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
        assert sorted(names) == on_disk and "REPORT.md" in names, name


def test_every_package_imported_directly_is_declared() -> None:
    """Issue 16, item 9: every third-party module the package imports is a declared dependency
    (runtime, or an extra where only an optional path imports it); removing ``rich`` from the
    declared dependencies fails it (checked when written)."""
    import ast
    import tomllib

    root = Path(__file__).resolve().parents[1]
    meta = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = {_dist(d) for d in meta["dependencies"]}
    for extra in meta["optional-dependencies"].values():
        declared |= {_dist(d) for d in extra}
    import_names = {"numpy", "numba", "polars", "pyarrow", "typer", "rich", "matplotlib",
                    "prometheus_client", "arviz", "torch", "transformers", "dask",
                    "distributed", "xarray", "h5netcdf", "h5py", "llvmlite", "pydantic",
                    "pydantic_core"}  # fmt: skip
    dist_of = {"prometheus_client": "prometheus-client", "distributed": "dask",
               "xarray": "arviz", "llvmlite": "numba", "pydantic_core": "pydantic"}  # fmt: skip
    stdlib = set(__import__("sys").stdlib_module_names)
    found: set[str] = set()
    for path in (root / "specreplay").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in stdlib or top in ("specreplay", "__future__", "vllm"):
                    continue
                found.add(top)
    assert found <= import_names, found - import_names  # a new import: declare it, list it here
    missing = {t for t in found if _dist(dist_of.get(t, t)) not in declared}
    assert not missing, missing


def _dist(req: str) -> str:
    """The distribution name of a requirement, normalised (``dask[distributed]>=1`` -> dask)."""
    import re

    name = re.split(r"[\[<>=!~; ]", req.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def test_an_unknown_role_raises_with_the_valid_ones() -> None:
    """Issue 16, item 8: a wrong role name no longer returns None silently."""
    from specreplay.errors import SpecReplayError
    from specreplay.results.model import Cell, Level, Role

    cell = Cell(level=Level.POOLED, family=None, bucket=None, n_requests=0, arms={}, deltas=())
    assert cell.delta(Role.PATH_BIAS) is None and cell.delta("path-bias") is None  # none here
    with pytest.raises(SpecReplayError, match=r"role 'candidate-vs-base': .*candidate-vs-baseline"):
        cell.delta("candidate-vs-base")


def test_confidence_level_is_level_as_scipy_spells_it() -> None:
    """Issue 16, item 8: ``confidence_level=`` (scipy.stats.bootstrap's name) is ``level``; both
    given and different is one error, not a silent choice or a bare TypeError."""
    from specreplay import api
    from specreplay.errors import SpecReplayError
    from specreplay.results.model import Role

    a, b = ([10, 12, 9, 11], [31.0, 40.0, 25.0, 33.0]), ([10, 11, 9, 12], [33.0, 41.0, 27.0, 36.0])
    kw = {"n_boot": 200, "min_requests": 2}
    one = api.interval(a, b, confidence_level=0.9, **kw).pooled.delta(Role.B_VS_A)
    two = api.interval(a, b, level=0.9, **kw).pooled.delta(Role.B_VS_A)
    assert one is not None and two is not None and (one.lo, one.hi) == (two.lo, two.hi)
    assert one.level == 0.9
    with pytest.raises(SpecReplayError, match=r"level=0.8 and confidence_level=0.9: give one"):
        api.interval(a, b, level=0.8, confidence_level=0.9, **kw)
