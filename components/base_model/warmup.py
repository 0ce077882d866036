"""Format warm-up of a real model: a short SFT on the agent's syntax, not its content, that shows no gold label.

Each transcript is a training question, then 1 to `agent.max_turns - 1` searches (0 to max_turns - 1 after the
environment's own first search, `agent.force_first_search`) with their results, then an answer. Only format
tokens are targets: the tags, the tool-call JSON scaffold and each turn's end-of-turn token. The answer's content
and the content of every query but the question itself are not (target 0): the transcripts carry no preference
for any answer or query. The first query is the question; later queries and the answer are names drawn from the
results shown so far (the answer from the last results, never a name the question holds). With
`model.warmup.content: drawn` that drawn text is taught too, and each later query is a
drawn name plus a word of the question: the transcripts teach copying a name from the results, never which one.
With `model.warmup.queries: linked` the name is one a passage about an entity already asked about mentions, and the
word one of the question's relation words: a hop's shape (follow a link, ask for a relation), on clean passages.

No transcript shows a gold answer or a gold supporting passage's title, except the names the question itself
contains: the results shown are the top hits that are not supporting passages and mention none of those strings.

The warm-up stops by measurement (`probe`): every `model.warmup.probe_every` steps, episodes sampled at the
training temperature on held-out training questions through the real rollout. It stops once the valid-call and
answered rates pass their thresholds; when the entropy at content tokens (queries and answers, teacher-forced on
held-out transcripts: format tokens are meant to become deterministic) falls below `model.warmup.min_entropy`, it
goes back to the last probed weights above it; `model.warmup.steps` caps it.
"""

from __future__ import annotations

import json
import random
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from components.agent.observation import format_entry, format_hits, shown_results, with_first_read
from components.agent.parser import ANSWER_CLOSE, ANSWER_OPEN, call_text
from components.config import Config
from components.data.schema import Question
from components.model.loading import autocast, freeze_below, rollout_autocast
from components.base_model.priming import Sequence_, sft_step
from components.retrieval.base import Hit, SearchBackend
from components.rollout.chat import ChatFormat
from components.rollout.content import content_entropy
from components.rollout.engine import RolloutStats
from components.rollout.episode_setup import EpisodeSetup, question_turn_prompt
from components.rollout.trajectory import Trajectory, transcript

FUNCTION_WORDS = frozenset(
    "a an the of in on at to for by with from and or is was are were be been who whom whose what which when where "
    "why how did does do has have had that this these those it its as".split()
)
CANDIDATES = 4  # hits fetched per shown hit, so that top_k clean ones remain after the gold filter
_NAME = re.compile(r"[A-Z][\w-]*(?:[ '][A-Z][\w-]*)*")  # a capitalised name in a passage (no possessive 's)


# --- what a transcript may show ------------------------------------------------------------------------------


def _words(text: str) -> str:
    """Lower-cased words separated by single spaces, padded with one: whole-word containment is `in`."""
    return " " + " ".join(re.sub(r"[^\w]+", " ", text.lower()).split()) + " "


def mentions(text: str, names: Sequence[str]) -> bool:
    """Whether `text` contains any of `names` as whole words (case and punctuation ignored)."""
    haystack = _words(text)
    return any(w.strip() and w in haystack for w in map(_words, names))


def gold_strings(q: Question, titles: dict[str, str]) -> list[str]:
    """The gold answers and the titles of the supporting passages (`titles`: passage id -> title) that the
    question does not name itself: what a warm-up transcript must never show."""
    golds = list(q.answers) + [titles[i] for i in q.supporting_ids if i in titles]
    return sorted({g for g in golds if g.strip() and not mentions(q.question, [g])})


def clean_hits(hits: Sequence[Hit], q: Question, banned: Sequence[str], k: int) -> list[Hit]:
    """The first `k` hits that are not supporting passages and mention no banned string."""
    return [h for h in hits if h.id not in q.supporting_ids and not mentions(f"{h.title} {h.text}", banned)][:k]


