"""The local trainer end to end on a small world: every algorithm steps, checkpoints resume exactly after
kill -9, a non-finite loss skips the step, the final model is saved in HF format."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import components.data.prepare as prepare
import components.model.base_model as base_model
import components.retrieval.index as index
from components.config import parse_config
from components.rl import checkpoint as ckpt
from components.rl import train
from components.rl.batch import collate
from components.rollout.engine import rollout
from components.tracking.tracker import NullTracker


def small_raw(art: Path, **train_over) -> dict:
    return {
        "project": {"seed": 3, "artifacts_dir": str(art)},
        "data": {"datasets": [], "synthetic": {"seed": 7, "n_entities": 40, "n_relations": 4, "n_train": 60,
                                               "n_dev": 10, "n_test": 10}},  # fmt: skip
        "agent": {"system_prompt": False, "max_turns": 3, "max_tokens_per_turn": 12},
        "model": {"tiny": {"vocab_size": 600, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "num_key_value_heads": 1, "prime_first_turn_steps": 3,
                           "prime_steps": 3, "prime_batch_size": 4, "prime_probes": 8}},
        "train": {"steps": 4, "questions_per_step": 2, "group_size": 3, "micro_batch_size": 4, "eval_every": 2,
                  "eval_questions": 4, "checkpoint_every": 2, "log_trajectories_every": 2, **train_over},
    }  # fmt: skip


class Recorder(NullTracker):
    def __init__(self):
        self.metrics, self.texts, self.models, self.tags = {}, {}, [], {}

    def log_metrics(self, metrics, step=None):
        assert step not in self.metrics or step == 0, f"step {step} logged twice"
        self.metrics.setdefault(step, {}).update(metrics)

    def log_text(self, text, artifact_file):
        self.texts[artifact_file] = text

    def log_model(self, hf_dir, name):
        self.models.append((Path(hf_dir), name))
        return f"models:/{name}"

    def set_tags(self, tags):
        self.tags.update(tags)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    art = tmp_path_factory.mktemp("art")
    cfg = parse_config(small_raw(art))
    prepare.run(cfg, NullTracker())
    index.run(cfg, NullTracker())
    base_model.run(cfg, NullTracker())
    return art


def fresh(prepared: Path, tmp_path: Path) -> Path:
    """A copy of the prepared artifacts without any training state."""
    art = tmp_path / "art"
    shutil.copytree(prepared, art)
    return art


@pytest.mark.parametrize("algorithm", ["grpo", "ppo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_each_algorithm_trains_and_saves(prepared, tmp_path, algorithm):
    art = fresh(prepared, tmp_path)
    cfg = parse_config(small_raw(art, algorithm=algorithm, steps=2, kl_coef=0.1 if algorithm == "grpo" else 0.0))
    rec = Recorder()
    result = train.run(cfg, rec)
    assert result["steps"] == 2 and "dev/synthetic/em" in result and "dev/synthetic_cf/em" in result
    steps = rec.metrics
    assert set(steps) == {0, 1, 2}
    for key in ("train/reward", "train/em", "train/turns", "train/tool_call_validity", "train/entropy",
                "train/ppo_kl", "train/rollout_tokens_per_s", "train/step_s", "train/grad_norm"):  # fmt: skip
        assert key in steps[2], key
    if algorithm == "ppo":
        assert "train/value_loss" in steps[1]
    if algorithm == "grpo":
        assert "train/kl_ref" in steps[1]
    assert any("Q: Who is the" in t for t in rec.texts.values())
    out = art / "models" / "trained"
    assert (out / "config.json").is_file() and rec.models == [(out, "agent")]
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() > 0


def test_non_finite_loss_skips_the_step(prepared, tmp_path):
    art = fresh(prepared, tmp_path)
    cfg = parse_config(small_raw(art, steps=2, eval_every=0, entropy_coef=0.01))  # a gradient even without reward
    trainer = train.build_trainer(cfg)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    trainer.loss_hook = lambda step, loss: loss * float("nan")  # a fault no real run produces on demand
    metrics, _ = trainer.step(0)
    assert metrics["skipped_nonfinite"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())
    trainer.loss_hook = None
    metrics, _ = trainer.step(1)
    assert metrics["skipped_nonfinite"] == 0.0
    assert any(not torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())
    with torch.no_grad():
        next(trainer.policy.parameters()).fill_(float("nan"))
    with pytest.raises(ckpt.NonFiniteCheckpoint):
        ckpt.save(tmp_path / "ck", 1, {"policy": trainer.policy}, {}, {})
    assert ckpt.latest(tmp_path / "ck") is None


def test_episodes_without_advantage_are_skipped_and_the_update_is_unchanged(prepared, tmp_path):
    """GRPO groups that all scored alike have zero advantage: the trainer skips them; same parameters after."""
    cfg = parse_config(small_raw(fresh(prepared, tmp_path), steps=1, eval_every=0, questions_per_step=3,
                                 micro_batch_size=2))  # fmt: skip
    skipping, full = train.build_trainer(cfg), train.build_trainer(cfg)
    full._rows_to_update = lambda adv, mask: torch.arange(len(adv))
    qs = skipping.sample_questions(0)
    trajs = rollout(skipping.policy, skipping.chat, skipping.env, [q for q in qs for _ in range(3)], cfg.agent,
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    batch = collate(trajs, skipping.chat.pad_id)
    batch.token_rewards.zero_()
    batch.token_rewards[0, int(batch.action_mask[0].nonzero().max())] = 1.0  # only the first group has signal
    before = {k: v.clone() for k, v in skipping.policy.state_dict().items()}
    out = skipping.update(batch, 0)
    assert out["updated_fraction"] == pytest.approx(3 / 9)
    assert full.update(batch, 0)["updated_fraction"] == 1.0
    after, reference = skipping.policy.state_dict(), full.policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    for k in after:
        assert torch.allclose(after[k], reference[k], atol=1e-6), k


RUNNER = """
import json, sys
from components.config import parse_config
from components.rl import train
from tests.test_rl_train import Recorder, small_raw
from pathlib import Path
rec = Recorder()
cfg = parse_config(small_raw(Path(sys.argv[1]), steps=6, eval_every=0, checkpoint_every=2))
if len(sys.argv) > 2:
    import time
    orig = train.Trainer.step
    def slow(self, step):
        out = orig(self, step)
        print("STEP", step + 1, flush=True)
        time.sleep(0.5)
        return out
    train.Trainer.step = slow
