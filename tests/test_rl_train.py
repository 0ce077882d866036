"""The local trainer end to end on a small world: every algorithm steps, checkpoints resume exactly after
kill -9, a non-finite loss skips the step, the final model is saved in HF format."""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import components.data.prepare as prepare
import components.model.base_model as base_model
import components.retrieval.index as index
from components.config import parse_config
from components.rl import checkpoint as ckpt
from components.rl import train
from components.rl.advantages import compute_advantages
from components.rl.batch import collate
from components.rl.losses import aggregate, kl_to_reference, policy_logprobs, policy_loss, value_loss
from components.rollout.engine import rollout
from components.tracking.tracker import NullTracker
from tests.toy import small_raw


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


@pytest.mark.parametrize("algorithm", ["grpo", "grpo_process", "ppo", "rloo", "reinforce_plus_plus",
                                       "reinforce_plus_plus_baseline"])  # fmt: skip
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
    assert 0 <= steps[2]["train/support_recall"] <= 1 and 0 <= steps[2]["train/answer_seen"] <= 1
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
    # A fault no real run produces on demand: NaN logits, only in the update's forward (rollouts run without grad).
    poison = trainer.policy.get_output_embeddings().register_forward_hook(
        lambda module, args, out: out * float("nan") if torch.is_grad_enabled() else out)
    metrics, _ = trainer.step(0)
    assert metrics["skipped_nonfinite"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())
    poison.remove()
    metrics, _ = trainer.step(1)
    assert metrics["skipped_nonfinite"] == 0.0
    assert any(not torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())
    with torch.no_grad():
        next(trainer.policy.parameters()).fill_(float("nan"))
    with pytest.raises(ckpt.NonFiniteCheckpoint):
        ckpt.save(tmp_path / "ck", 1, {"policy": trainer.policy}, {}, {})
    assert ckpt.latest(tmp_path / "ck") is None


def test_episodes_without_advantage_are_skipped_and_the_update_is_unchanged(prepared, tmp_path):
    """GRPO groups that all scored alike have zero advantage: the trainer skips them; the same gradient step."""
    cfg = parse_config(small_raw(fresh(prepared, tmp_path), steps=1, eval_every=0, questions_per_step=3,
                                 micro_batch_size=2))  # fmt: skip
    skipping, full = train.build_trainer(cfg), train.build_trainer(cfg)
    full._rows_to_update = lambda adv, mask: torch.arange(len(adv))
    for t in (skipping, full):  # plain SGD: the step is the gradient itself (Adam's g / sqrt(v) magnifies rounding near 0)
        t.opt = torch.optim.SGD(t.trainable, lr=1.0)
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
        assert torch.allclose(after[k], reference[k], atol=1e-6), (k, float((after[k] - reference[k]).abs().max()))


