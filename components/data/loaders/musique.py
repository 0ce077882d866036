"""MuSiQue (json list or jsonl): id, question, answer, answer_aliases, answerable, paragraphs[]{title, paragraph_text, is_supporting}."""

from __future__ import annotations

from pathlib import Path

from components.config import DatasetSpec
from components.data.loaders.base import Questions, add_paragraphs
from components.data.passages import PassageTable
from components.data.reader import answers_of, need, read_records
from components.data.schema import Question


def load(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    out = Questions(spec)
    for where, row in read_records(path):
        if out.full():
            break
        if row.get("answerable") is False:  # MuSiQue-Full's unanswerable contrast questions
            continue
        raw_id = need(row, "id", where)
        if not out.wants(raw_id):
            continue
        question = need(row, "question", where)
        aliases = row.get("answer_aliases") or []
        answers = answers_of([need(row, "answer", where)] + list(aliases), "answer", where)
        supporting = add_paragraphs(table, spec, row, "paragraphs", where)
        out.add(where, raw_id, question, answers, supporting)
    return out.items
