"""An episode as a list of plain steps (model turns and tool calls, with wall-clock times), for the HTML
report and the MLflow traces. Built after the fact from a recorded Trajectory."""

from __future__ import annotations

import html
import re

from components.agent.turns import turns
from components.rollout.trajectory import Trajectory

_HIT = re.compile(r"^\[(\d+)\] (.*?): ", re.M)  # components.agent.observation.numbered(format_entry(...))


def hit_titles(observation: str) -> list[str]:
    """Titles of the passages in a search observation (unescaped), in rank order."""
    return [html.unescape(m.group(2)) for m in _HIT.finditer(observation)]


def episode_steps(t: Trajectory) -> list[dict]:
    """[{kind: "model", text, start_ns, end_ns}, {kind: "tool", name, query, ok, hits, text, start_ns, end_ns}, ...].

    A tool step's times are those of the batched tool step its call ran in (the rollout runs every call of a
    turn as one batch)."""
    steps: list[dict] = []
    model_turns = turns(t.episode)
    if t.episode.first_search is not None:  # the environment's own first search (agent.force_first_search)
        forced = model_turns.pop(0)
        steps.append({"kind": "tool", "name": "search", "query": forced.call["arguments"]["query"], "ok": True,
                      "forced": True, "hits": hit_titles(forced.observation), "text": forced.observation,
                      "start_ns": 0, "end_ns": 0})  # fmt: skip
    for i, turn in enumerate(model_turns):
        start, end = t.turn_times[i] if i < len(t.turn_times) else (0, 0)
        steps.append({"kind": "model", "text": turn.text, "start_ns": start, "end_ns": end})
        if turn.observation is None:
            continue
        start, end = t.tool_times[i] if i < len(t.tool_times) else (0, 0)
        args = turn.call["arguments"] if turn.call else None
        steps.append({
            "kind": "tool",
            "name": turn.call["name"] if turn.call else "invalid",
            "query": str(args.get("query", "")) if isinstance(args, dict) else None,
            "ok": turn.call is not None and not turn.observation.startswith("Error:"),
            "hits": hit_titles(turn.observation),
            "text": turn.observation,
            "start_ns": start,
            "end_ns": end,
        })  # fmt: skip
    return steps