def reference_update(trainer: train.Trainer, batch) -> dict[str, float]:
    """The update written straight through the pure functions, one loop (the trainer's code before it was split)."""
    tc = trainer.tc
    mask = batch.action_mask if tc.mask.loss else batch.response_mask
    values = trainer._values(batch) if trainer.critic is not None else None
    adv, returns = compute_advantages(tc, batch.token_rewards, batch.action_mask, batch.response_mask, batch.index,
                                      values)  # fmt: skip
    rows = trainer._rows_to_update(adv, mask)
    parts = [(mb, *batch.trimmed(mb)) for mb in trainer._micro(batch, rows)]
    old = torch.zeros_like(batch.response_mask)
    with torch.no_grad():
        for mb, b, r in parts:
            old[mb, :r] = policy_logprobs(trainer.policy, b, tc.temperature, mask[mb, :r])[0]
    n_tokens, n_seqs = int(mask.sum()), len(batch)
    sums = dict.fromkeys(["pg_loss", "ppo_kl", "pg_clipfrac", "kl_ref", "value_loss", "grad_norm"], 0.0)
    for _ in range(tc.ppo_epochs):
        trainer.opt.zero_grad(set_to_none=True)
        if trainer.critic_opt is not None:
            trainer.critic_opt.zero_grad(set_to_none=True)
        for mb, b, r in parts:
            m = mask[mb, :r]
            logp, entropy = policy_logprobs(trainer.policy, b, tc.temperature, m)
            pg, pg_metrics = policy_loss(tc, old[mb, :r], logp, adv[mb, :r], m, n_tokens, n_seqs)
            loss = pg - tc.entropy_coef * aggregate(tc, entropy, m, n_tokens, n_seqs)
            if trainer.ref is not None:
                with torch.no_grad():
                    ref_logp, _ = policy_logprobs(trainer.ref, b, tc.temperature, m)
                kl = aggregate(tc, kl_to_reference(tc, logp, ref_logp), m, n_tokens, n_seqs)
                loss = loss + tc.kl_coef * kl
                sums["kl_ref"] += float(kl.detach())
            if trainer.critic is not None:
                vf, _ = value_loss(tc, trainer.critic.values(b), returns[mb, :r], values[mb, :r], m, n_tokens, n_seqs)
                loss = loss + vf
                sums["value_loss"] += float(vf.detach())
            loss.backward()
            sums["pg_loss"] += float(pg.detach())
            sums["ppo_kl"] += pg_metrics["actor/ppo_kl"] * len(b) / n_seqs
            sums["pg_clipfrac"] += pg_metrics["actor/pg_clipfrac"] * len(b) / n_seqs
        sums["grad_norm"] += float(torch.nn.utils.clip_grad_norm_(trainer.trainable, tc.max_grad_norm))
        trainer.opt.step()
        if trainer.critic_opt is not None:
            torch.nn.utils.clip_grad_norm_(trainer.critic.parameters(), tc.max_grad_norm)
            trainer.critic_opt.step()
    return {k: v / tc.ppo_epochs for k, v in sums.items()}


