"""The CPU profile's model: a tiny Qwen2-architecture causal LM and a byte-level BPE tokenizer built locally.

Saved with save_pretrained, so AutoModelForCausalLM / AutoTokenizer (and verl, vLLM) load it like any hub model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from components.agent.parser import ANSWER_CLOSE, ANSWER_OPEN, TOOL_CLOSE, TOOL_OPEN
from components.config import TinyModelConfig

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]
# Single tokens for the action syntax, as in Qwen2.5 (non-special: they decode as text).
# The search call's JSON around its query is one token on each side too: a call then costs the tiny model about
# 7 generated tokens instead of 25, which is most of a CPU rollout's decode steps.
CALL_OPEN, CALL_CLOSE = json.dumps({"name": "search", "arguments": {"query": "@"}}).split("@")
ACTION_TOKENS = [TOOL_OPEN, TOOL_CLOSE, ANSWER_OPEN, ANSWER_CLOSE, "<tool_response>", "</tool_response>",
                 CALL_OPEN, CALL_CLOSE]  # fmt: skip
# The chat template's own words, so each is one token in any prompt.
TEMPLATE_TEXTS = ["system\n", "user\n", "assistant\n", "Question: "]

# ChatML, as Qwen2.5 renders it; a tool message becomes a user turn wrapped in <tool_response>.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def build_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on `texts` (any text still encodes, byte by byte), with ChatML specials."""
    tok = Tokenizer(models.BPE())
    # Spaces are their own tokens, so a word has one token form wherever it stands (after a space, a quote or a
    # tag): copying an entity from a passage into a query or an answer is then copying the same token.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\s+|[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_with_template_texts(texts), trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in ACTION_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        bos_token=None,
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=1 << 16,
        clean_up_tokenization_spaces=False,
    )


def _with_template_texts(texts: Iterable[str]) -> Iterable[str]:
    yield from texts
    for _ in range(1000):
        yield from TEMPLATE_TEXTS


def build_model(tokenizer: PreTrainedTokenizerFast, cfg: TinyModelConfig, seed: int) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)
