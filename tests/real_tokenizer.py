"""SmolLM2-135M-Instruct's tokenizer (ChatML template; from the pinned GGUF, eos/pad fixed) and bigram models over
its vocabulary whose greedy output is chosen by the test: the real token ids and template, without the weights."""

from __future__ import annotations

import lzma
import shutil
from pathlib import Path

import torch

FIXTURE = Path(__file__).parent / "fixtures" / "smollm2_tokenizer"


def smollm2_tokenizer(path: Path, eos: str | None = None):
    """The tokenizer, unpacked into `path`; `eos` overrides its eos token (e.g. the GGUF's wrong <|im_start|>)."""
    from transformers import AutoTokenizer

    path.mkdir(parents=True, exist_ok=True)
    for f in FIXTURE.iterdir():
        if f.suffix == ".xz":
            (path / f.stem).write_bytes(lzma.decompress(f.read_bytes()))
        else:
            shutil.copy(f, path / f.name)
    tok = AutoTokenizer.from_pretrained(path)
    if eos is not None:
        tok.eos_token = eos
    return tok


def bigram_model(vocab_size: int, next_token: dict[int, int], default: int):
    """A 1-layer Llama whose greedy next token depends only on the current one: `next_token[t]`, else `default`.

    The layers add nothing to the residual stream (zero output projections), so the logits are
    lm_head(norm(embedding)); each listed token gets its own embedding direction.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    keys = sorted(next_token)
    hidden = 2 * (len(keys) // 2 + 1)  # even (rotary), with a last direction for every other token
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=4, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=hidden, tie_word_embeddings=False,
                      max_position_embeddings=4096)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.norm.weight.fill_(1.0)
        for layer in model.model.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        emb[:, hidden - 1] = 1.0  # every other token: the last direction
        for d, t in enumerate(keys):
            emb[t] = 0.0
            emb[t, d] = 1.0
            head[next_token[t], d] = 10.0
        head[default, hidden - 1] = 10.0
    return model.eval()
