"""Turns end on the chat template's end-of-turn token even when the tokenizer's eos is wrong (as a converted GGUF's
is: <|im_start|>), with SmolLM2's real tokenizer and template and a 1-layer bigram model over its vocabulary."""

import pytest
from transformers import GenerationConfig

from components.agent.prompts import SYSTEM_PROMPT
from components.config import AgentConfig
from components.data.schema import Passage, Question
from components.retrieval.embedded import EmbeddedBackend
from components.rollout.chat import ChatFormat
from components.rollout.engine import rollout
from components.rollout.episode_setup import make_env
from components.evaluation.agent_eval import evaluate_agent, summarize
from tests.real_tokenizer import bigram_model, smollm2_tokenizer

IM_START, IM_END, NEWLINE = 1, 2, 198
AGENT = AgentConfig(system_prompt=True, max_turns=2, max_tokens_per_turn=8, max_total_tokens=1024)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return smollm2_tokenizer(tmp_path_factory.mktemp("tok"), eos="<|im_start|>")


@pytest.fixture(scope="module")
def paris(tok):
    (pid,) = tok.encode("Paris", add_special_tokens=False)
    return pid


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    b = EmbeddedBackend(tmp_path_factory.mktemp("index"))
    b.build("wiki", [Passage("p1", "France", "Paris is the capital of France."),
                     Passage("p2", "Spain", "Madrid is the capital of Spain.")])  # fmt: skip
    return b


QS = [Question("q1", "What is the capital of France?", ["Paris"], "toy", "dev"),
      Question("q2", "Which city is the French capital?", ["Paris"], "toy", "dev")]  # fmt: skip


def test_stop_ids_include_end_of_turn_eos_and_generation_config(tok, paris):
    assert tok.eos_token_id == IM_START
    chat = ChatFormat(tok, SYSTEM_PROMPT, GenerationConfig(eos_token_id=[IM_END, 0]))
    assert chat.eos_id == IM_END  # the first special token the template writes after an assistant message
    assert chat.stop_ids == {IM_START, IM_END, 0}
    assert chat.after_eos == "\n" and chat.after_cut == "<|im_end|>\n"
    assert ChatFormat(tok, None).stop_ids == {IM_START, IM_END}
    for stop in (IM_END, IM_START, 0):
        assert chat.decode_turn([paris, stop]) == "Paris"
    assert chat.decode_turn([paris, NEWLINE]) == "Paris\n"


def test_turn_stops_at_im_end_not_at_max_tokens(tok, paris, backend):
    """Each turn is exactly "Paris<|im_end|>"; the environment adds only the rest of the suffix ("\\n")."""
    model = bigram_model(len(tok), {paris: IM_END}, default=paris)
    chat = ChatFormat.for_agent(tok, AGENT)
    trajs = rollout(model, chat, make_env(backend, QS, AGENT, 2), QS, AGENT, temperature=0.0)
    for t in trajs:
        assert t.episode.turns == 2  # "Paris" is no action: an error observation, then a second turn
        for start, end in t.turn_spans:
            assert t.input_ids[start:end] == [paris, IM_END]
        first_end = t.turn_spans[0][1]
        assert t.input_ids[first_end] == NEWLINE and t.input_ids[first_end + 1] == IM_START
        text = tok.decode(t.input_ids)
        assert "<|im_end|>\n<|im_end|>" not in text and text.count("<|im_end|>") == text.count("<|im_start|>")


def test_without_the_end_of_turn_stop_the_turn_runs_to_max_tokens(tok, paris, backend):
    """The failure the stop ids fix: stopping on the tokenizer's eos only runs past <|im_end|>."""
    model = bigram_model(len(tok), {paris: IM_END, IM_END: paris}, default=paris)
    chat = ChatFormat.for_agent(tok, AGENT)
    fixed = rollout(model, chat, make_env(backend, QS, AGENT, 2), QS[:1], AGENT, temperature=0.0)
    assert fixed[0].turn_spans[0][1] - fixed[0].turn_spans[0][0] == 2
    chat.stop_ids = frozenset({tok.eos_token_id})
    broken = rollout(model, chat, make_env(backend, QS, AGENT, 2), QS[:1], AGENT, temperature=0.0)
    assert broken[0].turn_spans[0][1] - broken[0].turn_spans[0][0] == AGENT.max_tokens_per_turn


def test_another_stop_id_ends_the_turn_and_the_full_suffix_closes_it(tok, paris, backend):
    """A turn ended by the tokenizer's eos (not written by the template) is closed with the whole suffix."""
    model = bigram_model(len(tok), {paris: IM_START}, default=paris)
    chat = ChatFormat.for_agent(tok, AGENT)
    (t,) = rollout(model, chat, make_env(backend, QS, AGENT, 2), QS[:1], AGENT, temperature=0.0)
    start, end = t.turn_spans[0]
    assert t.input_ids[start:end] == [paris, IM_START]
    assert t.input_ids[end : end + 2] == [IM_END, NEWLINE]
    assert t.episode.log[1] == ("assistant", "Paris")


def test_direct_baseline_is_scored_on_plain_generation(tok, paris, backend):
    """"<answer>" prefilled, the model says "Paris" and ends its turn: the plain answer scores, the strict
    parse (no </answer>) does not; both are reported."""
    model = bigram_model(len(tok), {paris: IM_END}, default=paris)
    res = evaluate_agent(model, tok, QS, backend, AGENT, 2, mode="direct")
    assert [(r.prediction, r.em, r.strict_prediction, r.em_strict) for r in res] == [("Paris", 1.0, None, 0.0)] * 2
    s = summarize(res)
    assert (s["em"], s["answered"], s["em_strict"], s["answered_strict"]) == (1.0, 1.0, 0.0, 0.0)
    agent = summarize(evaluate_agent(model, tok, QS, backend, AGENT, 2, mode="agent"))
    assert agent["em"] == 0.0 and "em_strict" not in agent  # the agent is scored strictly only
