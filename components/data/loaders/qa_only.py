"""2WikiMultihopQA (idx/_id, question, answer; with or without paragraphs) and FlashRAG jsonl
(id, question, golden_answers)."""

from __future__ import annotations

from pathlib import Path

from components.config import DatasetSpec
from components.data.loaders.common import Questions, add_titled_sentences, literal
from components.data.passages import PassageTable
from components.data.reader import answers_of, need, read_records
from components.data.schema import DataError, Question, cut


def load_2wiki(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    out = Questions(spec)
    for where, row in read_records(path):
        if out.full():
            break
        key = next((k for k in ("_id", "idx", "id") if k in row), None)
        if key is None:
            raise DataError(f"{where}: missing field 'idx' (or '_id')")
        raw_id = need(row, key, where, (str, int))
        answers = answers_of(need(row, "answer", where, (str, list)), "answer", where)
        out.add(where, raw_id, need(row, "question", where), answers)
    return out.items


def load_2wiki_context(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    """_id, question, answer, context [[title, [sentences]]], supporting_facts [[title, sent_id]].

    context and supporting_facts are lists, or Python-literal strings of lists (some 2Wiki releases) that are
    parsed with ast.literal_eval, never evaluated. evidences (optional) [[subject, relation, object]] is the gold
    path, one triple per supporting title in supporting_facts' order: hop i's query is "subject relation".
    The other literal fields are not read.
    """
    out = Questions(spec)
    for where, row in read_records(path):
        if out.full():
            break
        raw_id = need(row, "_id", where, (str, int))
        if not out.wants(raw_id):
            continue
        question = need(row, "question", where)
        answers = answers_of(need(row, "answer", where, (str, list)), "answer", where)
        context, facts = literal(row, "context", where), literal(row, "supporting_facts", where)
        supporting = add_titled_sentences(table, spec, context, facts, where, sep=" ")
        hops: list[str] = []
        if row.get("evidences") is not None:
            evidences = literal(row, "evidences", where)
            supporting, hops = evidence_path(table, spec, context, facts, evidences, supporting, where)
        out.add(where, raw_id, question, answers, supporting, hops)
    return out.items


def evidence_path(table: PassageTable, spec: DatasetSpec, context: list, facts: list, evidences: list,
                  supporting: list[str], where: str) -> tuple[list[str], list[str]]:  # fmt: skip
    """The supporting ids in supporting_facts' order and a query per evidence; `supporting` and no queries when
    the evidences are not one per supporting passage."""
    texts = {title: " ".join(sentences) for title, sentences in context}  # both checked by add_titled_sentences
    titles = list(dict.fromkeys(fact[0] for fact in facts))
    ids = [table.add(spec.name, t, texts[t]) for t in titles]  # the ids add_titled_sentences gave them
    for j, ev in enumerate(evidences):
        if not (isinstance(ev, (list, tuple)) and len(ev) == 3 and all(isinstance(x, str) for x in ev)):
            raise DataError(f"{where}: evidences[{j}] must be [subject, relation, object], got {cut(repr(ev), 80)}")
    if len(evidences) != len(titles) or len(set(ids)) != len(ids) or set(ids) != set(supporting):
        return supporting, []
    return ids, [" ".join(f"{subject} {relation}".split()) for subject, relation, _ in evidences]


def load_flashrag(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    out = Questions(spec)
    for where, row in read_records(path):
        if out.full():
            break
        raw_id = need(row, "id", where, (str, int))
        answers = answers_of(need(row, "golden_answers", where, (list, str)), "golden_answers", where)
        out.add(where, raw_id, need(row, "question", where), answers)
    return out.items