@pytest.mark.parametrize("over", [
    {"algorithm": "grpo", "kl_coef": 0.1, "entropy_coef": 0.01, "ppo_epochs": 2,
     "loss_agg_mode": "seq-mean-token-mean"},
    {"algorithm": "ppo", "ppo_epochs": 2, "gamma": 0.9, "lam": 0.8, "mask": {"loss": False}},
], ids=["grpo-kl-entropy", "ppo"])  # fmt: skip
def test_the_update_equals_the_losses_written_out_to_the_last_bit(prepared, tmp_path, over):
    """Trainer.update (old log-probs, micro-batch losses, guarded step) against the same step written straight
    through the pure loss functions: same metrics and same weights, policy, critic and optimizer state, bit for bit."""
    cfg = parse_config(small_raw(fresh(prepared, tmp_path), steps=1, eval_every=0, micro_batch_size=2, **over))
    trainer, reference = train.build_trainer(cfg), train.build_trainer(cfg)
    qs = trainer.sample_questions(0)
    trajs = rollout(trainer.policy, trainer.chat, trainer.env, [q for q in qs for _ in range(3)], cfg.agent,
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    batch = collate(trajs, trainer.chat.pad_id)
    for i in range(len(batch)):  # rewards that differ within each group: every row carries signal
        batch.token_rewards[i, int(batch.action_mask[i].nonzero().max())] += (i % 3) / 2
    got, want = trainer.update(batch, 0), reference_update(reference, batch)
    assert got["skipped_nonfinite"] == 0 and got["updated_fraction"] == 1.0
    assert all(got[k] == want[k] for k in got if k in want), {k: (got[k], want[k]) for k in got if k in want}
    assert got["grad_norm"] > 0 and ("kl_ref" in got) == (cfg.train.kl_coef > 0)
    assert ("value_loss" in got) == (cfg.train.algorithm == "ppo")
    for mine, theirs in [(trainer.policy, reference.policy), (trainer.critic, reference.critic)]:
        if mine is not None:
            a, b = mine.state_dict(), theirs.state_dict()
            assert all(torch.equal(a[k], b[k]) for k in a)
    assert tensor_equal(trainer.opt.state_dict()["state"], reference.opt.state_dict()["state"])
    assert any(not torch.equal(v, p) for v, p in zip(trainer.policy.state_dict().values(),
                                                     train.build_trainer(cfg).policy.state_dict().values()))


def tensor_equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(tensor_equal(a[k], b[k]) for k in a)
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


# Kill -9 at exact points: a real SIGKILL of a real `train` stage process (MLflow store, curve.csv), then resume.
# The base model is primed enough to search (a model that never searches never meets a retriever tie).


def resume_raw(art: Path) -> dict:
    raw = small_raw(art, steps=10, eval_every=2, checkpoint_every=3)
    raw["model"]["tiny"]["priming"].update(first_turn_steps=400, steps=400, lr=1e-2, probe_every=25)
    return raw


@pytest.fixture(scope="module")
def primed(tmp_path_factory):
    art = tmp_path_factory.mktemp("primed")
    cfg = parse_config(resume_raw(art))
    prepare.run(cfg, NullTracker())
    index.run(cfg, NullTracker())
    base_model.run(cfg, NullTracker())
    return art

RUNNER = """
import json, os, signal, sys
from contextlib import contextmanager
from pathlib import Path
from components.config import parse_config
from components.rl import checkpoint as ckpt, train
from components.stages import run_stage
from tests.test_rl_train import resume_raw

where, _, at = (sys.argv[2] if len(sys.argv) > 2 else "").partition(":")
raw = resume_raw(Path(sys.argv[1]))
raw["train"].update(json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
def die(point, n):
    if point == where and n == int(at):
        print("KILLED", point, n, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
step, evaluate, save = train.Trainer.step, train.Trainer.evaluate, ckpt.save
def step_(self, s):
    out = step(self, s)
    die("step", s + 1)  # the step is done, not yet evaluated or checkpointed
    return out
def evaluate_(self, n):
    out = evaluate(self, n)
    die("eval", n)  # evaluated, not yet checkpointed
    return out
atomic = ckpt.atomic_path
def save_(root, n, *args, **kwargs):
    @contextmanager
    def atomic_(target, **kw):
        with atomic(target, **kw) as tmp:
            yield tmp
            die("writing", n)  # checkpoint written in its temp dir, not yet moved in place
    ckpt.atomic_path = atomic_
    out = save(root, n, *args, **kwargs)
    ckpt.atomic_path = atomic
    die("saved", n)  # checkpoint written, its metrics not yet flushed to MLflow
    return out
train.Trainer.step, train.Trainer.evaluate, ckpt.save = step_, evaluate_, save_
run_stage("train", parse_config(raw))
"""


def _train(art: Path, kill: str = "", **train_over) -> subprocess.CompletedProcess:
    """The train stage in a fresh process, MLflow store and artifacts under art's parent; SIGKILLed at `kill`."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "MLFLOW_TRACKING_URI": f"sqlite:///{art.parent / 'mlflow.db'}"}
    return subprocess.run([sys.executable, "-c", RUNNER, str(art), kill, json.dumps(train_over)], capture_output=True,
                          text=True, env=env, cwd=art.parent, timeout=300)  # fmt: skip


def _curve(art: Path) -> list[dict[str, str]]:
    """curve.csv without the timing columns (wall-clock figures differ between any two runs)."""
    with open(art / "train" / "curve.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if not re.search(r"(_s|_seconds)$", k)} for r in rows]


def _mlflow_history(art: Path) -> dict[str, list[tuple[int, float]]]:
    """Every per-step metric (train/, dev/) of the last finished train run: key -> [(step, value)] as logged,
    each step once (checked here: the stage's summary must not repeat a step-0 value)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{art.parent / 'mlflow.db'}")
    exp = client.get_experiment_by_name("agentr1")
    [run] = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=1,
                               order_by=["attributes.start_time DESC"])  # fmt: skip
    keys = [k for k in run.data.metrics if k.startswith(("train/", "dev/")) and not re.search(r"_s$", k)]
    history = {k: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)) for k in keys}
    twice = {k: [s for s, _ in h] for k, h in history.items() if len({s for s, _ in h}) != len(h)}
    assert not twice, f"steps logged twice: {twice}"
    return history


