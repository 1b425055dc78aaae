"""Heavy optional libraries are imported only by the runs that need them (issue 13, item 5).

Dask and distributed (``--scheduler``/``--workers`` only), matplotlib (plots, written only with an
output folder) and ArviZ with xarray (``Result.to_arviz()`` only: k̂, HDI and ETI are computed in
the package) each take from a few tenths of a second to several seconds to import. Each test
runs in a fresh interpreter and reads ``sys.modules`` there, so a module-level ``import
matplotlib`` (or ``dask``, ``arviz``) added anywhere in the package fails it.

The package's HDI and ETI replace ArviZ's at run time: they are checked against ``arviz_stats``
bit for bit, since they run the same NumPy operations (a sort and a least width; a linear
quantile).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from arviz_stats.base import array_stats

from specreplay.stats.arviz_bridge import eti, hdi_nearest

HEAVY = ("arviz", "arviz_base", "arviz_stats", "dask", "distributed", "matplotlib", "xarray")
DATA = Path(__file__).resolve().parent / "data" / "medusa-mtbench"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"

_PROBE = """
import json, sys
HEAVY = {heavy!r}
seen = {{}}
def note(step):
    seen[step] = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
{body}
print(json.dumps(seen))
"""


def _probe(body: str, tmp_path: Path) -> dict[str, list[str]]:
    """Run ``body`` in a fresh interpreter; return the heavy modules loaded after each note()."""
    code = _PROBE.format(heavy=HEAVY, body=body)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, check=True).stdout  # fmt: skip
    seen: dict[str, list[str]] = json.loads(out.strip().splitlines()[-1])
    return seen


def test_importing_every_module_loads_no_heavy_library(tmp_path: Path) -> None:
    """Every module of specreplay (render/, pipelines/, the CLI, the API, …) imports none of
    dask, distributed, matplotlib, arviz or xarray at module level."""
    seen = _probe(
        "import importlib, pkgutil, specreplay\n"
        "names = [m.name for m in pkgutil.walk_packages(specreplay.__path__, 'specreplay.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "assert len(names) > 100, len(names)\n"
        "note('all modules')\n",
        tmp_path,
    )
    assert seen == {"all modules": []}


def test_help_and_runs_without_plots_load_no_heavy_library(
    small_archive: Path, tmp_path: Path
) -> None:
    """``--help``, ``requalify --help``, a default requalify and a default interval computed
    without an output folder (no plots: ``out=None``) load none of them; the same requalify
    writing its folder loads matplotlib for its plots, and still no Dask and no ArviZ, nor
    ``matplotlib.pyplot`` (issue 18: a plot is a bare Figure on an Agg canvas)."""
    a, b = DATA / f"medusa-vicuna-7b-v1.3-{STEM}", DATA / f"medusa-vicuna-13b-v1.3-{STEM}"
    arms = "baseline='top32:t0.7@5', candidate='top32:t0.7:dyadic24@5', min_requests=5"
    seen = _probe(
        "from typer.testing import CliRunner\n"
        "from specreplay.cli import app\n"
        "from specreplay import api\n"
        "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
        "note('--help')\n"
        "assert CliRunner().invoke(app, ['requalify', '--help']).exit_code == 0\n"
        "note('requalify --help')\n"
        f"r = api.requalify({str(small_archive)!r}, {arms}, n_boot=200)\n"
        "assert r.requalification is not None\n"
        "note('requalify')\n"
        f"api.interval({str(a)!r}, {str(b)!r}, question_file={str(DATA / 'question.jsonl')!r},"
        " n_boot=200)\n"
        "note('interval')\n"
        f"api.requalify({str(small_archive)!r}, {arms}, n_boot=200, out='run')\n"
        "note('requalify --out')\n",
        tmp_path,
    )
    assert seen["--help"] == seen["requalify --help"] == []
    assert seen["requalify"] == seen["interval"] == []
    written = {m.split(".")[0] for m in seen["requalify --out"]}
    assert written == {"matplotlib"}  # the plots, and only they
    assert "matplotlib.pyplot" not in seen["requalify --out"]
    assert (tmp_path / "run" / "forest.png").exists()


@pytest.mark.parametrize("prob", [0.5, 0.89, 0.95, 0.999])
def test_hdi_and_eti_equal_arviz_bit_for_bit(prob: float) -> None:
    """On seeded draws (normal, skewed, heavy ties, tiny samples) both intervals equal
    arviz_stats' hdi (nearest) and eti (linear) exactly."""
    rng = np.random.default_rng(int(prob * 1000))
    samples = [rng.normal(0.01, 0.003, 10_000), rng.lognormal(0.0, 1.0, 2_001),
               np.round(rng.normal(0, 1, 5_000), 1), rng.standard_t(2, 37), np.array([0.3]),
               np.array([1.0, 1.0, 2.0])]  # fmt: skip
    for x in samples:
        np.testing.assert_array_equal(hdi_nearest(x, prob), array_stats.hdi(x, prob))
        np.testing.assert_array_equal(eti(x, prob), array_stats.eti(x, prob))
    with pytest.raises(ValueError, match="Too few elements"):
        array_stats.hdi(np.zeros(0), prob)
    with pytest.raises(ValueError, match="Too few elements"):
        hdi_nearest(np.zeros(0), prob)


_AT_START_UP = """
import json, os, sys
from numba.core.registry import CPUDispatcher
import specreplay.timing as timing

def first_stage(t0):
    loaded = sorted(
        f"{{name}}.{{attr}}"
        for name, mod in list(sys.modules.items())
        if name.startswith("specreplay.")
        for attr, obj in list(vars(mod).items())
        if isinstance(obj, CPUDispatcher) and obj.overloads
    )
    print(json.dumps({{"modules": sorted(sys.modules), "loaded": loaded}}))
    sys.stdout.flush()
    os._exit(0)

timing._start_up_ends = first_stage
sys.argv = ["specreplay", "requalify", {archive!r}, "--baseline", "top32:t0.7@5",
            "--candidate", "top32:t0.7:dyadic24@5", "--out", "run", "-q"]
from specreplay.cli import app
app()
"""

NOT_BEFORE_THE_PASS = ("arviz", "dask", "distributed", "matplotlib", "xarray", "scipy.stats")
"""Libraries a requalify's start-up must not import (scipy's base comes with Numba)."""
UNCALLED_KERNELS = ("specreplay.sim.toy", "specreplay.sim.live", "specreplay.sim.synth")
"""Kernel modules a requalify never calls (the toy model, live decoding, synthesis)."""


def test_start_up_loads_no_kernel_and_no_library_the_run_does_not_need(
    small_archive: Path, tmp_path: Path
) -> None:
    """Up to a requalify's first stage (the end of start-up, :mod:`specreplay.timing`) no
    Numba kernel of specreplay has an overload (none compiled or loaded from the cache: no
    eager signature, no warm-up call at import; each is loaded by its first call, in the stage
    that makes it), none of the plotting, Dask, ArviZ or scipy.stats is imported, and neither
    are the kernel modules the run never calls."""
    code = _AT_START_UP.format(archive=str(small_archive))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, check=True, timeout=300).stdout  # fmt: skip
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["loaded"] == []
    mods = set(seen["modules"])
    assert "specreplay.pipelines.requalify" in mods  # the hook ran where it should
    heavy = sorted(m for m in mods if m.startswith(NOT_BEFORE_THE_PASS))
    assert heavy == []
    assert mods.isdisjoint(UNCALLED_KERNELS)
