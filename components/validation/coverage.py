"""Corpus answer coverage: the share of questions with at least one answer appearing in some passage of its corpus.

Answers and passages are compared after the official SQuAD/HotpotQA normalisation, on whole tokens, so "1" does
not match inside "1990". Only questions whose corpus has passages count; results are per dataset and overall.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from components.agent.rewards import normalize_answer
from components.validation.text import normalise

_SEP = "|"  # after each passage, so a match never spans two; punctuation, so never a normalised token


class TokenIndex:
    """All passage tokens of one corpus as integer codes: a vocabulary, adjacent-pair keys, and code positions."""

    def __init__(self, texts: pd.Series):
        flat = (normalise(texts) + f" {_SEP}").str.split().explode()
        codes, uniques = pd.factorize(flat)
        self.vocab = {tok: i for i, tok in enumerate(uniques) if tok != _SEP}
        self.codes = codes.astype(np.int64)  # the separator has a code of its own, outside the vocabulary
        self._width = len(uniques)
        self._pairs = set((self.codes[:-1] * self._width + self.codes[1:]).tolist())
        self._order = np.argsort(self.codes, kind="stable")
        self._sorted = self.codes[self._order]

    def contains(self, phrase: str) -> bool:
        want = [self.vocab.get(t) for t in normalize_answer(phrase).split()]
        if not want or None in want:
            return False
        if any(a * self._width + b not in self._pairs for a, b in zip(want, want[1:])):
            return False
        if len(want) <= 2:
            return True
        lo, hi = np.searchsorted(self._sorted, [want[0], want[0] + 1])
        starts = self._order[lo:hi]
        starts = starts[starts + len(want) <= len(self.codes)]
        for offset, code in enumerate(want[1:], start=1):
            starts = starts[self.codes[starts + offset] == code]
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
