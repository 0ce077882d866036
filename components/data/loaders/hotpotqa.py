"""HotpotQA in the Hugging Face layout (json list or jsonl), the original release layout and the IRCoT layout."""

from __future__ import annotations

from pathlib import Path

from components.config import DatasetSpec
from components.data.loaders.common import Questions, add_paragraphs, add_titled_sentences
from components.data.passages import PassageTable
from components.data.reader import answers_of, need, read_jsonl, read_records
from components.data.schema import DataError, Question, cut


def load_hf(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    """question, answer, supporting_facts{title, sent_id}, context{title, sentences}; optional id/_id.

    Supporting passages are the context paragraphs whose title is in supporting_facts.
    """
    out = Questions(spec)
    for idx, (where, row) in enumerate(read_records(path)):
        if out.full():
            break
        raw_id = _raw_id(row, idx, where)
        if not out.wants(raw_id):
            continue
        question = need(row, "question", where)
        answers = answers_of(need(row, "answer", where, (str, list)), "answer", where)
        context = need(row, "context", where, dict)
        titles = need(context, "title", f"{where}: field 'context'", list)
        sentences = need(context, "sentences", f"{where}: field 'context'", list)
        if len(titles) != len(sentences):
            raise DataError(f"{where}: field 'context': {len(titles)} titles but {len(sentences)} sentence lists")
        facts = need(row, "supporting_facts", where, dict)
        gold = set(need(facts, "title", f"{where}: field 'supporting_facts'", list))
        supporting = []
        for title, sents in zip(titles, sentences):
            if not isinstance(title, str) or not isinstance(sents, list):
                raise DataError(f"{where}: field 'context' must hold title strings and sentence lists")
            pid = table.add(spec.name, title, "".join(sents))
            if title in gold:
                supporting.append(pid)
        missing = gold - set(titles)
        if missing:
            raise DataError(f"{where}: field 'supporting_facts': titles {cut(str(sorted(missing)))} not in the context")
        out.add(where, raw_id, question, answers, supporting)
    return out.items


def load_ircot(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    """question_id, question_text, answers_objects[].spans, contexts[]{title, paragraph_text, is_supporting}."""
    out = Questions(spec)
    for where, row in read_jsonl(path):
        if out.full():
            break
        raw_id = need(row, "question_id", where, (str, int))
        if not out.wants(raw_id):
            continue
        question = need(row, "question_text", where)
        objects = need(row, "answers_objects", where, list)
        spans = [s for o in objects if isinstance(o, dict) for s in o.get("spans", [])]
        answers = answers_of(spans, "answers_objects", where)
        supporting = add_paragraphs(table, spec, row, "contexts", where)
        out.add(where, raw_id, question, answers, supporting)
    return out.items


def load_original(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    """_id, question, answer, supporting_facts [[title, sent_id]], context [[title, [sentences]]]."""
    out = Questions(spec)
    for idx, (where, row) in enumerate(read_records(path)):
        if out.full():
            break
        raw_id = _raw_id(row, idx, where)
        if not out.wants(raw_id):
            continue
        question = need(row, "question", where)
        answers = answers_of(need(row, "answer", where, (str, list)), "answer", where)
        context, facts = need(row, "context", where, list), need(row, "supporting_facts", where, list)
        supporting = add_titled_sentences(table, spec, context, facts, where, sep="")  # sentences carry their spaces
        out.add(where, raw_id, question, answers, supporting)
    return out.items


def _raw_id(row: dict, idx: int, where: str) -> str | int:
    """id or _id (a string or an integer); the row index when the file has neither."""
    key = next((k for k in ("id", "_id") if k in row), None)
    return idx if key is None else need(row, key, where, (str, int))
