"""The cold start (components/base_model/cold_start.py) on the shipped data with Qwen2.5's real tokenizer and chat
template: transcripts walk each train question's gold path through the real environment and retriever, every model
turn parses as a search call or an answer, the action mask covers exactly the model's turns, no dev question,
answer or passage shows; the SFT on them and its place in the base_model stage's warm-up."""

from __future__ import annotations

import dataclasses
import html
import random

import pytest
import torch

from components import artifacts
from components.agent.parser import Answer, ToolCall, answer_text, parse_turn
from components.agent.tools import SearchTool, validate_arguments
from components.config import load_config
from components.data.prepare import load_all, write_passages, write_questions
from components.data.schema import Passage, Question
from components.data.yes_no import YES_NO, balance_yes_no, yes_or_no
from components.io import write_json
from components.base_model import cold_start, rejection
from components.base_model.base_model import warm_up_real
from components.base_model.source import SOURCE_FILE
from components.base_model.warmup import mentions
from components.retrieval.embedded import EmbeddedBackend
from components.rollout.chat import ChatFormat
from components.tracking.tracker import NullTracker
from tests.conftest import ROOT
from tests.real_tokenizer import qwen_tokenizer

DATASETS = ("hotpotqa", "2wiki", "musique")
PER_DATASET = 10


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The qwen profile over a project in a temp dir: the first train questions of each dataset and every held-out
    question prepared with the whole corpus, the corpus indexed where the base_model stage looks, Qwen's tokenizer."""
    root = tmp_path_factory.mktemp("cold_start")
    cfg = _config(root)
    questions, passages = load_all(cfg.data, ROOT / "data")
    train = [q for d in DATASETS for q in [q for q in questions if q.dataset == d and q.split == "train"][:PER_DATASET]]
    held = [q for q in questions if q.split != "train"]
    artifacts.prepared(cfg).mkdir(parents=True)
    write_questions(artifacts.questions(cfg), train + held)
    supporting = {i for q in train + held for i in q.supporting_ids}
    write_passages(artifacts.passages(cfg), [p for p in passages if p.id in supporting])  # what the warm-up reads
    backend = EmbeddedBackend(artifacts.index(cfg), cfg.retrieval.embedded, seed=cfg.project.seed)
    backend.build("wiki", passages)
    tok = qwen_tokenizer(root / "tok")
    yield cfg, train, held, {p.id: p for p in passages}, backend, tok, root
    backend.close()


@pytest.fixture(scope="module")
def made(shipped):
    cfg, train, held, passages, backend, tok, _ = shipped
    chat = ChatFormat.for_agent(tok, cfg.agent)
    backend.reseed(0, 1)
    data, drops = cold_start.transcripts(train, backend, chat, cfg, passages, cold_start.held_out_passages(held))
    return data, drops, chat


def test_every_dataset_gives_transcripts_along_its_gold_path(made, shipped):
    data, drops, _ = made
    passages = shipped[3]
    assert {t.episode.question.dataset for t in data} == set(DATASETS)
    assert len(data) + sum(drops.values()) == len(DATASETS) * PER_DATASET
    for t in data:
        q, ep = t.episode.question, t.episode
        path = cold_start.gold_path(q, passages)
        assert path and {pid for _, pid in path} <= ep.seen_ids  # every gold passage was shown
        assert 1 <= ep.n_valid_calls == ep.n_calls <= len(path)
        assert ep.answer in q.answers


def test_model_turns_parse_and_the_action_mask_covers_exactly_them(made):
    data, _, chat = made
    for t in data:
        in_turns = {i for s, e in t.turn_spans for i in range(s, e)}
        assert {i for i, m in enumerate(t.action_mask) if m} == in_turns
        assert t.turn_spans[0][0] == t.prompt_len and len(t.input_ids) == len(t.action_mask)
        actions = [parse_turn(chat.decode_turn(t.input_ids[s:e])) for s, e in t.turn_spans]
        *calls, answer = actions
        assert isinstance(answer, Answer) and answer.text == t.episode.answer
        for call in calls:
            assert isinstance(call, ToolCall) and call.name == "search"
            assert validate_arguments(SearchTool, call.arguments) is None
        assert all(t.input_ids[e - 1] == chat.eos_id for _, e in t.turn_spans)
        # between two turns: exactly what the rollout inserts for the environment's observation
        observations = [text for role, text in t.episode.log if role == "tool"]
        for (_, end), (start, _), obs in zip(t.turn_spans, t.turn_spans[1:], observations):
            assert tuple(t.input_ids[end:start]) == chat.insert_ids(obs, True)