train.run(cfg, rec)
print("METRICS", json.dumps({k: v["train/reward"] for k, v in rec.metrics.items()}))
"""


def _run(art: Path, slow: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    args = [sys.executable, "-c", RUNNER, str(art)] + (["slow"] if slow else [])
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                            cwd=Path(__file__).resolve().parents[1])  # fmt: skip


def _metrics(out: str) -> dict[int, float]:
    line = next(l for l in out.splitlines() if l.startswith("METRICS "))
    return {int(k): v for k, v in json.loads(line[8:]).items()}


def test_resume_after_kill_9_repeats_the_same_steps(prepared, tmp_path):
    ref_art = fresh(prepared, tmp_path / "ref")
    ref = _run(ref_art)
    reference = _metrics(ref.communicate(timeout=300)[0])
    assert sorted(reference) == [1, 2, 3, 4, 5, 6]

    art = fresh(prepared, tmp_path / "killed")
    proc = _run(art, slow=True)
    for line in proc.stdout:
        if line.startswith("STEP 3"):  # checkpoint at 2 is written, step 3 is done but not checkpointed
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    root = train.checkpoint_root(parse_config(small_raw(art, steps=6, eval_every=0, checkpoint_every=2)))
    assert ckpt.latest(root).name == "step-00000002"
    state = json.loads((ckpt.latest(root) / "state.json").read_text())
    assert state["flushed"] is True and state["step"] == 2

    resumed = _metrics(_run(art).communicate(timeout=300)[0])
    assert sorted(resumed) == [3, 4, 5, 6]  # steps 1-2 were logged before the kill; nothing lost or repeated
    assert resumed == {k: reference[k] for k in resumed}  # and they are the same steps
