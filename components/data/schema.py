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
    supporting_ids: list[str] = field(default_factory=list)  # in the gold path's order when `hops` is set
    corpus: str = "wiki"  # which index answers this question's searches
    # the annotated gold path: one search query per supporting passage, in supporting_ids' order (MuSiQue's
    # decomposition, 2Wiki's evidences); empty when the annotation gives no order (HotpotQA)
    hops: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    corpus: str = "wiki"


SHOWN_CHARS = 200  # the longest text of one value a message or report shows


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text`, or its first `limit` chars and its full length: values in messages and reports stay small."""
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text):,} chars]"


class DataError(ValueError):
    """Malformed input data; the message names the file and the row or key."""
