"""The real model's format warm-up (components/base_model/warmup.py) on the shipped data, with SmolLM2's real tokenizer
and chat template: no transcript shows a gold answer or a gold supporting title beyond the names the question
itself contains, only format tokens are targets, transcripts have 1 to max_turns - 1 searches; and the measured
stop (probes of sampled episodes through the real rollout) on a small random model with SmolLM2's vocabulary."""

from __future__ import annotations

import html
import json
import random
import re
from collections import Counter
from contextlib import nullcontext

import pytest
import torch

from components.agent.observation import question_note
from components.agent.parser import ANSWER_CLOSE, ANSWER_OPEN, call_text
from components.agent.prompts import SYSTEM_PROMPT
from components.config import load_config
from components.data.prepare import load_all
from components.base_model import warmup
from components.retrieval.embedded import EmbeddedBackend
from components.rollout.chat import ChatFormat
from components.rollout.episode_setup import episode_setup
from tests.conftest import ROOT
from tests.real_tokenizer import smollm2_tokenizer

TRAIN_SETS = ("hotpotqa", "2wiki", "musique", "synthetic")
IM_END = "<|im_end|>"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The real profile's config, every shipped train question (HotpotQA, 2Wiki, MuSiQue) and 300 of the synthetic
    world's, their corpora indexed, SmolLM2's tokenizer."""
    root = tmp_path_factory.mktemp("warmup")
    cfg = load_config(ROOT / "params.yaml", {"profile": "real", "data.synthetic.enabled": True})
    questions, passages = load_all(cfg.data, ROOT / "data")
    train = [q for q in questions if q.split == "train" and q.dataset in TRAIN_SETS]
    train = [q for q in train if q.dataset != "synthetic"] + [q for q in train if q.dataset == "synthetic"][:300]
    backend = EmbeddedBackend(root / "index", cfg.retrieval.embedded, seed=0)
    for corpus in sorted({q.corpus for q in train}):
        backend.build(corpus, [p for p in passages if p.corpus == corpus])
    titles = {p.id: p.title for p in passages}
    tok = smollm2_tokenizer(root / "tok")
    yield cfg, train, backend, titles, tok
    backend.close()


def _named(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None


def _runs(ids: list[int], targets: list[int]) -> list[list[int]]:
    """The maximal runs of target tokens."""
    runs, cur = [], []
    for i, t in zip(ids, targets):
        if t:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


@pytest.fixture(scope="module", params=[(False, "masked", "any", "tool_response"), (True, "masked", "any", "tool_response"),
                                        (True, "masked", "any", "question_turn"), (True, "drawn", "any", "tool_response"),
                                        (True, "drawn", "linked", "tool_response")],
                ids=["searching", "forced_first_search", "forced_in_question_turn", "drawn_content",
                     "drawn_linked_queries"])  # fmt: skip
def made(request, shipped):
    cfg, train, backend, titles, tok = shipped
    forced, content, queries, at = request.param
    warm = cfg.model.warmup.model_copy(update={"content": content, "queries": queries})
    model = cfg.model.model_copy(update={"warmup": warm})
    agent = cfg.agent.model_copy(update={"force_first_search": forced, "first_search_at": at})
    cfg = cfg.model_copy(update={"agent": agent, "model": model})
    chat = ChatFormat.for_agent(tok, cfg.agent)
    return cfg, chat, train, warmup.transcripts(train, backend, chat, cfg, titles, random.Random(0))


def test_no_transcript_shows_a_gold_answer_or_supporting_title(made, shipped):
    """Checked on the decoded text, observations unescaped, with the question's own text cut out: no gold answer
    and no supporting title appears as a whole word unless the question names it; the answer is never a gold one."""
    cfg, chat, train, made_ = made
    titles = shipped[3]
    per_set = Counter(t.question.dataset for t in made_)
    assert all(per_set[d] >= 0.5 * sum(q.dataset == d for q in train) for d in TRAIN_SETS), per_set
    checked = 0
    for t in made_:
        q, seq = t.question, t.seq
        text = html.unescape(chat.tok.decode(seq.ids))
        fixed = (SYSTEM_PROMPT, '{"name": "search", "arguments": {"query": "', "Question: ")  # the format's own words
        for shown in (q.question, json.dumps(q.question)[1:-1], *fixed):
            text = text.replace(shown, " ")
        golds = list(q.answers) + [titles[i] for i in q.supporting_ids]
        for gold in golds:
            if not _named(q.question, gold):
                assert not _named(text, gold), f"{q.id}: {gold!r} shown in\n{text}"
                checked += 1
        answer = text[text.rindex(ANSWER_OPEN) + len(ANSWER_OPEN) : text.rindex(ANSWER_CLOSE)]
        assert all(answer.strip().lower() != g.strip().lower() for g in q.answers), (q.id, answer)
    assert checked >= len(made_)  # every transcript had at least one string to hide


def test_only_format_tokens_are_targets(made):
    """Every run of target tokens is part of the call scaffold, the question as a first query, the answer tags,
    or an end of turn; the transcript's first tokens (the prompt) and all observations are not targets."""
    cfg, chat, _, made_ = made
    if cfg.model.warmup.content == "drawn":
        pytest.skip("drawn content is taught: test_drawn_content_is_names_from_the_results")
    for t in made_:
        q, seq = t.question, t.seq
        allowed = call_text(q.question) + IM_END, '{"query": "', '"}}</tool_call>' + IM_END, ANSWER_OPEN, ANSWER_CLOSE + IM_END
        prompt = len(chat.prompt_ids(q.question))
        assert not any(seq.targets[:prompt])
        for run in _runs(seq.ids, seq.targets):
            piece = chat.tok.decode(run)
            assert any(piece in a for a in allowed), (q.id, piece)
        answer = chat.tok.decode([i for i, t in zip(seq.ids, seq.targets) if t]).split(ANSWER_OPEN)[-1]
        assert answer == ANSWER_CLOSE + IM_END  # the answer's content is never a target
        assert t.content and not any(seq.targets[i] for i in t.content) and min(t.content) >= prompt
        last = [p for p in t.content if all(k in t.content for k in range(p, max(t.content) + 1))]  # the last run
        text = chat.tok.decode(seq.ids)
        assert chat.tok.decode([seq.ids[p] for p in last]) == text[text.rindex(ANSWER_OPEN) + 8 : text.rindex(ANSWER_CLOSE)]


