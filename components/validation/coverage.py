"""Corpus answer coverage: the share of questions with at least one answer appearing in some passage of its corpus.

Answers and passages are compared after the official SQuAD/HotpotQA normalisation, on whole tokens, so "1" does
not match inside "1990". Only questions whose corpus has passages count; results are per dataset and overall.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from components.agent.rewards import normalize_answer

_SEP = -1  # between passages, so a match never spans two passages


class TokenIndex:
    """All passage tokens of one corpus as integer codes, with the positions of each code."""

    def __init__(self, texts: Iterable[str]):
        self.vocab: dict[str, int] = {}
        codes: list[int] = []
        for text in texts:
            codes.extend(self.vocab.setdefault(t, len(self.vocab)) for t in normalize_answer(str(text)).split())
            codes.append(_SEP)
        self.codes = np.asarray(codes, dtype=np.int64)
        order = np.argsort(self.codes, kind="stable")
        self._order = order
        self._sorted = self.codes[order]

    def contains(self, phrase: str) -> bool:
        want = [self.vocab.get(t) for t in normalize_answer(phrase).split()]
        if not want or None in want:
            return False
        lo, hi = np.searchsorted(self._sorted, [want[0], want[0] + 1])
        starts = self._order[lo:hi]
        starts = starts[starts + len(want) <= len(self.codes)]
        for offset, code in enumerate(want[1:], start=1):
            starts = starts[self.codes[starts + offset] == code]
            if not len(starts):
                return False
        return len(starts) > 0


def answer_coverage(questions: pd.DataFrame, passages: pd.DataFrame) -> dict[str, float]:
    """`answer_coverage.<dataset>` and `answer_coverage.overall`, over questions whose corpus has passages."""
    indexes = {corpus: TokenIndex(group["text"]) for corpus, group in passages.groupby("corpus", sort=False)}
    q = questions[questions["corpus"].isin(list(indexes))]
    if q.empty:
        return {}
    covered = pd.Series(
        [any(indexes[c].contains(a) for a in answers) for c, answers in zip(q["corpus"], q["answers"])],
        index=q.index,
        dtype=float,
    )
    out = {f"answer_coverage.{name}": float(v) for name, v in covered.groupby(q["dataset"]).mean().items()}
    out["answer_coverage.overall"] = float(covered.mean())
    return out
