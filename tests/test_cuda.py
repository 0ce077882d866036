"""The local trainer on a CUDA GPU (skipped where there is none, as in CI): the tiny world is prepared, indexed and
primed, then trained two steps with GRPO and with PPO (critic, two epochs), evaluated and saved, all on the GPU."""

from __future__ import annotations

import shutil

import pytest
import torch

from components.config import parse_config
from components.data import prepare
from components.base_model import base_model
from components.retrieval import index
from components.train.local import train
from components.tracking.tracker import NullTracker
from tests.toy import small_raw

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_grpo_and_ppo_train_on_cuda(tmp_path):
    primed = tmp_path / "primed"
    for algorithm in ("grpo", "ppo"):
        art = tmp_path / algorithm
        raw = small_raw(art, algorithm=algorithm, steps=2, eval_every=2, ppo_epochs=2 if algorithm == "ppo" else 1)
        raw["model"]["device"] = "cuda"
        cfg = parse_config(raw)
        if not primed.exists():
            for stage in (prepare, index, base_model):
                stage.run(cfg, NullTracker())
            shutil.copytree(art, primed)
        else:
            shutil.copytree(primed, art, dirs_exist_ok=True)
        trainer = train.build_trainer(cfg)
        assert trainer.device.type == "cuda"
        result = train.run(cfg, NullTracker())
        assert result["steps"] == 2.0 and "dev/synthetic/em" in result
