"""Rejection sampling (STaR, RFT; DGPO's "cold start on good trajectories", here the model's own): sample episodes
of train questions from the warmed-up agent, keep those whose answer is right, and fine-tune on them with the cold
start's SFT (the action mask is the target: only the model's turns are learnt).

Unlike a GRPO group, every kept episode teaches: none is spent on a question whose episodes all score the same.
An episode is kept once: a question answered right the same way by several samples counts once.

With `model.warmup.rejection_correct`, a wrong episode whose observations showed a gold answer is kept too, its
answer turn rewritten to that answer (STaR's rationalization): the model's own searches, then the answer it should
have read from them, wherever it stood. Yes/no answers are never written in: they would teach a label, not reading.
"""

from __future__ import annotations

from collections.abc import Sequence

from components.agent.parser import answer_text
from components.base_model.cold_start import sft
from components.base_model.warmup import mentions, sample_episodes
from components.config import Config
from components.data.schema import Question
from components.data.yes_no import yes_or_no
from components.rollout.chat import ChatFormat
from components.rollout.episode_setup import EpisodeSetup
from components.rollout.trajectory import Trajectory


def sample(model, episodes: EpisodeSetup, questions: Sequence[Question], cfg: Config) -> list[Trajectory]:
    """`model.warmup.rejection_samples` episodes of each question, sampled as the warm-up's probes are."""
    return sample_episodes(model, episodes, questions, cfg.model.warmup.rejection_samples, cfg, cfg.project.seed)


def distinct(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """Each distinct token sequence once, in order."""
    seen: set[tuple[int, ...]] = set()
    kept = []
    for t in trajs:
        ids = tuple(t.input_ids)
        if ids not in seen:
            seen.add(ids)
            kept.append(t)
    return kept


def keep_right(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """The episodes whose answer is an exact match, each distinct token sequence once."""
    return distinct([t for t in trajs if t.episode.em == 1.0])


def corrected(t: Trajectory, chat: ChatFormat) -> Trajectory | None:
    """A wrong episode that answered after observations showing a gold answer (not yes/no), with its answer turn
    rewritten to `<answer>that answer</answer>`; None for any other episode."""
    ep = t.episode
    if ep.em == 1.0 or ep.answer is None or not t.turn_spans:
        return None
    gold = next((a for a in ep.question.answers if not yes_or_no(a) and mentions(ep.shown, [a])), None)
    if gold is None:
        return None
    start = t.turn_spans[-1][0]
    fixed = Trajectory(ep, t.prompt_len, turn_spans=t.turn_spans[:-1])
    fixed.input_ids, fixed.action_mask = t.input_ids[:start], t.action_mask[:start]
    fixed.rewards, fixed.logprobs = [0.0] * start, [0.0] * start
    fixed.add(chat.encode(answer_text(gold)) + [chat.eos_id], is_action=True)
    fixed.turn_spans.append((start, len(fixed.input_ids)))
    return fixed


def run(model, sampler, episodes: EpisodeSetup, questions: Sequence[Question], cfg: Config,
        tracker) -> dict[str, float]:  # fmt: skip
    """Sample on `sampler` (the model itself, or its vLLM actor holding the same weights), keep the right episodes,
    then `model.warmup.rejection_steps` SFT steps on them."""
    wc = cfg.model.warmup
    trajs = sample(sampler, episodes, questions, cfg)
    right = keep_right(trajs)
    fixed = [corrected(t, episodes.chat) for t in trajs] if wc.rejection_correct else []
    data = distinct(right + [t for t in fixed if t is not None])  # a rewritten episode equal to a right one: once
    if not data:
        raise ValueError(f"model.warmup.rejection_samples: none of {len(trajs)} episodes on {len(questions)} train "
                         "questions answered right; nothing to fine-tune on")  # fmt: skip
    tracker.log_text("\n\n".join(episodes.chat.tok.decode(t.input_ids) for t in data[:8]), "rejection/kept.txt")
    losses = sft(model, data, cfg, episodes.chat.pad_id, wc.rejection_steps, wc.rejection_lr, "rejection",
                 log=tracker.log_metrics)  # fmt: skip
    tail = losses[-10:]
    return {"rejection_episodes": float(len(trajs)), "rejection_kept": float(len(data)),
            "rejection_corrected": float(len(data) - len(right)),
            "rejection_sampled_em": sum(t.episode.em for t in trajs) / len(trajs),
            "rejection_kept_searches": sum(t.episode.n_valid_calls for t in data) / len(data),
            "rejection_first_loss": losses[0], "rejection_loss": sum(tail) / len(tail)}  # fmt: skip
