"""MuSiQue (json list or jsonl): id, question, answer, answer_aliases, answerable, paragraphs[]{title, paragraph_text,
is_supporting}, question_decomposition[]{question, answer, paragraph_support_idx} (optional: the gold path)."""

from __future__ import annotations

import re
from pathlib import Path

from components.config import DatasetSpec
from components.data.loaders.common import Questions, add_paragraphs
from components.data.passages import PassageTable
from components.data.reader import answers_of, need, read_records
from components.data.schema import DataError, Question

_REF = re.compile(r"#(\d+)")  # "#2" in a sub-question: the answer of step 2


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
        hops: list[str] = []
        if row.get("question_decomposition") is not None:
            supporting, hops = decomposition(table, spec, row, set(supporting), where)
        out.add(where, raw_id, question, answers, supporting, hops)
    return out.items


def decomposition(table: PassageTable, spec: DatasetSpec, row: dict, supporting: set[str],
                  where: str) -> tuple[list[str], list[str]]:  # fmt: skip
    """The supporting ids in the decomposition's order and one query per step: its sub-question with each "#k"
    replaced by step k's answer and the " >> " of a Wikidata-style step ("X >> country") as a space."""
    steps = need(row, "question_decomposition", where, list)
    paragraphs = row["paragraphs"]  # checked by add_paragraphs
    ids, queries, answers = [], [], []
    for j, step in enumerate(steps):
        at = f"{where}: question_decomposition[{j}]"
        if not isinstance(step, dict):
            raise DataError(f"{at}: expected an object")
        idx = need(step, "paragraph_support_idx", at, int)
        if not 0 <= idx < len(paragraphs):
            raise DataError(f"{at}: paragraph_support_idx {idx} is not a paragraph (the row has {len(paragraphs)})")
        par = paragraphs[idx]
        pid = table.add(spec.name, par["title"], par["paragraph_text"])  # the id add_paragraphs gave it
        if pid not in supporting:
            raise DataError(f"{at}: paragraph_support_idx {idx} is not a supporting paragraph")

        def answer_of(m: re.Match, at: str = at) -> str:
            k = int(m.group(1))
            if not 1 <= k <= len(answers):
                raise DataError(f"{at}: field 'question': #{k} names no earlier step")
            return answers[k - 1]

        text = _REF.sub(answer_of, need(step, "question", at))
        ids.append(pid)
        queries.append(re.sub(r" ([?,.])", r"\1", " ".join(text.replace(">>", " ").split())))
        answers.append(need(step, "answer", at))
    if len(set(ids)) != len(ids) or set(ids) != supporting:
        raise DataError(f"{where}: field 'question_decomposition': its paragraphs are not the supporting ones")
    return ids, queries
