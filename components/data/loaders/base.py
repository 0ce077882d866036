"""What every loader shares: the signature and a question list that rejects duplicate ids."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from components.config import DatasetSpec
from components.data.passages import PassageTable
from components.data.reader import need
from components.data.schema import DataError, Question

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

    def add(self, where: str, raw_id: object, question: str, answers: list[str],
            supporting_ids: list[str] | None = None) -> None:  # fmt: skip
        qid = f"{self.spec.name}:{raw_id}"
        if qid in self._seen:
            raise DataError(f"{where}: duplicate id {str(raw_id)!r} (first seen at {self._seen[qid]})")
        self._seen[qid] = where
        self.items.append(
            Question(qid, question.strip(), answers, self.spec.name, self.spec.split, supporting_ids or [], "wiki")
        )


def add_paragraphs(table: PassageTable, spec: DatasetSpec, row: dict, field: str, where: str) -> list[str]:
    """Add a row's `field` list of {title, paragraph_text, is_supporting} to the table; return the supporting ids."""
    supporting = []
    for j, par in enumerate(need(row, field, where, list)):
        at = f"{where}: {field}[{j}]"
        if not isinstance(par, dict):
            raise DataError(f"{at}: expected an object")
        pid = table.add(spec.name, need(par, "title", at), need(par, "paragraph_text", at))
        if par.get("is_supporting"):
            supporting.append(pid)
    return supporting
