"""An episode's log as turns: what the model wrote, the call it made, what the environment answered."""

from __future__ import annotations

from dataclasses import dataclass

from components.agent.tool_env import Episode
from components.agent.parser import ToolCall, parse_turn


@dataclass
class Turn:
    text: str  # the model's turn as generated ("" for the environment's own first search)
    call: dict | None  # {"name", "arguments"} when the turn is a tool call
    observation: str | None  # what the environment answered


def turns(episode: Episode) -> list[Turn]:
    """The environment's own first search as a turn with no text, then each model turn, its parsed call and the
    environment's answer."""
    out: list[Turn] = []
    if episode.first_search is not None:
        query = {"query": episode.question.question}
        out.append(Turn("", {"name": "search", "arguments": query}, episode.first_search))
    for role, text in episode.log[1:]:
        if role == "assistant":
            action = parse_turn(text)
            call = {"name": action.name, "arguments": action.arguments} if isinstance(action, ToolCall) else None
            out.append(Turn(text, call, None))
        elif role == "tool" and out:
            out[-1].observation = text
    return out
