"""Derived columns for the cross-row and cross-table rules, so GE can expect on them row by row.

Each derived column is null when the row is fine and otherwise names what is wrong, so a failing
expectation shows the offending rows (ids + values) in the result and in the data docs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from components.validation.text import normalise

QUESTION_COLUMNS = ("id", "question", "answers", "dataset", "split", "supporting_ids", "corpus")
PASSAGE_COLUMNS = ("id", "title", "text", "corpus")

MISSING_SUPPORT = "missing_supporting_ids"  # ", "-joined supporting ids absent from the question's corpus
SPLIT_OVERLAP = "train_eval_overlap"  # "<other split>:<other id>" when the normalised question is in train and eval
ID_OVERLAP = "train_eval_id_overlap"  # "<other split>:<other id>" when the source id is in train and eval
N_ANSWERS = "n_answers"


def as_list(value: Any) -> list:
    """Parquet list cells arrive as numpy arrays, None or lists; give a plain list."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


def questions_frame(questions: pd.DataFrame, passages: pd.DataFrame, eval_splits: Sequence[str]) -> pd.DataFrame:
    """The questions table plus the derived columns the questions suite expects on."""
    q = questions.reset_index(drop=True).copy()
    q["answers"] = q["answers"].map(as_list)
    q["supporting_ids"] = q["supporting_ids"].map(as_list)
    q[N_ANSWERS] = q["answers"].map(len)
    q[MISSING_SUPPORT] = missing_supporting_ids(q, passages)
    q[SPLIT_OVERLAP] = split_overlap(q, eval_splits)
    q[ID_OVERLAP] = id_overlap(q, eval_splits)
    return q


def answers_frame(q: pd.DataFrame) -> pd.DataFrame:
    """One row per (question, answer string), for the answer length rules."""
    ex = q[["id", "answers"]].explode("answers").dropna(subset=["answers"])
    return pd.DataFrame({"question_id": ex["id"].to_numpy(), "answer": ex["answers"].astype(str).to_numpy()})


def missing_supporting_ids(q: pd.DataFrame, passages: pd.DataFrame) -> pd.Series:
    ex = q[["corpus", "supporting_ids"]].explode("supporting_ids").dropna(subset=["supporting_ids"])
    known = pd.MultiIndex.from_arrays([passages["corpus"].astype(str), passages["id"].astype(str)])
    wanted = pd.MultiIndex.from_arrays([ex["corpus"].astype(str), ex["supporting_ids"].astype(str)])
    missing = ex[~wanted.isin(known)]
    joined = missing.groupby(level=0)["supporting_ids"].agg(lambda ids: ", ".join(map(str, ids)))
    return joined.reindex(q.index).astype(object).where(lambda s: s.notna(), None)


def split_overlap(q: pd.DataFrame, eval_splits: Sequence[str]) -> pd.Series:
    """For a train row whose normalised question is also in an eval split (or the reverse): 'split:id' of the twin."""
    return _cross_split(normalise(q["question"]), q, eval_splits)


def id_overlap(q: pd.DataFrame, eval_splits: Sequence[str]) -> pd.Series:
    """Same, on the source id: the question id without its '<dataset>:' prefix, so two dataset names (or two
    specs carving one file) cannot hold one question in train and in eval."""
    return _cross_split(q["id"].astype(str).str.split(":", n=1).str[-1], q, eval_splits)


def _cross_split(key: pd.Series, q: pd.DataFrame, eval_splits: Sequence[str]) -> pd.Series:
    is_train = q["split"] == "train"
    is_eval = q["split"].isin(list(eval_splits))
    first_train = _first_by_text(key[is_train], q.loc[is_train])
    first_eval = _first_by_text(key[is_eval], q.loc[is_eval])
    out = pd.Series(None, index=q.index, dtype=object)
    out[is_train] = key[is_train].map(first_eval)
    out[is_eval] = key[is_eval].map(first_train)
    return out.where(out.notna(), None)


def _first_by_text(norm: pd.Series, rows: pd.DataFrame) -> dict[str, str]:
    twin = rows["split"].astype(str) + ":" + rows["id"].astype(str)
    frame = pd.DataFrame({"norm": norm, "twin": twin})
    return frame[frame["norm"] != ""].drop_duplicates("norm").set_index("norm")["twin"].to_dict()
