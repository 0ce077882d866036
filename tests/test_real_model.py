"""Smoke test of the real model (SmolLM2-135M-Instruct from the pinned package): its chat template drives
multi-turn rollouts over real HotpotQA paragraphs, the action mask is 1 exactly on generated tokens, one GRPO
update moves the policy towards a rewarded episode, and 4 questions are evaluated. The module converts the pinned
GGUF once per test run, on a pseudo-terminal (tests/real_conversion.py), so the conversion's progress bar is checked on
the same run."""

from __future__ import annotations

import copy

import pytest
import torch

from components.config import load_config
from components.data.loaders import LOADERS
from components.data.passages import PassageTable
from components.model.loading import load_model
from components.base_model.source import SOURCE_FILE, materialise
from components.retrieval.factory import make_backend
from components.train.local.batch import collate
from components.train.local.losses import policy_logprobs
from components.train.local.train import Trainer
from components.train.local.update import update
from components.rollout.chat import ChatFormat
from components.rollout.engine import rollout
from components.rollout.episode_setup import make_env
from components.evaluation.agent_eval import evaluate_agent, summarize
from tests.reference_rollout import reference_rollout
from tests.conftest import ROOT as repo_root

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real(tmp_path_factory, real_conversion):
    """The real profile in a temp project: 6 HotpotQA questions, their paragraphs indexed, the model from the test
    run's conversion (into an empty cache, by a process on a pseudo-terminal); yields what that terminal showed."""
    root = tmp_path_factory.mktemp("real")
    overrides = {
        "profile": "real", "project.artifacts_dir": str(root / "artifacts"),
        "model.cache_dir": str(real_conversion.cache_dir),
        "rollout.engine": "hf",  # this module checks the transformers engine; tests/test_vllm_engine.py checks vLLM
        "agent.max_turns": 2, "agent.max_tokens_per_turn": 16, "train.questions_per_step": 2, "train.group_size": 2,
    }  # fmt: skip
    cfg = load_config(repo_root / "params.yaml", overrides)
    spec = next(s for s in cfg.data.datasets if s.name == "hotpotqa")
    table = PassageTable()
    questions = LOADERS[spec.format](spec.model_copy(update={"limit": 6}), repo_root / "data" / spec.path, table)
    backend = make_backend(cfg)
    backend.build(questions[0].corpus, table.passages)  # the 6 questions' 60 paragraphs
    base = root / "artifacts" / "models" / "base"
    info = materialise(cfg.model, base)  # from the cache the converting process filled
    policy, tok = load_model(base, cfg, torch.device("cpu"))
    torch.manual_seed(0)
    yield cfg, questions, backend, policy, tok, info, real_conversion.shown
    backend.close()


def test_base_model_is_the_pinned_dequantised_gguf(real):
    cfg, *_, tok, info, _ = real
    assert info["sha256"] == cfg.model.sha256 and info["dequantised"] is True and info["params"] == 134_515_008
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.pad_token_id != tok.eos_token_id
    assert (cfg.artifacts / "models" / "base" / SOURCE_FILE).is_file()


def test_the_gguf_conversion_shows_its_bar_on_a_terminal(real):
    """transformers' own bar, with a rate, while base_model (real profile) de-quantizes the pinned GGUF."""
    cfg, *_, shown = real
    assert "de-quantizing GGUF tensors" in shown and "it/s" in shown and "100%" in shown, shown[-2000:]
    assert (cfg.artifacts / "models" / "base" / "model.safetensors").is_file()


@pytest.fixture(scope="module")
def episodes(real):
    """A group of 2 sampled episodes for each of 2 questions, from the policy the trainer builds."""
    cfg, questions, backend, policy, tok, *_ = real
    policy = copy.deepcopy(policy)
    trainer = Trainer(cfg, policy, tok, backend, questions[:2], {})
    gen = torch.Generator().manual_seed(0)
    trajs = trainer.episodes.rollout(policy, [q for q in questions[:2] for _ in range(2)], temperature=1.0,
                                     generator=gen)
    return trainer, trajs


