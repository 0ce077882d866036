"""Shared pieces for the verl tests: a params Config in a temp project, a real BM25 index, the tiny tokenizer,
and verl's own Hydra config composed from our overrides (Hydra's compose API, same config module as main_ppo).
A pytest plugin (tests/conftest.py): its fixtures (cfg, tokenizer, smollm2, qwen) need no import."""

from __future__ import annotations

from pathlib import Path

import pytest

from components import artifacts
from components.config import Config, parse_config
from components.data.schema import Passage, Question

PASSAGES = [
    Passage("fr", "France", "Paris is the capital and largest city of France.", corpus="toy"),
    Passage("de", "Germany", "Berlin is the capital of Germany.", corpus="toy"),
    Passage("it", "Italy", "Rome is the capital city of Italy.", corpus="toy"),
]
QUESTIONS = [
    Question("q1", "What is the capital of France?", ["Paris"], "synthetic", "train", ["fr"], "toy"),
    Question("q2", "What is the capital of Italy?", ["Rome", "Roma"], "synthetic", "train", [], "toy"),
    Question("q3", "What is the capital of Germany?", ["Berlin"], "synthetic", "dev", ["de"], "toy"),
    Question("q4", "Which city is on the Nile?", ["Cairo"], "hotpotqa", "dev", ["eg"], "wiki"),
    Question("q5", "Which city is on the Thames?", ["London"], "hotpotqa", "train", ["uk"], "wiki"),
    Question("q6", "What is the capital of Spain?", ["Madrid"], "synthetic_cf", "train", [], "toy"),
    Question("q7", "What is the capital of Spain?", ["Paris"], "synthetic_cf", "dev", [], "toy"),
    Question("q8", "What is the capital of Italy?", ["Rome"], "synthetic", "dev", [], "toy"),
]
REWARD = {
    "answer_metric": "em",
    "format_penalty": 0.3,
    "valid_call": 0.1,
    "invalid_call": 0.2,
    "supporting": 0.5,
    "new_info": 0.05,
    "search_cost": 0.02,
}


def make_cfg(root: Path, **train: object) -> Config:
    return parse_config(
        {
            "project": {"artifacts_dir": str(root / "artifacts"), "data_dir": str(root / "data")},
            "retrieval": {"top_k": 2},
            "agent": {"max_turns": 4, "reward": REWARD},
            "train": {"backend": "verl", "questions_per_step": 4, "group_size": 2, **train},
        }
    )


def build_index(cfg: Config) -> None:
    from components.retrieval.factory import make_backend

    backend = make_backend(cfg)
    backend.build("toy", PASSAGES)
    backend.close()


def tiny_tokenizer():
    from components.model.tiny import build_tokenizer

    texts = [p.text for p in PASSAGES] + ["Question: what is the capital of France? search query answer"]
    return build_tokenizer(texts, vocab_size=400)


# the tiny model's, the real profile's (SmolLM2's ChatML template), the qwen profile's (Qwen's template with tools)
TOKENIZERS = ["tiny", "smollm2", "qwen"]


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    from tests.real_tokenizer import smollm2_tokenizer

    return smollm2_tokenizer(tmp_path_factory.mktemp("smollm2_tokenizer"))


@pytest.fixture(scope="session")
def qwen(tmp_path_factory):
    from tests.real_tokenizer import qwen_tokenizer

    return qwen_tokenizer(tmp_path_factory.mktemp("qwen_tokenizer"))


def named_tokenizer(request, name: str):
    return tiny_tokenizer() if name == "tiny" else request.getfixturevalue(name)


@pytest.fixture(params=TOKENIZERS)
def tokenizer(request):
    """Each verl test that takes this runs with every tokenizer and its chat template."""
    return named_tokenizer(request, request.param)


def save_tiny_model(cfg: Config) -> Path:
    """A small Qwen2 model + tokenizer where the base_model stage puts it (verl reads its config for PPO's critic)."""
    from components.config import TinyModelConfig
    from components.model.tiny import build_model

    tok = tiny_tokenizer()
    small = TinyModelConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                            num_key_value_heads=1, max_position_embeddings=256)  # fmt: skip
    path = artifacts.base_model(cfg)
    build_model(tok, small, seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def verl_config(cfg: Config):
    """verl's ppo_trainer config with our overrides, as the launch composes it."""
    from omegaconf import OmegaConf

    from components.train.verl.launch import compose

    return OmegaConf.create(compose(cfg))


@pytest.fixture
def cfg(tmp_path) -> Config:
    c = make_cfg(tmp_path)
    build_index(c)
    return c

