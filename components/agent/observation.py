"""Hits -> observation text. Passage text is escaped so it can never become an action or a new turn.

Everything a passage could use to break out of its tool response starts with "<" (`<tool_call>`,
`</tool_response>`, `<answer>`, `<|im_end|>` and every other chat special token), so escaping "<", ">"
and "&" the HTML way keeps passages plain text, both for the parser and for the tokenizer's special tokens.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from components.agent.prompts import question_turn
from components.config import AgentConfig
from components.retrieval.base import Hit


def escape(text: str) -> str:
    return html.escape(text, quote=False)


def format_entry(hit: Hit, cut: Callable[[str], str] | None = None) -> str:
    """One passage as shown, without its rank; `cut` shortens its text (e.g. to a token budget) before escaping."""
    return f"{escape(hit.title)}: {escape(cut(hit.text) if cut else hit.text)}"


def numbered(entries: Sequence[str]) -> str:
    return "\n".join(f"[{i}] {e}" for i, e in enumerate(entries, 1))


def format_hits(hits: Sequence[Hit], cut: Callable[[str], str] | None = None) -> str:
    return numbered([format_entry(h, cut) for h in hits])


def with_first_read(entries: Sequence[str], ids: Sequence[str], first_entries: Sequence[str],
                    first_ids: Sequence[str]) -> str:  # fmt: skip
    """A search's passages, then the forced first search's that it did not return, numbered on
    (`agent.observation_first_read`): the latest results always hold naive RAG's passages too."""
    returned = set(ids)
    return numbered([*entries, *(e for e, i in zip(first_entries, first_ids) if i not in returned)])


def question_note(question: str) -> str:
    """What `agent.observation_question` appends to each search's results: the question again, escaped like them,
    so that the model reads the results with the question last (as in naive RAG's prompt)."""
    return f"\n\n{question_turn(escape(question))}"


def shown_results(results: str, question: str, agent: AgentConfig) -> str:
    """A search's results as the model is shown them (the environment's and the format warm-up's alike): with the
    question below them under `agent.observation_question`."""
    return results + question_note(question) if agent.observation_question else results


def error_observation(reason: str) -> str:
    """Every error text the environment shows the model (parser, schema, tool failures) goes through here."""
    return f"Error: {escape(reason)}"
