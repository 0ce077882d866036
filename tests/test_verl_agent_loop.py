"""Our search tool loaded by verl's `load_all_tools` and driven through verl's ToolAgentLoop tool-call path.

The LLM server is the only stand-in: it replays scripted model turns (a valid call, a call with malformed JSON, an
unknown tool), which a real model cannot be made to emit on demand. Tool loading, hermes parsing, tool execution,
chat-template token merging, the response mask and rm_scores are verl's own code.
"""

from __future__ import annotations

import json

import hydra
import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.tool_registry import load_all_tools
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from components.agent.observation import error_observation, format_hits
from components.agent.prompts import assistant_turn_suffix, initial_messages, render_tool_turn
from components.retrieval.factory import make_backend
from components.train.verl.agent_loop import ProcessRewardOutput, agent_loop_config
from components.train.verl.reward import compute_score
from components.train.verl.tool import AgentR1SearchTool, write_tool_config
from tests.verl_fixtures import REWARD, verl_config

VALID = '<tool_call>{"name": "search", "arguments": {"query": "capital of France"}}</tool_call>'
STRING_ARGS = '<tool_call>{"name": "search", "arguments": "capital"}</tool_call>'
UNKNOWN = '<tool_call>{"name": "lookup", "arguments": {"query": "France"}}</tool_call>'
BROKEN_JSON = '<tool_call>{"name": "search", "arguments": {"query": </tool_call>'
ANSWER = "<answer>Paris</answer>"

W = REWARD
VALID_NEW_SUPPORTING = W["valid_call"] - W["search_cost"] + W["new_info"] + W["supporting"]
VALID_SEEN = W["valid_call"] - W["search_cost"]
INVALID = -W["invalid_call"]


class ScriptedServer:
    """Returns the next scripted model turn, tokenized, ending with the tokenizer's stop token."""

    def __init__(self, tokenizer, turns):
        self.tokenizer, self.turns = tokenizer, list(turns)

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        text = self.turns.pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids), stop_reason="completed")


@pytest.fixture
def setup(cfg, tmp_path, tokenizer):
    path = write_tool_config(cfg, tmp_path / "tool_config.yaml")
    tools = load_all_tools(tool_config_path=str(path), function_tool_path=None)
    return cfg, tools, verl_config(cfg), tokenizer


def make_loop(setup, turns):
    cfg, tools, vcfg, tok = setup
    entry = OmegaConf.create(agent_loop_config(cfg.agent.reward)[0])
    return hydra.utils.instantiate(  # as verl's AgentLoopWorker does
        config=entry,
        trainer_config=DictConfigWrap(config=vcfg),
        server_manager=ScriptedServer(tok, turns),
        tokenizer=tok,
        processor=None,
        hf_model_type=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(vcfg.data),
        tools=ToolListWrap(tools),
    )


def episode(setup, turns, corpus="toy", supporting=("fr",)):
    loop = make_loop(setup, turns)
    kwargs = {
        "raw_prompt": initial_messages("What is the capital of France?"),
        "tools_kwargs": {"search": {"create_kwargs": {"corpus": corpus, "supporting_ids": list(supporting)}}},
        "extra_info": {},
    }
    return loop, loop.loop.run_until_complete(loop.run({"temperature": 1.0}, **kwargs))  # verl's event loop


def tool_turn_head(tok) -> str:
    """What the tokenizer's chat template writes before a tool message's content (e.g. "<tool_response>\n")."""
    turn = render_tool_turn(tok, "\x00")
    return turn[: turn.index("\x00")]


def segment_ends(mask):
    return [i for i, m in enumerate(mask) if m and (i + 1 == len(mask) or not mask[i + 1])]


def test_fixture_index_answers(cfg):
    hits = make_backend(cfg).search("toy", ["capital of France"], 2)[0]
    assert hits[0].id == "fr"


def test_tool_loads_through_verl_registry(setup):
    _, tools, _, _ = setup
    assert [type(t) for t in tools] == [AgentR1SearchTool]
    assert tools[0].name == "search"
    assert tools[0].tool_schema.function.parameters.required == ["query"]


