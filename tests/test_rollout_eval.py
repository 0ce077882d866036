"""Evaluation in token-budget batches, chunked prefill, the baselines' plain-generation answer, the progress bar."""

import io

import pytest
import torch

import components.rollout.episode_setup as episode_setup
import components.evaluation.agent_eval as ev
from components.config import AgentConfig
from tests.toy import make_toy
from components.evaluation.answers import plain_answer
from components.config import RolloutConfig
from components.rollout.engine import RolloutStats, rollout
from components.rollout.progress import GenerationProgress

STOPS = ("<|im_end|>", "<|endoftext|>")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return make_toy(tmp_path_factory.mktemp("toy"), seed=0)


@pytest.mark.parametrize(("turn", "answer"), [
    ("<answer>Paris</answer>", "Paris"),
    ("<answer>Paris", "Paris"),                                  # no closing tag
    ("<answer> the Eiffel Tower \n", "the Eiffel Tower"),
    ("<answer>Paris</answer> because it is the capital", "Paris"),  # text after the closing tag
    ("<answer>Paris<|im_end|>\nuser: more", "Paris"),             # text after the end of turn
    ("<answer>Paris<|endoftext|><answer>Rome</answer>", "Paris"),
    ("Paris", "Paris"),                                          # no prefill in the text
    ("<answer></answer>", None),                                 # empty answer
    ("<answer>   ", None),
    ("<answer><|im_end|>Paris", None),                           # nothing before the end of turn
    ("", None),
])  # fmt: skip
def test_plain_answer(turn, answer):
    assert plain_answer(turn, STOPS) == answer


def test_row_bound():
    one = AgentConfig(max_turns=1, max_tokens_per_turn=32, max_total_tokens=512)
    assert ev.row_bound(100, one) == 132 and ev.row_bound(500, one) == 512 and ev.row_bound(600, one) == 600
    assert ev.row_bound(100, AgentConfig(max_turns=3, max_total_tokens=512)) == 512


@pytest.mark.parametrize("mode", ["agent", "direct", "naive_rag"])
def test_a_small_token_budget_streams_through_few_rows_with_the_same_results(toy, mode, monkeypatch):
    """`batch_tokens` bounds the KV cache (rows x the longest possible row): the questions then stream through
    that many rows, as finished episodes free theirs, and every result is the one of a single wide batch."""
    qs = toy.world.questions("dev")[:12]
    toy.backend.reseed(0)  # both runs meet the same retriever ties (naive RAG's transcript shows its search)
    one = ev.evaluate_agent(toy.model, toy.tokenizer, qs, toy.backend, toy.agent, 3, mode=mode)
    rows = []

    def spy(model, chat, env, questions, *a, **k):
        rows.append(k["engine"].max_rows)
        return rollout(model, chat, env, questions, *a, **k)

    monkeypatch.setattr(episode_setup, "rollout", spy)
    budget = 3 * toy.agent.max_total_tokens if mode == "agent" else 150  # single-turn rows: prompt + 16 tokens
    toy.backend.reseed(0)
    streamed = ev.evaluate_agent(toy.model, toy.tokenizer, qs, toy.backend, toy.agent, 3, mode=mode, batch_tokens=budget)
    assert len(rows) == 1 and 1 <= rows[0] <= 3
    assert [r.question_id for r in streamed] == [q.id for q in qs]
    assert streamed == one


def test_chunked_prefill_matches_one_forward(toy):
    """Feeding prompts and observations a few tokens per forward gives the same episodes."""
    qs = toy.world.questions("train")[:8]
    a = rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, temperature=1.0, generator=torch.Generator().manual_seed(3))
    b = rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, temperature=1.0, generator=torch.Generator().manual_seed(3),
                engine=RolloutConfig(prefill_tokens=5))  # fmt: skip
    assert [t.input_ids for t in a] == [t.input_ids for t in b]
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)


