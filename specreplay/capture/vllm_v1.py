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

What one round records (one row per drafted position 1..n, schema v1)
---------------------------------------------------------------------
- **A sampled request with ``draft_probs``** (a draft model or EAGLE with
  ``draft_sample_method="probabilistic"``: ``vllm/v1/spec_decode/llm_base_proposer.py``,
  ``compute_probs_and_sample_next_token``, where ``draft_probs = softmax(logits / T)`` at the
  request's temperature T, no top-k or top-p): candidates are the ``top_k`` ids of
  ``draft_probs`` (``torch.topk``), widened by one column in a round where some drafted id lies
  outside its position's top-k (that column holds the drafted id, or the next-best id where the
  drafted id is already in); ``emitted_q`` is ``draft_probs`` there (the float32 values the
  sampler read) divided by their sum S, since schema v1 holds the logging law on the candidates
  (validate requires Σ emitted_q = 1, and the recorder's logits mode renormalises the same way):
  the mass 1 − S that the engine put outside the candidates is not in the archive, and the
  adapter logs its mean and maximum at close (raise ``SPECREPLAY_CAPTURE_TOP_K`` to shrink it);
  ``draft_logprobs`` is the temperature-1 log-softmax recovered from it,
  ``log_softmax(T · log draft_probs)`` over the full vocabulary (exact: ``log draft_probs`` is
  ``logits / T`` up to a constant); the logging arm is ``tT@K`` (T to 6 significant digits).
- **A point-mass drafter** (``draft_probs`` None: n-gram, EAGLE argmax, any
  ``draft_sample_method="greedy"``): ``cand_ids = [drafted_id]``, ``draft_logprobs = [0.0]``,
  ``emitted_q = [1.0]``, logging arm ``greedy@K``; the manifest's drafter is
  ``"point-mass (ngram)"`` (ngram, ngram_gpu), ``"point-mass (eagle-argmax)"`` (eagle, eagle3,
  mtp and the ``*_mtp`` methods) or ``"point-mass (METHOD-argmax)"`` (draft_model, suffix, …).
- **target_probs** are the target's probabilities as the sampler verified them: the float32
  softmax of the constrained ``target_logits``, gathered at the candidates.
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
- **Model Runner V2** (``vllm/v1/worker/gpu/``, vLLM 0.33.0's default where Triton is present)
  verifies in ``vllm/v1/worker/gpu/spec_decode/rejection_sampler.py``, which this adapter does
  not hook: run vLLM with ``VLLM_USE_V2_MODEL_RUNNER=0``. :func:`register` logs a warning when it
  is not set so, and a capture that saw no batch says so at close.
- Round counters are kept for sampled requests only (one dict entry per sampled request).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.sim.arms import parse_arm

__all__ = [
    "ENV_ARM",
    "ENV_FAMILY",
    "ENV_FOLDER",
    "ENV_QUEUE",
    "ENV_SAMPLE",
    "ENV_TOP_K",
    "RUNNER_MODULE",
    "SAMPLER_MODULE",
    "VLLM_VERSION",
    "CaptureSettings",
    "VllmCapture",
    "active",
    "install",
    "register",
    "settings_from_env",
]

VLLM_VERSION = "0.33.0"
"""The vLLM release whose source this adapter follows."""
RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
SAMPLER_MODULE = "vllm.v1.sample.rejection_sampler"

ENV_FOLDER = "SPECREPLAY_CAPTURE"
ENV_SAMPLE = "SPECREPLAY_CAPTURE_SAMPLE"
ENV_TOP_K = "SPECREPLAY_CAPTURE_TOP_K"
ENV_ARM = "SPECREPLAY_CAPTURE_ARM"
ENV_FAMILY = "SPECREPLAY_CAPTURE_FAMILY"
ENV_QUEUE = "SPECREPLAY_CAPTURE_QUEUE_ROUNDS"

PLACEHOLDER_TOKEN_ID = -1  # vllm/v1/sample/rejection_sampler.py

log = logging.getLogger("specreplay.capture.vllm")


# ------------------------------------------------------------------------------------------------
# settings
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaptureSettings:
    """What the environment asks the plugin to record (:func:`settings_from_env`).

    Attributes
    ----------
    folder : str
        The capture folder (``SPECREPLAY_CAPTURE``): every process appends its writer to it.
    sample : float
        Fraction of requests recorded, by request-id hash (``SPECREPLAY_CAPTURE_SAMPLE``, 1).
    top_k : int
        Candidates kept per position when the drafter gives ``draft_probs``
        (``SPECREPLAY_CAPTURE_TOP_K``, 32).
    logging_arm : str or None
        The one arm recorded (``SPECREPLAY_CAPTURE_ARM``, canonical); None: the first round's.
    family : str
        The ``family`` of every row (``SPECREPLAY_CAPTURE_FAMILY``, ``vllm``).
    queue_rounds : int
        The recorder's queue, in rounds (``SPECREPLAY_CAPTURE_QUEUE_ROUNDS``, 4096).
    """

    folder: str
    sample: float = 1.0
    top_k: int = 32
    logging_arm: str | None = None
    family: str = "vllm"
    queue_rounds: int = 4096


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SpecReplayError(f"{name}={text!r}: expected an integer ≥ 1")
    return value


def settings_from_env(env: Mapping[str, str] | None = None) -> CaptureSettings | None:
    """Read the capture settings from the environment; None when capture is off.

    Parameters
    ----------
    env : Mapping[str, str], optional
        The environment (``os.environ`` by default).

    Returns
    -------
    CaptureSettings or None
        None when ``SPECREPLAY_CAPTURE`` is unset or empty.

    Raises
    ------
    SpecReplayError
        One line naming the variable whose value is malformed.

    Examples
    --------
    >>> settings_from_env({}) is None
    True
    >>> s = settings_from_env({"SPECREPLAY_CAPTURE": "/c", "SPECREPLAY_CAPTURE_ARM": "greedy@4"})
    >>> s.folder, s.sample, s.top_k, s.logging_arm, s.family, s.queue_rounds
    ('/c', 1.0, 32, 'greedy@4', 'vllm', 4096)
    >>> settings_from_env({"SPECREPLAY_CAPTURE": "/tmp/cap", "SPECREPLAY_CAPTURE_SAMPLE": "2"})
    Traceback (most recent call last):
    ...
    specreplay.errors.SpecReplayError: SPECREPLAY_CAPTURE_SAMPLE='2': expected a number in (0, 1]
    """
    env = os.environ if env is None else env
    folder = env.get(ENV_FOLDER, "").strip()
    if not folder:
        return None
    sample_text = env.get(ENV_SAMPLE, "").strip() or "1"
    try:
        sample = float(sample_text)
    except ValueError:
        sample = math.nan
    if not (math.isfinite(sample) and 0.0 < sample <= 1.0):
        raise SpecReplayError(f"{ENV_SAMPLE}={sample_text!r}: expected a number in (0, 1]")
    arm_text = env.get(ENV_ARM, "").strip()
    arm = None
    if arm_text:
        try:
            arm = parse_arm(arm_text).canonical
        except SpecReplayError as e:
            raise SpecReplayError(f"{ENV_ARM}: {e}") from None
    return CaptureSettings(
        folder=folder,
        sample=sample,
        top_k=_int_env(env, ENV_TOP_K, 32),
        logging_arm=arm,
        family=env.get(ENV_FAMILY, "vllm"),
        queue_rounds=_int_env(env, ENV_QUEUE, 4096),
    )


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
    cap = VllmCapture(settings, recorder_factory=recorder_factory)
    _ACTIVE = cap
    when_imported(RUNNER_MODULE, cap.patch_runner)
    when_imported(SAMPLER_MODULE, cap.patch_sampler)
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "").strip().lower() not in ("0", "false"):
        log.warning(
            "specreplay capture hooks vLLM's V1 model runner (%s); vLLM %s uses Model Runner V2 "
            "by default, whose rounds are not recorded: set VLLM_USE_V2_MODEL_RUNNER=0",
            RUNNER_MODULE,
            VLLM_VERSION,
        )
    return cap


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


# ------------------------------------------------------------------------------------------------
# the capture
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch:
    """What the runner knows about the batch being verified (set by the ``_sample`` wrapper)."""

    req_ids: tuple[str, ...]  # (batch_size,) row order of the batch
    context_tokens: NDArray[np.int64]  # (batch_size,): num_computed_tokens_cpu + 1
    temperature: NDArray[np.float64]  # (batch_size,) float64: 0.0 = greedy
    depth: int  # num_speculative_tokens
    method: str  # speculative_config.method


@dataclass(frozen=True)
class _Columns:
    """The drafts of the requests recorded from one sampler call, on the host (``_columns``).

    One row per draft, the chosen requests' drafts one after another (batch order); a round keeps
    the first ``k`` candidate columns, or ``k + 1`` when some drafted id is outside its top k.
    """

    drafted: NDArray[np.int64]  # (rows,) drafted ids, -1 = padded draft
    cand_ids: NDArray[np.int64]  # (rows, k or k + 1) candidates; the drafted id (point mass)
    emitted_q: NDArray[np.float64]  # (rows, ·) draft_probs at the candidates, not renormalised
    draft_logprobs: NDArray[np.float64]  # (rows, ·) temperature-1 draft log-probabilities
    target_probs: NDArray[np.float64]  # (rows, ·) the target law as verified
    present: NDArray[np.bool_]  # (rows,) the drafted id is among its position's top k
    k: int  # top_k (capped at the vocabulary); 1 for a greedy arm
    valid: NDArray[np.int64]  # (chosen,) sampler output entries ≠ -1 per chosen request


@dataclass
class AdapterCounts:
    """Rounds the adapter saw but did not offer to the recorder, by reason (logged at close)."""

    batches: int = 0
    skipped_other_arm: int = 0
    skipped_rule: int = 0
    skipped_no_batch: int = 0
    skipped_padded: int = 0
    positions_q: int = 0  # positions recorded from draft_probs
    outside_mass_sum: float = 0.0  # Σ of the draft mass outside the candidates
    outside_mass_max: float = 0.0


def _point_mass_drafter(method: str) -> str:
    if method.startswith("ngram"):
        return "point-mass (ngram)"
    # vllm/config/speculative.py: EagleModelTypes = eagle, eagle3, the *_mtp / mtp types, dflash
    if method.startswith("eagle") or method == "mtp" or method.endswith("_mtp"):
        return "point-mass (eagle-argmax)"
    return f"point-mass ({method}-argmax)"


@functools.lru_cache(maxsize=256)
def _t_arm(temperature: float, depth: int) -> str:
    """Return the canonical arm ``tT@K`` of a sampled request (T to 6 significant digits)."""
    return parse_arm(f"t{temperature:.6g}@{depth}").canonical


def _writer_id() -> str:
    rank = 0
    try:
        from vllm.distributed.parallel_state import get_world_group

        rank = int(get_world_group().rank)
    except Exception:  # not initialised, or not vLLM: the pid keeps ids unique on one host
        rank = 0
    return f"vllm_r{rank}_p{os.getpid()}"


def _tp_rank() -> int:
    try:
        from vllm.distributed.parallel_state import get_tp_group

        return int(get_tp_group().rank_in_group)
    except Exception:
        return 0


class VllmCapture:
    """The hooks of one process: they build rounds from vLLM's tensors and feed a Recorder.

    Parameters
    ----------
    settings : CaptureSettings
        What to record.
    recorder_factory : callable, optional
        ``factory(path, **kwargs)`` returning a recorder with the Recorder contract
        (``sampled``, ``round``, ``close``); ``specreplay.capture.recorder.Recorder`` by default.
    tp_rank : callable, optional
        Returns this process's tensor-parallel rank (vLLM's ``get_tp_group()`` by default).
    """

    def __init__(
        self,
        settings: CaptureSettings,
        *,
        recorder_factory: Callable[..., Any] | None = None,
        tp_rank: Callable[[], int] = _tp_rank,
    ) -> None:
        self.settings = settings
        self.counts = AdapterCounts()
        self.recorder: Any = None
        self.failed: str | None = None
        self._factory = recorder_factory
        self._tp_rank = tp_rank
        self._records_here: bool | None = None
        self._local = threading.local()
        self._rounds: dict[str, int] = {}
        self._lock = threading.Lock()

    # -- patching ------------------------------------------------------------------------

    def patch_runner(self, module: ModuleType) -> None:
        """Wrap ``GPUModelRunner._sample`` of ``module`` (vllm.v1.worker.gpu_model_runner)."""
        cls = module.GPUModelRunner
        original = cls._sample
        if getattr(original, "__specreplay_capture__", False):
            return
        capture = self

        @functools.wraps(original)
        def _sample(
            runner: Any, logits: Any, spec_decode_metadata: Any, *args: Any, **kwargs: Any
        ) -> Any:
            if spec_decode_metadata is None:
                return original(runner, logits, spec_decode_metadata, *args, **kwargs)
            capture._enter(runner, spec_decode_metadata)
            try:
                return original(runner, logits, spec_decode_metadata, *args, **kwargs)
            finally:
                capture._local.batch = None

        _sample.__specreplay_capture__ = True  # type: ignore[attr-defined]
        cls._sample = _sample

    def patch_sampler(self, module: ModuleType) -> None:
        """Wrap ``rejection_sample`` of ``module`` (vllm.v1.sample.rejection_sampler)."""
        original = module.rejection_sample
        if getattr(original, "__specreplay_capture__", False):
            return
        capture = self

        @functools.wraps(original)
        def rejection_sample(
            draft_token_ids: Any,
            num_draft_tokens: list[int],
            max_spec_len: int,
            cu_num_draft_tokens: Any,
            draft_probs: Any,
            target_logits: Any,
            bonus_token_ids: Any,
            sampling_metadata: Any,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            out = original(
                draft_token_ids,
                num_draft_tokens,
                max_spec_len,
                cu_num_draft_tokens,
                draft_probs,
                target_logits,
                bonus_token_ids,
                sampling_metadata,
                *args,
                **kwargs,
            )
            # positional tail in 0.33.0: synthetic_mode, synthetic_conditional_rates,
            # use_fp64_gumbel, fly_window_size, ...
            synthetic = kwargs.get("synthetic_mode", args[0] if len(args) > 0 else False)
            fly = kwargs.get("fly_window_size", args[3] if len(args) > 3 else None)
            capture.on_verify(
                draft_token_ids,
                num_draft_tokens,
                draft_probs,
                target_logits,
                sampling_metadata,
                out,
                standard_rule=not synthetic and fly is None,
            )
            return out

        rejection_sample.__specreplay_capture__ = True  # type: ignore[attr-defined]
        setattr(module, "rejection_sample", rejection_sample)  # noqa: B010 (ModuleType)

    # -- the runner's side ----------------------------------------------------------------

    def _enter(self, runner: Any, metadata: Any) -> None:
        self._local.batch = None
        if self.failed is not None:
            return
        try:
            if self._records_here is None:
                self._records_here = self._tp_rank() == 0
            if not self._records_here:
                return
            n = len(metadata.num_draft_tokens)
            ib = runner.input_batch
            spec = getattr(runner, "speculative_config", None)
            self._local.batch = _Batch(
                req_ids=tuple(ib.req_ids[:n]),
                context_tokens=np.asarray(ib.num_computed_tokens_cpu[:n], dtype=np.int64) + 1,
                temperature=np.asarray(ib.temperature_cpu[:n], dtype=np.float64),
                depth=int(runner.num_spec_tokens),
                method=str(getattr(spec, "method", "") or "unknown"),
            )
            self.counts.batches += 1
        except Exception as e:  # the engine first: never raise into vLLM
            self._fail(e)

    # -- the sampler's side ---------------------------------------------------------------

    def on_verify(
        self,
        draft_token_ids: Any,
        num_draft_tokens: Sequence[int],
        draft_probs: Any,
        target_logits: Any,
        sampling_metadata: Any,
        output_token_ids: Any,
        *,
        standard_rule: bool = True,
    ) -> None:
        """Record the rounds of one ``rejection_sample`` call (tensors in vLLM's layout).

        Parameters
        ----------
        draft_token_ids : torch.Tensor
            (num_tokens,) int: the flattened drafts.
        num_draft_tokens : list[int]
            (batch_size,) drafts per request.
        draft_probs : torch.Tensor or None
            (num_tokens, V) float32: the drafter's law, or None (point-mass drafter).
        target_logits : torch.Tensor
            (num_tokens, V): the target's logits after temperature, top-k and top-p.
        sampling_metadata : SamplingMetadata
            Read for ``all_greedy``.
        output_token_ids : torch.Tensor
            (batch_size, max_spec_len + 1) int32: the sampler's output, -1 padded.
        standard_rule : bool
            False for vLLM's synthetic and FLy rules (nothing is recorded).
        """
        if self.failed is not None:
            return
        batch: _Batch | None = getattr(self._local, "batch", None)
        try:
            if batch is None:
                if self._records_here is not False:
                    self.counts.skipped_no_batch += sum(1 for n in num_draft_tokens if n > 0)
                return
            if not standard_rule:
                self.counts.skipped_rule += sum(1 for n in num_draft_tokens if n > 0)
                return
            self._verify(
                batch,
                draft_token_ids,
                num_draft_tokens,
                draft_probs,
                target_logits,
                sampling_metadata,
                output_token_ids,
            )
        except Exception as e:  # the engine first: never raise into vLLM
            self._fail(e)

    def _arm_of(self, batch: _Batch, i: int, all_greedy: bool, point_mass: bool) -> str:
        greedy = all_greedy or batch.temperature[i] == 0.0
        if greedy or point_mass:
            return f"greedy@{batch.depth}"
        return _t_arm(float(batch.temperature[i]), batch.depth)

    def _open(self, arm: str, batch: _Batch, point_mass: bool) -> Any:
        if self.recorder is not None:
            return self.recorder
        factory = self._factory
        if factory is None:
            from specreplay.capture.recorder import Recorder

            factory = Recorder
        try:
            import vllm

            engine = f"vllm {vllm.__version__}"
        except Exception:
            engine = "vllm (version unknown)"
        drafter = (
            _point_mass_drafter(batch.method)
            if arm.startswith("greedy")
            else f"{batch.method} (vLLM draft_probs)"
        )
        s = self.settings
        self.recorder = factory(
            s.folder,
            logging_arm=arm,
            top_k=s.top_k,
            sample=s.sample,
            queue_rounds=s.queue_rounds,
            mode="append",
            writer_id=_writer_id(),
            format="parquet-dir",
            drafter=drafter,
            engine=engine,
        )
        return self.recorder

    def _verify(
        self,
        batch: _Batch,
        draft_token_ids: Any,
        num_draft_tokens: Sequence[int],
        draft_probs: Any,
        target_logits: Any,
        sampling_metadata: Any,
        output_token_ids: Any,
    ) -> None:
        """Record the sampled rounds of one ``rejection_sample`` call (see :meth:`on_verify`)."""
        ns = [int(n) for n in num_draft_tokens]
        if len(ns) != len(batch.req_ids):
            raise SpecReplayError(
                f"vLLM capture: {len(ns)} requests in the sampler's batch, {len(batch.req_ids)} "
                "in the runner's"
            )
        all_greedy = bool(getattr(sampling_metadata, "all_greedy", False))
        chosen, arm = self._choose(batch, ns, all_greedy, point_mass=draft_probs is None)
        if not chosen:
            return
        greedy_arm = arm is not None and arm.startswith("greedy")
        cols = self._columns(
            batch,
            ns,
            chosen,
            greedy_arm,
            all_greedy,
            draft_token_ids,
            draft_probs,
            target_logits,
            output_token_ids,
        )
        self._record(batch, ns, chosen, cols, greedy_arm)

    def _choose(
        self, batch: _Batch, ns: Sequence[int], all_greedy: bool, point_mass: bool
    ) -> tuple[list[int], str | None]:
        """Pick the batch rows to record: drafted, of the logging arm, sampled by the recorder.

        Returns the rows (in batch order) and the logging arm; opens the recorder on the first
        row of the arm and counts the rows of another arm (``skipped_other_arm``).
        """
        arm_wanted = self.settings.logging_arm
        chosen: list[int] = []  # batch rows recorded this call
        for i, n in enumerate(ns):
            if n == 0:
                continue
            arm = self._arm_of(batch, i, all_greedy, point_mass)
            if arm_wanted is None:
                arm_wanted = arm
            if arm != arm_wanted:
                self.counts.skipped_other_arm += 1
                continue
            rec = self._open(arm_wanted, batch, point_mass)
            if rec.sampled(batch.req_ids[i]):
                chosen.append(i)
        return chosen, arm_wanted

    def _columns(
        self,
        batch: _Batch,
        ns: Sequence[int],
        chosen: Sequence[int],
        greedy_arm: bool,
        all_greedy: bool,
        draft_token_ids: Any,
        draft_probs: Any,
        target_logits: Any,
        output_token_ids: Any,
    ) -> _Columns:
        """Build the candidate columns of the ``chosen`` requests on the device; one transfer each.

        A greedy arm gets the point-mass columns (the target's argmax law for greedy requests);
        a sampled arm the top k of ``draft_probs`` and a spare column (module docstring).
        """
        import torch

        starts = np.concatenate([[0], np.cumsum(ns)[:-1]]).astype(np.int64)
        rows = np.concatenate([np.arange(starts[i], starts[i] + ns[i]) for i in chosen])
        device = target_logits.device
        idx = torch.as_tensor(rows, device=device)
        drafted_t = draft_token_ids[idx].to(torch.int64)
        safe = drafted_t.clamp(min=0)[:, None]  # padded drafts (-1) are cut below
        logits = target_logits[idx].to(torch.float32)
        target_p = logits.softmax(dim=-1, dtype=torch.float32)  # as rejection_sample computes it
        if greedy_arm:
            # greedy requests: the verified law is the point mass at the target's argmax
            is_greedy = torch.as_tensor(
                np.concatenate(
                    [np.full(ns[i], all_greedy or batch.temperature[i] == 0.0) for i in chosen]
                ),
                device=device,
            )
            at_argmax = (logits.argmax(dim=-1) == drafted_t).to(torch.float32)
            tp = torch.where(is_greedy, at_argmax, target_p.gather(1, safe)[:, 0])[:, None]
            cand = safe
            emitted = torch.ones_like(tp)
            dlp = torch.zeros_like(tp)
        else:
            q = draft_probs[idx].to(torch.float32)
            k = min(self.settings.top_k, q.shape[-1])
            wide = min(k + 1, q.shape[-1])  # the top k, then one spare column
            ranked = torch.topk(q, wide, dim=-1).indices
            top = ranked[:, :k]
            present = (top == safe).any(dim=-1)
            if wide > k:  # the spare: the drafted id where it is outside the top k, else the next
                cand = torch.cat([top, torch.where(present, ranked[:, k], safe[:, 0])[:, None]], 1)
            else:
                cand = top
            emitted = q.gather(1, cand)
            temp = float(batch.temperature[chosen[0]])
            # log q = logits / T - c, so T · log q is the temperature-1 logits up to a constant
            l1 = torch.log(q.to(torch.float64)) * temp
            dlp = l1.gather(1, cand) - torch.logsumexp(l1, dim=-1, keepdim=True)
            tp = target_p.gather(1, cand)
            present_np = present.cpu().numpy()
        out = output_token_ids[torch.as_tensor(chosen, device=output_token_ids.device)]
        # one transfer each
        drafted_np = drafted_t.cpu().numpy()
        cand_np = cand.cpu().numpy().astype(np.int64)
        emitted_np = emitted.cpu().numpy().astype(np.float64)
        dlp_np = dlp.cpu().numpy().astype(np.float64)
        tp_np = tp.cpu().numpy().astype(np.float64)
        valid = (out.cpu().numpy() != PLACEHOLDER_TOKEN_ID).sum(axis=1)
        if greedy_arm:
            present_np = np.ones(len(drafted_np), dtype=bool)
            k = 1
        return _Columns(drafted_np, cand_np, emitted_np, dlp_np, tp_np, present_np, k, valid)

    def _record(
        self,
        batch: _Batch,
        ns: Sequence[int],
        chosen: Sequence[int],
        cols: _Columns,
        greedy_arm: bool,
    ) -> None:
        """Offer each chosen request's round to the recorder, up to its first padded draft.

        Counts an inconsistent or fully padded round (``skipped_padded``) instead, and the draft
        mass left outside the candidates of a sampled arm.
        """
        rec = self.recorder
        k = cols.k
        lo = 0
        for j, i in enumerate(chosen):
            n = ns[i]
            sl = slice(lo, lo + n)
            lo += n
            d = cols.drafted[sl]
            padded = np.flatnonzero(d < 0)
            m = int(padded[0]) if padded.size else n
            accepted = int(cols.valid[j]) - 1
            if m == 0 or not 0 <= accepted <= m:
                self.counts.skipped_padded += 1
                continue
            rid = batch.req_ids[i]
            r = self._rounds.get(rid, 0)
            self._rounds[rid] = r + 1
            sm = slice(sl.start, sl.start + m)
            # a round whose drafted ids are all in their top k keeps k columns, else k + 1
            w = k if cols.present[sm].all() else k + 1
            q_cand = cols.emitted_q[sm, :w]
            mass = q_cand.sum(axis=1)  # the engine's draft mass on the candidates
            if not greedy_arm:
                outside = 1.0 - mass
                self.counts.positions_q += m
                self.counts.outside_mass_sum += float(outside.sum())
                self.counts.outside_mass_max = max(
                    self.counts.outside_mass_max, float(outside.max())
                )
            rec.round(
                rid,
                r,
                drafted_ids=d[:m],
                target_probs=cols.target_probs[sm, :w],
                accepted=accepted,
                family=self.settings.family,
                context_tokens=int(batch.context_tokens[i]),
                cand_ids=cols.cand_ids[sm, :w],
                emitted_q=q_cand / mass[:, None],
                draft_logprobs=cols.draft_logprobs[sm, :w],
            )

    # -- ending ---------------------------------------------------------------------------

    def _fail(self, e: BaseException) -> None:
        self.failed = f"{type(e).__name__}: {e}"
        log.exception(
            "specreplay capture stopped in this process (vLLM continues): %s", self.failed
        )

    def close(self) -> Any:
        """Close the recorder (commit this process's writer); log what was skipped. Idempotent."""
        with self._lock:
            c = self.counts
            if c.batches == 0 and c.skipped_no_batch:
                log.warning(
                    "specreplay capture: %d rounds verified outside GPUModelRunner._sample "
                    "(Model Runner V2?): nothing recorded from them",
                    c.skipped_no_batch,
                )
            if c.skipped_other_arm or c.skipped_rule or c.skipped_padded:
                log.info(
                    "specreplay capture: rounds not recorded: %d of another logging arm, %d "
                    "verified by a synthetic/fly rule, %d inconsistent or fully padded",
                    c.skipped_other_arm,
                    c.skipped_rule,
                    c.skipped_padded,
                )
            if c.positions_q:
                log.info(
                    "specreplay capture: draft_probs mass outside the candidates (renormalised "
                    "away): mean %.3g, max %.3g over %d positions",
                    c.outside_mass_sum / c.positions_q,
                    c.outside_mass_max,
                    c.positions_q,
                )
            if self.recorder is None:
                return None
            try:
                return self.recorder.close()
            except Exception as e:
                log.error("specreplay capture: closing the recorder failed: %s", e)
                return None
