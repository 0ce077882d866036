"""Prepared questions exported to verl's parquet schema and read back by verl's RLHFDataset, with the tiny
tokenizer and with the real models' (SmolLM2, ChatML; Qwen2.5, with tools)."""

from __future__ import annotations

import pandas as pd
import pytest
from verl.utils.dataset.rl_dataset import RLHFDataset

from components.agent.prompts import SYSTEM_PROMPT
from components import artifacts
from components.data.prepare import write_questions
from components.config import ConfigError
from components.data.schema import DataError, Question
from components.train.local.train import build_trainer, train_questions
from components.train.verl.export import AGENT_NAME, export
from tests.verl_fixtures import QUESTIONS, make_cfg, verl_config

def ids(path) -> list[str]:
    return list(pd.read_parquet(path)["extra_info"].map(lambda e: e["id"]))


def prepared(tmp_path, questions=QUESTIONS, **train):
    cfg = make_cfg(tmp_path, **train)
    artifacts.prepared(cfg).mkdir(parents=True, exist_ok=True)
    write_questions(artifacts.questions(cfg), questions)
    return cfg


def test_export_schema(tmp_path):
    cfg = prepared(tmp_path)
    paths = export(cfg, tmp_path / "verl", eval_questions=1)
    train = pd.read_parquet(paths["train"])
    assert ids(paths["train"]) == ["q1", "q2"]  # train.datasets' train split only, as the local trainer
    assert ids(paths["val"]) == ["q8", "q7"]  # their dev split's last, capped per dataset, plus the counterfactual set
    row = train.iloc[1]
    assert row["data_source"] == "synthetic" and row["agent_name"] == AGENT_NAME
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["prompt"][0]["content"] == SYSTEM_PROMPT and "<tool_call>" in SYSTEM_PROMPT
    assert list(row["reward_model"]["ground_truth"]) == ["Rome", "Roma"]
    assert row["extra_info"]["index"] == 1
    assert row["extra_info"]["tools_kwargs"]["search"]["create_kwargs"]["corpus"] == "toy"


def test_export_takes_only_train_datasets(tmp_path):
    paths = export(prepared(tmp_path, datasets=["synthetic_cf"]), tmp_path / "verl")
    assert ids(paths["train"]) == ["q6"] and ids(paths["val"]) == ["q7"]  # q1-q5: other datasets
    paths = export(prepared(tmp_path, datasets=["synthetic"]), tmp_path / "all")
    assert ids(paths["val"]) == ["q3", "q8", "q7"]  # no cap: every dev question of the datasets


def test_yes_no_questions_all_balanced_or_none_on_both_backends(tmp_path):
    """train.yes_no: every train question (all), a seeded subset of the "no" questions as large as the "yes" ones
    (balance), or no yes/no question (none); the others in order. The verl export and the local trainer's pool are
    the same questions."""
    answers = ["No", "yes", "Paris", "no", "no", "Yes", "no", "Rome", "no"]
    qs = [Question(f"t{i}", f"Question {i}?", [a], "synthetic", "train", [], "toy") for i, a in enumerate(answers)]
    qs.append(Question("d0", "Dev?", ["no"], "synthetic", "dev", [], "toy"))
    by_id = {q.id: q.answers[0].lower() for q in qs}
    plain = export(prepared(tmp_path, qs), tmp_path / "plain")
    assert ids(plain["train"]) == [q.id for q in qs[:-1]]  # all by default: every train question
    cfg = prepared(tmp_path, qs, yes_no="balance")
    kept = ids(export(cfg, tmp_path / "balanced")["train"])
    assert [by_id[i] for i in kept].count("yes") == [by_id[i] for i in kept].count("no") == 2
    assert [i for i in kept if by_id[i] not in ("yes", "no")] == ["t2", "t7"] and kept == sorted(kept)
    assert kept == [q.id for q in train_questions(qs, cfg)]  # the local trainer draws from the same pool
    assert kept == ids(export(cfg, tmp_path / "again")["train"])  # seeded
    cfg = prepared(tmp_path, qs, yes_no="none")
    assert ids(export(cfg, tmp_path / "none")["train"]) == ["t2", "t7"] == [q.id for q in train_questions(qs, cfg)]


def test_a_train_pool_that_yes_no_none_empties_names_the_key_on_both_backends(tmp_path):
    """Every train question answers yes or no: with train.yes_no none no question is left, and both backends stop
    in one line that names train.yes_no, before any model is loaded (ConfigError: the CLI prints it, no traceback)."""
    qs = [Question(f"t{i}", f"Question {i}?", [a], "synthetic", "train", [], "toy")
          for i, a in enumerate(["yes", "No"])]  # fmt: skip
    qs.append(Question("d0", "Dev?", ["Paris"], "synthetic", "dev", [], "toy"))
    cfg = prepared(tmp_path, qs, yes_no="none")
    empty = r"no questions in split 'train' of train.datasets=\['synthetic'\], train.yes_no='none'$"
    with pytest.raises(DataError, match=empty):
        export(cfg, tmp_path / "verl")
    named = r"train.datasets=\['synthetic'\], train.yes_no='none': no train-split questions in "
    with pytest.raises(ConfigError, match=named):
        build_trainer(cfg)
    assert train_questions(qs, prepared(tmp_path, qs)) == qs[:2]  # with yes_no all the same file has a pool


def test_rlhf_dataset_reads_our_parquet(tmp_path, tokenizer):
    cfg = prepared(tmp_path)
    paths = export(cfg, tmp_path / "verl")
    data_cfg = verl_config(cfg).data
    data_cfg.filter_overlong_prompts = False  # the filter is the next test's (datasets pickles the tokenizer: 25 s for Qwen's)
    ds = RLHFDataset(str(paths["train"]), tokenizer, data_cfg)
    assert len(ds) == 2
    item = ds[0]
    assert item["raw_prompt"][1]["content"] == "Question: What is the capital of France?"
    assert item["agent_name"] == AGENT_NAME and item["index"] == 0
    assert item["tools_kwargs"] == {"search": {"create_kwargs": {"corpus": "toy", "supporting_ids": ["fr"]}}}
    assert list(item["reward_model"]["ground_truth"]) == ["Paris"]
    prompt = tokenizer.apply_chat_template(item["raw_prompt"], tokenize=False, add_generation_prompt=True)
    assert SYSTEM_PROMPT in prompt and prompt.count(SYSTEM_PROMPT) == 1  # ours, not the template's default


@pytest.mark.parametrize("tokenizer", ["tiny", "smollm2"], indirect=True)  # the filter does not depend on the template
def test_rlhf_dataset_drops_prompts_longer_than_max_prompt_length(tmp_path, tokenizer):
    cfg = prepared(tmp_path)
    paths = export(cfg, tmp_path / "verl")
    data_cfg = verl_config(cfg).data
    data_cfg.max_prompt_length = 8  # shorter than the system prompt alone
    assert len(RLHFDataset(str(paths["train"]), tokenizer, data_cfg)) == 0


def test_missing_prepared_file_names_it(tmp_path):
    cfg = make_cfg(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"prepared/questions.parquet: not found \(run the prepare stage first"):
        export(cfg, tmp_path / "verl")


def test_no_dev_split_is_a_data_error_and_writes_nothing(tmp_path):
    cfg = prepared(tmp_path, [q for q in QUESTIONS if q.split == "train" or q.dataset == "hotpotqa"])
    with pytest.raises(DataError, match=r"questions.parquet: no questions in split 'dev' of train.datasets=\['synthetic'\]"):
        export(cfg, tmp_path / "verl")
    assert not (tmp_path / "verl" / "train.parquet").exists()