def names_in(hits: Sequence[Hit], banned: Sequence[str], cut: Callable[[str], str] | None = None) -> list[str]:
    """Titles and capitalised names of the hits as shown (`cut`: each text's cut), in order, none of them banned."""
    texts = [cut(h.text) if cut else h.text for h in hits]
    found = [h.title for h in hits] + [m.group() for t in texts for m in _NAME.finditer(t)]
    return [n for n in dict.fromkeys(found) if not mentions(n, banned)]


def keywords(question: str) -> list[str]:
    """The question's words that are not function words (all of them if none is left)."""
    words = re.findall(r"[\w'-]+", question)
    return [w for w in words if w.lower() not in FUNCTION_WORDS] or words


def relation_words(question: str) -> list[str]:
    """The question's keywords that are not capitalised (the relations, not the entities; all keywords if none)."""
    words = keywords(question)
    return [w for w in words if not w[0].isupper()] or words


def linked_names(hits: Sequence[Hit], asked: Sequence[str], banned: Sequence[str], cut: Callable[[str], str]) -> list[str]:
    """Names in the text of the hits whose title the question or an earlier query names, other than that title:
    the entities one link away from what was asked (a hop's shape, never its gold: the hits are clean)."""
    about = [h for h in hits if any(mentions(a, [h.title]) for a in asked)]
    return [n for h in about for n in names_in([h], banned, cut) if not mentions(n, [h.title])]


# --- transcripts ---------------------------------------------------------------------------------------------


