"""A baseline's answer read as plain generation (FlashRAG's scoring): what the model says up to its end of turn.

The agent's answer stays the strict `<answer>...</answer>` parse (components.agent.parser), which its reward
uses; for the direct and naive-RAG baselines the `<answer>` tag is only a prefill, and closing it is optional.
"""

from __future__ import annotations

from collections.abc import Sequence

from components.agent.parser import ANSWER_CLOSE, ANSWER_OPEN


def plain_answer(turn: str, stop_texts: Sequence[str] = ()) -> str | None:
    """The text after a leading `<answer>` up to `</answer>` or an end-of-turn token, stripped; None if empty."""
    text = turn.lstrip()
    if text.startswith(ANSWER_OPEN):
        text = text[len(ANSWER_OPEN) :]
    for end in (ANSWER_CLOSE, *stop_texts):
        cut = text.find(end)
        if cut >= 0:
            text = text[:cut]
    text = text.strip()
    return text or None


def read_answer(trajectory, stop_texts: Sequence[str] = ()) -> str | None:
    """The plain answer of a trajectory's last assistant turn; None if it has none."""
    turns = [text for role, text in trajectory.episode.log if role == "assistant"]
    return plain_answer(turns[-1], stop_texts) if turns else None