def test_drawn_content_is_names_from_the_results(made):
    """With drawn content every token the model writes is a target; each later query is a name shown in an
    earlier result plus a word of the question, and the answer is a name the last result shows, not one the
    question holds. With linked queries the name is in a passage about an entity asked about before, and the word is
    one of the question's relation words."""
    cfg, chat, _, made_ = made
    if cfg.model.warmup.content != "drawn":
        pytest.skip("masked content: test_only_format_tokens_are_targets")
    calls = 0
    for t in made_:
        q, seq = t.question, t.seq
        prompt = len(chat.prompt_ids(q.question))
        assert t.content and all(seq.targets[i] for i in t.content) and min(t.content) >= prompt
        text = html.unescape(chat.tok.decode(seq.ids))
        results = text.split("<tool_response>")[1:]
        words = set(warmup.keywords(q.question))
        for quoted in re.findall(r'"query": ("(?:[^"\\]|\\.)*")}}</tool_call>', text)[2:]:  # after the prompt's and the forced one
            name, word = json.loads(quoted).rsplit(" ", 1)
            query = f"{name} {word}"
            assert word in words and any(_named(r, name) for r in results), (q.id, query)
            if cfg.model.warmup.queries == "linked" and q.dataset == "synthetic":  # one entity per passage, its title
                asked = [q.question, *(json.loads(x).rsplit(" ", 1)[0] for x in re.findall(r'"query": ("(?:[^"\\]|\\.)*")}}', text))]
                hits = [h for r in results for h in re.split(r"(?m)^\[\d+\] ", r)[1:]]  # "title: text"
                titles_naming = [h.split(":", 1)[0] for h in hits if _named(h.split(":", 1)[-1], name)]
                assert word in warmup.relation_words(q.question), (q.id, query)
                assert any(_named(a, t) for t in titles_naming for a in asked), (q.id, query)
            calls += 1
        answer = text[text.rindex(ANSWER_OPEN) + len(ANSWER_OPEN) : text.rindex(ANSWER_CLOSE)]
        assert _named(results[-1], answer) and not _named(q.question, answer), (q.id, answer)
    assert calls >= len(made_) // 2


