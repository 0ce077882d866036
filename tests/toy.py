"""A small, fast agent setup for tests: synthetic world, embedded index, tokenizer, random tiny model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from components.agent.prompts import SYSTEM_PROMPT
from components.config import AgentConfig, SyntheticConfig, TinyModelConfig
from components.data.synthetic import RELATIONS, World, generate_world
from components.agent.parser import answer_text, call_text
from components.model.tiny import build_model, build_tokenizer
from components.retrieval.embedded import EmbeddedBackend
from components.rollout.chat import ChatFormat
from components.rollout.episode_setup import make_env

TOY_WORLD = SyntheticConfig(seed=5, n_entities=40, n_relations=4, n_train=100, n_dev=20, n_test=20)
TOY_MODEL = TinyModelConfig(vocab_size=700, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1)  # fmt: skip


@dataclass
class Toy:
    world: World
    backend: EmbeddedBackend
    tokenizer: object
    model: object
    chat: ChatFormat
    agent: AgentConfig

    def env(self, agent: AgentConfig | None = None):
        return make_env(self.backend, self.world.questions("train"), agent or self.agent, 3)


def make_toy(root: str | Path, seed: int = 0, world: SyntheticConfig = TOY_WORLD,
             model: TinyModelConfig = TOY_MODEL, agent: AgentConfig | None = None) -> Toy:  # fmt: skip
    w = generate_world(world)
    backend = EmbeddedBackend(Path(root) / "index", seed=seed)
    backend.build(w.name, w.passages())
    texts = [p.text for p in w.passages()] + [q.question for q in w.questions("train")] + [SYSTEM_PROMPT] * 20
    texts += [call_text(f"{e} {r}") + answer_text(e) for e in w.entities for r in RELATIONS[:2]]
    tok = build_tokenizer(texts, model.vocab_size)
    agent = agent or AgentConfig(max_turns=3, max_tokens_per_turn=16, system_prompt=False)
    return Toy(w, backend, tok, build_model(tok, model, seed), ChatFormat.for_agent(tok, agent), agent)


def small_raw(art: Path, **train_over) -> dict:
    """Raw params of a small, fast tiny-model run (synthetic world, 4 GRPO steps) under `art`."""
    return {
        "project": {"seed": 3, "artifacts_dir": str(art)},
        "data": {"datasets": [], "synthetic": {"seed": 7, "n_entities": 40, "n_relations": 4, "n_train": 60,
                                               "n_dev": 10, "n_test": 10}},  # fmt: skip
        "agent": {"system_prompt": False, "max_turns": 3, "max_tokens_per_turn": 12},
        "model": {"tiny": {"vocab_size": 600, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "num_key_value_heads": 1,
                           "priming": {"first_turn_steps": 3, "steps": 3, "batch_size": 4, "probes": 8}}},
        "train": {"steps": 4, "questions_per_step": 2, "group_size": 3, "micro_batch_size": 4, "eval_every": 2,
                  "eval_questions": 4, "checkpoint_every": 2, "log_trajectories_every": 2, **train_over},
    }  # fmt: skip


def replayed_reward(ep, w) -> float:
    """The total reward an episode would earn under weights `w`, replayed from its recorded answer and calls with the
    reward functions alone: a check of the environment's bookkeeping."""
    from components.agent.rewards import outcome_reward, process_reward, unearned_bonus

    seen, rewards = set(ep.first_ids), []
    for valid, ids in ep.calls:
        rewards.append(process_reward(valid, ids, seen, ep.question.supporting_ids, w))
        seen.update(ids)
    outcome = outcome_reward(ep.answer, ep.question.answers, w)
    return sum(rewards) + outcome - unearned_bonus(rewards, ep.answer, ep.question.answers, w)
