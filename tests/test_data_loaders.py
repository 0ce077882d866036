"""Each loader on the real sample files shipped in data/."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from components.agent.observation import format_hits
from components.config import DatasetSpec
from components.data.loaders import LOADERS
from components.data.passages import PassageTable
from components.retrieval.base import Hit

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
    # the file's titles hold HTML entities ("Tunnels &amp; Trolls"): stored decoded, so the model's observation
    # escapes them once, not twice
    assert not any("&amp;" in p.title or "&amp;" in p.text for p in ps)
    tnt = next(p for p in ps if p.title == "Tunnels & Trolls")
    assert format_hits([Hit(tnt.id, tnt.title, tnt.text, 1.0)]).startswith("[1] Tunnels &amp; Trolls: ")


def test_hotpotqa_hf_supporting_are_the_supporting_fact_titles():
    qs, ps = load("hotpotqa_hf", "hotpotqa_hf", "hotpotqa/hotpot_dev_distractor_first100_hf.json")
    check_common(qs, ps, "hotpotqa_hf")
    assert len(qs) == 100 and qs[0].id == "hotpotqa_hf:0" and qs[0].answers == ["yes"]
    raw = json.loads((DATA / "hotpotqa/hotpot_dev_distractor_first100_hf.json").read_text())
    by_id = {p.id: p for p in ps}
    for q, r in zip(qs, raw):
        assert {by_id[i].title for i in q.supporting_ids} == {html.unescape(t) for t in r["supporting_facts"]["title"]}
    assert by_id[qs[0].supporting_ids[0]].text.startswith("Scott Derrickson")


def test_musique_supporting_count_matches_decomposition():
    qs, ps = load("musique", "musique", "musique/musique_ans_train_100.json", split="train")
    check_common(qs, ps, "musique", "train")
    raw = json.loads((DATA / "musique/musique_ans_train_100.json").read_text())
    assert len(qs) == 100
    for q, r in zip(qs, raw):
        assert len(q.supporting_ids) == len(r["question_decomposition"])
        assert q.answers[0] == r["answer"] and set(r["answer_aliases"]) <= set(q.answers)


def test_musique_path_follows_the_decomposition():
    qs, ps = load("musique", "musique", "musique/musique_ans_train_100.json", split="train")
    raw = json.loads((DATA / "musique/musique_ans_train_100.json").read_text())
    by_id = {p.id: p for p in ps}
    for q, r in zip(qs, raw):
        steps = r["question_decomposition"]
        assert [by_id[i].title for i in q.supporting_ids] == [r["paragraphs"][s["paragraph_support_idx"]]["title"] for s in steps]
        assert len(q.hops) == len(steps) and not any("#" in h or ">>" in h for h in q.hops)
    assert qs[0].hops == ["What company published Journal of Psychotherapy Integration?",
                          "Who was the first president of American Psychological Association?"]  # fmt: skip


def test_2wiki_path_follows_the_evidences():
    qs, ps = load("2wiki", "2wiki_context", "2wikimultihopqa/train_500_with_context.json", split="train")
    raw = json.loads((DATA / "2wikimultihopqa/train_500_with_context.json").read_text())
    by_id = {p.id: p for p in ps}
    assert all(q.hops for q in qs)
    q, r = qs[0], raw[0]
    assert q.hops == ["Get Low performer", "Dillon Francis date of birth"]
    assert [by_id[i].title for i in q.supporting_ids] == ["Get Low (Dillon Francis and DJ Snake song)", "Dillon Francis"]
    assert len(q.hops) == len(r["evidences"])


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


def _titles(qs, ps):
    by_id = {p.id: p for p in ps}
    return [{by_id[i].title for i in q.supporting_ids} for q in qs]


def test_hotpotqa_hf_jsonl_dev1025():
    qs, ps = load("hotpotqa_dev1025", "hotpotqa_hf", "hotpotqa/hotpot_dev_distractor_1025_hf.jsonl")
    check_common(qs, ps, "hotpotqa_dev1025")
    assert len(qs) == 1025 and qs[0].id == "hotpotqa_dev1025:5a8595a85542992a431d1b48"
    assert qs[0].question.startswith("Where was the music festival Billy McFarland") and qs[0].answers == ["Great Exuma"]
    assert _titles(qs, ps)[0] == {"Billy McFarland (entrepreneur)", "Fyre Festival"}
    raw = [json.loads(line) for line in (DATA / "hotpotqa/hotpot_dev_distractor_1025_hf.jsonl").open()]
    assert [t for t in _titles(qs, ps)] == [{html.unescape(t) for t in r["supporting_facts"]["title"]} for r in raw]


def test_hotpotqa_original_train_layout():
    qs, ps = load("hotpotqa", "hotpotqa_original", "hotpotqa/hotpot_train_100_original.json", split="train")
    check_common(qs, ps, "hotpotqa", "train")
    assert len(qs) == 100 and qs[0].id == "hotpotqa:5a77ec115542992a6e59dff7"
    assert qs[0].question == "If Gallu is a demon Lilu is what?" and qs[0].answers == ["a spirit"]
    raw = json.loads((DATA / "hotpotqa/hotpot_train_100_original.json").read_text())
    assert _titles(qs, ps) == [{html.unescape(t) for t, _ in r["supporting_facts"]} for r in raw]
    lilu = next(p for p in ps if p.title == "Lilu (mythology)")
    assert lilu.text.startswith("A lilu or lilû is a masculine Akkadian word for a spirit, related to Alû, demon.")


def test_2wiki_context_layout_and_id_split():
    path = "2wikimultihopqa/train_500_with_context.json"
    qs, ps = load("2wiki", "2wiki_context", path, split="train")
    check_common(qs, ps, "2wiki", "train")
    assert len(qs) == 500 and qs[0].id == "2wiki:93402dbc0bdb11eba7f7acde48001122" and qs[0].answers == ["October 5, 1987"]
    assert _titles(qs, ps)[0] == {"Get Low (Dillon Francis and DJ Snake song)", "Dillon Francis"}
    assert all(len(q.supporting_ids) >= 2 for q in qs)
    theodred = next(p for p in ps if p.title == "Theodred II (Bishop of Elmham)")  # sentences joined with a space
    assert theodred.text.startswith("Theodred II was a medieval Bishop of Elmham. The date of")
    train, _ = load("2wiki", "2wiki_context", path, split="train", id_hash_range=(0.0, 0.8))
    dev, _ = load("2wiki", "2wiki_context", path, split="dev", id_hash_range=(0.8, 1.0))
    assert (len(train), len(dev)) == (396, 104)
    assert {q.id for q in train} | {q.id for q in dev} == {q.id for q in qs}
    assert not {q.id for q in train} & {q.id for q in dev}


def test_2wiki_context_literal_strings_parse_like_lists(tmp_path):
    rows = json.loads((DATA / "2wikimultihopqa/train_500_with_context.json").read_text())[:3]
    as_strings = [{**r, "context": repr(r["context"]), "supporting_facts": repr(r["supporting_facts"])} for r in rows]
    (tmp_path / "2w.json").write_text(json.dumps(as_strings))
    spec = DatasetSpec(name="2wiki", format="2wiki_context", path="2w.json")
    lists, strings = PassageTable(), PassageTable()
    (tmp_path / "l.json").write_text(json.dumps(rows))
    assert LOADERS["2wiki_context"](spec, tmp_path / "2w.json", strings) == LOADERS["2wiki_context"](spec, tmp_path / "l.json", lists)
    assert strings.passages == lists.passages and len(lists) >= 25


def test_musique_dev_jsonl():
    qs, ps = load("musique", "musique", "musique/musique_ans_dev_192.jsonl")
    check_common(qs, ps, "musique")
    assert len(qs) == 192 and qs[0].id == "musique:2hop__574419_270105" and qs[0].answers[0] == "Stanley"
    assert _titles(qs, ps)[0] == {"Mountrail County Courthouse", "Van Hook Township, Mountrail County, North Dakota"}
