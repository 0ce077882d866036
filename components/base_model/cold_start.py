"""Cold start (DGPO; Search-R1 practice): SFT on transcripts that walk each train question's gold path, in the
agent's own chat and tool format, before the format warm-up and RL.

A transcript is the episode a scripted policy plays through the real environment (ToolEnv with the search tool on
the configured retrieval backend over the prepared corpus): one search per hop of the gold path, then
`<answer>gold answer</answer>`. Its observations are therefore exactly what the environment shows for those
queries; the gold passage is never placed in them by hand. The path (`gold_path`) is the loader's annotation
(MuSiQue's decomposition, 2Wiki's evidences: `Question.hops`) or, for HotpotQA, the two supporting passages in
bridge order: the question first, then the title of the passage the first one (or the question) names.

A transcript is kept only when it is honest:
- every hop's gold passage is among the hits of its query (a hop whose gold passage an earlier search already
  showed is not searched again, unless `model.warmup.cold_start_hops: all`; no query is run twice);
- every name a query holds (capitalised words, numbers) is in the question or in an earlier observation;
- the answer written is a gold answer shown in the question or an observation ("yes"/"no" always);
- no observation shows a held-out passage (one supporting a question of another split than train);
- its searches fit agent.max_turns - 1 and all of it fits agent.max_total_tokens.

`model.warmup.cold_start_first_read` says what a transcript does when the forced first read already shows a gold
answer (not yes/no, not named in the question): walk the path as any other, answer at once as naive RAG does, or
read it back: search the path's other hops by name, not the answer's, then answer from that first read, so that the
answer is not always in the last observation.

With `model.warmup.cold_start_balance_yes_no` as many transcripts answer "yes" as "no" (2Wiki's train split answers
"no" 102 times to 28 "yes"), so that the cold start teaches no answer to a comparison before reading.

It is a Trajectory as the rollout records it: action mask 1 on the model's turns (the calls and the answer, each
with its end-of-turn token), 0 on the prompt and on the environment's insertions.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from components.agent.parser import answer_text, call_text
from components.config import Config
from components.data.schema import Passage, Question
from components.data.yes_no import YES_NO, balance_yes_no, yes_or_no
from components.model.loading import autocast, freeze_below
from components.base_model.priming import Sequence_, sft_step
from components.base_model.warmup import _NAME, FUNCTION_WORDS, mentions
from components.retrieval.base import SearchBackend
from components.rollout.chat import ChatFormat
from components.rollout.episode_setup import EpisodeSetup, make_env
from components.rollout.trajectory import Trajectory

_NUMBER = re.compile(r"\d+")
_PAREN = re.compile(r"\s*\([^)]*\)$")  # a title's disambiguation: "Lilu (mythology)"


# --- the gold path -------------------------------------------------------------------------------------------


def gold_path(q: Question, passages: dict[str, Passage]) -> list[tuple[str, str]]:
    """(query, gold passage id) per hop; [] when the question has no usable path."""
    if q.hops:
        return list(zip(q.hops, q.supporting_ids))
    if len(q.supporting_ids) != 2 or any(i not in passages for i in q.supporting_ids):
        return []
    a, b = (passages[i] for i in q.supporting_ids)
    # hop 1 is the passage the question names (either, when it names both or neither); hop 2 is reached by name
    orders = sorted([(a, b), (b, a)], key=lambda ab: not _named_as(q.question, ab[0].title))
    for first, second in orders:
        name = _named_as(f"{q.question} {first.text}", second.title)
        if name:
            return [(q.question, first.id), (name, second.id)]
    return []


def _named_as(text: str, title: str) -> str | None:
    """The title as `text` names it: whole, or without its disambiguation; None when it does not."""
    short = _PAREN.sub("", title)
    return next((n for n in (title, short) if n.strip() and mentions(text, [n])), None)


def unshown_names(query: str, known: str) -> list[str]:
    """The names in `query` (capitalised words without leading function words, numbers) that `known` lacks."""
    names = []
    for m in _NAME.finditer(query):
        words = m.group().split()
        while words and words[0].lower() in FUNCTION_WORDS:
            words = words[1:]
        names += [" ".join(words)] if words else []
    names += _NUMBER.findall(query)
    return [n for n in names if not mentions(known, [n])]


def shown_answer(q: Question, known: str) -> str | None:
    return next((a for a in q.answers if yes_or_no(a) or mentions(known, [a])), None)


def first_read_answer(q: Question, first_read: str | None) -> str | None:
    """A gold answer the forced first read shows that is neither yes/no nor named in the question itself."""
    return next((a for a in q.answers if first_read and not yes_or_no(a) and not mentions(q.question, [a])
                 and mentions(first_read, [a])), None)  # fmt: skip


# --- transcripts ---------------------------------------------------------------------------------------------


@dataclass
class _Draft:
    traj: Trajectory
    path: list[tuple[str, str]]
    hop: int = 0  # the next hop of the path
    text: str = ""  # the turn being played
    searched: set[str] = field(default_factory=set)  # the queries already run (the environment's first one too)
    reason: str | None = None  # why it was dropped (a metric key: too_many_hops, gold_not_retrieved, ...)

    def known(self) -> str:
        ep = self.traj.episode
        return " ".join([ep.question.question, ep.first_search or ""] + [t for role, t in ep.log if role == "tool"])


def transcripts(questions: Sequence[Question], backend: SearchBackend, chat: ChatFormat, cfg: Config,
                passages: dict[str, Passage], held_out: set[str]) -> tuple[list[Trajectory], Counter]:  # fmt: skip
    """The honest transcripts of `questions` (see the module's docstring) and why the others were dropped;
    `held_out`: ids of the passages no transcript may show. Every turn's searches run as one batch."""
    agent = cfg.agent
    drops: Counter = Counter()
    candidates = []
    for q in questions:
        path = gold_path(q, passages) if q.split == "train" else []
        if not path:
            drops["no_path" if q.split == "train" else "not_train"] += 1
        elif len(path) > max(0, agent.max_turns - 1) + agent.force_first_search:
            drops["too_many_hops"] += 1
        else:
            candidates.append((q, path))
    if not candidates:
        return [], drops
    qs = [q for q, _ in candidates]
    episodes = EpisodeSetup(chat, make_env(backend, qs, agent, cfg.retrieval.top_k, chat), agent)
    env, prompts = episodes.env, episodes.prompts(qs)
    wc = cfg.model.warmup
    drafts = []
    for (q, path), prompt in zip(candidates, prompts):
        d = _Draft(Trajectory(env.reset(q), prompt_len=len(prompt)), path)
        d.traj.add(prompt, is_action=False)
        if d.traj.episode.first_search is not None:
            d.searched.add(q.question)
        if held_out & set(d.traj.episode.first_ids):  # the environment's own first search (force_first_search)
            d.reason = "held_out_shown"
        if wc.cold_start_first_read == "read_back":
            d.path = read_back_path(q, path, d.traj.episode.first_search, passages)
        drafts.append(d)
    every_hop, answer_first_read = wc.cold_start_hops == "all", wc.cold_start_first_read == "answer"
    while todo := [d for d in drafts if d.reason is None and not d.traj.episode.done]:
        playing = [d for d in todo if _next_turn(d, agent.max_turns, every_hop, answer_first_read)]
        if not playing:
            break
        results = env.step([d.traj.episode for d in playing], [d.text for d in playing])
        for d, res in zip(playing, results):
            turn = chat.encode(d.text) + [chat.eos_id]  # as the rollout engine records a turn that ended cleanly
            start = len(d.traj.input_ids)
            d.traj.add(turn, is_action=True)
            d.traj.turn_spans.append((start, len(d.traj.input_ids)))
            if res.done:
                continue
            shown = set(d.traj.episode.calls[-1][1])
            if held_out & shown:
                d.reason = "held_out_shown"
            elif d.path[d.hop][1] not in shown:
                d.reason = "gold_not_retrieved"
            else:
                d.traj.add(chat.insert_ids(res.observation, True), is_action=False)
                d.hop += 1
    out = []
    for d in drafts:
        if d.reason is None and d.traj.episode.answer is None:
            d.reason = "no_answer"
        if d.reason is None and len(d.traj.input_ids) > agent.max_total_tokens:
            d.reason = "too_long"
        if d.reason is None:
            out.append(d.traj)
        else:
            drops[d.reason] += 1
    return out, drops


def _next_turn(d: _Draft, max_turns: int, every_hop: bool, answer_first_read: bool) -> bool:
    """Set the draft's next turn: the next hop not yet shown (`every_hop`: not yet searched), else the answer; False
    (with a reason) if none is honest. `answer_first_read`: the first turn answers when the first read shows it."""
    ep, known = d.traj.episode, d.known()
    if answer_first_read and ep.turns == 0 and (answer := first_read_answer(ep.question, ep.first_search)):
        d.text = answer_text(answer)
        return True
    while d.hop < len(d.path) and d.path[d.hop][1] in ep.seen_ids and (not every_hop or d.path[d.hop][0] in d.searched):
        d.hop += 1  # an earlier search showed this hop's passage already (under every_hop: that hop's own query)
    if d.hop < len(d.path):
        query = d.path[d.hop][0]
        if ep.turns >= max_turns - 1:
            d.reason = "too_many_hops"
        elif unshown_names(query, known):
            d.reason = "unshown_name"
        elif query in d.searched:  # the same search again: what it shows did not hold this hop's passage
            d.reason = "gold_not_retrieved"
        else:
            d.text, d.searched = call_text(query), d.searched | {query}
        return d.reason is None
    answer = shown_answer(ep.question, known)
    if answer is None:
        d.reason = "answer_not_shown"
        return False
    d.text = answer_text(answer)
    return True


def read_back_path(q: Question, path: list[tuple[str, str]], first_read: str | None,
                   passages: dict[str, Passage]) -> list[tuple[str, str]]:
    """The path to walk when the first read shows a gold answer: the hops whose passage does not hold it, a hop whose
    query is the question itself searched by its passage's title. The path as it is when the first read shows no
    answer, when every hop's passage holds it, or when such a query would name what nothing has shown yet."""
    answer = first_read_answer(q, first_read)
    if answer is None:
        return path
    holds = lambda pid: pid in passages and mentions(passages[pid].text, [answer])  # noqa: E731
    other = [(_PAREN.sub("", passages[pid].title) if query == q.question and pid in passages else query, pid)
             for query, pid in path if not holds(pid)]  # fmt: skip
    known = f"{q.question} {first_read}"
    if not other or any(query == q.question or unshown_names(query, known) for query, _ in other):
        return path
    return other


def held_out_passages(questions: Sequence[Question]) -> set[str]:
    """Ids of the passages supporting a question of another split than train: no transcript may show them."""
    return {i for q in questions if q.split != "train" for i in q.supporting_ids}


# --- SFT -----------------------------------------------------------------------------------------------------


def sft(model, data: Sequence[Trajectory], cfg: Config, pad_id: int, steps: int, lr: float, name: str = "cold_start",
        log=None) -> list[float]:  # fmt: skip
    """`steps` AdamW steps at `lr` of the warm-up's masked next-token loss (priming.lm_step), the action mask as its
    targets: only the model's turns are learnt. Logs `<name>_loss`; returns the losses."""
    wc = cfg.model.warmup
    params = freeze_below(model, cfg.train.trainable_layers)
    opt = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(f"agentr1-{name.replace('_', '-')}:{cfg.project.seed}")
    seqs = [Sequence_(list(t.input_ids), list(t.action_mask)) for t in data]
    device = next(model.parameters()).device
    losses: list[float] = []
    model.train()
    for step in tqdm(range(1, steps + 1), desc=name.replace("_", " "), disable=None):
        batch = rng.sample(seqs, min(wc.batch_size, len(seqs)))
        losses.append(sft_step(model, opt, params, batch, pad_id, device, autocast(cfg, device), wc.micro_batch_size,
                               cfg.train.max_grad_norm))  # fmt: skip
        if log is not None:
            log({f"{name}_loss": losses[-1]}, step=step)
    model.requires_grad_(True)
    model.eval()
    return losses


def run(model, chat: ChatFormat, backend: SearchBackend, train: Sequence[Question], prepared: Sequence[Question],
        passages: dict[str, Passage], cfg: Config, tracker) -> dict[str, float]:  # fmt: skip
    """The transcripts of `train`, none showing a passage of a held-out question of `prepared`, then the SFT."""
    backend.reseed(0, 1)  # the retriever's ties as the transcripts saw them
    data, drops = transcripts(train, backend, chat, cfg, passages, held_out_passages(prepared))
    wc = cfg.model.warmup
    if wc.cold_start_balance_yes_no:
        rng = random.Random(f"agentr1-cold-start-yes-no:{cfg.project.seed}")
        data = balance_yes_no(data, lambda t: t.episode.answer, rng)
    if not data:
        raise ValueError(f"model.warmup.cold_start_steps: no honest cold-start transcript from {len(train)} train "
                         f"questions (dropped: {dict(drops)})")  # fmt: skip
    tracker.log_text("\n\n".join(chat.tok.decode(t.input_ids) for t in data[:8]), "cold_start/transcripts.txt")
    losses = sft(model, data, cfg, chat.pad_id, wc.cold_start_steps, wc.cold_start_lr, log=tracker.log_metrics)
    tail = losses[-10:]
    searches = sum(t.episode.n_calls for t in data) / len(data)
    answers = Counter(yes_or_no(t.episode.answer) for t in data)
    return {"cold_start_transcripts": float(len(data)), "cold_start_dropped": float(sum(drops.values())),
            **{f"cold_start_answered_{a}": float(answers[a]) for a in YES_NO},
            "cold_start_searches": searches, "cold_start_first_loss": losses[0],
            "cold_start_loss": sum(tail) / len(tail),
            **{f"cold_start_dropped/{k}": float(v) for k, v in drops.items()}}  # fmt: skip
