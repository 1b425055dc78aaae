"""vLLM v1 capture: a vLLM general plugin that records verification rounds as position traces.

See docs/record-vllm.md. Written against **vLLM 0.33.0** (the wheel on PyPI; its files are cited
by path), not run against a live vLLM server here. No vLLM file is patched: vLLM calls
:func:`register` in every process it starts (``vllm/plugins/__init__.py``,
``load_general_plugins``, entry-point group ``vllm.general_plugins``); with the environment
variable ``SPECREPLAY_CAPTURE`` unset it does nothing, and set it wraps two functions at runtime,
when (or if already) their modules are imported:

``vllm.v1.worker.gpu_model_runner.GPUModelRunner._sample(self, logits, spec_decode_metadata)``
    Where the V1 model runner calls the rejection sampler. The wrapper reads, for the batch being
    verified, the request ids (``self.input_batch.req_ids``, row order of the batch), the
    computed-token counts (``self.input_batch.num_computed_tokens_cpu``), the request
    temperatures (``self.input_batch.temperature_cpu``: 0.0 marks a greedy request), the depth
    (``self.num_spec_tokens``) and the method (``self.speculative_config.method``), and leaves
    them in a thread-local for the call below. It changes nothing.
``vllm.v1.sample.rejection_sampler.rejection_sample``
    ``(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
    target_logits, bonus_token_ids, sampling_metadata, ...)``.
    Where the draft and target distributions meet. ``RejectionSampler.forward`` calls it (by its
    module-global name) after ``apply_sampling_constraints`` has applied the request's
    temperature, top-k and top-p to ``target_logits``; the function's own target law is
    ``target_logits.softmax(dim=-1, dtype=torch.float32)``. The wrapper calls the original first,
    then records from its inputs and its output.

Terms (vLLM's layout, ``vllm/v1/spec_decode/metadata.py``, ``SpecDecodeMetadata``)
-----------------------------------------------------------------------------------
flattened drafts
    ``draft_token_ids`` (num_tokens,): the drafts of request 0, then of request 1, …;
    ``num_draft_tokens`` (batch_size,) a Python list of counts (0 for a request with no drafts);
    ``cu_num_draft_tokens`` their inclusive cumulative sum. Row j of ``draft_probs``
    (num_tokens, V) and of ``target_logits`` (num_tokens, V) belongs to draft j.
output
    ``rejection_sample`` returns (batch_size, max_spec_len + 1) int32 token ids: a request's
    accepted drafts, then one recovered or bonus token, then ``PLACEHOLDER_TOKEN_ID`` (-1). The
    number of accepted drafts is therefore the count of entries ≠ -1, minus one.
padded drafts
    A draft id of -1 is a padded draft that the sampler always rejects
    (``_rejection_random_sample_kernel``); a round is recorded up to its first padded draft.

What one round records (one row per drafted position 1..n, schema v2)
--------------------------------------------------------------------
- **A sampled request with ``draft_probs``** (a draft model or EAGLE with
  ``draft_sample_method="probabilistic"``: ``vllm/v1/spec_decode/llm_base_proposer.py``,
  ``compute_probs_and_sample_next_token``, where ``draft_probs = softmax(logits / T)`` at the
  request's temperature T, no top-k or top-p): candidates are the ``top_k`` ids of
  ``draft_probs`` (``torch.topk``), widened by one column in a round where some drafted id lies
  outside its position's top-k (that column holds the drafted id, or the next-best id where the
  drafted id is already in); ``emitted_q`` is ``draft_probs`` there (the float32 values the
  sampler read), **never renormalised**, and ``draft_tail`` the mass outside them, 1 − Σ
  ``emitted_q`` (schema v2; the replay computes what the kept candidates determine and refuses
  the rest: :mod:`specreplay.replay.truncation`); ``draft_logprobs`` is the temperature-1
  log-softmax recovered from it, ``log_softmax(T · log draft_probs)`` over the full vocabulary
  (exact: ``log draft_probs`` is ``logits / T`` up to a constant); the logging arm is ``tT@K``
  (T to 6 significant digits).
- **A point-mass drafter** (``draft_probs`` None: n-gram, EAGLE argmax, any
  ``draft_sample_method="greedy"``): ``cand_ids = [drafted_id]``, ``draft_logprobs = [0.0]``,
  ``emitted_q = [1.0]``, logging arm ``greedy@K``; the manifest's drafter is
  ``"point-mass (ngram)"`` (ngram, ngram_gpu), ``"point-mass (eagle-argmax)"`` (eagle, eagle3,
  mtp and the ``*_mtp`` methods) or ``"point-mass (METHOD-argmax)"`` (draft_model, suffix, …).
- **target_probs** are the target's probabilities as the sampler verified them: the float32
  softmax of the constrained ``target_logits``, gathered at the candidates; ``target_tail`` the
  mass outside them (for a point-mass row, 1 − p at the drafted token).
- **Greedy requests** (temperature 0): vLLM accepts a draft iff it equals the target's argmax
  (``_rejection_greedy_sample_kernel``) and drafts by argmax, so both laws are point masses: the
  row is the point-mass row above, with ``target_probs`` = 1.0 if the drafted id is the argmax
  of ``target_logits`` and 0.0 otherwise (the law that was verified; the target's softmax is not
  what decided), logging arm ``greedy@K``.
- ``accepted``: from the sampler's output; ``context_tokens`` = ``num_computed_tokens_cpu + 1``
  when ``_sample`` runs (the tokens the first draft is conditioned on: the prompt and the output
  so far, including the last sampled token that this step feeds in; with async scheduling the
  count is already corrected for the previous round's rejected drafts, since
  ``execute_model`` applies ``_update_states``' deferred correction before ``sample_tokens``);
  ``round``: 0, 1, … per request, counted by this adapter over the rounds it offers to the
  recorder (a step in which a request has no drafts is not a round); ``family``:
  ``SPECREPLAY_CAPTURE_FAMILY`` (default ``vllm``); K: the config's ``num_speculative_tokens``.

Decisions (where issue 12 is silent)
------------------------------------
- **One logging arm per capture.** A TraceWriter folder holds one logging arm, and appending
  writers must agree on it. The arm is ``SPECREPLAY_CAPTURE_ARM`` when set, otherwise the arm of
  the first round this process verifies; requests of another arm (another temperature, or greedy
  ones in a sampled capture) are not recorded and are counted (``skipped_other_arm``, logged at
  close). Set the variable when several processes capture mixed traffic.
- **Rules that are not p/q**: vLLM's ``synthetic`` and ``fly`` rejection methods accept by other
  rules; their rounds are not recorded (``skipped_rule``).
- **Only tensor-parallel rank 0 records**: the executor runs ``sample_tokens`` on every worker
  and takes the output of TP rank 0 of the last pipeline stage
  (``vllm/v1/executor/multiproc_executor.py``, ``MultiprocExecutor._get_output_rank``); the
  other TP ranks verify the same rounds and would duplicate the rows. Each data-parallel engine
  records its own requests. Pipeline stages other than the last never call ``_sample``.
- **Writer ids**: ``vllm_r<world rank>_p<pid>`` (vLLM's ``get_world_group().rank``, 0 when it is
  not initialised), one per process, all appending to the one folder (``mode="append"``).
- **Flush**: the Recorder registers ``close`` with :mod:`atexit`, which also runs in vLLM's
  workers started by ``fork`` (``VLLM_WORKER_MULTIPROC_METHOD``'s default): the Python 3.13
  this was checked on runs a fork child's atexit handlers before its ``os._exit``
  (``multiprocessing/popen_fork.py``, ``Popen._launch``), and the test's forked writer relies on
  it. vLLM turns SIGTERM and SIGINT into ``SystemExit`` in its workers and engine core
  (``vllm/v1/executor/multiproc_executor.py``, ``WorkerProc``'s ``signal_handler``;
  ``vllm/v1/engine/core.py``), so a graceful shutdown flushes; a SIGKILL (the executor sends one
  to workers still alive 4 s after its SIGTERM, ``_ensure_worker_termination``) loses that
  process's rows and leaves its staged ``.NAME.tmp-PID`` folder, which readers refuse.
- **The engine first**: any error in the adapter is logged once and stops recording in that
  process; it never reaches vLLM.
- **Model Runner V2** (``vllm/v1/worker/gpu/``: vLLM's default on GPU where Triton is present
  and the configuration is supported, ``VllmConfig.use_v2_model_runner``; on CPU, without Triton,
  V1 runs) verifies in ``vllm/v1/worker/gpu/spec_decode/rejection_sampler.py``, which this
  adapter does not hook. The plugin wraps the V2 runner's ``__init__``
  (``vllm.v1.worker.gpu.model_runner.GPUModelRunner``, which the CPU V2 runner subclasses):
  when vLLM builds one, the plugin logs one warning line through vLLM's logger
  (:data:`V2_MESSAGE`: it records nothing; ``VLLM_USE_V2_MODEL_RUNNER=0`` selects V1) and, at
  close, writes the capture's manifest with that line as the writer's ``recorded_nothing``,
  which ``validate`` prints. Nothing is said on V1.
- Round counters are kept for sampled requests only (one dict entry per sampled request).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from specreplay.capture.vllm_settings import (
    ENV_ARM,
    ENV_COMMIT_IDLE,
    ENV_COMMIT_ROUNDS,
    ENV_COMMIT_SECONDS,
    ENV_FAMILY,
    ENV_FOLDER,
    ENV_QUEUE,
    ENV_SAMPLE,
    ENV_TOP_K,
    RUNNER_MODULE,
    RUNNER_V2_MODULE,
    SAMPLER_MODULE,
    V2_MESSAGE,
    VLLM_VERSION,
    CaptureSettings,
    settings_from_env,
)

if TYPE_CHECKING:
    from specreplay.capture.vllm_rounds import VllmCapture

__all__ = [
    "ENV_ARM",
    "ENV_COMMIT_IDLE",
    "ENV_COMMIT_ROUNDS",
    "ENV_COMMIT_SECONDS",
    "ENV_FAMILY",
    "ENV_FOLDER",
    "ENV_QUEUE",
    "ENV_SAMPLE",
    "ENV_TOP_K",
    "RUNNER_MODULE",
    "RUNNER_V2_MODULE",
    "SAMPLER_MODULE",
    "V2_MESSAGE",
    "VLLM_VERSION",
    "CaptureSettings",
    "VllmCapture",
    "active",
    "close",
    "install",
    "register",
    "settings_from_env",
]

# ------------------------------------------------------------------------------------------------
# the plugin
# ------------------------------------------------------------------------------------------------

_ACTIVE: VllmCapture | None = None


def active() -> VllmCapture | None:
    """Return this process's capture, or None when :func:`register` left capture off."""
    return _ACTIVE


