"""Capture: record position traces where a serving engine makes them (issue 12).

``specreplay.capture`` holds the framework-neutral recorder (:class:`Recorder`, docs/record.md);
the engine adapters (Hugging Face transformers, vLLM v1) sit beside it and import their engine
lazily, so that importing this package never needs torch. See docs/record-transformers.md and
docs/record-vllm.md.
"""

from __future__ import annotations

from specreplay.capture.recorder import CaptureCounts, Recorder, sample_keeps

__all__ = ["CaptureCounts", "Recorder", "sample_keeps"]
