"""The turn parser: the accepted syntax, clear Malformed reasons, and no exception on 10,000+ fuzzed turns."""

import json
import random

import pytest

from components.agent.parser import Answer, Malformed, ToolCall, parse_turn

CALL = '<tool_call>{"name": "search", "arguments": {"query": "Bavo rival"}}</tool_call>'


@pytest.mark.parametrize(
    "text, expected",
    [
        (CALL, ToolCall("search", {"query": "Bavo rival"})),
        (CALL + "<|im_end|>", ToolCall("search", {"query": "Bavo rival"})),
        ("<tool_call>\n" + json.dumps({"name": "search", "arguments": {"query": "x"}}) + "\n</tool_call>",
         ToolCall("search", {"query": "x"})),
        ('<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>', ToolCall("search", {"query": "x"})),
        ("<answer> Kelitu </answer>", Answer("Kelitu")),
        ("thinking... <answer>Kelitu</answer> trailing", Answer("Kelitu")),
        ("<answer>A</answer>" + CALL, Answer("A")),  # the first action wins
        (CALL + "<answer>A</answer>", ToolCall("search", {"query": "Bavo rival"})),
    ],
)  # fmt: skip
def test_well_formed_turns(text, expected):
    assert parse_turn(text) == expected


@pytest.mark.parametrize(
    "text, reason",
    [
        ("just text", "no <tool_call> or <answer>"),
        ("<answer>unterminated", "not closed"),
        ("<answer>  </answer>", "empty"),
        ("<tool_call>{\"name\": \"search\"", "not closed"),
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
        ('<tool_call>{"name": "search", "arguments": [1]}</tool_call>', '"arguments" must be'),
        ('<tool_call>{"name": "search", "arguments": "{bad"}</tool_call>', '"arguments" is not valid JSON'),
    ],
)  # fmt: skip
def test_malformed_turns_name_the_problem(text, reason):
    out = parse_turn(text)
    assert isinstance(out, Malformed) and reason in out.reason


def _mutate(s: str, rng: random.Random) -> str:
    pieces = ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "{", "}", '"', "\\", "[", "\x00", "\ud800",
              "<|im_end|>", '"name"', '"arguments"', ":", ",", "null", "1e999", "[" * 50, "{" * 3000]  # fmt: skip
    chars = list(s)
    for _ in range(rng.randint(1, 6)):
        op = rng.random()
        pos = rng.randint(0, len(chars))
        if op < 0.4:
            chars[pos:pos] = list(rng.choice(pieces))
        elif op < 0.7 and chars:
            del chars[pos : pos + rng.randint(1, 5)]
        else:
            chars[pos:pos] = [chr(rng.randint(0, 0x2FFF))]
    return "".join(chars)


def test_fuzz_never_raises():
    rng = random.Random(0)
    seeds = [CALL, "<answer>Kelitu</answer>", '<tool_call>{"name": "search", "arguments": "{\\"query\\": 1}"}</tool_call>']
    kinds = {ToolCall: 0, Answer: 0, Malformed: 0}
    for i in range(12_000):
        if i % 3 == 0:
            text = "".join(chr(rng.randint(0, 0x10FF)) for _ in range(rng.randint(0, 80)))
        else:
            text = _mutate(rng.choice(seeds), rng)
        out = parse_turn(text)
        assert isinstance(out, (ToolCall, Answer, Malformed))
        kinds[type(out)] += 1
    assert all(n > 100 for n in kinds.values()), kinds  # the fuzzer reaches every outcome


def test_non_text_is_malformed():
    assert isinstance(parse_turn(None), Malformed)  # type: ignore[arg-type]
