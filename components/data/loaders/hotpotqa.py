"""HotpotQA in the Hugging Face layout (json list) and the IRCoT layout (jsonl)."""

from __future__ import annotations

from pathlib import Path

from components.config import DatasetSpec
from components.data.loaders.base import Questions, add_paragraphs
from components.data.passages import PassageTable
from components.data.reader import answers_of, need, read_json_list, read_jsonl
from components.data.schema import DataError, Question


def load_hf(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    """question, answer, supporting_facts{title, sent_id}, context{title, sentences}; optional id/_id.

    Supporting passages are the context paragraphs whose title is in supporting_facts.
    """
    out = Questions(spec)
    for idx, (where, row) in enumerate(read_json_list(path)):
        if out.full():
            break
        raw_id = row.get("id", row.get("_id", idx))
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
            raise DataError(f"{where}: field 'supporting_facts': titles {sorted(missing)} not in the context")
        out.add(where, raw_id, question, answers, supporting)
    return out.items


def load_ircot(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    """question_id, question_text, answers_objects[].spans, contexts[]{title, paragraph_text, is_supporting}."""
    out = Questions(spec)
    for where, row in read_jsonl(path):
        if out.full():
            break
        raw_id = need(row, "question_id", where, (str, int))
        question = need(row, "question_text", where)
        objects = need(row, "answers_objects", where, list)
        spans = [s for o in objects if isinstance(o, dict) for s in o.get("spans", [])]
        answers = answers_of(spans, "answers_objects", where)
        supporting = add_paragraphs(table, spec, row, "contexts", where)
        out.add(where, raw_id, question, answers, supporting)
    return out.items
