"""What every loader shares: the signature, a question list that rejects duplicate ids, and paragraph helpers."""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable
from pathlib import Path

from components.config import DatasetSpec
from components.data.passages import PassageTable
from components.data.reader import check_encodable, need
from components.data.schema import DataError, Question, cut

# A loader reads one dataset file into questions, adding its passages to the shared table.
Loader = Callable[[DatasetSpec, Path, PassageTable], list[Question]]


class Questions:
    """Questions of one dataset; ids are `<dataset>:<raw id>` and must be unique."""

    def __init__(self, spec: DatasetSpec) -> None:
        self.spec = spec
        self.items: list[Question] = []
        self._seen: dict[str, str] = {}

    def full(self) -> bool:
        return self.spec.limit is not None and len(self.items) >= self.spec.limit

    def wants(self, raw_id: object) -> bool:
        """False when spec.id_hash_range leaves this id to another spec (call before adding its paragraphs)."""
        if self.spec.id_hash_range is None:
            return True
        lo, hi = self.spec.id_hash_range
        return lo <= id_hash(raw_id) < hi

    def add(self, where: str, raw_id: object, question: str, answers: list[str],
            supporting_ids: list[str] | None = None, hops: list[str] | None = None) -> None:  # fmt: skip
        if not self.wants(raw_id):
            return
        qid = f"{self.spec.name}:{raw_id}"
        if qid in self._seen:
            raise DataError(f"{where}: duplicate id {cut(str(raw_id))!r} (first seen at {self._seen[qid]})")
        self._seen[qid] = where
        self.items.append(
            Question(qid, question.strip(), answers, self.spec.name, self.spec.split, supporting_ids or [], "wiki", hops or [])
        )


def add_paragraphs(table: PassageTable, spec: DatasetSpec, row: dict, field: str, where: str) -> list[str]:
    """Add a row's `field` list of {title, paragraph_text, is_supporting} to the table; return the supporting ids."""
    supporting = []
    for j, par in enumerate(need(row, field, where, list)):
        at = f"{where}: {field}[{j}]"
        if not isinstance(par, dict):
            raise DataError(f"{at}: expected an object")
        pid = table.add(spec.name, need(par, "title", at), need(par, "paragraph_text", at))
        flag = par.get("is_supporting", False)  # absent: not supporting
        if not isinstance(flag, bool):  # the string "no" would read as true
            raise DataError(f"{at}: field 'is_supporting' must be true or false, got {type(flag).__name__} {_show(flag)}")
        if flag:
            supporting.append(pid)
    return supporting


def id_hash(raw_id: object) -> float:
    """A stable position of a raw question id in [0, 1)."""
    digest = hashlib.sha256(str(raw_id).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def literal(row: dict, key: str, where: str) -> list:
    """row[key] as a list: a JSON list, or a Python-literal string parsed by ast.literal_eval (never evaluated)."""
    value = need(row, key, where, (list, str))
    if isinstance(value, list):
        return value
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as err:
        raise DataError(f"{where}: field {key!r} is not a Python literal ({type(err).__name__}: {_short(err)})") from None
    if not isinstance(value, list):
        raise DataError(f"{where}: field {key!r} must hold a list, got {type(value).__name__}")
    check_encodable(value, where, key)  # a literal's '\ud800' escape makes a lone surrogate too
    return value


def add_titled_sentences(
    table: PassageTable, spec: DatasetSpec, context: list, facts: list, where: str, sep: str
) -> list[str]:
    """Original-release layout: context [[title, [sentences]]] and supporting_facts [[title, sent_id]].

    Each context entry becomes a passage (sentences joined by `sep`); supporting are those whose title is a fact's.
    """
    gold = set()
    for j, fact in enumerate(facts):
        if not (isinstance(fact, (list, tuple)) and len(fact) == 2 and isinstance(fact[0], str)
                and isinstance(fact[1], int) and not isinstance(fact[1], bool)):  # fmt: skip
            raise DataError(f"{where}: supporting_facts[{j}] must be [title, sentence id], got {_show(fact)}")
        gold.add(fact[0])
    supporting, titles = [], set()
    for j, entry in enumerate(context):
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], (list, tuple)) and all(isinstance(s, str) for s in entry[1])):  # fmt: skip
            raise DataError(f"{where}: context[{j}] must be [title, [sentences]], got {_show(entry)}")
        title, sentences = entry
        text = sep.join(sentences)
        if not title.strip() or not text.strip():
            raise DataError(f"{where}: context[{j}]: empty title or text")
        pid = table.add(spec.name, title, text)
        titles.add(title)
        if title in gold and pid not in supporting:
            supporting.append(pid)
    missing = gold - titles
    if missing:
        raise DataError(f"{where}: field 'supporting_facts': titles {cut(str(sorted(missing)))} not in the context")
    return supporting


def _short(err: BaseException) -> str:
    return str(err).splitlines()[0][:200] if str(err) else "no detail"


def _show(value: object) -> str:
    return cut(repr(value), 80)
