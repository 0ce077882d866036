"""The local trainer end to end on a small world: every algorithm steps, checkpoints resume exactly after
kill -9, a non-finite loss skips the step, the final model is saved in HF format."""

import copy
import csv
import dataclasses
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
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

import components.data.prepare as prepare
import components.base_model.base_model as base_model
import components.retrieval.index as index
from components.config import parse_config
from components.train.local import checkpoint as ckpt
from components.train.local import train
from components.train.local import update as rl_update
from components.train.local.advantages import compute_advantages
from components.train.local.batch import collate
from components.train.local.losses import policy_logprobs
from components.tracking.tracker import NullTracker
from tests.test_learning import learning_config, place_prior
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


def signal_batch(trainer: train.Trainer, cfg, group_size: int = 3):
    """A batch of the trainer's first step's episodes, rewards that differ within each group: every row has signal."""
    qs = trainer.sample_questions(0)
    trajs = trainer.episodes.rollout(trainer.policy, [q for q in qs for _ in range(group_size)],
                                     generator=torch.Generator().manual_seed(0))
    batch = collate(trajs, trainer.chat.pad_id)
    for i in range(len(batch)):
        batch.token_rewards[i, int(batch.action_mask[i].nonzero().max())] += (i % group_size) ** 2 / 2
    return batch


def sgd(trainer: train.Trainer) -> None:
    """Plain SGD at lr 1: the step is the gradient itself (Adam's g / sqrt(v) magnifies rounding near 0)."""
    trainer.opt = torch.optim.SGD(trainer.trainable, lr=1.0)
    if trainer.critic is not None:
        trainer.critic_opt = torch.optim.SGD(trainer.critic.parameters(), lr=1.0)


def test_episodes_without_advantage_are_skipped_and_the_update_is_unchanged(prepared, tmp_path, monkeypatch):
    """GRPO groups that all scored alike have zero advantage: the update skips them; the same gradient step."""
    cfg = parse_config(small_raw(fresh(prepared, tmp_path), steps=1, eval_every=0, questions_per_step=3,
                                 micro_batch_size=2))  # fmt: skip
    skipping, full = train.build_trainer(cfg), train.build_trainer(cfg)
    for t in (skipping, full):
        sgd(t)
    batch = signal_batch(skipping, cfg)
    batch.token_rewards.zero_()
    batch.token_rewards[0, int(batch.action_mask[0].nonzero().max())] = 1.0  # only the first group has signal
    before = {k: v.clone() for k, v in skipping.policy.state_dict().items()}
    out = rl_update.update(skipping.learner, batch, cfg.train, skipping.amp)
    assert out["updated_fraction"] == pytest.approx(3 / 9)
    monkeypatch.setattr(rl_update, "rows_with_signal", lambda adv, mask: torch.arange(len(adv)))
    assert rl_update.update(full.learner, batch, cfg.train, full.amp)["updated_fraction"] == 1.0
    after, reference = skipping.policy.state_dict(), full.policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    for k in after:
        assert torch.allclose(after[k], reference[k], atol=1e-6), (k, float((after[k] - reference[k]).abs().max()))