def _trace_steps(art: Path) -> dict[str, int]:
    """How many training traces the store holds per step, over every run (a killed run's included); each trace
    must carry its scores once (a trace logged again under the same id would carry them twice)."""
    from collections import Counter

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{art.parent / 'mlflow.db'}")
    exp = client.get_experiment_by_name("agentr1")
    traces = [t for t in client.search_traces([exp.experiment_id], max_results=1000)
              if t.info.tags.get("agentr1.stage") == "train"]  # fmt: skip
    scores = [sorted(a.name for a in t.info.assessments) for t in traces]
    assert all(s == ["em", "f1", "outcome"] for s in scores), scores
    return dict(Counter(t.info.tags["agentr1.step"] for t in traces))


def _weights(art: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(art / "models" / "trained" / "model.safetensors")


def test_resume_after_kill_9_at_any_point_is_bit_identical(primed, tmp_path):
    """Killed after step 5 (evaluated at 4, checkpoint at 3) and after writing checkpoint 9 before its metrics
    reached MLflow (evaluated at 8), each time resumed. The result equals an uninterrupted run: weights, the
    curve, every step's MLflow metrics exactly once, and each evaluated step's traces once in the store (step 4's
    traces were logged by the killed run and are not logged again)."""
    ref_art = fresh(primed, tmp_path / "ref")
    done = _train(ref_art)
    assert done.returncode == 0, done.stderr[-3000:]

    art = fresh(primed, tmp_path / "killed")
    root = train.checkpoint_root(parse_config(resume_raw(art)))
    for kill, last_ckpt in [("step:5", 3), ("saved:9", 9)]:
        proc = _train(art, kill)
        assert proc.returncode == -signal.SIGKILL and f"KILLED {kill.replace(':', ' ')}" in proc.stdout, proc.stderr[-3000:]
        assert ckpt.latest(root).name == f"step-{last_ckpt:08d}"
    resumed = _train(art)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    searches = [float(r["train/searches"]) for r in _curve(ref_art)[1:]]
    assert sum(searches) > 0  # the policy searched, so retriever ties could matter
    ref_w, w = _weights(ref_art), _weights(art)
    assert ref_w.keys() == w.keys() and all(torch.equal(ref_w[k], w[k]) for k in ref_w)
    curve = _curve(art)
    assert [int(r["step"]) for r in curve] == list(range(11))  # every step exactly once, step 0 the first eval
    assert curve == _curve(ref_art)
    history = _mlflow_history(art)
    assert len(history) > 10 and all([s for s, _ in h] == list(range(1, 11)) for k, h in history.items()
                                     if k.startswith("train/"))  # fmt: skip
    assert [s for s, _ in history["dev/synthetic/em"]] == [0, 2, 4, 6, 8, 10]
    assert history == _mlflow_history(ref_art)
    per_step = min(resume_raw(art)["train"]["questions_per_step"], 8)  # tracking.traces: 8
    assert _trace_steps(art) == _trace_steps(ref_art) == {str(s): per_step for s in (2, 4, 6, 8, 10)}


def test_a_run_that_stopped_at_its_target_resumes_to_the_same_end(primed, tmp_path):
    """stop_at_target: killed right after writing the target step's checkpoint. The resumed run adds no step past
    the target (it went on to train.steps) and equals the uninterrupted one."""
    over = {"target_em": 0.0, "stop_at_target": True}  # the first evaluation (step 2) reaches it
    ref_art = fresh(primed, tmp_path / "ref")
    done = _train(ref_art, **over)
    assert done.returncode == 0, done.stderr[-3000:]
    art = fresh(primed, tmp_path / "killed")
    root = train.checkpoint_root(parse_config({**resume_raw(art), "train": {**resume_raw(art)["train"], **over}}))
    proc = _train(art, "saved:2", **over)
    assert proc.returncode == -signal.SIGKILL and ckpt.latest(root).name == "step-00000002"
    resumed = _train(art, **over)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [int(r["step"]) for r in _curve(art)] == [0, 1, 2] and _curve(art) == _curve(ref_art)
    ref_w, w = _weights(ref_art), _weights(art)
    assert all(torch.equal(ref_w[k], w[k]) for k in ref_w)
    assert _mlflow_history(art) == _mlflow_history(ref_art)


def test_a_damaged_checkpoint_falls_back_to_the_previous_one_then_stops_with_a_message(prepared, tmp_path, monkeypatch):
    art = fresh(prepared, tmp_path)
    raw = small_raw(art, steps=6, eval_every=0, checkpoint_every=2)
    cfg = parse_config(raw)
    root = train.checkpoint_root(cfg)
    step = train.Trainer.step

    def crash_at_5(self, s):
        if s == 4:
            raise KeyboardInterrupt  # an interrupted run: checkpoints 2 and 4 are on disk
        return step(self, s)

    monkeypatch.setattr(train.Trainer, "step", crash_at_5)
    with pytest.raises(KeyboardInterrupt):
        train.run(cfg, NullTracker())
    monkeypatch.setattr(train.Trainer, "step", step)
    assert sorted(p.name for p in root.iterdir() if p.name != ".lock") == ["step-00000002", "step-00000004"]  # two kept
    weights = root / "step-00000004" / "weights.pt"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)

    rec = Recorder()
    with pytest.warns(UserWarning, match=f"{weights}: SHA-256 does not match"):
        train.run(cfg, rec)
    assert rec.tags["resumed_from_step"] == "2" and sorted(rec.metrics) == [1, 2, 3, 4, 5, 6]

    # every checkpoint damaged: the CLI stops with a message naming them and what to do, no traceback
    damaged = sorted(p for p in root.iterdir() if p.name != ".lock")  # .lock: the writer lock
    for d in damaged:
        (d / "weights.pt").write_bytes(b"\0" * 100)
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(raw))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    proc = subprocess.run([sys.executable, "-m", "components.cli", "train", "-p", str(params)], capture_output=True,
                          text=True, env=env, cwd=Path(__file__).resolve().parents[1], timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    err = " ".join(proc.stderr.split())  # rich wraps long lines
    assert "no usable checkpoint" in err and "Traceback" not in proc.stderr
    assert len(damaged) == 2 and all(str(d / "weights.pt") in err for d in damaged) and f"delete {root}" in err


def test_half_copied_or_unloadable_checkpoints_are_skipped_with_a_warning_naming_them(tmp_path):
    """Faults beyond a hash mismatch: a newer step dir without its state file (a half copy), an empty one, and one
    whose files match SHA256SUMS but do not load. Each is skipped, named, for the last good checkpoint. A killed
    write's temp dir is removed by the next save."""
    import hashlib

    model, root = torch.nn.Linear(3, 2), tmp_path / "ck"
    opt = torch.optim.AdamW(model.parameters())
    leftover = root / ".step-00000002.k1lled00" / "step-00000002"  # atomic_path's temp, as kill -9 mid-write
    leftover.mkdir(parents=True)  # leaves it (checks/resume_probe.py kills real writes)
    ckpt.save(root, 2, {"policy": model}, {"policy": opt}, {"curve": []})
    assert not leftover.parent.exists()  # the next save removes it
    good = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.add_(1.0)
    for step in (4, 6, 8):
        ckpt.save(root, step, {"policy": model}, {"policy": opt}, {"curve": []}, keep=4)
    (root / "step-00000004" / "state.json").write_text("{not json")  # rehashed: verifies, does not load
    (root / "step-00000004" / "SHA256SUMS").write_text("".join(
        f"{hashlib.sha256((root / 'step-00000004' / n).read_bytes()).hexdigest()}  {n}\n" for n in ("weights.pt", "state.json")))
    (root / "step-00000006" / "state.json").unlink()  # half copied
    shutil.rmtree(root / "step-00000008")
    (root / "step-00000008").mkdir()  # empty
    with pytest.warns(UserWarning) as caught:
        state = ckpt.load_latest(root, {"policy": model}, {"policy": opt})
    shown = [str(w.message) for w in caught]
    assert state["step"] == 2 and all(torch.equal(good[k], v) for k, v in model.state_dict().items())
    for step in (4, 6, 8):
        assert any(str(root / f"step-0000000{step}") in m for m in shown), (step, shown)
    assert any("does not load (JSONDecodeError" in m for m in shown) and shown[-1].startswith("resuming from the older")


def test_a_time_budget_stops_after_the_step_that_passes_it_and_the_next_call_resumes(prepared, tmp_path):
    """train.max_minutes: each call trains until its budget is spent, then evaluates and checkpoints that step; a
    second call resumes there. Here every step passes a 1 ms budget: one step a call, evaluated and saved."""
    art = fresh(prepared, tmp_path)
    cfg = parse_config(small_raw(art, steps=6, eval_every=4, checkpoint_every=4, max_minutes=1e-5))
    root = train.checkpoint_root(cfg)
    first = Recorder()
    train.run(cfg, first)
    assert sorted(s for s in first.metrics if s) == [1] and "dev/synthetic/em" in first.metrics[1]
    assert ckpt.latest(root).name == "step-00000001"
    cfg = parse_config(small_raw(art, steps=6, eval_every=4, checkpoint_every=4, max_minutes=2e-5))
    assert train.checkpoint_root(cfg) == root  # another budget goes on from the same checkpoints
    second = Recorder()
    result = train.run(cfg, second)
    assert second.tags["resumed_from_step"] == "1" and max(second.metrics) == 2  # step 1's row carried into its curve
    assert result["steps"] == 2.0 and ckpt.latest(root).name == "step-00000002"


def test_the_verl_backend_refuses_a_time_budget(tmp_path):
    raw = small_raw(tmp_path, max_minutes=5)
    raw["train"]["backend"] = "verl"
    with pytest.raises(ValueError, match="train.max_minutes is a local-trainer knob"):
        parse_config(raw)


def test_the_verl_backend_refuses_a_curriculum(tmp_path):
    raw = small_raw(tmp_path, curriculum={"steps": 5})
    raw["train"]["backend"] = "verl"
    with pytest.raises(ValueError, match="train.curriculum.steps is a local-trainer knob"):
        parse_config(raw)


def test_a_curriculum_draws_the_longer_questions_first_then_all(tmp_path):
    """train.curriculum: the first `steps` steps draw only questions of `min_hops` hops or more; later steps draw from
    every training question; a curriculum no question meets is refused by its key."""
    raw = small_raw(tmp_path / "art", questions_per_step=8, curriculum={"steps": 6, "min_hops": 2})
    raw["data"]["synthetic"]["min_hops"] = 1  # a world of 1- and 2-hop questions
    cfg = parse_config(raw)
    for stage in (prepare, index, base_model):
        stage.run(cfg, NullTracker())
    trainer = train.build_trainer(cfg)

    def hops(questions):
        return {len(q.supporting_ids) for q in questions}

    assert hops(trainer.train_qs) == {1, 2}
    drawn = [trainer.sample_questions(step) for step in range(30)]
    assert all(hops(qs) == {2} for qs in drawn[:6])  # 48 draws from a pool about half 1-hop
    assert set().union(*map(hops, drawn[6:])) == {1, 2}
    assert drawn[6:] == [trainer.sample_questions(step) for step in range(6, 30)]  # from (seed, step) alone

    raw["train"]["curriculum"]["min_hops"] = 3
    with pytest.raises(ValueError, match="train.curriculum.min_hops=3: no train-split question"):
        train.build_trainer(parse_config(raw))