def test_no_dev_question_answer_or_passage_in_any_transcript(made, shipped):
    data, drops, chat = made
    _, train, held, passages, *_ = shipped
    held_ids = cold_start.held_out_passages(held)
    assert drops["held_out_shown"] > 0  # the retriever does reach dev passages from train questions
    texts = [chat.tok.decode(t.input_ids) for t in data]
    train_answers = {a for q in train for a in q.answers}
    dev_only_answers = {a for q in held for a in q.answers} - train_answers
    train_texts = {q.question for q in train}
    for t, text in zip(data, texts):
        assert not (t.episode.seen_ids & held_ids)
        assert t.episode.answer not in dev_only_answers
    for q in held:
        if q.question not in train_texts:
            assert not any(q.question in text for text in texts), q.id
    for pid in held_ids:
        start = html.escape(passages[pid].text[:60], quote=False)
        assert not any(start in text for text in texts), pid


def test_the_balanced_cold_start_keeps_as_many_yes_as_no_and_every_other_transcript(made):
    data, _, _ = made
    answer = lambda t: t.episode.answer.lower()  # noqa: E731
    counts = {a: sum(answer(t) == a for t in data) for a in YES_NO}
    assert counts["no"] > counts["yes"] > 0  # as in 2Wiki's train split: more "no"
    kept = balance_yes_no(data, answer, random.Random(0))
    assert [answer(t) for t in kept].count("yes") == [answer(t) for t in kept].count("no") == counts["yes"]
    assert [t for t in kept if answer(t) not in YES_NO] == [t for t in data if answer(t) not in YES_NO]
    assert kept == balance_yes_no(data, answer, random.Random(0))  # seeded


def test_under_the_forced_first_search_the_question_search_is_prompt(shipped):
    _, train, held, passages, backend, tok, root = shipped
    cfg = _config(root, {"agent.force_first_search": True})
    chat = ChatFormat.for_agent(tok, cfg.agent)
    backend.reseed(0, 1)
    data, _ = cold_start.transcripts(train, backend, chat, cfg, passages, cold_start.held_out_passages(held))
    assert data
    for t in data:
        q = t.episode.question
        assert t.episode.first_search is not None and t.prompt_len > len(chat.prompt_ids(q.question))
        assert not any(t.action_mask[: t.prompt_len]) and t.turn_spans[0][0] == t.prompt_len
        queries = [parse_turn(chat.decode_turn(t.input_ids[s:e])) for s, e in t.turn_spans[:-1]]
        assert all(c.arguments["query"] != q.question for c in queries)  # the environment searched it already


def test_under_every_hop_each_hop_is_searched_by_its_own_query(shipped):
    """model.warmup.cold_start_hops: all: also a hop the forced first search showed is searched by name, so every
    transcript searches each hop but the question's own; under unseen, fewer."""
    _, train, held, passages, backend, tok, root = shipped
    searches = {}
    for hops in ("unseen", "all"):
        cfg = _config(root, {"agent.force_first_search": True, "model.warmup.cold_start_hops": hops})
        chat = ChatFormat.for_agent(tok, cfg.agent)
        backend.reseed(0, 1)
        data, _ = cold_start.transcripts(train, backend, chat, cfg, passages, cold_start.held_out_passages(held))
        searches[hops] = sum(t.episode.n_calls for t in data) / len(data)
        if hops == "all":
            for t in data:
                q = t.episode.question
                run = [parse_turn(chat.decode_turn(t.input_ids[s:e])).arguments["query"] for s, e in t.turn_spans[:-1]]
                assert run == [query for query, _ in cold_start.gold_path(q, passages) if query != q.question], q.id
    assert searches["all"] > searches["unseen"]


def test_a_hop_query_names_only_what_was_shown():
    question = "What is the date of birth of the performer of song Get Low?"
    assert cold_start.unshown_names("Get Low performer", question) == []
    assert cold_start.unshown_names("Dillon Francis date of birth", question) == ["Dillon Francis"]
    assert cold_start.unshown_names("Dillon Francis date of birth", question + " [1] Get Low: by Dillon Francis") == []
    assert cold_start.unshown_names("What year was it released in 1987?", "it came out") == ["1987"]