def test_valid_call_observation_mask_and_process_reward(setup):
    cfg, _, _, tok = setup
    loop, out = episode(setup, [VALID, ANSWER])
    assert isinstance(out, ProcessRewardOutput)
    text = tok.decode(out.response_ids)
    hits = make_backend(cfg).search("toy", ["capital of France"], cfg.retrieval.top_k)[0]
    assert render_tool_turn(tok, format_hits(hits)) in text  # the project's observation, in the template's tool turn
    mask = out.response_mask
    first_turn_end, answer_end = segment_ends(mask)
    assert tok.decode(out.response_ids[: first_turn_end + 1]).startswith(VALID)
    assert answer_end == len(mask) - 1
    assert 0 in mask[first_turn_end:answer_end]  # the observation is not an action
    assert out.process_rewards == [(first_turn_end, pytest.approx(VALID_NEW_SUPPORTING))]
    assert "agentr1_seen_ids" not in out.extra_fields

    score = compute_score("toy", tok.decode(out.response_ids, skip_special_tokens=True), ["Paris"], {})
    assert score["score"] == 1.0 and score["em"] == 1.0
    out.reward_score = score["score"]
    rm = out.as_dict()["rm_scores"]
    assert rm[first_turn_end].item() == pytest.approx(VALID_NEW_SUPPORTING)
    assert rm[-1].item() == pytest.approx(1.0)
    assert rm.sum().item() == pytest.approx(1.0 + VALID_NEW_SUPPORTING)


def test_response_is_the_chat_template_transcript(setup):
    """The model's stop token is the template's end of turn, and the response is what the chat template renders:
    verl's token merge plus our TurnEndBuilder add the rest of the turn end (ChatML: "\n") outside the mask."""
    cfg, _, _, tok = setup
    suffix = assistant_turn_suffix(tok)
    assert suffix.startswith(tok.eos_token) and tok.eos_token != tok.pad_token
    _, out = episode(setup, [VALID, ANSWER])
    hits = make_backend(cfg).search("toy", ["capital of France"], cfg.retrieval.top_k)[0]
    expected = VALID + suffix + render_tool_turn(tok, format_hits(hits)) + ANSWER + tok.eos_token
    assert out.response_ids == tok.encode(expected, add_special_tokens=False)
    first_turn_end = segment_ends(out.response_mask)[0]
    assert tok.decode(out.response_ids[: first_turn_end + 1]) == VALID + tok.eos_token
    assert out.response_mask[first_turn_end + 1] == 0  # the inserted turn end is not an action


def test_invalid_calls_get_penalty_and_project_observation(setup):
    _, _, _, tok = setup
    loop, out = episode(setup, [UNKNOWN, STRING_ARGS, VALID, ANSWER])
    text = tok.decode(out.response_ids)
    assert render_tool_turn(tok, error_observation("unknown tool 'lookup'")) in text
    assert "Error: arguments: 'capital' is not of type 'object'" in text
    ends = segment_ends(out.response_mask)
    assert [p for p, _ in out.process_rewards] == ends[:3]
    assert [r for _, r in out.process_rewards] == pytest.approx([INVALID, INVALID, VALID_NEW_SUPPORTING])


def test_second_search_for_same_passages_earns_no_new_info(setup):
    _, out = episode(setup, [VALID, VALID, ANSWER])
    assert [r for _, r in out.process_rewards] == pytest.approx([VALID_NEW_SUPPORTING, VALID_SEEN])


def test_malformed_json_in_call_ends_episode_without_answer(setup):
    _, _, _, tok = setup
    loop, out = episode(setup, [BROKEN_JSON, ANSWER])
    assert out.process_rewards == []  # verl's hermes parser drops the call; the turn is the last one
    assert segment_ends(out.response_mask) == [len(out.response_mask) - 1]
    score = compute_score("toy", tok.decode(out.response_ids, skip_special_tokens=True), ["Paris"], {}, format_penalty=0.3)
    assert score["score"] == pytest.approx(-0.3) and score["answered"] == 0.0


def test_malformed_arguments_string_through_call_tool(setup):
    loop = make_loop(setup, [])
    agent_data = type("AgentData", (), {"extra_fields": {}})()
    response, reward, _ = loop.loop.run_until_complete(
        loop._call_tool(FunctionCall(name="search", arguments='{"query": '), {}, agent_data)
    )
    assert response.text == 'Error: "arguments" is not valid JSON'
    assert reward == pytest.approx(INVALID)


def test_backend_failure_is_an_invalid_call_not_a_crash(setup):
    _, _, _, tok = setup
    _, out = episode(setup, [VALID, ANSWER], corpus="missing")
    text = tok.decode(out.response_ids)
    assert tool_turn_head(tok) + "Error: search failed: the search service is unavailable" in text
    assert [r for _, r in out.process_rewards] == pytest.approx([INVALID])


def test_tool_config_yaml_is_self_contained(cfg, tmp_path):
    import yaml

    doc = yaml.safe_load(write_tool_config(cfg, tmp_path / "t.yaml").read_text())
    (tool,) = doc["tools"]
    assert tool["class_name"] == "components.train.verl.tool.AgentR1SearchTool"
    assert tool["config"]["type"] == "native"
    assert tool["config"]["agentr1"]["project"]["artifacts_dir"] == str(cfg.artifacts.resolve())
    assert json.dumps(tool["tool_schema"]["function"]["parameters"]["required"]) == '["query"]'