def test_progress_counts_questions_and_tokens(toy):
    qs = toy.world.questions("train")[:6]
    out, stats = io.StringIO(), RolloutStats()
    with GenerationProgress(len(qs), "test", file=out, disable=False, refresh_s=0.0) as bar:
        rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, temperature=0.0, stats=stats, progress=bar)
    assert bar.tokens == stats.generated_tokens > 0 and bar.bar.n == len(qs)
    assert "tok/s" in out.getvalue() and f"{len(qs)}/{len(qs)}" in out.getvalue()


def test_progress_is_silent_when_stderr_is_not_a_terminal(toy, capsys):
    ev.evaluate_agent(toy.model, toy.tokenizer, toy.world.questions("dev")[:3], toy.backend, toy.agent, 3, mode="direct")
    assert capsys.readouterr().err == ""


def test_the_agents_results_say_what_share_of_the_gold_passages_its_searches_found(toy):
    """support_recall: with the forced first search an episode has at least that search's share of the gold
    passages; the baselines record none, and the summary averages the agent's."""
    qs = [q for q in toy.world.questions("dev") if q.supporting_ids][:8]
    agent = toy.agent.model_copy(update={"force_first_search": True})
    toy.backend.reseed(0)
    first = toy.backend.search(qs[0].corpus, [q.question for q in qs], 3)
    toy.backend.reseed(0)
    results = ev.evaluate_agent(toy.model, toy.tokenizer, qs, toy.backend, agent, 3)
    for q, hits, r in zip(qs, first, results):
        floor = len(set(q.supporting_ids) & {h.id for h in hits}) / len(q.supporting_ids)
        assert floor <= r.support_recall <= 1.0
    assert any(r.support_recall > 0 for r in results)
    assert ev.summarize(results)["support_recall"] == pytest.approx(sum(r.support_recall for r in results) / len(qs))
    plain = ev.evaluate_agent(toy.model, toy.tokenizer, qs, toy.backend, agent, 3, mode="naive_rag")
    assert all(r.support_recall is None for r in plain) and "support_recall" not in ev.summarize(plain)


def test_reread_scores_the_answer_from_every_passage_the_episode_showed(toy, monkeypatch):
    """evaluate.reread: after its episode each agent answers again from naive RAG's prompt (the passages above the
    question) over every passage the episode showed; that answer is scored, the episode's own is its strict one.
    An episode that searched no more reads exactly naive RAG's prompt."""
    from components.agent.rewards import exact_match

    qs = toy.world.questions("dev")[:12]
    agent = toy.agent.model_copy(update={"force_first_search": True, "first_search_at": "question_turn"})
    toy.backend.reseed(0)
    own = ev.evaluate_agent(toy.model, toy.tokenizer, qs, toy.backend, agent, 3)
    calls = []

    def spy(model, chat, env, questions, *a, **k):
        trajs = rollout(model, chat, env, questions, *a, **k)
        calls.append((k["prompts"], trajs))
        return trajs

    monkeypatch.setattr(episode_setup, "rollout", spy)
    toy.backend.reseed(0)
    again = ev.evaluate_agent(toy.model, toy.tokenizer, qs, toy.backend, agent, 3, reread=True)
    (_, episodes), (prompts, reads) = calls
    toy.backend.reseed(0)
    naive = episode_setup.searched_prompts(qs, toy.chat, toy.env(agent), "question_turn")
    for q, o, r, ep, prompt, read, plain in zip(qs, own, again, episodes, prompts, reads, naive):
        assert (r.strict_prediction, r.em_strict, r.turns, r.searches) == (o.strict_prediction, o.em, o.turns, o.searches)
        turn = [text for role, text in read.episode.log if role == "assistant"][-1]
        assert r.prediction == plain_answer(turn, STOPS) and r.em == exact_match(r.prediction, q.answers)
        assert f"reread: {r.prediction!r}" in r.transcript
        assert len(ep.episode.read) >= len(ep.episode.first_ids)
        if list(ep.episode.read) == list(ep.episode.first_ids):
            assert prompt == plain
    assert any(list(t.episode.read) == list(t.episode.first_ids) for t in episodes)
    summary = ev.summarize(again)
    assert summary["em_strict"] == pytest.approx(ev.summarize(own)["em"]) and "support_recall" in summary
