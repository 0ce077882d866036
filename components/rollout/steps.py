"""An episode as a list of plain steps (model turns and tool calls, with wall-clock times), for the HTML
report and the MLflow traces. Built after the fact from a recorded Trajectory."""

from __future__ import annotations

import html
import re

from components.agent.parser import ToolCall, parse_turn
from components.rollout.trajectory import Trajectory

_HIT = re.compile(r"^\[(\d+)\] (.*?): ", re.M)  # components.agent.observation.format_hit


def hit_titles(observation: str) -> list[str]:
    """Titles of the passages in a search observation (unescaped), in rank order."""
    return [html.unescape(m.group(2)) for m in _HIT.finditer(observation)]


def episode_steps(t: Trajectory) -> list[dict]:
    """[{kind: "model", text, start_ns, end_ns}, {kind: "tool", name, query, ok, hits, text, start_ns, end_ns}, ...].

    A tool step's times are those of the batched tool step its call ran in (the rollout runs every call of a
    turn as one batch)."""
    steps: list[dict] = []
    ep = t.episode
    if ep.first_search is not None:  # the environment's own first search (agent.force_first_search), in the prompt
        steps.append({"kind": "tool", "name": "search", "query": ep.question.question, "ok": True, "forced": True,
                      "hits": hit_titles(ep.first_search), "text": ep.first_search, "start_ns": 0, "end_ns": 0})  # fmt: skip
    turn = -1
    for role, text in t.episode.log[1:]:
        if role == "assistant":
            turn += 1
            start, end = t.turn_times[turn] if turn < len(t.turn_times) else (0, 0)
            steps.append({"kind": "model", "text": text, "start_ns": start, "end_ns": end})
        elif role == "tool":
            start, end = t.tool_times[turn] if 0 <= turn < len(t.tool_times) else (0, 0)
            action = parse_turn(steps[-1]["text"]) if steps else None
            call = isinstance(action, ToolCall)
            steps.append({
                "kind": "tool",
                "name": action.name if call else "invalid",
                "query": str(action.arguments.get("query", "")) if call and isinstance(action.arguments, dict) else None,
                "ok": call and not text.startswith("Error:"),
                "hits": hit_titles(text),
                "text": text,
                "start_ns": start,
                "end_ns": end,
            })  # fmt: skip
    return steps
