"""Record Hugging Face transformers' assisted generation through the recorder (issue 12, item 2).

See docs/record-transformers.md. :class:`AssistedCapture` wraps one target model and its assistant
(``model.generate(..., assistant_model=...)``, sampled and greedy) and hands every verification
round to a :class:`~specreplay.capture.recorder.Recorder`; :class:`LiveArm` is the "live arm" hook
that makes transformers sample AND verify with an arm's law.

Where the draft and target distributions meet (transformers 5.24.0)
--------------------------------------------------------------------
``GenerationMixin._assisted_decoding`` (``transformers/generation/utils.py``) runs one loop
iteration per round:

1. ``candidate_generator.get_candidates(input_ids)`` (``AssistedCandidateGenerator`` in
   ``transformers/generation/candidate_generator.py``) runs ``assistant_model.generate`` for
   ``min(num_assistant_tokens, max_length − cur_len − 1)`` tokens (``_calculate_new_tokens``) and
   returns the drafted sequence and ``candidate_logits``: the assistant's PROCESSED scores (its
   logits cast to float32, then the shared logits processors and warpers): q = softmax of them is
   the law it sampled from.
2. One target forward on the prompt-or-new tokens plus the candidates; the target's logits are cast
   to float32 and processed (``new_logits``); p = softmax(new_logits).
3. Sampled (``do_sample=True``): the module-level ``_speculative_sampling`` accepts draft i when
   ``r_i <= p_i / q_i``, stops at the first rejection and resamples from (p − q)+. Greedy
   (``do_sample=False``): drafts are kept while they equal ``argmax`` of ``new_logits``.
4. The kept tokens are cut at ``max_length`` and at the first EOS, ``n_matches`` is recomputed as
   (tokens kept − 1), and ``candidate_generator.update_candidate_strategy(input_ids, new_logits,
   n_matches)`` is called in both modes.

The hooks (instance attributes only; no transformers function is patched):

- the target's ``_get_candidate_generator`` is wrapped for the duration of one
  :meth:`AssistedCapture.generate` call, so the generator it returns gets wrapped
  ``get_candidates`` (the round start: context length, drafted ids) and
  ``update_candidate_strategy`` (``new_logits`` and the final ``n_matches``: one mechanism for the
  sampled and the greedy path);
- a forward hook on the assistant keeps its RAW last-position logits of each draft step: the
  drafter's full-vocabulary logits at temperature 1 that the recorder's logits mode wants (cast to
  float32 first, as ``_sample`` does before it samples).

Terms
-----
round
    One iteration of the loop above: the drafts of one ``get_candidates`` call, verified by one
    target forward.
undrafted round
    A round whose draft budget ``max_length − cur_len − 1`` is 0 (the last token before
    ``max_length``): one target forward, one token, no draft. It has no position to record
    (schema v1 is one row per drafted position) and is counted in :class:`RequestCapture`.
short round
    A recorded round with fewer drafts than the depth K: the end of generation (the draft budget)
    or an assistant that drafted EOS.

Decisions (where issue 12 is silent)
------------------------------------
- **One request per generate call**, ``request_id`` and ``family`` given by the caller; rounds
  are numbered 0, 1, 2 … within the call, undrafted rounds included (so a gap in the archive's
  round numbers marks one). ``context_tokens`` is the sequence length at the round start.
- **The draft length is fixed**: the assistant's ``generation_config`` gets
  ``num_assistant_tokens=K``, ``num_assistant_tokens_schedule="constant"`` and
  ``assistant_confidence_threshold=0`` (transformers reads them from the assistant's config only);
  a generate keyword that sets them otherwise is refused, as are prompt lookup, early exit, MTP,
  DFlash, different tokenizers and ``assistant_ensemble_weight`` (another acceptance rule).
- **accepted = the engine's final n_matches**, so 1 + A is exactly the tokens the round kept and
  the archive's MEASURED R is the engine's own count. In a round that kept an EOS drafted at
  position j, transformers reports n_matches = j − 1 (the EOS is counted as the round's last
  token): the recording follows the engine.
- **target_probs**: sampled, p = softmax(new_logits) in float64 from the engine's processed float32
  logits (the engine takes the same softmax in float32); greedy, a point mass on
  ``argmax(new_logits)``, the law a greedy verifier accepts against (a draft is accepted iff it
  is the argmax, which is what the replay's accept test does with p a point mass and q = 1).
- **The logging arm must describe the engine**: the recorder's arm has depth K; greedy iff
  ``do_sample=False``; sampled, its policy equals the generation's temperature, top-k and top-p
  (top-k ≥ V or unset = all), or it is the live arm when one is set.
- **Live arm** (:class:`LiveArm`): appended to the candidate generator's own processor list (the
  assistant's generate only: the target's processors are not touched), it replaces the scores by
  log q with q the arm's sampler law (package policy + quantizer, :mod:`specreplay.sim.policy`)
  on the top-K candidates of the scores it receives (K = the recorder's top_k, else V); since
  ``candidate_logits`` are those scores, transformers samples AND verifies with that q. It
  returns float64 so that q survives the softmax to within float64 rounding. It needs a matched,
  sampled arm of depth K and an engine at temperature 1 with no top-k/top-p of its own (the arm
  is the whole policy).
- **Supported versions**: transformers ≥ 5.20, < 5.25 (the [capture] extra; tested on 5.24.0).
  Anything else is refused with one line: the hook points above are private API.

This module imports torch and transformers lazily (inside functions), so it imports in the core
install; it depends on :mod:`specreplay.sim` and :mod:`specreplay.errors`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specreplay.errors import SpecReplayError
from specreplay.sim.arms import Arm, parse_arm
from specreplay.sim.live import arm_round_laws

__all__ = [
    "SUPPORTED_TRANSFORMERS",
    "AssistedCapture",
    "LiveArm",
    "RequestCapture",
    "StopAfterRounds",
    "check_transformers_version",
]

SUPPORTED_TRANSFORMERS: tuple[tuple[int, int], tuple[int, int]] = ((5, 20), (5, 25))
"""Supported transformers versions: ``>= 5.20, < 5.25`` (pinned 5.24.0 in constraints.txt)."""

_FIXED = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
_REFUSED = (
    "prompt_lookup_num_tokens",
    "assistant_early_exit",
    "use_mtp",
    "assistant_ensemble_weight",
    "assistant_tokenizer",
    "tokenizer",
    "speculation_type",
)


def check_transformers_version(version: str) -> None:
    """Refuse a transformers version outside :data:`SUPPORTED_TRANSFORMERS` (one line).

    Parameters
    ----------
    version : str
        ``transformers.__version__``.

    Raises
    ------
    SpecReplayError
        When the version is outside ``>= 5.20, < 5.25`` or cannot be read.

    Examples
    --------
    >>> check_transformers_version("5.24.0")
    >>> try:
    ...     check_transformers_version("4.57.1")
    ... except SpecReplayError as e:
    ...     print(e)
    transformers 4.57.1: not supported by the capture adapter (it needs >=5.20,<5.25)
    """
    m = re.match(r"(\d+)\.(\d+)", version)
    (lo, hi) = SUPPORTED_TRANSFORMERS
    if m is None or not lo <= (int(m.group(1)), int(m.group(2))) < hi:
        raise SpecReplayError(
            f"transformers {version}: not supported by the capture adapter (it needs "
            f">={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]})"
        )


@dataclass(frozen=True)
class RequestCapture:
    """What one :meth:`AssistedCapture.generate` call did, round by round (the engine's view).

    Attributes
    ----------
    request_id : str
    prompt_tokens : int
        Length of the prompt.
    output_tokens : int
        Length of the returned sequence (prompt included).
    context_tokens, drafted, accepted : tuple of int
        Per round (undrafted rounds included): the sequence length at the round start, the drafts
        (0 for an undrafted round) and the engine's final n_matches.
    recorded : tuple of bool
        Per round: handed to the recorder and queued.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    context_tokens: tuple[int, ...]
    drafted: tuple[int, ...]
    accepted: tuple[int, ...]
    recorded: tuple[bool, ...]

    @property
    def tokens_emitted(self) -> int:
        """Output length − prompt length (there is no separate prefill token in 5.2x)."""
        return self.output_tokens - self.prompt_tokens

    @property
    def rounds(self) -> int:
        """Rounds (= target forwards), undrafted rounds included."""
        return len(self.drafted)


class StopAfterRounds:
    """A transformers stopping criterion that stops generation after ``rounds`` rounds.

    In assisted decoding the stopping criteria run once per round, so ``StopAfterRounds(1)`` runs
    exactly one round: the live rounds of a counterfactual check.
    """

    def __init__(self, rounds: int = 1) -> None:
        self.rounds = rounds
        self.calls = 0

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        """Return one bool per sequence: True once ``rounds`` rounds have run."""
        import torch

        self.calls += 1
        done = self.calls >= self.rounds
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


class LiveArm:
    """An assistant logits processor: replace the scores by log q of an arm's sampler law.

    Parameters
    ----------
    arm : str or Arm
        A matched, sampled arm (transformers verifies with the law it sampled from).
    top_k : int, optional
        Candidates per position: the top_k ids of the scores (ties to the lower id), as the
        recorder keeps them; None = the whole vocabulary.

    Notes
    -----
    The law is :func:`specreplay.sim.live.arm_round_laws` (the replay's policy + quantizer of one
    row) on the candidates' float64 log-softmax of
    the scores received (the assistant's logits cast to float32 by transformers); candidates
    outside the top_k and candidates the law gives 0 get −inf. Returns float64 scores.
    """

    def __init__(self, arm: str | Arm, top_k: int | None = None) -> None:
        a = parse_arm(arm) if isinstance(arm, str) else arm
        if a.policy.greedy or not a.matched:
            raise SpecReplayError(
                f"live arm {a.canonical}: needs a sampled arm whose verifier is its sampler "
                "(transformers samples and verifies with one q)"
            )
        if a.policy.top_k is not None and top_k is not None and a.policy.top_k > top_k:
            raise SpecReplayError(
                f"live arm {a.canonical}: keeps more candidates than top_k={top_k}"
            )
        self.arm = a
        self.top_k = top_k
        # the replay's own row law (serial kernels: a parallel kernel per draft step made its
        # idle OpenMP workers spin against the engine, ten times slower on 2 cores)
        self._sampler = arm_round_laws(a)[0]

    def law(self, scores: NDArray[np.float64]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """Return (candidate ids, q) of one position's scores (V,)."""
        lp = scores - np.logaddexp.reduce(scores)
        k = lp.shape[0] if self.top_k is None else min(self.top_k, lp.shape[0])
        cand = np.argsort(-lp, kind="stable")[:k].astype(np.int64)
        return cand, self._sampler(lp[cand])

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """Return log q (float64, same shape as ``scores``): −inf where q is 0."""
        import torch

        s = scores.detach().to(device="cpu", dtype=torch.float64).numpy()
        out = np.full(s.shape, -np.inf)
        for b in range(s.shape[0]):
            cand, q = self.law(s[b])
            with np.errstate(divide="ignore"):
                out[b, cand] = np.log(q)
        return torch.from_numpy(out).to(scores.device)


@dataclass
class _Pending:
    """The round between get_candidates and update_candidate_strategy."""

    context: int
    drafted: NDArray[np.int64]
    raw: NDArray[np.float64] | None


@dataclass
class _State:
    """One generate call's bookkeeping."""

    request_id: str
    family: str
    greedy: bool
    record: bool
    pending: _Pending | None = None
    raw: list[Any] = field(default_factory=list)
    collecting: bool = False
    context: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    recorded: list[bool] = field(default_factory=list)


class AssistedCapture:
    """Record ``model.generate(..., assistant_model=assistant)`` through a recorder.

    Parameters
    ----------
    model : transformers PreTrainedModel
        The target (a decoder-only causal LM).
    assistant : transformers PreTrainedModel
        The drafter; its ``generation_config`` gets the fixed draft length (module docstring).
    recorder : Recorder, optional
        Where the rounds go (its ``arm`` is the logging arm, its ``top_k`` the candidates); None
        runs the hooks without recording (e.g. live rounds of a counterfactual).
    num_assistant_tokens : int
        K, the draft length of every full round.
    live_arm : str or Arm, optional
        Sample and verify with this arm's law (:class:`LiveArm`).

    Raises
    ------
    SpecReplayError
        transformers outside the supported versions; a live arm that is not a matched sampled arm
        of depth K.
    """

    def __init__(
        self,
        model: Any,
        assistant: Any,
        recorder: Any = None,
        *,
        num_assistant_tokens: int,
        live_arm: str | Arm | None = None,
    ) -> None:
        import transformers

        check_transformers_version(transformers.__version__)
        if isinstance(num_assistant_tokens, bool) or not isinstance(num_assistant_tokens, int):
            raise SpecReplayError(f"num_assistant_tokens={num_assistant_tokens!r}: an integer ≥ 1")
        if num_assistant_tokens < 1:
            raise SpecReplayError(f"num_assistant_tokens={num_assistant_tokens}: an integer ≥ 1")
        self.model = model
        self.assistant = assistant
        self.recorder = recorder
        self.k = num_assistant_tokens
        self.vocab = int(model.config.get_text_config().vocab_size)
        top_k = None if recorder is None else int(recorder.top_k)
        self.live = None if live_arm is None else LiveArm(live_arm, top_k)
        if self.live is not None and self.live.arm.depth != self.k:
            raise SpecReplayError(
                f"live arm {self.live.arm.canonical}: its depth should be "
                f"num_assistant_tokens={self.k}"
            )
        cfg = assistant.generation_config
        cfg.num_assistant_tokens = self.k
        cfg.num_assistant_tokens_schedule = "constant"
        cfg.assistant_confidence_threshold = 0.0
        self.engine = f"transformers {transformers.__version__}"
        self._state: _State | None = None

    # -- checks ------------------------------------------------------------------------------

    def _setting(self, kwargs: dict[str, Any], name: str, default: Any) -> Any:
        if name in kwargs:
            return kwargs[name]
        value = getattr(self.model.generation_config, name, None)
        return default if value is None else value

    def _engine_policy(self, kwargs: dict[str, Any]) -> tuple[float, int | None, float]:
        t = float(self._setting(kwargs, "temperature", 1.0))
        k = self._setting(kwargs, "top_k", None)
        top_k = None if k is None or int(k) <= 0 or int(k) >= self.vocab else int(k)
        top_p = float(self._setting(kwargs, "top_p", 1.0))
        return t, top_k, top_p

    def _check(self, kwargs: dict[str, Any], greedy: bool) -> None:
        wanted = {"num_assistant_tokens": self.k, "num_assistant_tokens_schedule": "constant"}
        for name in _FIXED:
            if name in kwargs and kwargs[name] != wanted.get(name, 0):
                raise SpecReplayError(
                    f"generate({name}={kwargs[name]!r}): the capture fixes it to "
                    f"{wanted.get(name, 0)!r} (a varying draft length is not replayable)"
                )
        for name in _REFUSED:
            if kwargs.get(name) is not None:
                raise SpecReplayError(
                    f"generate({name}=...): not supported by the capture (only the assistant-"
                    "model path with a shared tokenizer and the standard acceptance rule)"
                )
        if int(self._setting(kwargs, "num_beams", 1)) != 1:
            raise SpecReplayError("generate(num_beams>1): assisted generation is single-beam")
        policy = self._engine_policy(kwargs)
        if self.live is not None and (greedy or policy != (1.0, None, 1.0)):
            raise SpecReplayError(
                f"live arm {self.live.arm.canonical}: needs do_sample=True at temperature 1 "
                f"without top_k/top_p (the arm is the whole policy); got {policy}"
            )
        if self.recorder is None:
            return
        arm: Arm = self.recorder.arm
        if arm.depth != self.k:
            raise SpecReplayError(
                f"recorder logging arm {arm.canonical}: its depth should be "
                f"num_assistant_tokens={self.k}"
            )
        if greedy != arm.policy.greedy:
            raise SpecReplayError(
                f"recorder logging arm {arm.canonical}: do_sample={not greedy} needs "
                + ("a sampled arm" if not greedy else f"greedy@{self.k}")
            )
        if greedy:
            return
        if self.live is not None:
            if arm != self.live.arm:
                raise SpecReplayError(
                    f"recorder logging arm {arm.canonical}: the engine drafts with the live arm "
                    f"{self.live.arm.canonical}"
                )
            return
        t, top_k, top_p = policy
        if (arm.policy.temperature, arm.policy.top_k, arm.policy.top_p) != (t, top_k, top_p):
            raise SpecReplayError(
                f"recorder logging arm {arm.canonical}: the engine samples at temperature {t}, "
                f"top_k {top_k}, top_p {top_p}"
            )
        if not arm.matched or arm.sampler.kind != "float64":
            raise SpecReplayError(
                f"recorder logging arm {arm.canonical}: transformers samples a float law "
                "(quantize it with live_arm=)"
            )

    # -- generate ----------------------------------------------------------------------------

    def generate(
        self, input_ids: Any, *, request_id: str, family: str = "", **kwargs: Any
    ) -> tuple[Any, RequestCapture]:
        """Run ``model.generate(input_ids, assistant_model=assistant, **kwargs)`` recorded.

        Parameters
        ----------
        input_ids : torch.LongTensor, (1, prompt_len)
            One prompt (assisted generation is single-sequence).
        request_id : str
            The request id written in the archive.
        family : str
            Its family.
        **kwargs
            Passed to ``generate`` (``do_sample``, ``max_new_tokens``, ``stopping_criteria`` …).

        Returns
        -------
        (output, RequestCapture)
            What ``generate`` returned, and the rounds as the engine ran them.
        """
        greedy = not bool(self._setting(kwargs, "do_sample", False))
        self._check(kwargs, greedy)
        if getattr(input_ids, "ndim", 0) != 2 or int(input_ids.shape[0]) != 1:
            raise SpecReplayError("AssistedCapture.generate: input_ids should be one prompt (1, n)")
        record = self.recorder is not None and bool(self.recorder.sampled(request_id))
        state = _State(request_id, family, greedy, record)
        self._state = state
        model = self.model
        shadowed = model.__dict__.get("_get_candidate_generator")
        original = model._get_candidate_generator
        hook = self.assistant.register_forward_hook(self._assistant_hook)

        def candidate_generator(*args: Any, **kw: Any) -> Any:
            gen = original(*args, **kw)
            self._wrap(gen)
            return gen

        model._get_candidate_generator = candidate_generator
        try:
            out = model.generate(input_ids, assistant_model=self.assistant, **kwargs)
        finally:
            if shadowed is None:
                del model._get_candidate_generator  # the class method shows through again
            else:
                model._get_candidate_generator = shadowed
            hook.remove()
            self._state = None
        seq = out if not hasattr(out, "sequences") else out.sequences
        return out, RequestCapture(
            request_id=request_id,
            prompt_tokens=int(input_ids.shape[1]),
            output_tokens=int(seq.shape[1]),
            context_tokens=tuple(state.context),
            drafted=tuple(state.drafted),
            accepted=tuple(state.accepted),
            recorded=tuple(state.recorded),
        )

    def _wrap(self, gen: Any) -> None:
        from transformers.generation.candidate_generator import AssistedCandidateGenerator

        if type(gen) is not AssistedCandidateGenerator:
            raise SpecReplayError(
                f"transformers chose {type(gen).__name__}: the capture supports the plain "
                "assistant-model path (AssistedCandidateGenerator) only"
            )
        if self.live is not None:
            gen.logits_processor.append(self.live)  # the assistant's list only (module docstring)
        get_candidates: Callable[..., Any] = gen.get_candidates
        update: Callable[..., Any] = gen.update_candidate_strategy

        def wrapped_get_candidates(input_ids: Any, **kw: Any) -> Any:
            st = self._state
            assert st is not None
            st.raw = []
            st.collecting = True
            try:
                cand_ids, cand_logits = get_candidates(input_ids, **kw)
            finally:
                st.collecting = False
            cur = int(input_ids.shape[1])
            drafted = cand_ids[0, cur:].detach().cpu().numpy().astype(np.int64)
            raw = None
            if st.record and drafted.shape[0] > 0:
                if len(st.raw) != drafted.shape[0]:
                    raise SpecReplayError(
                        f"transformers ran {len(st.raw)} assistant forwards for "
                        f"{drafted.shape[0]} drafts (unsupported generation path)"
                    )
                raw = np.stack(st.raw)
            st.pending = _Pending(cur, drafted, raw)
            return cand_ids, cand_logits

        def wrapped_update(input_ids: Any, scores: Any, num_matches: Any) -> Any:
            self._round(scores, int(num_matches))
            return update(input_ids, scores, num_matches)

        gen.get_candidates = wrapped_get_candidates
        gen.update_candidate_strategy = wrapped_update

    def _assistant_hook(self, module: Any, args: Any, output: Any) -> None:
        st = self._state
        if st is not None and st.collecting and st.record:
            import torch

            # transformers' _sample casts the logits to float32 before it processes and samples
            last = output.logits[0, -1, :].detach().to(torch.float32)
            st.raw.append(last.to(device="cpu", dtype=torch.float64).numpy())

    def _round(self, new_logits: Any, n_matches: int) -> None:
        st = self._state
        assert st is not None and st.pending is not None
        pend, st.pending = st.pending, None
        n = int(pend.drafted.shape[0])
        index = len(st.drafted)
        st.context.append(pend.context)
        st.drafted.append(n)
        st.accepted.append(n_matches)
        queued = False
        if st.record and n > 0:
            import torch

            logits = new_logits[0, :n, :].detach()
            if st.greedy:
                target = np.zeros((n, logits.shape[-1]))
                target[np.arange(n), logits.argmax(dim=-1).cpu().numpy()] = 1.0
            else:
                target = torch.softmax(logits.to(torch.float64), dim=-1).cpu().numpy()
            queued = bool(
                self.recorder.round(
                    st.request_id,
                    index,
                    pend.drafted,
                    target,
                    n_matches,
                    family=st.family,
                    context_tokens=pend.context,
                    draft_logits=pend.raw,
                    # a short round here is capped by the draft budget or an EOS (module
                    # docstring): the request's end or token limit, never the drafter's choice
                    capped=n < self.k,
                )
            )
        st.recorded.append(queued)
