"""Prepared questions -> verl's RL parquet schema (one row per question).

    prompt          chat messages: the agent's system prompt (with the tool instructions) and the question turn
    data_source     the question's dataset
    agent_name      the agent loop that runs it (agent_loop.AGENT_NAME)
    reward_model    {"style": "rule", "ground_truth": [answers]}
    extra_info      {"index", "id", "split", "corpus", "tools_kwargs": {"search": {"create_kwargs": {...}}}}
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from components.agent.prompts import SYSTEM_PROMPT, initial_messages, system_prompt_text
from components.train.local.train import COUNTERFACTUAL, SYNTHETIC, curve_questions, train_questions, yes_no_note
from components import artifacts
from components.data.prepare import read_questions
from components.data.schema import DataError, Question
from components.io import atomic_path

AGENT_NAME = "agentr1_tool_agent"
TRAIN_SPLIT, EVAL_SPLIT = "train", "dev"


def row(q: Question, index: int, system_prompt: str | None = SYSTEM_PROMPT) -> dict[str, Any]:
    return {
        "data_source": q.dataset,
        "agent_name": AGENT_NAME,
        "prompt": initial_messages(q.question, system_prompt),
        "ability": "multihop_qa",
        "reward_model": {"style": "rule", "ground_truth": list(q.answers)},
        "extra_info": {
            "index": index,
            "id": q.id,
            "split": q.split,
            "corpus": q.corpus,
            "tools_kwargs": {"search": {"create_kwargs": {"corpus": q.corpus, "supporting_ids": list(q.supporting_ids)}}},
        },
    }


def write_split(questions: Sequence[Question], path: str | Path, system_prompt: str | None = SYSTEM_PROMPT) -> int:
    with atomic_path(path) as tmp:
        pd.DataFrame([row(q, i, system_prompt) for i, q in enumerate(questions)]).to_parquet(tmp, index=False)
    return len(questions)


def export(cfg, out_dir: str | Path, eval_questions: int | None = None) -> dict[str, Path]:
    """Write train.parquet and val.parquet under `out_dir`; returns their paths.

    `eval_questions` caps each dataset's val questions (the last of its dev split, as the local dev curve)."""
    source = artifacts.require(cfg, artifacts.questions(cfg))
    questions = read_questions(source)
    datasets = cfg.train.datasets  # as the local trainer: train.datasets' train split, their dev split for val
    val_sets = [*datasets, COUNTERFACTUAL] if SYNTHETIC in datasets else datasets
    splits = {
        "train": train_questions(questions, cfg),
        "val": [q for ds in val_sets for q in curve_questions(questions, ds, eval_questions)],
    }
    for name, qs in splits.items():
        if not qs:
            split = TRAIN_SPLIT if name == "train" else EVAL_SPLIT
            note = yes_no_note(cfg) if name == "train" else ""
            raise DataError(f"{source}: no questions in split {split!r} of train.datasets={list(datasets)}{note}")
        bad = next((q for q in qs if not q.answers), None)
        if bad is not None:
            raise DataError(f"{source}: question {bad.id!r} has no answers")
    out = Path(out_dir)
    paths = {name: out / f"{name}.parquet" for name in splits}
    system_prompt = system_prompt_text(cfg.agent.system_prompt)  # the same prompt the local trainer uses
    for name, qs in splits.items():
        write_split(qs, paths[name], system_prompt)
    return paths
