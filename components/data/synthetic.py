"""Seeded synthetic multi-hop world: entities, functional relations, one-fact passages, k-hop questions.

A fact is `relation(subject) = object`, written as one passage "<Subject>'s <relation> is <Object>." whose title is
the subject. A k-hop question names only the start entity and the relation chain:
"Who is the mentor of the rival of Bavo?" = mentor(rival(Bavo)). Every entity on the chain is distinct, so each
intermediate entity appears only in the passage one search returns, and answering takes exactly k searches.

Splits draw their start entities from disjoint pools, so no question (or start entity) is shared between
train/dev/test. The counterfactual world keeps the entities and relations but redraws every fact, so its answers
can only come from search, never from what a model memorised on the factual world.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from components.config import SyntheticConfig
from components.data.schema import DataError, Passage, Question

RELATIONS = (
    "mentor", "rival", "friend", "neighbor", "partner", "teacher", "employer", "cousin",
    "coach", "doctor", "landlord", "editor", "patron", "heir", "ally", "captain",
)  # fmt: skip
FACT_TEMPLATE = "{subject}'s {relation} is {object}."
QUESTION_PREFIX = "Who is the "  # then "<r_k> of the <r_k-1> of ... <start>?"
SPLITS = ("train", "dev", "test")
FACTUAL, COUNTERFACTUAL = "synthetic", "synthetic_cf"

_ONSETS = "b d f g k l m n p r s t v z".split()
_VOWELS = "a e i o u".split()
# Word-level pieces: capitalised names, lowercase words, the possessive and punctuation.
WORD_RE = re.compile(r"[A-Za-z]+|'s|[^\sA-Za-z]")


def words(text: str) -> list[str]:
    """Split a synthetic text into the word-level pieces `World.vocabulary()` covers."""
    return WORD_RE.findall(text)


def fact_text(subject: str, relation: str, obj: str) -> str:
    return FACT_TEMPLATE.format(subject=subject, relation=relation, object=obj)


def question_text(start: str, chain: tuple[str, ...]) -> str:
    """chain is in hop order: chain[0] is applied to `start` first, the last relation is asked about."""
    return QUESTION_PREFIX + " of the ".join(reversed(chain)) + f" of {start}?"


def template_words() -> list[str]:
    """Every non-entity, non-relation piece the templates produce."""
    return sorted(set(words(fact_text("A", "r", "B")) + words(question_text("A", ("r", "r")))) - {"A", "B", "r"})


def make_names(n: int, rng: random.Random) -> list[str]:
    """n unique pronounceable names of 2-3 consonant-vowel syllables, e.g. 'Bavo', 'Kelitu'."""
    names: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        sylls = rng.choice((2, 2, 3))
        name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(sylls)).capitalize()
        if name not in names:
            names.add(name)
            out.append(name)
    return out


@dataclass(frozen=True)
class World:
    """One synthetic world. `facts[(relation, subject)] = object`; every relation is a function."""

    name: str  # dataset and corpus name: "synthetic" or "synthetic_cf"
    entities: list[str]
    relations: list[str]
    facts: dict[tuple[str, str], str]
    start_pools: dict[str, list[str]]  # split -> start entities (disjoint)
    chains: dict[str, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)  # split -> (start, chain)

    def passage_id(self, subject: str, relation: str) -> str:
        return f"{self.name}:{subject}:{relation}"

    def passages(self) -> list[Passage]:
        return [
            Passage(self.passage_id(s, r), s, fact_text(s, r, self.facts[(r, s)]), corpus=self.name)
            for s in self.entities
            for r in self.relations
        ]

    def follow(self, start: str, chain: tuple[str, ...]) -> list[str]:
        """Entities along the chain, start first, answer last."""
        path = [start]
        for r in chain:
            path.append(self.facts[(r, path[-1])])
        return path

    def question(self, start: str, chain: tuple[str, ...], split: str) -> Question:
        path = self.follow(start, chain)
        return Question(
            id=f"{self.name}:{start}:{'.'.join(chain)}",
            question=question_text(start, chain),
            answers=[path[-1]],
            dataset=self.name,
            split=split,
            supporting_ids=[self.passage_id(s, r) for s, r in zip(path, chain)],
            corpus=self.name,
        )

    def questions(self, split: str) -> list[Question]:
        if split not in self.chains:
            raise KeyError(f"{self.name}: unknown split {split!r}; have {sorted(self.chains)}")
        return [self.question(s, c, split) for s, c in self.chains[split]]

    def vocabulary(self) -> list[str]:
        """Every word-level piece of every passage and question (see `words`)."""
        return sorted(set(self.entities) | set(self.relations) | set(template_words()))


def _draw_facts(entities: list[str], relations: list[str], rng: random.Random,
                avoid: dict[tuple[str, str], str] | None = None) -> dict[tuple[str, str], str]:  # fmt: skip
    """relation(subject) = a random other entity (and, given `avoid`, a different one than there)."""
    facts = {}
    for r in relations:
        for s in entities:
            while True:
                o = rng.choice(entities)
                if o != s and (avoid is None or o != avoid[(r, s)]):
                    break
            facts[(r, s)] = o
    return facts


def _split_pools(entities: list[str], sizes: dict[str, int], rng: random.Random) -> dict[str, list[str]]:
    """Partition shuffled entities into start pools proportional to the split sizes (each at least one)."""
    shuffled = entities[:]
    rng.shuffle(shuffled)
    total = sum(sizes.values())
    counts = {s: max(1, round(len(shuffled) * n / total)) for s, n in sizes.items()}
    counts["train"] = len(shuffled) - counts["dev"] - counts["test"]
    if counts["train"] < 1:
        raise DataError(f"data.synthetic.n_entities={len(entities)}: too few entities to give every split a start")
    pools, i = {}, 0
    for s in SPLITS:
        pools[s] = sorted(shuffled[i : i + counts[s]])
        i += counts[s]
    return pools


def _sample_chains(world: World, pool: list[str], n: int, hops: tuple[int, int], rng: random.Random,
                   split: str) -> list[tuple[str, tuple[str, ...]]]:  # fmt: skip
    """n distinct (start, chain) pairs from `pool` whose paths visit k+1 distinct entities."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    out = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise DataError(
                f"data.synthetic: cannot draw {n} distinct {split} questions from {len(pool)} start entities "
                f"and {len(world.relations)} relations; raise n_entities/n_relations/hops or lower n_{split}"
            )
        start = rng.choice(pool)
        chain = tuple(rng.choice(world.relations) for _ in range(rng.randint(*hops)))
        if (start, chain) in seen:
            continue
        path = world.follow(start, chain)
        if len(set(path)) != len(path):  # a loop would let fewer searches (or none) reach the answer
            continue
        seen.add((start, chain))
        out.append((start, chain))
    return out


