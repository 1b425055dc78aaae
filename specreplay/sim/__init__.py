"""The simulated world and its laws: counter-based RNG, arms, policies, quantizers, toy model pair.

Bottom layer: depends on NumPy, Numba and :mod:`specreplay.errors` only (import-linter holds it).
Importing the package imports nothing: each module holding compiled kernels calls the root
package's :func:`specreplay.use_numba_cache` before it defines them (Numba picks a cached
kernel's directory when it is decorated), so the modules without kernels (``arms``, ``drafting``,
``ranges``) import without Numba: the vLLM plugin reads arms in the engine's process, where Numba
must not be loaded (docs/record-vllm.md).
"""