def format_tokens(chat: ChatFormat, text: str, content: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """`text` tokenised as the rollout engine does, plus the end-of-turn token; target 1 on every token that
    overlaps none of the `content` character spans [start, end)."""
    enc = chat.tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
    targets = [int(not any(s < ce and cs < e for cs, ce in content)) for s, e in offsets]
    return ids + [chat.eos_id], targets + [1]


def call_turn(chat: ChatFormat, query: str, is_question: bool) -> tuple[list[int], list[int]]:
    """A search turn; the query's content is a target only when it is the question itself."""
    text, quoted = call_text(query), json.dumps(query)
    start = text.rindex(quoted) + 1  # the query is the call's last JSON string
    return format_tokens(chat, text, [] if is_question else [(start, start + len(quoted) - 2)])


def answer_turn(chat: ChatFormat, answer: str) -> tuple[list[int], list[int]]:
    """An answer turn; only the tags and the end of turn are targets."""
    return format_tokens(chat, ANSWER_OPEN + answer + ANSWER_CLOSE, [(len(ANSWER_OPEN), len(ANSWER_OPEN) + len(answer))])


@dataclass
class Transcript:
    question: Question
    seq: Sequence_
    content: list[int]  # positions of the untaught content tokens: queries other than the question, the answer


@dataclass
class _Draft:
    q: Question
    banned: list[str]
    searches: int  # model searches still to write
    ids: list[int]
    targets: list[int]
    names: list[str]
    queried: set[str]
    query: str  # the next search's query
    last: list[str] = field(default_factory=list)  # the names the last results showed
    linked: list[str] = field(default_factory=list)  # names shown in a passage about an entity asked about
    first: list[Hit] = field(default_factory=list)  # the environment's first search's results
    content: list[int] = field(default_factory=list)
    ok: bool = True

    def add_turn(self, ids: list[int], targets: list[int], teach_content: bool) -> None:
        self.content += [len(self.ids) + j for j, t in enumerate(targets) if not t]
        self.ids += ids
        self.targets += [1] * len(ids) if teach_content else targets

    def add_prompt(self, ids: Sequence[int]) -> None:
        self.ids += ids
        self.targets += [0] * len(ids)


def transcripts(questions: Sequence[Question], backend: SearchBackend, chat: ChatFormat, cfg: Config,
                titles: dict[str, str], rng: random.Random) -> list[Transcript]:  # fmt: skip
    """A transcript for each question whose every search keeps at least one clean hit and whose transcript fits
    in agent.max_total_tokens; the searches of all transcripts run in batches, turn by turn."""
    agent, top_k = cfg.agent, cfg.retrieval.top_k
    cut = chat.cutter(agent.passage_max_tokens)
    forced = agent.force_first_search
    teach = cfg.model.warmup.content == "drawn"
    most = max(0, agent.max_turns - 1)
    drafts = []
    for q in questions:
        prompt = chat.prompt_ids(q.question)
        n = rng.randint(0 if forced else min(1, most), most)
        drafts.append(_Draft(q, gold_strings(q, titles), n + forced, prompt, [0] * len(prompt), [], set(), q.question))
    for turn in range(most + forced):
        todo = [d for d in drafts if d.ok and d.searches > 0]
        if not todo:
            break
        by_env = forced and turn == 0  # the environment's first search, else one the model writes
        k = top_k if by_env else agent.own_top_k(top_k)
        for d, hits in zip(todo, _search(backend, todo, top_k * CANDIDATES)):
            shown = clean_hits(hits, d.q, d.banned, k)
            d.ok = bool(shown)
            if d.ok:
                _write_search(d, shown, chat, cfg, cut, by_env=by_env)
                _next_query(d, shown, cfg, cut, rng)
    out = []
    for d in drafts:
        # a name the last results show, neither a gold one nor one the question names
        answers = [n for n in d.last if not mentions(n, d.q.answers) and not mentions(d.q.question, [n])]
        if not d.ok or not answers:
            continue
        d.add_turn(*answer_turn(chat, rng.choice(answers)), teach)
        if len(d.ids) <= agent.max_total_tokens:
            out.append(Transcript(d.q, Sequence_(d.ids, d.targets), d.content))
    return out


def _write_search(d: _Draft, shown: list[Hit], chat: ChatFormat, cfg: Config, cut: Callable[[str], str],
                  by_env: bool) -> None:  # fmt: skip
    """A search and its results: the environment's forced first search is all prompt, the model's call is taught."""
    results = format_hits(shown, cut)
    if by_env:
        d.first = shown
    elif cfg.agent.observation_first_read and d.first:  # as ToolEnv shows an own search's results
        results = with_first_read([format_entry(h, cut) for h in shown], [h.id for h in shown],
                                  [format_entry(h, cut) for h in d.first], [h.id for h in d.first])
    if by_env and cfg.agent.first_search_at == "question_turn":  # the results above the question
        d.ids, d.targets = [], []
        d.add_prompt(question_turn_prompt(chat, d.q.question, results))
        return
    ids, targets = call_turn(chat, d.query, d.query == d.q.question)
    if by_env:  # a finished call
        d.add_prompt(ids)
    else:
        d.add_turn(ids, targets, cfg.model.warmup.content == "drawn")
    d.add_prompt(list(chat.insert_ids(shown_results(results, d.q.question, cfg.agent), True)))


def _next_query(d: _Draft, shown: list[Hit], cfg: Config, cut: Callable[[str], str], rng: random.Random) -> None:
    """Read the names the results show, then pick the next search: a name not yet searched (under `linked`, one
    shown in a passage about an entity asked about), with a word of the question when content is drawn."""
    linked = cfg.model.warmup.queries == "linked"
    d.queried.add(d.query)
    d.last = names_in(shown, d.banned, cut)
    d.names += [n for n in d.last if n not in d.names]
    if linked:
        d.linked += [n for n in linked_names(shown, [d.q.question, *d.queried], d.banned, cut) if n not in d.linked]
    d.searches -= 1
    pool = [n for n in d.linked if n not in d.queried]  # empty unless linked
    fresh = pool or [n for n in d.names if n not in d.queried]
    if fresh:
        name = rng.choice(fresh)
        d.queried.add(name)
        words = (relation_words if linked else keywords)(d.q.question)
        d.query = f"{name} {rng.choice(words)}" if cfg.model.warmup.content == "drawn" else name


def _search(backend: SearchBackend, drafts: Sequence[_Draft], k: int) -> list[list[Hit]]:
    by_corpus: dict[str, list[int]] = {}
    for i, d in enumerate(drafts):
        by_corpus.setdefault(d.q.corpus, []).append(i)
    out: list[list[Hit]] = [[] for _ in drafts]
    for corpus, idx in by_corpus.items():
        for i, hits in zip(idx, backend.search(corpus, [drafts[i].query for i in idx], k)):
            out[i] = list(hits)
    return out


# --- the measured stop ---------------------------------------------------------------------------------------


@torch.no_grad()
def sample_episodes(model, episodes: EpisodeSetup, questions: Sequence[Question], samples: int, cfg: Config,
                    seed: int, stats: RolloutStats | None = None) -> list[Trajectory]:  # fmt: skip
    """`samples` episodes of each question, in order, at train.temperature through the real rollout (seeded)."""
    group = [q for q in questions for _ in range(samples)]
    gen = torch.Generator().manual_seed(seed)
    with rollout_autocast(cfg, model):
        return episodes.rollout(model, group, temperature=cfg.train.temperature, generator=gen, stats=stats)


@torch.no_grad()
def probe(model, episodes: EpisodeSetup, questions: Sequence[Question], cfg: Config, seed: int,
          shown: list[str] | None = None) -> dict[str, float]:  # fmt: skip
    """Episodes sampled at train.temperature through the real rollout (each question `model.warmup.probe_samples`
    times): EM, F1, answered rate, valid-call rate, valid searches per episode, sampling entropy (nats/token) of
    every sampled token and of the content tokens (queries, answers).
    `shown` receives a readable transcript of each question's first episode."""
    chat = episodes.chat
    stats = RolloutStats()
    trajs = sample_episodes(model, episodes, questions, cfg.model.warmup.probe_samples, cfg, seed, stats)
    eps = [t.episode for t in trajs]
    if shown is not None:
        shown += [transcript(t) for t in trajs[:: cfg.model.warmup.probe_samples]]
    n, calls = len(eps), sum(e.n_calls for e in eps)
    return {
        "em": sum(e.em for e in eps) / n,
        "f1": sum(e.f1 for e in eps) / n,
        "answered": sum(e.answer is not None for e in eps) / n,
        "valid_calls": sum(e.n_valid_calls for e in eps) / calls if calls else 1.0,
        "searches": sum(e.n_valid_calls for e in eps) / n,
        "entropy": stats.entropy,
        "content_entropy": content_entropy(trajs, chat),
    }


@torch.no_grad()
def content_entropy_forced(model, data: Sequence[Transcript], pad_id: int, temperature: float,
                           micro: int = 4) -> float:  # fmt: skip
    """The entropy (nats) of the model's next-token distribution at `temperature` where the transcripts' content
    tokens are predicted (the answer's text, queries other than the question), teacher-forced: what the model
    would sample there, measurable before it writes the format on its own."""
    device = next(model.parameters()).device
    head, total, n = model.get_output_embeddings(), 0.0, 0
    for i in range(0, len(data), micro):
        part = data[i : i + micro]
        width = max(len(t.seq.ids) for t in part)
        ids = torch.full((len(part), width), pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for r, t in enumerate(part):
            ids[r, : len(t.seq.ids)], attn[r, : len(t.seq.ids)] = torch.tensor(t.seq.ids), 1
        hidden = model.base_model(input_ids=ids.to(device), attention_mask=attn.to(device)).last_hidden_state
        rows = torch.tensor([r for r, t in enumerate(part) for _ in t.content], dtype=torch.long)
        cols = torch.tensor([p - 1 for t in part for p in t.content], dtype=torch.long)
        logp = torch.log_softmax(head(hidden[rows, cols]).float() / temperature, -1)
        total, n = total - float((logp.exp() * logp).sum()), n + len(rows)
    return total / n if n else 0.0


def passed(scores: dict[str, float], cfg: Config) -> bool:
    wc = cfg.model.warmup
    return scores["valid_calls"] >= wc.min_valid_calls and scores["answered"] >= wc.min_answered


@dataclass
class WarmupResult:
    before: dict[str, float]  # the probe of the model it started from
    after: dict[str, float]  # the probe of the weights it kept
    steps: int  # steps of the kept weights
    stop: str  # "passed" | "entropy_floor" | "step_cap"
    losses: list[float]
    seconds: float

    def metrics(self, n_transcripts: int) -> dict[str, float]:
        tail = self.losses[-10:]
        return {"warmup_steps": float(self.steps), "warmup_transcripts": float(n_transcripts),
                "warmup_first_loss": self.losses[0] if self.losses else 0.0,
                "warmup_loss": sum(tail) / max(1, len(tail)), "warmup_seconds": self.seconds,
                "warmup_passed": float(self.stop == "passed"),
                **{f"warmup_before_{k}": v for k, v in self.before.items()},
                **{f"warmup_after_{k}": v for k, v in self.after.items()}}  # fmt: skip


def warm_up(model, data: list[Sequence_], cfg: Config, pad_id: int, measure: Callable[[int], dict[str, float]],
            log=None) -> WarmupResult:  # fmt: skip
    """AdamW steps of next-token loss on the transcripts' format tokens until `measure(step)` passes (see the
    module's docstring), at most `model.warmup.steps`."""
    wc = cfg.model.warmup
    t0 = time.perf_counter()
    params = freeze_below(model, cfg.train.trainable_layers)
    opt = torch.optim.AdamW(params, lr=wc.lr)
    rng = random.Random(f"agentr1-warmup:{cfg.project.seed}")

    def scored(step: int) -> dict[str, float]:
        scores = measure(step)
        if log is not None:
            log({f"warmup_probe_{k}": v for k, v in scores.items()}, step=step)
        return scores

    before = scores = scored(0)
    kept = (0, scores, [p.detach().clone() for p in params])  # the last probed weights above the entropy floor
    losses: list[float] = []
    stop = "passed" if passed(scores, cfg) else "step_cap"
    bar = tqdm(range(1, wc.steps + 1), desc="format warm-up", disable=None)
    for step in bar if stop != "passed" else ():
        model.train()
        batch = rng.sample(data, min(wc.batch_size, len(data)))
        device = next(model.parameters()).device
        losses.append(sft_step(model, opt, params, batch, pad_id, device, autocast(cfg, device), wc.micro_batch_size,
                               cfg.train.max_grad_norm))  # fmt: skip
        if log is not None:
            log({"warmup_loss": losses[-1]}, step=step)
        if step % wc.probe_every and step != wc.steps:
            continue
        scores = scored(step)
        bar.set_postfix(valid=f"{scores['valid_calls']:.2f}", answered=f"{scores['answered']:.2f}",
                        content_entropy=f"{scores['content_entropy_forced']:.2f}")  # fmt: skip
        if scores["content_entropy_forced"] < wc.min_entropy:
            stop = "entropy_floor"
            break
        kept = (step, scores, [p.detach().clone() for p in params])
        if passed(scores, cfg):
            stop = "passed"
            break
    steps, after, weights = kept
    with torch.no_grad():
        for p, w in zip(params, weights):
            p.copy_(w)
    if stop != "passed":
        warnings.warn(f"model.warmup: stopped by {stop} at step {steps} with valid_calls={after['valid_calls']:.2f}, "
                      f"answered={after['answered']:.2f}, content_entropy_forced={after['content_entropy_forced']:.3f} (thresholds "
                      f"{wc.min_valid_calls}, {wc.min_answered}, floor {wc.min_entropy})",
                      stacklevel=2)  # fmt: skip
    model.requires_grad_(True)
    model.eval()
    return WarmupResult(before, after, steps, stop, losses, time.perf_counter() - t0)
