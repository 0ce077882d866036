"""The agent behind `agentr1 ask` and the served model: the index it searches, the checks on a question, its episodes.

The bottom of serving/: ask.py and pyfunc.py import this module, never the reverse.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from components import artifacts
from components.agent.parser import ANSWER_CLOSE, ANSWER_OPEN, TOOL_CLOSE, TOOL_OPEN
from components.config import Config
from components.data.schema import Question
from components.retrieval.base import SearchError

if TYPE_CHECKING:  # torch-heavy: imported where episodes run
    from components.rollout.engine import RolloutStats
    from components.rollout.trajectory import Trajectory

# Markup of the chat template and the action syntax: in a question it could end the user's turn or forge a model turn.
ACTION_MARKUP = (TOOL_OPEN, TOOL_CLOSE, ANSWER_OPEN, ANSWER_CLOSE, "<tool_response>", "</tool_response>")
WORD = re.compile(r"[^\W\d_]+")  # a run of letters, in any script


class AskError(Exception):
    """A question that cannot be asked: empty, too long, forged markup, no such model or alias, no index to search."""


def model_corpus(cfg: Config) -> str:
    """The corpus the model was trained to search: synthetic worlds have their own, the rest search wiki."""
    name = cfg.train.datasets[0]
    return name if name.startswith("synthetic") else "wiki"


def open_index(cfg: Config, corpus: str):
    """The search backend with a live index of `corpus`; AskError when there is none. The caller closes it."""
    from components.retrieval.factory import make_backend

    backend = make_backend(cfg)
    try:
        live = backend.live_version(corpus)
    except SearchError as e:
        backend.close()
        raise AskError(f"search index for corpus {corpus!r}: {e}") from None
    if live is None:
        backend.close()
        where = artifacts.index(cfg) / corpus if cfg.retrieval.backend == "embedded" else cfg.retrieval.elasticsearch.url
        raise AskError(f"no live search index for corpus {corpus!r} at {where}; run `agentr1 index` (or `dvc repro index`)")
    return backend


def reserved_markup(tok) -> tuple[str, ...]:
    """Every string a question may not contain: the tokenizer's added tokens (chat specials such as <|im_end|>,
    the action tokens) and the action tags, whether or not they are single tokens of this tokenizer."""
    added = [t.content for t in tok.added_tokens_decoder.values() if t.content.strip()]
    return tuple(sorted(set(added) | set(ACTION_MARKUP)))


def question_problem(question: str, max_chars: int, markup: Sequence[str]) -> str | None:
    """Why `question` (already stripped) cannot be asked, or None."""
    if not question:
        return "the question is empty"
    if len(question) > max_chars:
        return f"the question has {len(question)} characters; at most {max_chars} (serving.max_question_chars)"
    forged = [m for m in markup if m in question]
    if forged:
        first = min(forged, key=lambda m: (question.index(m), -len(m)))  # as it reads
        return f"the question contains the chat or tool markup {first!r}, which only the model and the tools may write"
    return None


class KnownWords:
    """Whether a word is in the tokenizer's vocabulary: it writes the word as one token, alone or after a space.

    The tiny model's vocabulary is learned from its synthetic world, so a real-world question is mostly unknown words.
    """

    def __init__(self, tok):
        self.tok, self._seen = tok, {}

    def __call__(self, word: str) -> bool:
        if word not in self._seen:
            self._seen[word] = any(len(self.tok.encode(v, add_special_tokens=False)) == 1 for v in (word, " " + word))
        return self._seen[word]


def reading_notice(question: str, known: KnownWords, share: float) -> str | None:
    """A plain warning when at least `share` of the question's words are outside the vocabulary, else None."""
    words = WORD.findall(question)
    unknown = [w for w in words if not known(w)]
    if not words or len(unknown) < share * len(words):
        return None
    shown = ", ".join(dict.fromkeys(unknown[:8]))
    return (f"{len(unknown)} of the {len(words)} words of this question ({shown}) are not in the model's vocabulary: "
            "it cannot read this question, so its answer is not to be trusted")  # fmt: skip


@dataclass(frozen=True)
class Reply:
    """One question's episode and the agent's answer: the episode's own, or under evaluate.reread the one it gives
    reading every passage the episode showed (the served agent answers as the evaluated one did)."""

    trajectory: Trajectory
    answer: str | None
    read_again: int | None = None  # passages read again; None when the episode's own answer is the answer

    @property
    def episode_answer(self) -> str | None:
        return self.trajectory.episode.answer


def run_episodes(model, tok, backend, cfg: Config, questions: Sequence[str], corpus: str,
                 progress: Callable[[int, int], None] | None = None) -> tuple[list[Reply], RolloutStats]:  # fmt: skip
    """Greedy episodes of the agent on `questions` over `backend`, as one rollout batch, then its reading pass
    under evaluate.reread: (replies, stats). `model` is a transformers model or a `VllmEngine`; the prompts carry
    the forced first search, where the agent has one.

    `progress` is called after every decode step; an exception it raises stops the generation."""
    import torch

    from components.evaluation.answers import read_answer
    from components.model.loading import rollout_autocast
    from components.rollout.engine import RolloutStats
    from components.rollout.episode_setup import episode_setup
    from components.rollout.reread import reading_pass

    qs = [Question(id=f"ask-{i}", question=q, answers=[], dataset="ask", split="ask", corpus=corpus)
          for i, q in enumerate(questions)]  # fmt: skip
    generation_config = getattr(model, "generation_config", None)
    episodes = episode_setup(tok, backend, qs, cfg.agent, cfg.retrieval.top_k, generation_config)
    stats = RolloutStats()
    with torch.no_grad(), rollout_autocast(cfg, model):
        trajs = episodes.rollout(model, qs, temperature=0.0, stats=stats, progress=progress, engine=cfg.rollout)
        if not cfg.evaluate.reread:
            return [Reply(t, t.episode.answer) for t in trajs], stats
        reading = reading_pass(tok, backend, trajs, cfg.agent, cfg.retrieval.top_k, generation_config)
        reads = reading.rollout(model, stats=stats, progress=progress, engine=cfg.rollout)
    stops = reading.setup.chat.stop_texts
    return [Reply(t, read_answer(r, stops), len(t.episode.read)) for t, r in zip(trajs, reads)], stats