def moved_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` with seeded noise on every weight: a reference whose KL to the model is not 0."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    return out


def verl_loss(trainer: train.Trainer, ref, batch, tc):
    """The step's loss over the whole batch in one piece, from verl's functions alone: the vanilla policy loss
    (at ratio 1: the behaviour policy is the policy), entropy bonus, KL penalty to `ref`, value loss; and its terms."""
    mask = batch.action_mask if tc.mask.loss else batch.response_mask
    n_tokens, n_seqs = int(mask.sum()), len(batch)
    with trainer.amp():
        logp, entropy = policy_logprobs(trainer.policy, batch, tc.temperature, mask)
        vpred = trainer.critic.values(batch) if trainer.critic is not None else None
        with torch.no_grad():
            ref_logp = policy_logprobs(ref, batch, tc.temperature, mask)[0] if ref is not None else None
    values = vpred.detach() if vpred is not None else None
    adv, returns = compute_advantages(tc, batch.token_rewards, batch.action_mask, batch.response_mask, batch.index,
                                      values)  # fmt: skip
    actor = OmegaConf.create({"clip_ratio": tc.clip_ratio, "clip_ratio_low": tc.clip_ratio,
                              "clip_ratio_high": tc.clip_ratio, "clip_ratio_c": 3.0,
                              "global_batch_info": {"batch_num_tokens": n_tokens,
                                                    "global_batch_size": n_seqs}})  # fmt: skip
    pg, _ = core_algos.get_policy_loss_fn("vanilla")(logp.detach(), logp, adv, mask, tc.loss_agg_mode, actor, None)
    agg = dict(loss_mask=mask, loss_agg_mode=tc.loss_agg_mode, batch_num_tokens=n_tokens, global_batch_size=n_seqs)
    loss, terms = pg - tc.entropy_coef * core_algos.agg_loss(entropy, **agg), {"pg_loss": float(pg.detach())}
    if ref is not None:
        kl = core_algos.agg_loss(core_algos.kl_penalty(logp, ref_logp, tc.kl_penalty), **agg)
        loss, terms["kl_ref"] = loss + tc.kl_coef * kl, float(kl.detach())
    if vpred is not None:
        vf, _ = core_algos.compute_value_loss(vpred, returns, values, mask, tc.value_clip, tc.loss_agg_mode,
                                              batch_num_tokens=n_tokens, global_batch_size=n_seqs)  # fmt: skip
        loss, terms["value_loss"] = loss + vf, float(vf.detach())
    return loss, terms


@pytest.mark.parametrize("over", [
    {"algorithm": "grpo", "kl_coef": 0.1, "entropy_coef": 0.01, "loss_agg_mode": "seq-mean-token-mean"},
    {"algorithm": "rloo"},
    {"algorithm": "ppo", "gamma": 0.9, "lam": 0.8, "mask": {"loss": False}},
], ids=["grpo-kl-entropy", "rloo", "ppo"])  # fmt: skip
def test_the_update_takes_the_gradient_step_of_verls_losses_over_the_whole_batch(prepared, tmp_path, over):
    """One epoch in micro-batches of 2 equals one SGD step on the loss verl's functions give for the whole batch at
    once: the same loss terms, the same new weights (policy and critic)."""
    cfg = parse_config(small_raw(fresh(prepared, tmp_path), steps=1, eval_every=0, micro_batch_size=2,
                                 max_grad_norm=1e9, **over))  # fmt: skip
    trainer = train.build_trainer(cfg)
    sgd(trainer)
    batch = signal_batch(trainer, cfg)
    ref = None
    if cfg.train.kl_coef:  # a reference apart from the policy, so that the KL term is not 0
        ref = moved_copy(trainer.ref)
    params = [p for m in (trainer.policy, trainer.critic) if m is not None for p in m.parameters() if p.requires_grad]
    loss, want = verl_loss(trainer, ref, batch, cfg.train)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    expected = [p.detach() - g if g is not None else p.detach().clone() for p, g in zip(params, grads)]

    learner = dataclasses.replace(trainer.learner, ref=ref)
    got = rl_update.update(learner, batch, cfg.train, trainer.amp)
    assert got["updated_fraction"] > 0 and got["skipped_nonfinite"] == 0 and got["grad_norm"] > 0
    assert got.keys() >= want.keys() and ("value_loss" in got) == (trainer.critic is not None)
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-7), k
    assert want.get("kl_ref", 1.0) > 0
    for n, (a, b) in enumerate(zip(params, expected)):
        assert torch.allclose(a.detach(), b, atol=1e-6), (n, float((a.detach() - b).abs().max()))
    assert any(torch.count_nonzero(g) for g in grads if g is not None)  # the step moved the weights


def test_the_selective_kl_pulls_only_wrong_episodes_to_the_reference(prepared, tmp_path):
    """train.kl_on=wrong (DGPO): an update where every episode is right takes the step it takes with no reference;
    one where every episode is wrong takes the step of the KL on every episode; half and half lies apart from both."""
    art = fresh(prepared, tmp_path)

    def step(right: list[float], **over) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        cfg = parse_config(small_raw(art, steps=1, eval_every=0, micro_batch_size=2,
                                     max_grad_norm=1e9, algorithm="grpo", **over))  # fmt: skip
        torch.manual_seed(0)
        trainer = train.build_trainer(cfg)
        sgd(trainer)
        batch = signal_batch(trainer, cfg)
        batch.right = torch.tensor((right * len(batch))[: len(batch)])
        ref = moved_copy(trainer.policy).requires_grad_(False)  # a reference apart from the policy: KL > 0
        out = rl_update.update(dataclasses.replace(trainer.learner, ref=ref if cfg.train.kl_coef else None), batch,
                               cfg.train, trainer.amp)  # fmt: skip
        assert out["grad_norm"] > 0
        return {k: v.clone() for k, v in trainer.policy.state_dict().items()}, out

    plain, _ = step([1.0])
    all_right, out = step([1.0], kl_coef=1.0, kl_on="wrong")
    assert out["kl_ref"] == 0
    all_wrong, out_wrong = step([0.0], kl_coef=1.0, kl_on="wrong")
    everywhere, out_all = step([1.0], kl_coef=1.0, kl_on="all")
    half, out_half = step([1.0, 0.0], kl_coef=1.0, kl_on="wrong")
    assert out_wrong["kl_ref"] == pytest.approx(out_all["kl_ref"], rel=1e-6) and out_wrong["kl_ref"] > 0
    assert 0 < out_half["kl_ref"] < out_all["kl_ref"]
    moved = lambda a, b: max(float((a[k] - b[k]).abs().max()) for k in a)  # noqa: E731
    assert moved(all_right, plain) < 1e-6 and moved(all_wrong, everywhere) < 1e-6
    assert moved(everywhere, plain) > 1e-4 and moved(half, plain) > 1e-4 and moved(half, everywhere) > 1e-4


def test_a_step_keeps_its_entropy_bonus_to_itself(prepared, tmp_path):
    """train.entropy_floor raises the bonus of a step whose sampling entropy is below it; the trainer's config stays."""
    cfg = parse_config(small_raw(fresh(prepared, tmp_path), steps=1, eval_every=0, entropy_coef=0.001,
                                 entropy_floor=1e6, entropy_floor_coef=0.01))  # fmt: skip
    trainer = train.build_trainer(cfg)
    metrics, _ = trainer.step(0)
    assert metrics["entropy_coef"] == pytest.approx(0.011)
    assert trainer.tc is cfg.train and trainer.tc.entropy_coef == 0.001


def test_reread_trains_the_answer_read_again_in_groups_of_its_own(prepared, tmp_path, monkeypatch):
    """train.reread: after the episodes, each one's passages are read again above its question in one sampled answer
    turn (evaluate.reread's prompt). The update gets the episodes and the readings; a reading's only action is its
    answer, rewarded as evaluate.reread scores it (the plain answer, the closing tag optional), and its advantage
    comes from its own question's readings alone."""
    from components.agent.rewards import outcome_reward
    from components.evaluation.answers import read_answer
    from components.rollout.reread import reading_pass

    cfg = parse_config(small_raw(fresh(prepared, tmp_path), steps=1, eval_every=0, reread=True))
    trainer = train.build_trainer(cfg)
    collated, updated = [], []
    monkeypatch.setattr(train, "collate", lambda trajs, *a: collated.append((list(trajs), *a)) or collate(trajs, *a))
    monkeypatch.setattr(train, "rl_update", lambda learner, batch, tc, amp: updated.append(batch) or {})
    metrics, episodes = trainer.step(0)
    ((rows, _, _, groups),), (batch,) = collated, updated
    n = len(episodes)
    assert rows[:n] == episodes and len(rows) == len(batch) == 2 * n
    reads = rows[n:]
    assert groups == [t.episode.question.id for t in episodes] + [f"{t.episode.question.id} read again" for t in episodes]
    prompts = reading_pass(trainer.tok, trainer.backend, episodes, cfg.agent, cfg.retrieval.top_k).prompts
    for ep, read, prompt in zip(episodes, reads, prompts):
        assert read.episode.question is ep.episode.question and read.input_ids[: len(prompt)] == prompt
        assert read.episode.turns == 1 and read.episode.n_valid_calls == 0
        acted = [i for i, m in enumerate(read.action_mask) if m]
        assert acted and min(acted) >= read.prompt_len  # the answer turn's tokens alone
        assert read.episode.answer == read_answer(read, trainer.chat.stop_texts)
        want = outcome_reward(read.episode.answer, read.episode.question.answers, cfg.agent.reward)
        assert read.rewards[read.last_action_index()] == want and sum(read.rewards) == want == read.episode.total_reward
    assert any(t.episode.answer is not None for t in reads)  # the tiny model rarely closes the tag: plain answers
    assert metrics["reread_em"] == pytest.approx(sum(t.episode.em for t in reads) / n)
    assert metrics["em"] == pytest.approx(sum(t.episode.em for t in episodes) / n)  # the episodes' own answers
    args = lambda b: (b.token_rewards, b.action_mask, b.response_mask, b.index)  # noqa: E731
    both, _ = compute_advantages(cfg.train, *args(batch))
    alone, _ = compute_advantages(cfg.train, *args(batch.select(list(range(n, 2 * n)))))
    assert torch.allclose(both[n:, : alone.shape[1]], alone) and not both[n:, alone.shape[1] :].any()


def test_under_reread_the_dev_curve_scores_the_answer_read_again(prepared, tmp_path):
    """With evaluate.reread the dev curve (and so train.keep: best) scores the answer the evaluate stage scores, the
    episode's own as em_strict; such a run keeps its checkpoints apart."""
    raw = small_raw(fresh(prepared, tmp_path), steps=1, eval_every=1)
    plain, again = parse_config(raw), parse_config({**raw, "evaluate": {"reread": True}})
    own, read = train.build_trainer(plain).evaluate(0), train.build_trainer(again).evaluate(0)
    sets = [k.removesuffix("/em") for k in own if k.endswith("/em")]
    assert sets
    for name in sets:
        assert f"{name}/em_strict" not in own and read[f"{name}/em_strict"] == pytest.approx(own[f"{name}/em"])
    assert train.checkpoint_root(plain) != train.checkpoint_root(again)


def test_the_verl_backend_refuses_reading_again_in_rl(tmp_path):
    raw = small_raw(tmp_path, reread=True)
    raw["train"]["backend"] = "verl"
    with pytest.raises(ValueError, match="train.reread is a local-trainer knob"):
        parse_config(raw)


def vocabulary_exps(trainer: train.Trainer, batch, tc) -> int:
    """How many exps over the whole vocabulary (an entropy's softmax) one update of `batch` runs."""
    vocab = trainer.policy.get_output_embeddings().weight.shape[0]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        rl_update.update(trainer.learner, batch, tc, trainer.amp)
    exps = [e for e in prof.events() if e.name == "aten::exp" and e.input_shapes]
    return sum(1 for e in exps if e.input_shapes[0][-1:] == [vocab])


def test_the_entropy_over_the_vocabulary_is_computed_only_for_an_entropy_bonus(prepared, tmp_path):
    """Without an entropy bonus the update skips the entropy (an exp and a product over the vocabulary per token)."""
    cfg = parse_config(small_raw(fresh(prepared, tmp_path), steps=1, eval_every=0, questions_per_step=3))
    trainer = train.build_trainer(cfg)
    batch = signal_batch(trainer, cfg)
    assert vocabulary_exps(trainer, batch, cfg.train) == 0
    assert vocabulary_exps(trainer, batch, cfg.train.model_copy(update={"entropy_coef": 0.001})) > 0


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
from components.train.local import checkpoint as ckpt, train
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


def _weights(art: Path, model: str = "trained") -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(art / "models" / model / "model.safetensors")


def _same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Bit-identical state dicts: the same tensor names, each tensor equal."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.e2e  # a process killed mid-run
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
    assert _same_weights(_weights(ref_art), _weights(art))
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


@pytest.mark.e2e  # a process killed mid-run
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
    assert _same_weights(_weights(ref_art), _weights(art))
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


@pytest.mark.slow  # a C++ compilation of the trained layers (about 30 s on a cold cache)
def test_compiled_layers_update_like_eager_and_resume_to_the_same_weights(prepared, tmp_path, monkeypatch):
    """train.compile: the update runs the trained layers through torch.compile, from the kept frozen output or from
    the tokens, with eager's loss and gradient norm to float error; a run stopped after every step (train.max_minutes)
    and resumed ends on the weights of an uninterrupted one."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    headers = Path(default_cache_dir()) / "precompiled_headers"  # 150 MB each, outside the cache dir (components/env.py)
    headers_before = set(headers.glob("*"))
    over = dict(steps=3, eval_every=0, checkpoint_every=1, trainable_layers=1, compile=True,
                entropy_coef=0.01)  # a gradient without rewards
    runs = {}
    for name, extra in {"eager": {"compile": False}, "compiled": {}, "from tokens": {"keep_frozen_hidden": False}}.items():
        art = fresh(prepared, tmp_path / name)
        rec = Recorder()
        train.run(parse_config(small_raw(art, **{**over, **extra})), rec)
        runs[name] = rec.metrics, _weights(art)
    eager, _ = runs["eager"]
    for name in ("compiled", "from tokens"):
        metrics, weights = runs[name]
        assert eager[1]["train/grad_norm"] > 0
        for key in ("train/pg_loss", "train/grad_norm"):  # step 1: the same episodes (the base policy's rollout)
            assert metrics[1][key] == pytest.approx(eager[1][key], rel=1e-4, abs=1e-7), (name, key)
        assert not _same_weights(weights, runs["eager"][1])  # the compiled kernels ran: other roundings
    art = fresh(prepared, tmp_path / "resumed")
    for _ in range(3):  # one step a call: each passes the budget, checkpoints and stops
        train.run(parse_config(small_raw(art, **over, max_minutes=1e-5)), Recorder())
    assert _same_weights(_weights(art), runs["compiled"][1])
    assert set(headers.glob("*")) == headers_before and any((tmp_path / "inductor").rglob("*.so"))


def test_keep_best_writes_the_policy_of_the_best_dev_evaluation(tmp_path):
    """train.keep=best: the stage writes the policy of the first evaluation with the best dev EM (the base policy's,
    step 0, included), and that evaluation is its result; the weights equal those of a run stopped at that step.

    It runs on the learning test's pinned prior and world: its weights are the same on every CPU, and its dev EM
    moves within six steps (0 at step 0, 0.02-0.06 later, on four seeds on an AVX2 EPYC), so there is a choice to
    make. A prior primed here starts from weights that differ by CPU, and on an AVX2 EPYC one never answered."""
    def raw(art: Path, **over) -> dict:
        raw = learning_config(art).model_dump(mode="json")
        raw["train"].update(questions_per_step=16, eval_every=1, eval_questions=50, checkpoint_every=3,
                            target_em=None, stop_at_target=False, **over)  # fmt: skip
        return raw

    prior = tmp_path / "prior"
    cfg = learning_config(prior)
    prepare.run(cfg, NullTracker())
    index.run(cfg, NullTracker())
    place_prior(cfg)
    art = fresh(prior, tmp_path / "best")
    rec = Recorder()
    result = train.run(parse_config(raw(art, steps=6, keep="best")), rec)
    ems = {s: m["dev/synthetic/em"] for s, m in rec.metrics.items() if "dev/synthetic/em" in m}
    assert sorted(ems) == list(range(7)) and len(set(ems.values())) > 1, ems  # a choice to make
    kept = min(ems, key=lambda s: (-ems[s], s))
    assert result["kept_step"] == kept and rec.tags["train.kept_step"] == str(kept)
    assert result["dev/synthetic/em"] == ems[kept] and result["steps"] == 6
    if kept:
        ref = fresh(prior, tmp_path / "ref")
        train.run(parse_config(raw(ref, steps=kept)), NullTracker())
        expected = _weights(ref)
    else:
        expected = _weights(art, "base")
    assert _same_weights(expected, _weights(art))


def test_keep_best_survives_an_interrupted_run(primed, tmp_path, monkeypatch):
    """Interrupted after step 4 (checkpoint 3 on disk) and again after step 5, each time resumed: the kept policy,
    its step and its evaluation equal an uninterrupted run's."""
    def raw(art: Path) -> dict:
        raw = resume_raw(art)
        raw["train"].update(steps=6, eval_every=1, eval_questions=10, keep="best")
        return raw

    ref = fresh(primed, tmp_path / "ref")
    expected = train.run(parse_config(raw(ref)), NullTracker())
    art = fresh(primed, tmp_path / "killed")
    step = train.Trainer.step
    for stop_at in (4, 5):
        def interrupted(self, s, stop_at=stop_at):
            if s == stop_at:
                raise KeyboardInterrupt
            return step(self, s)

        monkeypatch.setattr(train.Trainer, "step", interrupted)
        with pytest.raises(KeyboardInterrupt):
            train.run(parse_config(raw(art)), NullTracker())
    monkeypatch.setattr(train.Trainer, "step", step)
    result = train.run(parse_config(raw(art)), NullTracker())
    assert {k: v for k, v in result.items() if not k.endswith("_s")} == {
        k: v for k, v in expected.items() if not k.endswith("_s")}
    assert _same_weights(_weights(art), _weights(ref))


def test_keep_best_needs_evaluations_and_the_local_trainer(tmp_path):
    with pytest.raises(ValueError, match="train.keep=best needs dev evaluations"):
        parse_config(small_raw(tmp_path, keep="best", eval_every=0))
    raw = small_raw(tmp_path, keep="best")
    raw["train"]["backend"] = "verl"
    with pytest.raises(ValueError, match="train.keep is a local-trainer knob"):
        parse_config(raw)


def test_the_dev_curve_scores_the_last_dev_questions_so_keep_best_chooses_apart_from_evaluate(prepared):
    cfg = parse_config(small_raw(prepared, eval_questions=4))
    questions = train._prepared_questions(cfg)
    curve = train.build_trainer(cfg).eval_sets
    assert set(curve) == {"dev/synthetic", "dev/synthetic_cf"}
    for name, qs in curve.items():
        dev = train.split_questions(questions, [name.removeprefix("dev/")], "dev")
        assert len(dev) == 10 and [q.id for q in qs] == [q.id for q in dev[-4:]]  # evaluate.sets' limit takes the first


def test_the_verl_backend_refuses_a_time_budget(tmp_path):
    raw = small_raw(tmp_path, max_minutes=5)
    raw["train"]["backend"] = "verl"
    with pytest.raises(ValueError, match="train.max_minutes is a local-trainer knob"):
        parse_config(raw)


def test_the_verl_backend_refuses_the_compiled_update(tmp_path):
    raw = small_raw(tmp_path, compile=True)
    raw["train"]["backend"] = "verl"
    with pytest.raises(ValueError, match="train.compile is a local-trainer knob"):
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
