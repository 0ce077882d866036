"""The local trainer (train stage, backend `local`): rollout -> rewards -> advantages -> clipped update.

Each step samples `questions_per_step` training questions, rolls out `group_size` episodes of each with the
current policy and updates it on them (components/train/local/update.py). Step s draws its questions and sampling noise
from (seed, s) alone, so a run resumed from a checkpoint repeats exactly what it would have done.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import shutil
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from components import artifacts
from components.agent.rewards import is_yes_no, outcome_reward
from components.config import Config, ConfigError, RewardConfig
from components.data.prepare import read_questions
from components.data.schema import Question
from components.data.yes_no import balance_yes_no, without_yes_no
from components.evaluation.agent_eval import evaluate_agent, summarize
from components.evaluation.answers import read_answer
from components.io import atomic_path
from components.model.loading import RolloutWeights, autocast, freeze_below, load_model, pick_device
from components.model.top_layers import compiled_layers, frozen_layers
from components.retrieval.factory import make_backend
from components.train.local import checkpoint as ckpt
from components.train.local.advantages import groups_with_signal, step_config
from components.train.local.batch import collate
from components.train.local.critic import Critic
from components.train.local.update import Learner
from components.train.local.update import update as rl_update
from components.rollout.content import content_entropy
from components.rollout.engine import RolloutStats
from components.rollout.episode_setup import episode_setup
from components.rollout.reread import reading_pass
from components.rollout.trajectory import Trajectory, transcript
from components.rollout.traces import train_traces

SYNTHETIC, COUNTERFACTUAL = "synthetic", "synthetic_cf"


def checkpoint_root(cfg: Config) -> Path:
    """One checkpoint folder per training config: a resume never continues a run made with other params (the dev
    curve's evaluate.reread included). The wall-time budget is not part of it: a call with another budget goes on
    from the same checkpoints."""
    train = cfg.train.model_dump(mode="json", exclude={"max_minutes"})
    keyed = {"seed": cfg.project.seed, "top_k": cfg.retrieval.top_k, "model": cfg.model.model_dump(mode="json"),
             "agent": cfg.agent.model_dump(mode="json"), "train": train, "reread": cfg.evaluate.reread}  # fmt: skip
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:12]
    return artifacts.checkpoints(cfg) / digest


def split_questions(questions: Sequence[Question], datasets: Sequence[str], split: str) -> list[Question]:
    return [q for q in questions if q.dataset in datasets and q.split == split]


def train_questions(questions: Sequence[Question], cfg: Config) -> list[Question]:
    """The train split of train.datasets, with its yes/no questions as train.yes_no says: all, as many answering
    "yes" as "no" (balance), or none."""
    train = split_questions(questions, cfg.train.datasets, "train")
    answer = lambda q: q.answers[0] if q.answers else None  # noqa: E731
    if cfg.train.yes_no == "balance":
        return balance_yes_no(train, answer, random.Random(f"{cfg.project.seed}:train-yes-no"))
    if cfg.train.yes_no == "none":
        return without_yes_no(train, answer)
    return train


def yes_no_note(cfg: Config) -> str:
    """", train.yes_no=...", for an error about an empty train pool, when train.yes_no may have emptied it."""
    return "" if cfg.train.yes_no == "all" else f", train.yes_no={cfg.train.yes_no!r}"


def curve_questions(questions: Sequence[Question], dataset: str, n: int | None) -> list[Question]:
    """The dev curve's questions of one dataset: the last `n` of its dev split. Evaluate scores the first
    `limit` (evaluate.sets), so a model kept for its dev EM (train.keep: best) is chosen on other questions
    whenever the dev split holds both."""
    dev = split_questions(questions, [dataset], "dev")
    return dev[-n:] if n else dev


def curriculum_pool(questions: Sequence[Question], min_hops: int) -> list[Question]:
    """The questions of at least `min_hops` hops (one gold supporting passage a hop)."""
    return [q for q in questions if len(q.supporting_ids) >= min_hops]


def mean_of(values: Sequence[float | None]) -> float | None:
    """The mean of the values that are not None (None when none is: the metric is not logged)."""
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def rewarded_as_read(read: Trajectory, stop_texts: Sequence[str], w: RewardConfig) -> Trajectory:
    """A reading (train.reread) rewarded as evaluate.reread scores it: its plain answer, the closing tag optional,
    earns the outcome reward on the last action token; nothing else is rewarded."""
    ep = read.episode
    ep.answer, ep.process_rewards = read_answer(read, stop_texts), []
    ep.outcome = outcome_reward(ep.answer, ep.question.answers, w)
    read.rewards = [0.0] * len(read.rewards)
    read.rewards[read.last_action_index()] = ep.outcome
    return read


class Trainer:
    def __init__(self, cfg: Config, policy, tokenizer, backend, train_qs, eval_sets: dict[str, list[Question]],
                 model_dir: Path | None = None):  # fmt: skip
        if cfg.train.rollout_engine:  # the trainer's own engine; evaluation and serving keep rollout.engine
            cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"engine": cfg.train.rollout_engine})})
        self.cfg, self.tc = cfg, cfg.train
        self.policy, self.tok, self.backend = policy, tokenizer, backend
        self.device = next(policy.parameters()).device
        self.train_qs, self.eval_sets = train_qs, eval_sets
        self.episodes = episode_setup(tokenizer, backend, train_qs, cfg.agent, cfg.retrieval.top_k)
        self.chat = self.episodes.chat
        self.trainable = freeze_below(policy, self.tc.trainable_layers)
        if self.tc.gradient_checkpointing:
            policy.gradient_checkpointing_enable()
        self.opt = torch.optim.AdamW(self.trainable, lr=self.tc.lr, weight_decay=self.tc.weight_decay)
        self.critic = self.critic_opt = self.ref = None
        if self.tc.algorithm == "ppo":
            self.critic = Critic(copy.deepcopy(policy.base_model), policy.config.hidden_size).to(self.device)
            self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=self.tc.critic_lr)
        if self.tc.kl_coef > 0:
            self.ref = copy.deepcopy(policy).eval().requires_grad_(False)
        self.actor = RolloutWeights(policy, cfg, model_dir)  # what rollouts and evaluations run on
        # the rollout keeps the first trained layer's input; the update then starts there (frozen layers skipped)
        frozen = frozen_layers(policy, self.tc.trainable_layers)
        keep = frozen and self.tc.keep_frozen_hidden and cfg.rollout.engine == "hf"  # vLLM returns no hidden states
        self.keep_layer = frozen if keep else None
        self.layers = compiled_layers(policy, self.tc.trainable_layers) if self.tc.compile else None

    def rollout_amp(self):
        """Autocast for the rollout when it runs on the policy itself (a bf16 copy, or vLLM, computes in bf16)."""
        return self.amp() if self.actor.model is self.policy else nullcontext()

    def amp(self):
        return autocast(self.cfg, self.device)

    @property
    def learner(self) -> Learner:
        """What an update changes and reads (components/train/local/update.py)."""
        return Learner(self.policy, self.trainable, self.opt, self.ref, self.critic, self.critic_opt, self.layers)

    # --- one step ------------------------------------------------------------------------------------

    def sample_questions(self, step: int) -> list[Question]:
        rng = random.Random(f"{self.cfg.project.seed}:train:{step}")
        cur = self.tc.curriculum
        pool = curriculum_pool(self.train_qs, cur.min_hops) if step < cur.steps else self.train_qs
        return rng.sample(pool, min(self.tc.questions_per_step, len(pool)))

    def step(self, step: int) -> tuple[dict[str, float], list]:
        t0 = time.perf_counter()
        self.backend.reseed(step, 0)  # retriever ties, like everything else in a step, from (seed, step) alone
        qs = self.sample_questions(step)
        gen = torch.Generator().manual_seed(hash((self.cfg.project.seed, step)) % (2**63))
        stats = RolloutStats()
        self.actor.sync()
        group = [q for q in qs for _ in range(self.tc.group_size)]
        with self.rollout_amp():
            trajs = self.episodes.rollout(self.actor.model, group, temperature=self.tc.temperature, generator=gen,
                                          stats=stats, engine=self.cfg.rollout,
                                          capture_layer=self.keep_layer)  # fmt: skip
        reads = self.read_again(trajs, gen, stats) if self.tc.reread else []
        t1 = time.perf_counter()
        groups = [t.episode.question.id for t in trajs] + [f"{t.episode.question.id} read again" for t in reads]
        batch = collate(trajs + reads, self.chat.pad_id, self.keep_layer, groups).to(self.device)
        tc = step_config(self.cfg.train, stats.entropy)  # train.entropy_floor: the bonus for this update
        update = rl_update(self.learner, batch, tc, self.amp)
        t2 = time.perf_counter()
        eps = [t.episode for t in trajs]
        n_calls = sum(e.n_calls for e in eps)
        metrics = {
            "reward": float(np.mean([e.total_reward for e in eps])),
            "em": float(np.mean([e.em for e in eps])),
            "f1": float(np.mean([e.f1 for e in eps])),
            "turns": float(np.mean([e.turns for e in eps])),
            "searches": float(np.mean([e.n_valid_calls for e in eps])),
            "tool_call_validity": sum(e.n_valid_calls for e in eps) / n_calls if n_calls else 1.0,
            "answered": float(np.mean([e.answer is not None for e in eps])),
            "yes_no": float(np.mean([is_yes_no(e.answer) for e in eps])),  # with searches: the collapse monitor
            "support_recall": mean_of([e.support_recall for e in eps]),  # what the searches found of the gold support
            "answer_seen": float(np.mean([e.answer_seen for e in eps])),  # a gold answer was in an observation
            "response_tokens": float(batch.response_mask.sum(-1).mean()),
            "action_tokens": float(batch.action_mask.sum(-1).mean()),
            "rollout_tokens_per_s": stats.tokens_per_s,
            "entropy": stats.entropy,  # of the sampling policy, per generated token
            "content_entropy": content_entropy(trajs, self.chat),  # of the query and answer tokens alone
            "entropy_coef": tc.entropy_coef,
            "reread_em": mean_of([t.episode.em for t in reads]),  # train.reread: the answers read again
            "groups_with_signal": groups_with_signal(batch.token_rewards.sum(-1), batch.index),  # GRPO's signal
            "rollout_s": t1 - t0,
            "tool_s": stats.tool_seconds,
            "update_s": t2 - t1,
            **update,
        }
        return metrics, trajs

    def read_again(self, trajs, gen: torch.Generator, stats: RolloutStats) -> list:
        """train.reread: each episode's passages read again above its question, one sampled answer turn apiece."""
        reading = reading_pass(self.tok, self.backend, trajs, self.cfg.agent, self.cfg.retrieval.top_k)
        with self.rollout_amp():
            reads = reading.rollout(self.actor.model, temperature=self.tc.temperature, generator=gen, stats=stats,
                                    engine=self.cfg.rollout, capture_layer=self.keep_layer)  # fmt: skip
        stops = reading.setup.chat.stop_texts
        return [rewarded_as_read(t, stops, self.cfg.agent.reward) for t in reads]

    # --- evaluation ----------------------------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        self.backend.reseed(step, 1)
        self.actor.sync()
        out = {}
        for name, qs in self.eval_sets.items():
            with self.rollout_amp():
                res = evaluate_agent(self.actor.model, self.tok, qs, self.backend, self.cfg.agent, self.cfg.retrieval.top_k,
                                     batch_tokens=self.cfg.evaluate.batch_tokens, desc=f"eval {name}",
                                     reread=self.cfg.evaluate.reread)  # fmt: skip
            out.update(summarize(res, prefix=f"{name}/"))
        return out


def _prepared_questions(cfg: Config) -> list[Question]:
    return read_questions(artifacts.require(cfg, artifacts.questions(cfg)))


def build_trainer(cfg: Config) -> Trainer:
    questions = _prepared_questions(cfg)
    tc = cfg.train
    train_qs = train_questions(questions, cfg)
    if not train_qs:
        raise ConfigError(f"train.datasets={tc.datasets}{yes_no_note(cfg)}: no train-split questions in "
                          f"{artifacts.questions(cfg)}")
    if tc.curriculum.steps and not curriculum_pool(train_qs, tc.curriculum.min_hops):
        raise ConfigError(f"train.curriculum.min_hops={tc.curriculum.min_hops}: no train-split question of "
                         f"train.datasets={tc.datasets} has that many hops")  # fmt: skip
    eval_sets = {}
    for ds in tc.datasets:
        dev = curve_questions(questions, ds, tc.eval_questions)
        if dev:
            eval_sets[f"dev/{ds}"] = dev
    if SYNTHETIC in tc.datasets:
        cf = curve_questions(questions, COUNTERFACTUAL, tc.eval_questions)
        if cf:
            eval_sets[f"dev/{COUNTERFACTUAL}"] = cf
    policy, tok = load_model(artifacts.base_model(cfg), cfg, pick_device(cfg))
    return Trainer(cfg, policy, tok, make_backend(cfg), train_qs, eval_sets, artifacts.base_model(cfg))


def keep_best(trainer: Trainer, best_dir: Path) -> None:
    """Write the policy as the best so far (train.keep=best), replacing the previous best whole."""
    with atomic_path(best_dir) as tmp:
        trainer.policy.save_pretrained(tmp)


def run(cfg: Config, tracker) -> dict[str, float]:
    """Train; returns the final metrics. Resumes from the latest checkpoint under artifacts/train/checkpoints."""
    tc = cfg.train
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    torch.manual_seed(cfg.project.seed)
    trainer = build_trainer(cfg)
    try:
        return _train(cfg, tracker, trainer)
    finally:
        trainer.actor.close()  # a vLLM process stops with the stage


def _train(cfg: Config, tracker, trainer: Trainer) -> dict[str, float]:
    tc = cfg.train
    modules = {"policy": trainer.policy} | ({"critic": trainer.critic} if trainer.critic is not None else {})
    optims = {"policy": trainer.opt} | ({"critic": trainer.critic_opt} if trainer.critic_opt is not None else {})
    log = ckpt.TrainLog(checkpoint_root(cfg), modules, optims, tracker)
    start = log.resume()
    final_eval = log.last_eval()  # the result when no step is left to run
    end = start if tc.stop_at_target and log.reached_target else tc.steps  # it had stopped at its target
    tracker.set_tags({"train.algorithm": tc.algorithm, "train.backend": "local"})
    target_key = f"dev/{tc.datasets[0]}/em"
    best_dir = checkpoint_root(cfg) / "best"  # train.keep=best: the best evaluated policy so far
    if start == 0 and tc.eval_every:
        final_eval = trainer.evaluate(0)
        log.record(0, final_eval)
        if log.dev_em(0, final_eval.get(target_key), None, final_eval) and tc.keep == "best":
            keep_best(trainer, best_dir)
    bar = tqdm(range(start, end), desc=f"train {tc.algorithm}", initial=start, total=tc.steps)
    started = time.perf_counter()
    for step in bar:
        t0 = time.perf_counter()
        metrics, trajs = trainer.step(step)
        n = step + 1
        out_of_time = tc.max_minutes is not None and time.perf_counter() - started >= 60 * tc.max_minutes
        if tc.eval_every and (n % tc.eval_every == 0 or n == tc.steps or out_of_time):
            final_eval = trainer.evaluate(n)
            metrics.update(final_eval)
            log.log_traces(n, train_traces(cfg, trajs, n))  # a few of this step's episodes as MLflow traces
            if log.dev_em(n, final_eval.get(target_key), tc.target_em, final_eval) and tc.keep == "best":
                keep_best(trainer, best_dir)  # before the step's checkpoint: a resumed run finds it there
        if n % tc.log_trajectories_every == 0 or n == 1:
            text = "\n\n".join(transcript(t) for t in trajs[:: tc.group_size][:4])
            tracker.log_text(text, f"trajectories/step_{n:06d}.txt")
        metrics["step_s"] = time.perf_counter() - t0
        log.record(n, metrics)
        bar.set_postfix(em=f"{metrics['em']:.2f}", dev=f"{final_eval.get(target_key, float('nan')):.2f}")
        done = (log.reached_target and tc.stop_at_target) or out_of_time
        if n % tc.checkpoint_every == 0 or n == tc.steps or done:
            log.checkpoint(n)
        if done:
            break
    log.close()
    kept = log.history.get("best_step") if tc.keep == "best" else None
    out_dir = artifacts.trained_model(cfg)
    with atomic_path(out_dir) as tmp:
        if kept is None:
            trainer.policy.save_pretrained(tmp)
        else:  # the best evaluated policy, and its evaluation is the result
            shutil.copytree(best_dir, tmp, dirs_exist_ok=True)
            final_eval = log.history.get("best_eval", final_eval)
            tracker.set_tags({"train.kept_step": str(kept)})
        trainer.tok.save_pretrained(tmp)
    tracker.log_model(out_dir, "agent")
    result = dict(final_eval)
    result["steps"] = float(log.steps_done())
    if kept is not None:
        result["kept_step"] = float(kept)
    result["best_dev_em"] = float(log.history["best_em"] or 0.0)
    if log.reached_target:
        result["steps_to_target"] = float(log.history["steps_to_target"])
    return result