def test_the_answer_written_is_yes_or_no_in_any_form_or_one_shown():
    def question(*answers):
        return Question("h:1", "Is Alû older than Lilu?", list(answers), "hotpotqa", "train", ["p1", "p2"])

    assert cold_start.shown_answer(question(" Yes "), "nothing shown") == " Yes "  # as the reward reads it
    assert cold_start.shown_answer(question("Gallu", "no"), "[1] Alû: a demon") == "no"
    assert cold_start.shown_answer(question("Gallu"), "[1] Alû: with Gallu") == "Gallu"
    assert cold_start.shown_answer(question("Gallu"), "[1] Alû: a demon") is None


def test_hotpotqa_path_is_the_question_then_the_bridge_named_in_the_first_passage():
    first = Passage("p1", "Alû", "Alû is a demon, associated with Gallu and Lilu.")
    second = Passage("p2", "Lilu (mythology)", "A lilu is a spirit.")
    unrelated = Passage("p3", "Zeta", "Nothing here.")
    passages = {p.id: p for p in (first, second, unrelated)}
    q = Question("h:1", "Alû is associated with which spirit?", ["a spirit"], "hotpotqa", "train", ["p2", "p1"])
    assert cold_start.gold_path(q, passages) == [(q.question, "p1"), ("Lilu", "p2")]
    q2 = Question("h:2", "Which demon has no mouth?", ["x"], "hotpotqa", "train", ["p1", "p3"])
    assert cold_start.gold_path(q2, passages) == []  # neither is named by the question or the other: no second query


def test_base_model_warm_up_runs_the_cold_start_sft(shipped, tmp_path):
    """model.warmup.cold_start_steps alone: the stage builds the transcripts (balanced between yes and no), learns
    them and saves the weights."""
    *_, tok, root = shipped
    cfg = _sft_cfg(root, steps=0, cold_start_balance_yes_no=True)  # the cold start alone
    src = tmp_path / "pretrained"
    model = _tiny_model(tok)
    model.save_pretrained(src)
    tok.save_pretrained(src)
    write_json(src / SOURCE_FILE, {})
    top = "model.layers.0.mlp.down_proj.weight"  # a trainable layer (train.trainable_layers: the top 8)
    before = model.state_dict()[top].clone()

    class Logged(NullTracker):
        texts: dict[str, str] = {}

        def log_text(self, text, artifact_file):
            self.texts[artifact_file] = text

    tracker = Logged()
    metrics = warm_up_real(cfg, src, tmp_path / "base", tracker)
    assert metrics["cold_start_transcripts"] >= 1 and metrics["cold_start_loss"] < metrics["cold_start_first_loss"]
    assert metrics["cold_start_answered_yes"] == metrics["cold_start_answered_no"] > 0
    assert "<tool_call>" in tracker.texts["cold_start/transcripts.txt"]
    from transformers import AutoModelForCausalLM

    after = AutoModelForCausalLM.from_pretrained(tmp_path / "base").state_dict()[top]
    assert not torch.equal(before, after)


def _rejection_cfg(root, **warmup):
    settings = {"steps": 0, "rejection_samples": 2, "rejection_steps": 3, "rejection_lr": 1e-2, "batch_size": 2,
                "micro_batch_size": 2, "probe_questions": 2, "probe_samples": 1} | warmup  # fmt: skip
    extra = {f"model.warmup.{k}": v for k, v in settings.items()} | {"rollout.engine": "hf"}
    return _config(root, extra, autocast=False)


def _saved_tiny(tok, src):
    model = _tiny_model(tok)
    model.save_pretrained(src)
    tok.save_pretrained(src)
    write_json(src / SOURCE_FILE, {})
    return model