def generate_world(cfg: SyntheticConfig, counterfactual: bool = False) -> World:
    """The world for `cfg.seed`; with `counterfactual`, the same entities, relations and splits, every fact redrawn."""
    if cfg.n_relations > len(RELATIONS):
        raise DataError(f"data.synthetic.n_relations={cfg.n_relations}: at most {len(RELATIONS)} relations")
    if cfg.min_hops is not None and cfg.min_hops > cfg.hops:
        raise DataError(f"data.synthetic.min_hops={cfg.min_hops} is above data.synthetic.hops={cfg.hops}")
    rng = random.Random(f"agentr1-synthetic:{cfg.seed}")
    entities = make_names(cfg.n_entities, rng)
    relations = list(RELATIONS[: cfg.n_relations])
    facts = _draw_facts(entities, relations, rng)
    pools = _split_pools(entities, {"train": cfg.n_train, "dev": cfg.n_dev, "test": cfg.n_test}, rng)
    name = FACTUAL
    if counterfactual:
        facts = _draw_facts(entities, relations, random.Random(f"agentr1-synthetic-cf:{cfg.seed}"), avoid=facts)
        name = COUNTERFACTUAL
    world = World(name, entities, relations, facts, pools)
    hops = (cfg.min_hops or cfg.hops, cfg.hops)
    for split, n in (("train", cfg.n_train), ("dev", cfg.n_dev), ("test", cfg.n_test)):
        rng_q = random.Random(f"agentr1-{name}-questions:{cfg.seed}:{split}")
        world.chains[split] = _sample_chains(world, pools[split], n, hops, rng_q, split)
    return world
