"""Token ids of everything the environment inserts, rendered through the model's chat template."""

from __future__ import annotations

from functools import lru_cache

from components.agent.prompts import (SYSTEM_PROMPT, assistant_turn_suffix, initial_messages, render_prompt, render_tool_turn,
                                      system_prompt_text)  # fmt: skip
from components.agent.tools import declared_tools


class ChatFormat:
    """Wraps a HF tokenizer: prompt ids, the ids inserted after a model turn, and decoding of a turn.

    The prompt declares `tools` to the template (`apply_chat_template(tools=...)`): a template with tool support
    (Qwen2.5's) writes their schemas and its own call syntax into the system turn; others ignore them.
    A turn ends on any of `stop_ids`: the end-of-turn token the template writes after an assistant message
    (`eos_id`), the tokenizer's eos, and the generation config's eos ids. They differ when a converted
    tokenizer's eos is wrong (a GGUF's reports <|im_start|> where the model ends turns with <|im_end|>).
    """

    @classmethod
    def for_agent(cls, tokenizer, agent, generation_config=None) -> ChatFormat:
        return cls(tokenizer, system_prompt_text(agent.system_prompt), generation_config, declared_tools())

    def __init__(self, tokenizer, system_prompt: str | None = SYSTEM_PROMPT, generation_config=None,
                 tools: list[dict] | None = None):  # fmt: skip
        self.tok = tokenizer
        self.system_prompt = system_prompt
        self.tools = tools
        suffix = assistant_turn_suffix(tokenizer)
        end_of_turn = self._first_special(suffix)
        self.eos_id: int = end_of_turn if end_of_turn is not None else tokenizer.eos_token_id
        self.stop_ids: frozenset[int] = frozenset(
            i for i in (self.eos_id, tokenizer.eos_token_id, *_ids(getattr(generation_config, "eos_token_id", None)))
            if i is not None
        )  # fmt: skip
        self.stop_texts: tuple[str, ...] = tuple(tokenizer.convert_ids_to_tokens(sorted(self.stop_ids)))
        self.pad_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        eos_text = tokenizer.convert_ids_to_tokens(self.eos_id)
        # What the environment adds after a turn that ended with the end-of-turn token, and after any other
        # end (cut at max tokens, or another stop id the template does not write).
        self.after_eos = suffix[len(eos_text) :] if suffix.startswith(eos_text) else suffix
        self.after_cut = suffix
        self.tool_close_id = self._single_id("</tool_call>")

    def _first_special(self, text: str) -> int | None:
        special = {i for i, t in self.tok.added_tokens_decoder.items() if t.special} | set(self.tok.all_special_ids)
        return next((i for i in self.encode(text) if i in special), None)

    def _single_id(self, text: str) -> int | None:
        ids = self.encode(text)
        return ids[0] if len(ids) == 1 else None

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def prompt_ids(self, question: str) -> list[int]:
        return self.encode(render_prompt(self.tok, initial_messages(question, self.system_prompt), self.tools))

    def ended_with_eos(self, turn: list[int]) -> bool:
        """The turn ended with the template's end-of-turn token (the rest of the suffix follows it)."""
        return bool(turn) and turn[-1] == self.eos_id

    @lru_cache(maxsize=4096)  # noqa: B019 - observations repeat across a group
    def insert_ids(self, observation: str, ended_with_eos: bool) -> tuple[int, ...]:
        """Ids after a model turn: the rest of the assistant turn, the tool turn, the next assistant header."""
        rest = self.after_eos if ended_with_eos else self.after_cut
        return tuple(self.encode(rest + render_tool_turn(self.tok, observation)))

    @lru_cache(maxsize=65536)  # noqa: B019 - passages repeat across searches
    def cut(self, text: str, max_tokens: int) -> str:
        """`text` cut to its first `max_tokens` tokens ("…" marks a cut)."""
        ids = self.encode(text)
        return text if len(ids) <= max_tokens else self.tok.decode(ids[:max_tokens]).rstrip() + " …"

    def cutter(self, max_tokens: int | None):
        return None if max_tokens is None else lambda text: self.cut(text, max_tokens)

    def decode_turn(self, ids: list[int]) -> str:
        if ids and ids[-1] in self.stop_ids:
            ids = ids[:-1]
        return self.tok.decode(ids, skip_special_tokens=False)


def _ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (int(value),)
