"""The real models' tokenizers without their weights: SmolLM2-135M-Instruct's (ChatML template) and
Qwen2.5-Coder-0.5B-Instruct's (Qwen's template with tools, hermes <tool_call>), each saved by the base_model stage's
conversion of the pinned GGUF (eos/pad fixed) and shipped xz-compressed; and bigram models over a vocabulary whose
greedy output is chosen by the test."""

from __future__ import annotations

import lzma
import shutil
from pathlib import Path

import torch

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "smollm2_tokenizer"
QWEN_FIXTURE = FIXTURES / "qwen_tokenizer"  # Qwen2.5's tokenizer (Apache-2.0), from the qwen profile's joined GGUF


def smollm2_tokenizer(path: Path, eos: str | None = None):
    """The tokenizer, unpacked into `path`; `eos` overrides its eos token (e.g. the GGUF's wrong <|im_start|>)."""
    return unpack_tokenizer(FIXTURE, path, eos)


def qwen_tokenizer(path: Path):
    """Qwen2.5-Coder-0.5B-Instruct's tokenizer and chat template, unpacked into `path`."""
    return unpack_tokenizer(QWEN_FIXTURE, path)


def unpack_tokenizer(fixture: Path, path: Path, eos: str | None = None):
    from transformers import AutoTokenizer

    path.mkdir(parents=True, exist_ok=True)
    for f in fixture.iterdir():
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
