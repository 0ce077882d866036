"""The records that flow between stages."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answers: list[str]
    dataset: str
    split: str
    supporting_ids: list[str] = field(default_factory=list)
    corpus: str = "wiki"  # which index answers this question's searches


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    corpus: str = "wiki"


class DataError(ValueError):
    """Malformed input data; the message names the file and the row or key."""