def register() -> None:
    """Entry point of the ``vllm.general_plugins`` group: install the capture if enabled.

    vLLM calls it once in every process (``load_general_plugins``); it does nothing unless
    ``SPECREPLAY_CAPTURE`` is set. Calling it again is harmless.
    """
    settings = settings_from_env()
    if settings is None:
        return
    install(settings)


def install(
    settings: CaptureSettings, recorder_factory: Callable[..., Any] | None = None
) -> VllmCapture:
    """Install the capture hooks in this process (idempotent) and return the capture.

    Parameters
    ----------
    settings : CaptureSettings
        What to record.
    recorder_factory : callable, optional
        Builds the recorder (``specreplay.capture.recorder.Recorder`` by default); tests pass
        their own.
    """
    global _ACTIVE
    if _ACTIVE is not None:
        return _ACTIVE
    from specreplay.capture.vllm_rounds import VllmCapture  # NumPy; capture on only

    cap = VllmCapture(settings, recorder_factory=recorder_factory)
    _ACTIVE = cap
    when_imported(RUNNER_MODULE, cap.patch_runner)
    when_imported(SAMPLER_MODULE, cap.patch_sampler)
    when_imported(RUNNER_V2_MODULE, cap.patch_v2_runner)
    return cap


def close(worker: object = None) -> dict[str, Any] | None:
    """Commit this process's capture now and return its summary; None when capture is off.

    For ``llm.collective_rpc(vllm_v1.close)``, which runs it in every worker (vLLM passes the
    worker as the argument; sending a function needs ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``):
    a capture then survives however the engine ends later. Idempotent; a closed capture
    records nothing more.
    """
    cap = _ACTIVE
    if cap is None:
        return None
    cap.close()
    return cap.summary()


def _uninstall_for_tests() -> None:
    """Forget this process's capture and pending import hooks (tests only)."""
    global _ACTIVE
    _ACTIVE = None
    _FINDER.pending.clear()


# ------------------------------------------------------------------------------------------------
# post-import hooks: patch a module when it is imported (vLLM's plugins load before the worker's
# modules, and importing the model runner in the API server process would be wasteful)
# ------------------------------------------------------------------------------------------------


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, callbacks: list[Callable[[ModuleType], None]]) -> None:
        self.loader = loader
        self.callbacks = callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self.loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        for callback in self.callbacks:
            callback(module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.pending: dict[str, list[Callable[[ModuleType], None]]] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, self.pending.pop(fullname))
        return spec


_FINDER = _PostImportFinder()


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` now if ``name`` is imported, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    _FINDER.pending.setdefault(name, []).append(callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def __getattr__(name: str) -> Any:
    # the tensor side lives in vllm_rounds (NumPy at import): loaded on first use, never by
    # register() with capture off
    if name in ("VllmCapture", "AdapterCounts"):
        import specreplay.capture.vllm_rounds as rounds

        return getattr(rounds, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