def test_the_rejection_round_learns_each_right_episode_once(shipped, made, tmp_path, monkeypatch):
    """model.warmup.rejection_samples: the right episodes, each distinct one once, are learnt and saved; then a
    probe measures the result. With rejection_correct, the wrong ones that were shown a gold answer too."""
    *_, tok, root = shipped
    data, _, chat = made
    model = _saved_tiny(tok, tmp_path / "pretrained")
    top = "model.layers.0.mlp.down_proj.weight"
    before = model.state_dict()[top].clone()
    # a tiny random model never answers right: the gold-path transcripts (right answers, through the real
    # environment) stand in for its samples: half of them, each drawn twice
    # and, under rejection_correct, a wrong answer to each: rewritten, it is its transcript again, so those of the
    # right half add nothing and those of the other half whose gold answer was shown are learnt, once each
    right, rest = data[: len(data) // 2], data[len(data) // 2 :]
    wrong = [_answered(t, "Nobody Atall", chat) for t in data]
    fixed = [rejection.corrected(w, chat) for w in wrong]
    assert all(f is None or f.input_ids == t.input_ids for f, t in zip(fixed, data))
    correctable = sum(f is not None for f in fixed[len(right) :])
    sampled = [*right, *right, *wrong, *wrong]
    monkeypatch.setattr(rejection, "sample", lambda model, episodes, questions, cfg: sampled)
    metrics = warm_up_real(_rejection_cfg(root, rejection_correct=True), tmp_path / "pretrained", tmp_path / "base",
                           NullTracker())  # fmt: skip
    assert metrics["rejection_episodes"] == len(sampled) and metrics["rejection_corrected"] == correctable > 0
    assert metrics["rejection_kept"] == len(right) + correctable
    assert metrics["rejection_sampled_em"] == 2 * len(right) / len(sampled)
    assert metrics["rejection_loss"] < metrics["rejection_first_loss"]
    assert 0.0 <= metrics["rejection_probe/em"] <= 1.0 and "rejection_probe/searches" in metrics
    from transformers import AutoModelForCausalLM

    assert not torch.equal(before, AutoModelForCausalLM.from_pretrained(tmp_path / "base").state_dict()[top])


def _answered(t, answer: str, chat, answers: list[str] | None = None):
    """A copy of transcript `t` whose last turn answered `answer` instead."""
    q = t.episode.question if answers is None else dataclasses.replace(t.episode.question, answers=answers)
    ep = dataclasses.replace(t.episode, question=q, answer=answer)
    start, turn = t.turn_spans[-1][0], chat.encode(answer_text(answer)) + [chat.eos_id]
    return dataclasses.replace(t, episode=ep, input_ids=t.input_ids[:start] + turn,
                               action_mask=t.action_mask[:start] + [1] * len(turn), rewards=[0.0] * (start + len(turn)),
                               logprobs=[0.0] * (start + len(turn)), turn_spans=[*t.turn_spans[:-1], (start, start + len(turn))])  # fmt: skip


def test_a_wrong_answer_after_a_shown_gold_answer_is_rewritten_and_nothing_else(made):
    """model.warmup.rejection_correct: the episode's own turns and observations stay; its last turn becomes the
    gold answer shown in an observation, learnt like a model turn."""
    data, _, chat = made
    rewritten = 0
    for t in data:
        gold = t.episode.answer
        fixed = rejection.corrected(_answered(t, "Nobody Atall", chat), chat)
        if yes_or_no(gold) or not mentions(t.episode.shown, [gold]):
            assert fixed is None  # a yes/no answer would teach a label, not reading; an unshown one, a guess
            continue
        start = t.turn_spans[-1][0]
        assert fixed.input_ids[:start] == t.input_ids[:start] and fixed.action_mask[:start] == t.action_mask[:start]
        assert fixed.turn_spans[:-1] == t.turn_spans[:-1] and fixed.turn_spans[-1] == (start, len(fixed.input_ids))
        answer = parse_turn(chat.decode_turn(fixed.input_ids[start:]))
        assert isinstance(answer, Answer) and answer.text in t.episode.question.answers
        assert fixed.action_mask[start:] == [1] * (len(fixed.input_ids) - start)
        assert fixed.input_ids[-1] == chat.eos_id and len(fixed.rewards) == len(fixed.logprobs) == len(fixed.input_ids)
        rewritten += 1
        assert rejection.corrected(t, chat) is None  # right already
        assert rejection.corrected(_answered(t, "Nobody Atall", chat, ["Zyxxa Quorble"]), chat) is None  # never shown
    assert rewritten >= 10


def test_a_rejection_round_with_no_right_episode_stops_naming_the_key(shipped, tmp_path):
    *_, tok, root = shipped
    _saved_tiny(tok, tmp_path / "pretrained")
    with pytest.raises(ValueError, match=r"model.warmup.rejection_samples: none of 4 episodes on 2 train questions"):
        warm_up_real(_rejection_cfg(root, questions=2), tmp_path / "pretrained", tmp_path / "base", NullTracker())
    assert not (tmp_path / "base").exists()


def test_the_default_and_qwen_profiles_leave_the_cold_start_off():
    for profile in (None, "qwen", "real"):
        wc = load_config(ROOT / "params.yaml", {"profile": profile}).model.warmup
        assert wc.cold_start_steps == 0 and wc.rejection_samples == 0


def _config(root, extra: dict | None = None, **model):
    overrides = {"profile": "qwen", "project.artifacts_dir": str(root / "artifacts"), **(extra or {})}
    return load_config(ROOT / "params.yaml", overrides | {f"model.{k}": v for k, v in model.items()})


def _sft_cfg(root, **warmup):
    """A few quick SFT steps on a tiny model: a high learning rate, small batches, no autocast."""
    settings = {"cold_start_steps": 3, "cold_start_lr": 1e-2, "batch_size": 2, "micro_batch_size": 2} | warmup
    return _config(root, {f"model.warmup.{k}": v for k, v in settings.items()}, autocast=False)


def _tiny_model(tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096)  # fmt: skip
    return Qwen2ForCausalLM(config)


@pytest.fixture(scope="module")
def first_read(shipped):
    """The transcripts of the shipped train questions under each model.warmup.cold_start_first_read, with the forced
    first search and every hop by name; and their chat format."""
    _, train, held, passages, backend, tok, root = shipped
    made = {}
    for mode in ("walk", "answer", "read_back"):
        cfg = _config(root, {"agent.force_first_search": True, "model.warmup.cold_start_hops": "all",
                             "model.warmup.cold_start_first_read": mode})  # fmt: skip
        chat = ChatFormat.for_agent(tok, cfg.agent)
        backend.reseed(0, 1)
        data, _ = cold_start.transcripts(train, backend, chat, cfg, passages, cold_start.held_out_passages(held))
        made[mode] = {t.episode.question.id: t for t in data}
    return made, chat


def _queries(t, chat) -> list[str]:
    """The queries a transcript's calls wrote, in order."""
    return [parse_turn(chat.decode_turn(t.input_ids[s:e])).arguments["query"] for s, e in t.turn_spans[:-1]]


def _path_queries(q, path) -> list[str]:
    """The queries a transcript walking `path` writes: the forced first search already ran the question's own."""
    return [query for query, _ in path if query != q.question]


def test_a_transcript_whose_first_read_shows_the_answer_answers_at_once(shipped, first_read):
    """cold_start_first_read: answer: a transcript answers in its first turn exactly when the forced first read shows
    a gold answer that is not yes/no and not in the question; the others walk the path as before."""
    passages = shipped[3]
    made, chat = first_read
    at_once = [t for t in made["answer"].values() if t.episode.n_calls == 0]
    assert at_once, "no train question's first read shows its answer"
    for t in made["answer"].values():
        q, ep = t.episode.question, t.episode
        shown = cold_start.first_read_answer(q, ep.first_search)
        assert (ep.n_calls == 0) == (shown is not None), q.id
        if shown is not None:
            assert ep.answer == shown and not yes_or_no(shown) and shown in ep.first_search
            assert len(t.turn_spans) == 1 and sum(t.action_mask) == t.turn_spans[0][1] - t.turn_spans[0][0]
        else:  # the gold path, every hop by name, as without the flag
            assert _queries(t, chat) == _path_queries(q, cold_start.gold_path(q, passages)), q.id
    assert len(made["answer"]) >= len(made["walk"])  # answering at once is one more honest way to end
    assert cold_start.first_read_answer(shipped[1][0], None) is None


def test_a_transcript_whose_first_read_shows_the_answer_reads_it_back(shipped, first_read):
    """cold_start_first_read: read_back: where the forced first read shows a gold answer, the transcript searches the
    path's other hops by name (the question's own hop by its passage's title), not the hop whose passage holds the
    answer, and answers from what it has read; the others walk the path as before."""
    passages = shipped[3]
    made, chat = first_read

    def as_before(t):  # the queries of the gold path, as `walk` writes them
        return _path_queries(t.episode.question, cold_start.gold_path(t.episode.question, passages))

    back = [t for t in made["read_back"].values() if _queries(t, chat) != as_before(t)]
    assert back, "no transcript reads its first read back"
    for t in made["read_back"].values():
        q, ep = t.episode.question, t.episode
        path = cold_start.gold_path(q, passages)
        walked = cold_start.read_back_path(q, path, ep.first_search, passages)
        assert _queries(t, chat) == _path_queries(q, walked), q.id
        assert ep.answer in q.answers
        if walked != path:  # read back: the answer was in the first read, and no search looked for its passage
            shown = cold_start.first_read_answer(q, ep.first_search)
            assert shown is not None and mentions(ep.first_search, [ep.answer]) and ep.n_calls >= 1
            assert not any(mentions(passages[pid].text, [shown]) for _, pid in walked), q.id
    last = lambda t: [text for role, text in t.episode.log if role == "tool"][-1]  # noqa: E731
    assert any(not mentions(last(t), [t.episode.answer]) for t in back)  # the answer is not in the last observation
