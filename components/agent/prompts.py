"""The agent's prompt: one system prompt, one question turn, one tool-response turn (Agent-R1 search agent).

Plain strings and message lists only; rendering goes through the tokenizer's own chat template so that the
tiny local model, Qwen2.5 and verl's agent loop all see the same conversation.
"""

from __future__ import annotations

from typing import Any, Protocol

SYSTEM_PROMPT = (
    "Answer the question. Search for facts with "
    '<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call> '
    "and read the results in <tool_response>. "
    "Give the final answer as <answer>...</answer>."
)


def system_prompt_text(setting: bool | str) -> str | None:
    """agent.system_prompt as text: true = SYSTEM_PROMPT, false = none, a string = that prompt."""
    if isinstance(setting, str):
        return setting
    return SYSTEM_PROMPT if setting else None


def question_turn(question: str) -> str:
    return f"Question: {question}"


def initial_messages(question: str, system_prompt: str | None = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """The conversation an episode starts from; the assistant speaks next. `system_prompt=None` omits it."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
    return system + [{"role": "user", "content": question_turn(question)}]


class ChatTokenizer(Protocol):
    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


def render_prompt(tokenizer: ChatTokenizer, messages: list[dict[str, str]], tools: list[dict] | None = None) -> str:
    """The prompt text up to and including the assistant header."""
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)


def render_tool_turn(tokenizer: ChatTokenizer, content: str) -> str:
    """Text the environment inserts after the model's turn: the tool message plus the next assistant header.

    Rendered as the difference between a conversation with and without the tool message (the way verl's
    tool agent loop does it), so the template, not this module, decides the turn syntax.
    """
    base = [{"role": "system", "content": ""}, {"role": "assistant", "content": "x"}]
    before = tokenizer.apply_chat_template(base, tokenize=False, add_generation_prompt=False)
    after = tokenizer.apply_chat_template(
        base + [{"role": "tool", "content": content}], tokenize=False, add_generation_prompt=True
    )
    if not after.startswith(before):
        raise ValueError("chat template renders a tool message by rewriting earlier turns; cannot append it")
    return after[len(before) :]


def assistant_turn_suffix(tokenizer: ChatTokenizer) -> str:
    """What the template writes after an assistant message's content, e.g. "<|im_end|>\n" for ChatML.

    The model itself generates the first part (its stop token); the environment inserts the rest.
    """
    marker = "\x00MARK\x00"
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": ""}, {"role": "assistant", "content": marker}],
        tokenize=False,
        add_generation_prompt=False,
    )
    return text[text.index(marker) + len(marker) :]
