"""The synthetic multi-hop world: deterministic, disjoint splits, correct k-hop chains, a real counterfactual."""

from __future__ import annotations

import pytest

from components.config import SyntheticConfig
from components.data.schema import DataError
from components.data.synthetic import SPLITS, generate_world, words

CFG = SyntheticConfig(n_entities=60, n_relations=4, hops=2, n_train=150, n_dev=30, n_test=30)


def test_same_seed_same_world_other_seed_other_world():
    a, b = generate_world(CFG), generate_world(CFG)
    assert a.passages() == b.passages()
    assert all(a.questions(s) == b.questions(s) for s in SPLITS)
    c = generate_world(CFG.model_copy(update={"seed": CFG.seed + 1}))
    assert c.passages() != a.passages()


def test_names_unique_and_passages_one_fact_each():
    w = generate_world(CFG)
    assert len(set(w.entities)) == len(w.entities) == CFG.n_entities
    ps = w.passages()
    assert len(ps) == len({p.id for p in ps}) == CFG.n_entities * CFG.n_relations
    for p in ps[:20]:
        subject, relation = p.id.split(":")[1:]
        assert p.title == subject and p.corpus == "synthetic"
        assert p.text == f"{subject}'s {relation} is {w.facts[(relation, subject)]}."


def test_splits_sized_and_disjoint_in_questions_and_start_entities():
    w = generate_world(CFG)
    qs = {s: w.questions(s) for s in SPLITS}
    assert [len(qs[s]) for s in SPLITS] == [CFG.n_train, CFG.n_dev, CFG.n_test]
    for s in SPLITS:
        assert len({q.id for q in qs[s]}) == len(qs[s])
        assert all(q.split == s and q.dataset == q.corpus == "synthetic" for q in qs[s])
    starts = {s: {q.id.split(":")[1] for q in qs[s]} for s in SPLITS}
    texts = {s: {q.question for q in qs[s]} for s in SPLITS}
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        assert not starts[a] & starts[b]
        assert not texts[a] & texts[b]


def test_following_the_supporting_passages_reaches_the_answer():
    w = generate_world(CFG)
    by_id = {p.id: p for p in w.passages()}
    for q in w.questions("dev"):
        assert len(q.supporting_ids) == CFG.hops
        entity = q.id.split(":")[1]
        assert entity in q.question
        seen = [entity]
        for pid in q.supporting_ids:
            p = by_id[pid]
            assert p.title == entity  # each hop's passage is about the entity the previous hop found
            entity = p.text.rsplit(" is ", 1)[1].rstrip(".")
            seen.append(entity)
        assert [entity] == q.answers
        assert len(set(seen)) == len(seen)  # no loops: k distinct searches are needed
        for hidden in seen[1:]:  # intermediate entities and the answer are never named in the question
            assert hidden not in words(q.question)


def test_mixed_hops():
    w = generate_world(CFG.model_copy(update={"hops": 3, "min_hops": 1}))
    lengths = {len(q.supporting_ids) for q in w.questions("train")}
    assert lengths == {1, 2, 3}


def test_counterfactual_redraws_every_fact():
    w, cf = generate_world(CFG), generate_world(CFG, counterfactual=True)
    assert cf.entities == w.entities and cf.relations == w.relations and cf.start_pools == w.start_pools
    assert all(cf.facts[k] != w.facts[k] for k in w.facts)
    assert {p.corpus for p in cf.passages()} == {"synthetic_cf"}
    assert not {p.id for p in cf.passages()} & {p.id for p in w.passages()}
    dev = cf.questions("dev")
    assert {q.dataset for q in dev} == {q.corpus for q in dev} == {"synthetic_cf"}
    cf_ids = {p.id for p in cf.passages()}
    assert all(set(q.supporting_ids) <= cf_ids for q in dev)
    # the same question asked of both worlds gets the world's own answer
    start, chain = cf.chains["dev"][0]
    assert cf.follow(start, chain)[1:] != w.follow(start, chain)[1:]


def test_vocabulary_covers_every_text():
    w = generate_world(CFG)
    vocab = set(w.vocabulary())
    texts = [p.text for p in w.passages()] + [q.question for s in SPLITS for q in w.questions(s)]
    assert {t for text in texts for t in words(text)} <= vocab
    assert set(w.relations) <= vocab and set(w.entities) <= vocab


def test_impossible_sizes_fail_naming_the_param():
    with pytest.raises(DataError, match="cannot draw 60 distinct train questions.*lower n_train"):
        generate_world(SyntheticConfig(n_entities=30, n_relations=1, hops=1, n_train=60, n_dev=20, n_test=20))
    with pytest.raises(DataError, match="min_hops"):
        generate_world(CFG.model_copy(update={"min_hops": 3}))
