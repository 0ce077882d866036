"""Question-answer files without passages: 2WikiMultihopQA (idx/_id, question, answer) and FlashRAG jsonl
(id, question, golden_answers)."""

from __future__ import annotations

from pathlib import Path

from components.config import DatasetSpec
from components.data.loaders.base import Questions
from components.data.passages import PassageTable
from components.data.reader import answers_of, need, read_json_list, read_jsonl
from components.data.schema import DataError, Question


def _rows(path: Path):
    return read_jsonl(path) if path.suffix == ".jsonl" else read_json_list(path)


def load_2wiki(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    out = Questions(spec)
    for where, row in _rows(path):
        if out.full():
            break
        key = next((k for k in ("_id", "idx", "id") if k in row), None)
        if key is None:
            raise DataError(f"{where}: missing field 'idx' (or '_id')")
        raw_id = need(row, key, where, (str, int))
        answers = answers_of(need(row, "answer", where, (str, list)), "answer", where)
        out.add(where, raw_id, need(row, "question", where), answers)
    return out.items


def load_flashrag(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    out = Questions(spec)
    for where, row in _rows(path):
        if out.full():
            break
        raw_id = need(row, "id", where, (str, int))
        answers = answers_of(need(row, "golden_answers", where, (list, str)), "golden_answers", where)
        out.add(where, raw_id, need(row, "question", where), answers)
    return out.items
