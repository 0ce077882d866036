"""Vectorised form of the official answer normalisation (components.agent.rewards.normalize_answer)."""

from __future__ import annotations

import string

import pandas as pd

_DROP_PUNCT = str.maketrans("", "", string.punctuation)


def normalise(texts: pd.Series) -> pd.Series:
    """Same result as `normalize_answer` per cell (lower, drop punctuation and articles, collapse spaces)."""
    s = texts.fillna("").astype(str).str.lower().str.translate(_DROP_PUNCT)
    return s.str.replace(r"\b(a|an|the)\b", " ", regex=True).str.split().str.join(" ")
