"""KILT Wikipedia pages (wikipedia_title, text[]): each real paragraph becomes a passage; no questions."""

from __future__ import annotations

import re
from pathlib import Path

from components.config import DatasetSpec
from components.data.passages import PassageTable
from components.data.reader import need, read_jsonl
from components.data.schema import DataError, Question

_MARKUP = ("Section::::",)  # section headings carry no content
_BULLET = re.compile(r"^BULLET::::-?\s*")  # list items keep their text


def load(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    for n, (where, row) in enumerate(read_jsonl(path)):
        if spec.limit is not None and n >= spec.limit:
            break
        title = need(row, "wikipedia_title", where)
        paragraphs = need(row, "text", where, list)
        for j, par in enumerate(paragraphs):
            if not isinstance(par, str):
                raise DataError(f"{where}: text[{j}] must be a string, got {type(par).__name__}")
            par = _BULLET.sub("", par.strip())
            if par.startswith(_MARKUP) or len(par) < spec.min_chars or par == title.strip():
                continue
            table.add(spec.name, title, par)
    return []
