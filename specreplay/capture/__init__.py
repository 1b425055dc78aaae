"""Capture: record position traces where a serving engine makes them (issue 12).

``specreplay.capture`` holds the framework-neutral recorder (:class:`Recorder`,
docs/api.md#recorder); the engine adapters (Hugging Face transformers, vLLM v1) sit beside it and
import their engine lazily, so that importing this package never needs torch.

Importing this package imports nothing but the standard library: the names below load their
module on first use (PEP 562). vLLM imports the plugin module :mod:`specreplay.capture.vllm_v1`,
hence this package, in every process it starts, capture on or off; with capture off nothing but
the standard library and that module may load (no NumPy, Numba, llvmlite, polars, pyarrow,
matplotlib or ArviZ: ``tests/test_vllm_plugin_imports.py``). See docs/record-transformers.md and
docs/record-vllm.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specreplay.capture.recorder import CaptureCounts, Recorder, sample_keeps

__all__ = ["CaptureCounts", "Recorder", "sample_keeps"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("specreplay.capture.recorder"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
