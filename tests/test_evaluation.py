"""Unit tests of the evaluate stage's pieces: set selection and the per-dataset table."""

import csv
import io

import pytest

from components.config import EvalSetSpec
from components.data.schema import Question
from components.evaluation.evaluate import SYSTEMS, _csv, select


def test_table_holds_the_strict_columns_of_the_plain_baselines():
    rows = [{"system": "agent", "set": "hotpotqa/dev", "em": 0.5, "n": 2},
            {"system": "direct", "set": "hotpotqa/dev", "em": 0.25, "em_strict": 0.0, "n": 2}]  # fmt: skip
    table = list(csv.DictReader(io.StringIO(_csv(rows))))
    assert list(table[0]) == ["system", "set", "em", "n", "em_strict"]
    assert table[0]["em_strict"] == "" and table[1]["em_strict"] == "0.0" and table[1]["em"] == "0.25"


def test_select_keeps_order_and_limit_and_names_a_missing_set():
    qs = [Question(f"h:{i}", f"q{i}?", ["a"], "hotpotqa", "dev" if i % 2 else "train") for i in range(6)]
    assert [q.id for q in select(qs, EvalSetSpec(dataset="hotpotqa", split="dev", limit=2))] == ["h:1", "h:3"]
    with pytest.raises(ValueError, match="dataset='musique' split='dev'"):
        select(qs, EvalSetSpec(dataset="musique", split="dev"))


def test_baselines_use_the_pretrained_model_and_agents_their_own():
    assert SYSTEMS["direct"][0] == SYSTEMS["naive_rag"][0] == SYSTEMS["pretrained_agent"][0] == "pretrained"
    assert SYSTEMS["base_agent"] == ("base", "agent") and SYSTEMS["agent"] == ("trained", "agent")