def test_transcripts_have_one_to_max_turns_minus_one_searches(made):
    cfg, chat, _, made_ = made
    forced = cfg.agent.force_first_search
    as_call = forced and cfg.agent.first_search_at == "tool_response"  # the forced search shown as a finished call
    ends = Counter()
    for t in made_:
        q, seq = t.question, t.seq
        text = chat.tok.decode(seq.ids)
        model_calls = text.count("<tool_call>") - 1 - as_call  # the system prompt shows the syntax once
        if forced and not as_call:  # its results sit above the question, in the prompt
            assert text.count("Search results:\n[1] ") == 1 and text.index("Search results:") < text.index("Question: ")
            head = chat.tok.decode(seq.ids[: seq.targets.index(1)])  # all before the first target is prompt
            assert head.endswith(f"Question: {q.question}<|im_end|>\n<|im_start|>assistant\n"), head[-200:]
        ends[model_calls] += 1
        targets = [i for i, t in zip(seq.ids, seq.targets) if t]
        assert chat.tok.decode(targets).count("<tool_call>") == model_calls
        if not forced:  # the model's first query is the question, a target
            assert call_text(q.question) in chat.tok.decode(targets)
    low = 0 if forced else 1
    assert set(ends) == set(range(low, cfg.agent.max_turns)), ends


def test_under_observation_question_every_search_shows_the_question_below_its_results(shipped):
    """The warm-up's transcripts read as the environment's episodes do: each search's results, then the question."""
    cfg, train, backend, titles, tok = shipped
    cfg = cfg.model_copy(update={"agent": cfg.agent.model_copy(update={"observation_question": True})})
    chat = ChatFormat.for_agent(tok, cfg.agent)
    made_ = warmup.transcripts(train[:40], backend, chat, cfg, titles, random.Random(0))
    assert made_
    for t in made_:
        text = chat.tok.decode(t.seq.ids)
        searches = text.count("<tool_call>") - 1  # the system prompt shows the syntax once
        assert searches >= 1 and text.count(question_note(t.question.question)) == searches


def test_the_agents_own_searches_show_search_top_k_results(shipped):
    """Under agent.search_top_k the warm-up's transcripts read as the environment's episodes do: the forced first
    search shows up to retrieval.top_k results, every search the transcript's model writes shows one."""
    cfg, train, backend, titles, tok = shipped
    agent = cfg.agent.model_copy(update={"force_first_search": True, "first_search_at": "question_turn",
                                         "search_top_k": 1})  # fmt: skip
    cfg = cfg.model_copy(update={"agent": agent})
    chat = ChatFormat.for_agent(tok, cfg.agent)
    made_ = warmup.transcripts(train[:60], backend, chat, cfg, titles, random.Random(0))
    heads = [chat.tok.decode(t.seq.ids[: t.seq.targets.index(1)]) for t in made_]  # the prompt: the first search
    tails = [chat.tok.decode(t.seq.ids[t.seq.targets.index(1) :]) for t in made_]  # the model's searches, their results
    assert cfg.retrieval.top_k >= 2 and sum("\n[2] " in h for h in heads) >= len(made_) // 2, heads[:2]
    searched = [t for t in tails if "<tool_call>" in t]
    assert len(searched) >= len(made_) // 4, len(searched)
    assert all(t.count("[1] ") == t.count("<tool_call>") and "[2] " not in t for t in searched), searched[:2]


def test_under_observation_first_read_the_agents_searches_show_the_first_reads_passages_again(shipped):
    """Under agent.observation_first_read the warm-up's transcripts read as the environment's episodes do: each
    search the model writes shows its one result, then the first search's passages it did not return."""
    cfg, train, backend, titles, tok = shipped
    agent = cfg.agent.model_copy(update={"force_first_search": True, "first_search_at": "question_turn",
                                         "search_top_k": 1, "observation_first_read": True})  # fmt: skip
    cfg = cfg.model_copy(update={"agent": agent})
    chat = ChatFormat.for_agent(tok, cfg.agent)
    made_ = warmup.transcripts(train[:60], backend, chat, cfg, titles, random.Random(0))
    searched = 0
    for t in made_:
        start = t.seq.targets.index(1)
        first = chat.tok.decode(t.seq.ids[:start]).split("Search results:\n", 1)[1].split("\n\n", 1)[0]
        first_passages = [line.split("] ", 1)[1] for line in first.split("\n")]
        for shown in chat.tok.decode(t.seq.ids[start:]).split("<|im_start|>tool\n")[1:]:  # SmolLM2's tool turn
            passages = [line.split("] ", 1)[1] for line in shown.split("<|im_end|>")[0].split("\n")]
            assert passages[1:] == [p for p in first_passages if p != passages[0]], (passages, first_passages)
            searched += 1
    assert searched >= len(made_) // 4, searched


# --- the measured stop ---------------------------------------------------------------------------------------