def test_rollout_mask_is_one_exactly_on_generated_tokens(real, episodes):
    cfg, *_, tok, _, _ = real
    trainer, trajs = episodes
    assert len(trajs) == 4
    for t in trajs:
        spans = set()
        for s, e in t.turn_spans:
            spans.update(range(s, e))
            assert t.logprobs[e - 1] != 0.0  # every generated token carries its behaviour log-prob
        assert [i for i, m in enumerate(t.action_mask) if m] == sorted(spans)
        assert t.input_ids[: t.prompt_len] == trainer.chat.prompt_ids(t.episode.question.question)
        text = tok.decode(t.input_ids[: t.prompt_len])
        assert text.startswith("<|im_start|>system\n") and "<tool_call>" in text
        for s, e in t.turn_spans:  # a turn ends at the template's end of turn or at the token limit, never past it
            turn = t.input_ids[s:e]
            assert tok.convert_tokens_to_ids("<|im_start|>") not in turn
            assert turn[-1] == tok.eos_token_id or len(turn) == cfg.agent.max_tokens_per_turn or e == len(t.input_ids)
        for (_, e), (s2, _) in zip(t.turn_spans, t.turn_spans[1:]):  # what the environment inserted between turns
            assert tok.decode(t.input_ids[e:s2]).rstrip().endswith("<|im_start|>assistant")


def test_one_grpo_update_moves_the_policy_towards_the_rewarded_episode(episodes):
    trainer, trajs = episodes
    policy, group = trainer.policy, trajs[:2]  # the first question's group
    group[0].rewards[group[0].last_action_index()] += 1.0  # injected: the first episode is the better one
    batch = collate(group, trainer.chat.pad_id)
    with torch.no_grad():
        before = policy_logprobs(policy, batch, 1.0, batch.action_mask)[0]
    frozen = {n: p.detach().clone() for n, p in policy.named_parameters() if not p.requires_grad}
    metrics = update(trainer.learner, batch, trainer.tc, trainer.amp)
    with torch.no_grad():
        after = policy_logprobs(policy, batch, 1.0, batch.action_mask)[0]
    assert metrics["updated_fraction"] == 1.0 and metrics["grad_norm"] > 0
    gain = ((after - before) * batch.action_mask).sum(-1)
    assert gain[0] > 0 > gain[1]
    assert frozen and all(torch.equal(p, frozen[n]) for n, p in policy.named_parameters() if n in frozen)


def test_evaluate_four_questions(real):
    cfg, questions, backend, policy, tok, *_ = real
    res = evaluate_agent(policy, tok, questions[2:6], backend, cfg.agent, top_k=cfg.retrieval.top_k)
    s = summarize(res)
    assert [r.question_id for r in res] == [q.id for q in questions[2:6]]
    assert all(0 <= s[k] <= 1 for k in ("em", "f1", "answered")) and 0 <= s["searches"] <= cfg.agent.max_turns
    assert all(1 <= r.turns <= cfg.agent.max_turns and r.transcript.startswith("Q: ") for r in res)


@pytest.mark.parametrize("algorithm", ["ppo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "rloo"])
def test_every_algorithm_updates_the_real_model(real, episodes, algorithm):
    cfg, *_ = real
    base, trajs = episodes
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"algorithm": algorithm})})
    trainer = Trainer(cfg, copy.deepcopy(base.policy), base.tok, base.backend, base.train_qs, {})
    trajs = copy.deepcopy(trajs)
    trajs[0].rewards[trajs[0].last_action_index()] += 1.0  # injected, so every estimator has a non-zero advantage
    before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if p.requires_grad}
    metrics = update(trainer.learner, collate(trajs, trainer.chat.pad_id), trainer.tc, trainer.amp)
    assert metrics["skipped_nonfinite"] == 0 and metrics["grad_norm"] > 0
    assert ("value_loss" in metrics) == (algorithm == "ppo")
    assert any(not torch.equal(p, before[n]) for n, p in trainer.policy.named_parameters() if n in before)


def test_greedy_engine_episodes_equal_the_reference_and_a_full_forward(real):
    """The engine's greedy episodes are the reference rollout's (one `generate` per episode and turn), and their
    recorded log-probs are a fresh full forward pass's, on the real model."""
    cfg, questions, backend, policy, tok, *_ = real
    chat = ChatFormat.for_agent(tok, cfg.agent, policy.generation_config)
    qs = questions[:4]
    want = reference_rollout(policy, chat, make_env(backend, qs, cfg.agent, cfg.retrieval.top_k, chat), qs, cfg.agent)
    got = rollout(policy, chat, make_env(backend, qs, cfg.agent, cfg.retrieval.top_k, chat), qs, cfg.agent,
                  temperature=0.0)  # fmt: skip
    assert [g.input_ids for g in got] == [w.input_ids for w in want]
    assert [g.action_mask for g in got] == [w.action_mask for w in want]
    for t in got:
        ids = torch.tensor([t.input_ids])
        with torch.no_grad():
            logp = policy(input_ids=ids).logits.float().log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(t.action_mask[1:], dtype=torch.bool)
        assert torch.allclose(logp[mask], torch.tensor(t.logprobs[1:])[mask], atol=2e-3)
