"""Parse one model turn into exactly one action: ToolCall, Answer, or Malformed. Never raises.

Accepted syntax (hermes / Agent-R1):
    <tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>
    <answer>...</answer>
The first opening tag decides the action; text after its closing tag is ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_OPEN = re.compile(re.escape(TOOL_OPEN) + "|" + re.escape(ANSWER_OPEN))


def call_text(query: str) -> str:
    """The turn that searches for `query`, written exactly as parse_turn reads it."""
    return TOOL_OPEN + json.dumps({"name": "search", "arguments": {"query": query}}) + TOOL_CLOSE


def answer_text(answer: str) -> str:
    return ANSWER_OPEN + answer + ANSWER_CLOSE


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    text: str


@dataclass(frozen=True)
class Malformed:
    reason: str


Action = ToolCall | Answer | Malformed


def parse_turn(text: str) -> Action:
    try:
        return _parse(text)
    except Exception as err:  # a parser bug must not end a rollout; report it as a malformed turn
        return Malformed(f"unparseable turn ({type(err).__name__})")


def _parse(text: str) -> Action:
    if not isinstance(text, str):
        return Malformed("turn is not text")
    m = _OPEN.search(text)
    if m is None:
        return Malformed("no <tool_call> or <answer> in the turn")
    start = m.end()
    if m.group() == ANSWER_OPEN:
        end = text.find(ANSWER_CLOSE, start)
        if end < 0:
            return Malformed("<answer> is not closed")
        answer = text[start:end].strip()
        return Answer(answer) if answer else Malformed("empty <answer>")
    end = text.find(TOOL_CLOSE, start)
    if end < 0:
        return Malformed("<tool_call> is not closed")
    return _parse_call(text[start:end].strip())


def _parse_call(body: str) -> Action:
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return Malformed("tool call is not valid JSON")
    if not isinstance(obj, dict):
        return Malformed("tool call must be a JSON object")
    name, arguments = obj.get("name"), obj.get("arguments", {})
    if not isinstance(name, str) or not name:
        return Malformed('tool call has no "name"')
    if isinstance(arguments, str):  # some models emit arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            return Malformed('"arguments" is not valid JSON')
    if not isinstance(arguments, dict):
        return Malformed('"arguments" must be a JSON object')
    return ToolCall(name, arguments)