def _small_model(vocab: int):
    """A random 2-layer Llama over SmolLM2's vocabulary: fast, and far from the format (it never answers)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048)  # fmt: skip
    return LlamaForCausalLM(cfg)


@pytest.fixture(scope="module")
def probed(shipped):
    """The config for a quick warm-up: short turns, small probes; a model, its chat, transcripts and a probe."""
    cfg, train, backend, titles, tok = shipped
    synthetic = [q for q in train if q.dataset == "synthetic"]
    cfg = cfg.model_copy(update={
        "agent": cfg.agent.model_copy(update={"max_tokens_per_turn": 6, "max_turns": 2}),
        "model": cfg.model.model_copy(update={"warmup": cfg.model.warmup.model_copy(update={
                                                  "probe_every": 1, "probe_samples": 2, "batch_size": 2,
                                                  "micro_batch_size": 2}),
                                              "autocast": False, "device": "cpu"}),
        "train": cfg.train.model_copy(update={"trainable_layers": 1}),
    })  # fmt: skip
    chat = ChatFormat.for_agent(tok, cfg.agent)
    made_ = warmup.transcripts(synthetic[:8], backend, chat, cfg, titles, random.Random(0))
    data = [t.seq for t in made_]

    def run(**warm):
        model = cfg.model.model_copy(update={"warmup": cfg.model.warmup.model_copy(update=warm)})
        c = cfg.model_copy(update={"model": model})
        m = _small_model(len(tok))
        start = {n: p.detach().clone() for n, p in m.named_parameters()}
        calls = []

        def measure(step):
            calls.append(step)
            forced = warmup.content_entropy_forced(m, made_, chat.pad_id, 1.0)
            episodes = episode_setup(tok, backend, synthetic, c.agent, c.retrieval.top_k)
            return warmup.probe(m, episodes, synthetic[8:11], c, seed=0) | {"content_entropy_forced": forced}

        with pytest.warns(UserWarning) if warm.get("min_answered", 0) > 0 else nullcontext():
            result = warmup.warm_up(m, data, c, chat.pad_id, measure)
        same = all(torch.equal(p, start[n]) for n, p in m.named_parameters())
        return result, calls, same

    return run


def test_probe_reports_the_rollouts_rates(probed):
    result, calls, same = probed(steps=3, min_valid_calls=0.0, min_answered=0.0)
    assert result.stop == "passed" and result.steps == 0 and calls == [0] and same and not result.losses
    assert set(result.before) == {"em", "f1", "answered", "valid_calls", "searches", "entropy", "content_entropy",
                                  "content_entropy_forced"}
    assert result.before["content_entropy_forced"] > 9.0  # near log(49152) = 10.8
    assert result.before["answered"] == 0.0 and result.before["valid_calls"] == 0.0  # random tokens: no format
    assert result.before["entropy"] > 5.0  # near-uniform over 49k tokens at temperature 1
    assert result.metrics(8)["warmup_before_entropy"] == result.before["entropy"]


def test_step_cap_keeps_the_last_probed_weights(probed):
    result, calls, same = probed(steps=2, min_answered=1.0)
    assert result.stop == "step_cap" and result.steps == 2 and calls == [0, 1, 2] and not same
    assert len(result.losses) == 2 and all(loss > 0 for loss in result.losses)


def test_entropy_floor_restores_the_last_weights_above_it(probed):
    result, calls, same = probed(steps=4, min_answered=1.0, min_entropy=1e6)
    assert result.stop == "entropy_floor" and result.steps == 0 and calls == [0, 1] and same
    assert result.after == result.before


def test_content_tokens_are_the_query_and_the_answer(tmp_path):
    """content_mask marks the tokens of a call's query and of an answer's text, not the scaffold; content_entropy
    is the mean surprisal over them."""
    from components.rollout.content import content_entropy, content_mask
    from components.rollout.trajectory import Trajectory

    tok = smollm2_tokenizer(tmp_path / "tok")
    chat = ChatFormat(tok)
    for text, content in ((call_text("Who is Ruzi's rival?"), "Who is Ruzi's rival?"), ("<answer>Kufaku</answer>", "Kufaku"),
                          ("<answer>Kufaku and then some", "Kufaku and then some")):  # fmt: skip
        ids = chat.encode(text) + [chat.eos_id]
        mask = content_mask(chat, ids)
        assert tok.decode([i for i, m in zip(ids, mask) if m]).strip('"') == content, text
    t = Trajectory(episode=None, prompt_len=0)
    ids = chat.encode("<answer>Kufaku</answer>")
    t.add(ids, is_action=True, logprobs=[-0.5] * len(ids))
    t.turn_spans.append((0, len(ids)))
    assert content_entropy([t], chat) == pytest.approx(0.5)
