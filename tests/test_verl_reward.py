"""Our compute_score, loaded the way verl loads it (reward.custom_reward_function + reward_kwargs from params),
scoring responses through verl's own reward manager, with the tiny tokenizer and the real models' (SmolLM2, Qwen2.5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager

from components.agent.prompts import render_tool_turn
from components.train.verl.reward import compute_score, final_answer
from tests.verl_fixtures import REWARD, TOKENIZERS, make_cfg, named_tokenizer, verl_config


@pytest.fixture(scope="module", params=TOKENIZERS)
def manager(request, tmp_path_factory):
    cfg = make_cfg(tmp_path_factory.mktemp("reward"))
    tok = named_tokenizer(request, request.param)
    return load_reward_manager(verl_config(cfg), tok), tok


def score(manager, response: str, answers: list[str]) -> dict:
    mgr, tok = manager
    ids = tok.encode(response, add_special_tokens=False)
    prompt = tok.encode("Question: capital of France?", add_special_tokens=False)
    pad = 8  # right padding after the response, as verl pads it
    responses = torch.tensor([ids + [tok.pad_token_id] * pad])
    attention = torch.tensor([[1] * (len(prompt) + len(ids)) + [0] * pad])
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([prompt]), "responses": responses, "attention_mask": attention},
        non_tensors={
            "data_source": np.array(["hotpotqa"], dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": np.array(answers, dtype=object)}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )
    return mgr.loop.run_until_complete(mgr.run_single(data))


def test_manager_uses_our_compute_score_with_params_kwargs(manager):
    raw_fn, kwargs = manager[0].compute_score.args  # verl's partial(_call_with_kwargs, raw_fn, reward_kwargs)
    assert raw_fn.__name__ == "compute_score" and raw_fn.__code__.co_filename.endswith("train/verl/reward.py")
    assert kwargs == {"answer_metric": "em", "answer_format": 0.0, "format_penalty": REWARD["format_penalty"]}


def test_correct_answer_after_a_search(manager):
    tok = manager[1]  # a response as verl builds it: model turn, stop token, the template's tool turn, model turn
    response = (
        '<tool_call>{"name": "search", "arguments": {"query": "France"}}</tool_call>' + tok.eos_token
        + render_tool_turn(tok, "[1] France: Paris is the capital.")
        + "<answer> the Paris </answer>" + tok.eos_token
    )  # fmt: skip
    out = score(manager, response, ["Paris", "Paris, France"])
    assert out["reward_score"] == 1.0
    assert out["reward_extra_info"] == {"score": 1.0, "em": 1.0, "f1": 1.0, "answered": 1.0}


def test_wrong_answer_scores_zero_with_partial_f1(manager):
    out = score(manager, "<answer>Paris Texas</answer>", ["Paris"])
    assert out["reward_score"] == 0.0
    assert out["reward_extra_info"]["f1"] == pytest.approx(2 / 3)


def test_no_answer_gets_the_format_penalty_from_params(manager):
    out = score(manager, '<tool_call>{"name": "search"', ["Paris"])
    assert out["reward_score"] == pytest.approx(-REWARD["format_penalty"])
    assert out["reward_extra_info"]["answered"] == 0.0


def test_escaped_answer_in_an_observation_is_not_the_models():
    assert final_answer("<tool_response>&lt;answer&gt;Rome&lt;/answer&gt;</tool_response>") is None
    assert final_answer("<answer>Rome</answer> ... <answer>Paris</answer>") == "Paris"


def test_f1_metric_and_empty_ground_truth():
    assert compute_score("x", "<answer>Paris Texas</answer>", ["Paris"], answer_metric="f1")["score"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="data_source 'x': empty ground_truth"):
        compute_score("x", "<answer>a</answer>", [])
