"""Each loader on the real sample files shipped in data/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.config import DatasetSpec
from components.data.loaders import LOADERS
from components.data.passages import PassageTable

DATA = Path(__file__).resolve().parents[1] / "data"


def load(name: str, fmt: str, path: str, **kw):
    spec = DatasetSpec(name=name, format=fmt, path=path, **kw)
    table = PassageTable()
    questions = LOADERS[fmt](spec, DATA / path, table)
    return questions, table.passages


def check_common(questions, passages, name: str, split: str = "dev"):
    ids = {p.id for p in passages}
    assert len(ids) == len(passages)
    assert len({q.id for q in questions}) == len(questions)
    for q in questions:
        assert q.id.startswith(f"{name}:") and q.dataset == name and q.split == split and q.corpus == "wiki"
        assert q.question.strip() and q.answers and all(a.strip() for a in q.answers)
        assert set(q.supporting_ids) <= ids
    assert all(p.id.startswith(f"{name}:") and p.title and p.text and p.corpus == "wiki" for p in passages)


def test_hotpotqa_ircot():
    qs, ps = load("hotpotqa", "hotpotqa_ircot", "hotpotqa/dev_distractor_ircot_300.jsonl")
    check_common(qs, ps, "hotpotqa")
    assert len(qs) == 300
    assert qs[0].id == "hotpotqa:5a8c7595554299585d9e36b6" and qs[0].answers == ["Chief of Protocol"]
    assert all(len(q.supporting_ids) >= 2 for q in qs)
    by_id = {p.id: p for p in ps}
    assert {by_id[i].title for i in qs[0].supporting_ids} == {"Shirley Temple", "Kiss and Tell (1945 film)"}
    assert len(ps) < 300 * 10  # paragraphs shared between questions are one passage


def test_hotpotqa_hf_supporting_are_the_supporting_fact_titles():
    qs, ps = load("hotpotqa_hf", "hotpotqa_hf", "hotpotqa/hotpot_dev_distractor_first100_hf.json")
    check_common(qs, ps, "hotpotqa_hf")
    assert len(qs) == 100 and qs[0].id == "hotpotqa_hf:0" and qs[0].answers == ["yes"]
    raw = json.loads((DATA / "hotpotqa/hotpot_dev_distractor_first100_hf.json").read_text())
    by_id = {p.id: p for p in ps}
    for q, r in zip(qs, raw):
        assert {by_id[i].title for i in q.supporting_ids} == set(r["supporting_facts"]["title"])
    assert by_id[qs[0].supporting_ids[0]].text.startswith("Scott Derrickson")


def test_musique_supporting_count_matches_decomposition():
    qs, ps = load("musique", "musique", "musique/musique_ans_train_100.json", split="train")
    check_common(qs, ps, "musique", "train")
    raw = json.loads((DATA / "musique/musique_ans_train_100.json").read_text())
    assert len(qs) == 100
    for q, r in zip(qs, raw):
        assert len(q.supporting_ids) == len(r["question_decomposition"])
        assert q.answers[0] == r["answer"] and set(r["answer_aliases"]) <= set(q.answers)


def test_2wiki_has_no_passages():
    qs, ps = load("2wikimultihopqa", "2wiki", "2wikimultihopqa/dev_500_qa_only.jsonl")
    check_common(qs, ps, "2wikimultihopqa")
    assert len(qs) == 500 and ps == [] and all(q.supporting_ids == [] for q in qs)
    assert qs[0].id == "2wikimultihopqa:1" and qs[0].answers == ["Tetisheri"]


@pytest.mark.parametrize("name", ["nq", "triviaqa", "popqa"])
def test_flashrag(name):
    qs, ps = load(name, "flashrag", f"{name}/test_1000_flashrag.jsonl", split="test")
    check_common(qs, ps, name, "test")
    assert len(qs) == 1000 and ps == []
    first = json.loads((DATA / f"{name}/test_1000_flashrag.jsonl").open().readline())
    assert qs[0].id == f"{name}:{first['id']}" and qs[0].answers == list(dict.fromkeys(first["golden_answers"]))


def test_kilt_paragraphs_become_passages():
    qs, ps = load("kilt", "kilt", "wiki/kilt_sample_100_pages.jsonl", min_chars=40)
    check_common(qs, ps, "kilt")
    assert qs == []
    assert 2000 < len(ps) < 5644  # ~5.6k raw paragraphs, headings and short lines dropped
    pages = (DATA / "wiki/kilt_sample_100_pages.jsonl").read_text().splitlines()
    assert len({p.title for p in ps}) == len(pages) == 99  # the "100 pages" sample holds 99
    assert all(len(p.text) >= 40 and "::::" not in p.text[:12] for p in ps)
    assert ps[0].id == "kilt:A:0" and ps[0].text.startswith("A (named")


def test_limit_and_cross_dataset_dedupe():
    table = PassageTable()
    ir = DatasetSpec(name="hotpotqa", format="hotpotqa_ircot", path="hotpotqa/dev_distractor_ircot_300.jsonl")
    hf = DatasetSpec(name="hotpotqa_hf", format="hotpotqa_hf", path="hotpotqa/hotpot_dev_distractor_first100_hf.json", limit=10)
    LOADERS[ir.format](ir, DATA / ir.path, table)
    n = len(table)
    qs = LOADERS[hf.format](hf, DATA / hf.path, table)
    assert len(qs) == 10
    # the HF layout repeats the same paragraphs (spacing aside): most supporting ids resolve to the IRCoT passages
    reused = [i for q in qs for i in q.supporting_ids if i.startswith("hotpotqa:")]
    assert len(reused) >= 15 and len(table) - n < 10 * 10 / 2
