"""A tiny pair of causal LMs with random weights for the transformers tests (nothing downloaded).

Two 2-layer Llama models (vocab 32, hidden 16, float64), built from configs with seeded random
weights; their output layers are multiplied by ``SCALE`` so that the per-position acceptance of
the t1 arm lies between 0.3 and 0.9 (measured over the recorded positions by the tests: about 0.65
at ``SCALE = 8``; 1× gives 0.96, 30× gives 0.11). No EOS token: generations end at
``max_new_tokens``, so short rounds are end-of-generation rounds only.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 32
SCALE = 8.0
TARGET_SEED, DRAFT_SEED = 1, 2


def tiny_lm(seed: int, scale: float = SCALE) -> Any:
    """Return a seeded random 2-layer Llama (float64, eval mode) with its lm_head scaled."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).to(torch.float64).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    model.generation_config.eos_token_id = None
    # No pad id: with pad_token_id=0 (a real token here) transformers 5.24's assistant drafted
    # from laws that differ from a fresh forward once a 0 was in the context (the target's did
    # not); test_recorded_laws_are_the_models_laws caught it.
    model.generation_config.pad_token_id = None
    return model


def tiny_pair() -> tuple[Any, Any]:
    """Return (target, assistant)."""
    return tiny_lm(TARGET_SEED), tiny_lm(DRAFT_SEED)


def prompts(n: int, length: int = 6, seed: int = 0) -> list[Any]:
    """Return n seeded random prompts of shape (1, length)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (1, length), generator=g) for _ in range(n)]


class ForwardCounter:
    """Count a model's forward calls and the tokens each one fed (a forward hook)."""

    def __init__(self, model: Any) -> None:
        self.fed: list[int] = []
        self._handle = model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        ids = kwargs.get("input_ids")
        self.fed.append(int(ids.shape[1]) if ids is not None else int(args[0].shape[1]))

    def remove(self) -> None:
        self._handle.remove()


class LengthTrace:
    """A stopping criterion that never stops: it records the sequence length after each round.

    In assisted decoding the stopping criteria run once per round, after the round's tokens were
    appended, so the differences of ``lengths`` are the tokens each round emitted (the engine's
    own count, independent of the adapter's hooks).
    """

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        self.lengths.append(int(input_ids.shape[1]))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)
