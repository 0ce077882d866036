"""Prepared questions exported to verl's parquet schema and read back by verl's RLHFDataset with the tiny tokenizer."""

from __future__ import annotations

import pandas as pd
import pytest
from verl.utils.dataset.rl_dataset import RLHFDataset

from components.agent.prompts import SYSTEM_PROMPT
from components.data.prepare import QUESTIONS_FILE, prepared_dir, write_questions
from components.data.schema import DataError, Question
from components.verl_backend.export import AGENT_NAME, export
from tests.test_verl_fixtures import make_cfg, tiny_tokenizer, verl_config

QUESTIONS = [
    Question("q1", "What is the capital of France?", ["Paris"], "toyqa", "train", ["fr"], "toy"),
    Question("q2", "What is the capital of Italy?", ["Rome", "Roma"], "toyqa", "train", [], "toy"),
    Question("q3", "What is the capital of Germany?", ["Berlin"], "toyqa", "dev", ["de"], "toy"),
    Question("q4", "Which city is on the Nile?", ["Cairo"], "other", "dev", ["eg"], "wiki"),
]


def prepared(tmp_path, questions=QUESTIONS):
    cfg = make_cfg(tmp_path)
    prepared_dir(cfg).mkdir(parents=True, exist_ok=True)
    write_questions(prepared_dir(cfg) / QUESTIONS_FILE, questions)
    return cfg


def test_export_schema(tmp_path):
    cfg = prepared(tmp_path)
    paths = export(cfg, tmp_path / "verl", eval_questions=1)
    train, val = pd.read_parquet(paths["train"]), pd.read_parquet(paths["val"])
    assert list(train["extra_info"].map(lambda e: e["id"])) == ["q1", "q2"]
    assert len(val) == 1 and val["extra_info"][0]["id"] == "q3"
    row = train.iloc[1]
    assert row["data_source"] == "toyqa" and row["agent_name"] == AGENT_NAME
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["prompt"][0]["content"] == SYSTEM_PROMPT and "<tool_call>" in SYSTEM_PROMPT
    assert list(row["reward_model"]["ground_truth"]) == ["Rome", "Roma"]
    assert row["extra_info"]["index"] == 1
    assert row["extra_info"]["tools_kwargs"]["search"]["create_kwargs"]["corpus"] == "toy"


def test_rlhf_dataset_reads_our_parquet(tmp_path):
    cfg = prepared(tmp_path)
    paths = export(cfg, tmp_path / "verl")
    data_cfg = verl_config(cfg).data
    ds = RLHFDataset(str(paths["train"]), tiny_tokenizer(), data_cfg)
    assert len(ds) == 2
    item = ds[0]
    assert item["raw_prompt"][1]["content"] == "Question: What is the capital of France?"
    assert item["agent_name"] == AGENT_NAME and item["index"] == 0
    assert item["tools_kwargs"] == {"search": {"create_kwargs": {"corpus": "toy", "supporting_ids": ["fr"]}}}
    assert list(item["reward_model"]["ground_truth"]) == ["Paris"]


def test_rlhf_dataset_drops_prompts_longer_than_max_prompt_length(tmp_path):
    cfg = prepared(tmp_path)
    paths = export(cfg, tmp_path / "verl")
    data_cfg = verl_config(cfg).data
    data_cfg.max_prompt_length = 8  # shorter than the system prompt alone
    assert len(RLHFDataset(str(paths["train"]), tiny_tokenizer(), data_cfg)) == 0


def test_missing_prepared_file_names_it(tmp_path):
    cfg = make_cfg(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"prepared/questions.parquet: prepared questions not found"):
        export(cfg, tmp_path / "verl")


def test_no_dev_split_is_a_data_error_and_writes_nothing(tmp_path):
    cfg = prepared(tmp_path, [q for q in QUESTIONS if q.split == "train"])
    with pytest.raises(DataError, match=r"questions.parquet: no questions in split 'dev'"):
        export(cfg, tmp_path / "verl")
    assert not (tmp_path / "verl" / "train.parquet").exists()
