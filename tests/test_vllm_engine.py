"""Rollouts on vLLM (components/rollout/vllm_engine.py), with the real model (SmolLM2-135M, tied embeddings) on real
HotpotQA paragraphs: the episodes keep the rollout's contract, the same batch gives the same episodes, the weights
an optimizer step changes reach vLLM (its log-probs then match the trainer's forward within a bf16 tolerance, and
do not without the sync), serving's episodes run on it, and a missing or broken vLLM install stops with one line that says how to fix it.

One vLLM process serves the whole module: its start-up is paid once."""

from __future__ import annotations

import copy
import fcntl
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from components.config import load_config
from components.data.loaders import LOADERS
from components.data.passages import PassageTable
from components.model.loading import RolloutWeights, load_model, native_bf16
from components.base_model.source import materialise
from components.model.top_layers import frozen_layers
from components.retrieval.factory import make_backend
from components.train.local.batch import collate
from components.train.local.losses import policy_logprobs
from components.train.local.train import Trainer
from components.rollout.engine import RolloutStats, rollout
from components.rollout.episode_setup import searched_prompts
from components.evaluation.agent_eval import evaluate_agent
from components.rollout.vllm_engine import VllmEngine, VllmError, vllm_python
from components.serving.agent import run_episodes
from components.serving.batcher import Cancelled
from tests.conftest import ROOT as repo_root

pytestmark = pytest.mark.slow

# vLLM computes with its own kernels, in bf16 where bf16 is native, else in fp32. Against the trainer's forward (bf16
# autocast where bf16 is native, as the trainer computes), SmolLM2 on a Zen 4 EPYC: mean |difference| of log-probs
# 0.03-0.04 nats, one token up to about 0.5; after an AdamW step at lr 1e-3 without the sync, 1.4.
MEAN_TOL = 0.1


VLLM_LOCK = repo_root / ".cache" / "vllm-install.lock"  # held by `make test` while it installs vLLM's venv
VLLM_LOG = repo_root / ".cache" / "vllm-install.log"


def wait_for_vllm_install(lock_path: Path = VLLM_LOCK) -> None:
    """Until `make test`'s background `make vllm` is done (at once when nothing installs)."""
    if lock_path.exists():
        with open(lock_path) as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)


def test_the_fixture_waits_for_a_running_install_and_not_for_a_finished_one(tmp_path):
    """As `make test` holds the lock: a process has it while it installs; the wait ends when that process does."""
    lock = tmp_path / "install.lock"
    wait_for_vllm_install(lock)  # no lock file: nothing installs
    holder = subprocess.Popen(["flock", str(lock), "sleep", "3"])
    try:
        deadline = time.monotonic() + 10
        while not lock.exists() or subprocess.run(["flock", "-n", str(lock), "true"]).returncode == 0:
            assert time.monotonic() < deadline, "flock never took the lock"
            time.sleep(0.05)
        held = time.monotonic()
        wait_for_vllm_install(lock)
        assert time.monotonic() - held > 1.5  # it blocked while the install ran (3 s from before `held`)
        assert holder.wait(timeout=10) == 0
    finally:
        holder.kill()
        holder.wait()
    wait_for_vllm_install(lock)  # the file stays; nobody holds it


@pytest.fixture(scope="module")
def real(tmp_path_factory, real_conversion):
    root = tmp_path_factory.mktemp("vllm")
    overrides = {
        "profile": "real", "project.artifacts_dir": str(root / "artifacts"),
        "model.cache_dir": str(real_conversion.cache_dir),  # the test run's one conversion (tests/real_conversion.py)
        "rollout.engine": "vllm", "train.rollout_engine": "vllm", "rollout.vllm.kv_cache_mb": 512, "agent.max_turns": 2,
        "agent.max_tokens_per_turn": 24, "train.questions_per_step": 2, "train.group_size": 2,
    }  # fmt: skip
    cfg = load_config(repo_root / "params.yaml", overrides)
    wait_for_vllm_install()
    if not vllm_python(cfg.rollout).is_file():
        pytest.fail(f"{vllm_python(cfg.rollout)} not found: `make test` installs it (`make vllm`; its log: "
                    f"{VLLM_LOG})")  # fmt: skip
    spec = next(s for s in cfg.data.datasets if s.name == "hotpotqa")
    table = PassageTable()
    questions = LOADERS[spec.format](spec.model_copy(update={"limit": 4}), repo_root / "data" / spec.path, table)
    backend = make_backend(cfg)
    backend.build(questions[0].corpus, table.passages)
    base = root / "artifacts" / "models" / "base"
    materialise(cfg.model, base)
    policy, tok = load_model(base, cfg, torch.device("cpu"))
    trainer = Trainer(cfg, policy, tok, backend, questions, {}, model_dir=base)
    yield cfg, questions, trainer
    trainer.actor.close()
    backend.close()


def _episodes(trainer, questions, seed: int, temperature: float = 1.0, group_size: int = 2, searched: bool = False):
    """`group_size` episodes a question; `searched`: each starts after a first search with the question, its
    results in the prompt (agent.force_first_search's prompts)."""
    gen = torch.Generator().manual_seed(seed)
    group = [q for q in questions for _ in range(group_size)]
    env = trainer.episodes.env
    prompts = searched_prompts(group, trainer.chat, env) if searched else None
    return rollout(trainer.actor.model, trainer.chat, env, group, trainer.cfg.agent, temperature=temperature,
                   generator=gen, stats=RolloutStats(), prompts=prompts)  # fmt: skip


def _trainer_logprobs(trainer, trajs) -> tuple[torch.Tensor, torch.Tensor]:
    """The trainer's log-probs of the sampled tokens and the rollout's, over the action mask."""
    batch = collate(trajs, trainer.chat.pad_id)
    with torch.no_grad():
        logp, _ = policy_logprobs(trainer.policy, batch, trainer.tc.temperature, batch.action_mask)
    width = batch.action_mask.shape[1]
    rollout_lp = torch.tensor([t.logprobs[t.prompt_len :] + [0.0] * (width - t.response_len) for t in trajs])
    mask = batch.action_mask.bool()
    return logp[mask], rollout_lp[mask]


def test_vllm_episodes_keep_the_rollout_contract(real):
    cfg, questions, trainer = real
    trainer.actor.sync()
    trajs = _episodes(trainer, questions[:2], seed=0)
    tok, chat = trainer.tok, trainer.chat
    assert len(trajs) == 4
    for t in trajs:
        spans = set()
        for s, e in t.turn_spans:
            spans.update(range(s, e))
            turn = t.input_ids[s:e]
            assert turn[-1] in chat.stop_ids or len(turn) == cfg.agent.max_tokens_per_turn or e == len(t.input_ids)
            assert tok.convert_tokens_to_ids("<|im_start|>") not in turn
            assert all(lp <= 0.0 for lp in t.logprobs[s:e]) and t.logprobs[e - 1] != 0.0
            assert len(t.turn_times) == len(t.tool_times) == len(t.turn_spans)
        assert [i for i, m in enumerate(t.action_mask) if m] == sorted(spans)  # the action mask: generated tokens only
        assert t.input_ids[: t.prompt_len] == chat.prompt_ids(t.episode.question.question)
        for (_, e), (s2, _) in zip(t.turn_spans, t.turn_spans[1:]):  # the observation, inserted with mask 0
            assert tok.decode(t.input_ids[e:s2]).rstrip().endswith("<|im_start|>assistant")
        assert sum(t.rewards) == pytest.approx(t.episode.outcome + sum(t.episode.process_rewards))
    ours, theirs = _trainer_logprobs(trainer, trajs)
    assert (ours - theirs).abs().mean() < MEAN_TOL, (ours - theirs).abs().mean()


def test_vllm_reports_the_prompt_tokens_it_computed(real):
    """What a rollout counts as prefilled: on an empty prefix cache a prompt is computed in full; sent again, all but
    its last (partial) 64-token block comes from the cache."""
    _, questions, trainer = real
    engine, prompt = trainer.actor.model, trainer.chat.prompt_ids(questions[0].question)
    assert len(prompt) > 64  # at least one whole block to find again

    def computed() -> int:
        engine.add([{"id": "p", "prompt": prompt, "max_tokens": 1, "temperature": 1.0, "stop": []}])
        ((_, tokens, _, n),) = engine.step()
        assert len(tokens) == 1
        return n

    engine.reset(0)
    assert computed() == len(prompt)
    assert 0 < computed() <= 64


def test_the_same_batch_gives_the_same_episodes(real):
    """28 sampled episodes, each after a first search: their prompts are more than vLLM prefills in one step
    (8,192 tokens), so prompts are split over steps, which vLLM's CPU build cannot do for a request with a seed of
    its own."""
    _, questions, trainer = real
    trainer.actor.sync()
    a = _episodes(trainer, questions, seed=7, group_size=7, searched=True)
    b = _episodes(trainer, questions, seed=7, group_size=7, searched=True)
    c = _episodes(trainer, questions[:1], seed=8, group_size=2, searched=True)  # small: it only has to differ
    assert sum(t.prompt_len for t in a) > 8192
    assert [t.input_ids for t in a] == [t.input_ids for t in b]
    assert [t.logprobs for t in a] == [t.logprobs for t in b]
    assert [t.input_ids for t in a[:2]] != [t.input_ids for t in c]  # the seed matters


def _score_gap(trainer, seqs) -> tuple[float, float]:
    """Mean |vLLM log-prob - trainer log-prob| over fixed sequences, and the largest."""
    engine = trainer.actor.model
    got = engine.score(seqs)
    gaps = []
    with torch.no_grad(), trainer.amp():
        for s, lps in zip(seqs, got):
            logits = trainer.policy(torch.tensor([s])).logits.float().log_softmax(-1)[0, :-1]
            ref = logits.gather(-1, torch.tensor(s[1:])[:, None]).squeeze(-1)
            gaps.append((torch.tensor(lps) - ref).abs())
    gap = torch.cat(gaps)
    return float(gap.mean()), float(gap.max())


def test_weights_after_an_optimizer_step_reach_vllm(real):
    """An optimizer step on the trainable layers and the tied embedding (so the output layer moves too): after the
    sync vLLM scores fixed sequences as the trainer does; without it, far from it."""
    _, questions, trainer = real
    trainer.actor.sync()
    seqs = [t.input_ids for t in _episodes(trainer, questions[2:4], seed=1, temperature=0.0)]
    before = _score_gap(trainer, seqs)
    assert before[0] < MEAN_TOL, before
    policy = trainer.policy
    saved = copy.deepcopy(policy.state_dict())
    embed = policy.get_input_embeddings().weight
    assert policy.get_output_embeddings().weight is embed  # SmolLM2 ties its output layer to its embeddings
    params = [p for p in policy.parameters() if p.requires_grad] + [embed]
    embed.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=1e-3)
    batch = torch.tensor([seqs[0]])
    loss = -policy(batch).logits.float().log_softmax(-1)[0, :-1].gather(-1, batch[0, 1:, None]).mean()
    loss.backward()
    opt.step()
    try:
        stale = _score_gap(trainer, seqs)  # not synced: vLLM still has the old weights
        assert stale[0] > 3 * MEAN_TOL, stale
        trainer.actor.sent_all = False  # the embedding is not trainable in this profile: send every weight
        trainer.actor.sync()
        after = _score_gap(trainer, seqs)
        assert after[0] < MEAN_TOL, after
    finally:
        embed.requires_grad_(False)
        policy.load_state_dict(saved)
        trainer.actor.sent_all = False
        trainer.actor.sync()


def test_a_sync_sends_weights_only_after_they_changed(real, monkeypatch):
    """An evaluation's sync right before the next step's costs nothing: the trainable weights have not moved."""
    _, _, trainer = real
    trainer.actor.sync()
    sent = []
    engine = trainer.actor.model
    monkeypatch.setattr(engine, "load_weights", lambda weights: sent.append([n for n, _ in weights]))
    trainer.actor.sync()
    assert sent == []
    p = next(p for p in trainer.policy.parameters() if p.requires_grad)
    with torch.no_grad():
        p.add_(0.0)  # an in-place write, as an optimizer step makes
    trainer.actor.sync()
    assert len(sent) == 1 and sent[0] == [n for n, q in trainer.policy.named_parameters() if q.requires_grad]


def test_evaluation_runs_on_vllm(real):
    cfg, questions, trainer = real
    trainer.actor.sync()
    results = evaluate_agent(trainer.actor.model, trainer.tok, questions[:2], trainer.backend, cfg.agent,
                             top_k=cfg.retrieval.top_k)  # fmt: skip
    assert len(results) == 2 and all(r.turns >= 1 for r in results)
    naive = evaluate_agent(trainer.actor.model, trainer.tok, questions[:2], trainer.backend, cfg.agent,
                           top_k=cfg.retrieval.top_k, mode="naive_rag")  # fmt: skip
    assert all(r.plain and r.turns == 1 for r in naive)


def test_serving_runs_on_vllm_and_a_cancelled_batch_leaves_nothing_behind(real):
    cfg, questions, trainer = real
    trainer.actor.sync()
    asked = [q.question for q in questions[:3]]

    def answers():
        replies, _ = run_episodes(trainer.actor.model, trainer.tok, trainer.backend, cfg, asked, questions[0].corpus)
        return [(r.trajectory.input_ids, r.answer) for r in replies]

    first = answers()
    assert len(first) == 3 and all(len(ids) > 0 for ids, _ in first)

    def cancel(_tokens, _finished):  # what the server does when a client has gone
        raise Cancelled()

    with pytest.raises(Cancelled):
        run_episodes(trainer.actor.model, trainer.tok, trainer.backend, cfg, asked[::-1] * 4, questions[0].corpus, cancel)
    assert answers() == first  # greedy, and no request of the cancelled batch is left in vLLM


def test_the_trainer_may_roll_out_on_its_own_engine(real):
    """train.rollout_engine: hf trains on the transformers engine (keeping the frozen layers' output for the update)
    while evaluation and serving stay on rollout.engine: vllm."""
    cfg, questions, trainer = real
    own = cfg.model_copy(update={"train": cfg.train.model_copy(update={"rollout_engine": "hf"})})
    hf = Trainer(own, trainer.policy, trainer.tok, trainer.backend, questions, {}, model_dir=trainer.actor.model.model_dir)
    try:
        assert cfg.rollout.engine == "vllm" and hf.cfg.rollout.engine == "hf"
        assert not isinstance(hf.actor.model, VllmEngine) and hf.keep_layer == frozen_layers(trainer.policy, 8)
        with hf.rollout_amp():  # as Trainer.step rolls out
            trajs = hf.episodes.rollout(hf.actor.model, questions[:1] * 2, generator=torch.Generator().manual_seed(0),
                                        engine=hf.cfg.rollout, capture_layer=hf.keep_layer)  # fmt: skip
        assert all(t.hidden is not None and len(t.hidden) == len(t.input_ids) - 1 for t in trajs)
    finally:
        hf.actor.close()


def test_a_missing_vllm_install_is_one_line_that_says_how_to_fix_it(real, tmp_path):
    cfg, *_ = real
    base = cfg.artifacts / "models" / "base"
    missing = cfg.rollout.model_copy(update={"vllm": cfg.rollout.vllm.model_copy(update={"python": str(tmp_path / "nope")})})
    with pytest.raises(VllmError, match=r"rollout\.vllm\.python: .*nope not found; install it with `make vllm`"):
        VllmEngine(base, missing)
    broken = cfg.rollout.model_copy(update={"vllm": cfg.rollout.vllm.model_copy(update={"python": sys.executable})})
    with pytest.raises(VllmError) as err:  # an interpreter without vLLM
        VllmEngine(base, broken)
    assert "No module named 'vllm'" in str(err.value) and "make vllm" in str(err.value)
    assert "\n" not in str(err.value)


def test_rollout_weights_refuse_vllm_without_a_model_dir(real):
    cfg, _, trainer = real
    with pytest.raises(ValueError, match="rollout.engine: vllm needs the model directory"):
        RolloutWeights(trainer.policy, cfg)


def test_vllm_computes_in_bf16_only_where_it_is_native(real):
    """rollout.vllm.dtype: auto follows the trainer's rule (bf16 on a CPU with AVX512-BF16 or AMX, else fp32:
    emulated bf16 generated 2.9x slower on an AVX2 EPYC). The weight-sync test sends its weights in it."""
    _, _, trainer = real
    assert trainer.actor.model.dtype == ("bfloat16" if native_bf16(torch.device("cpu")) else "float32")


# The orphan also asks for the dtype "auto" would not choose: the setting reaches the worker.
ORPHAN = """
import os, sys
from components.config import RolloutConfig
from components.rollout.vllm_engine import VllmEngine
engine = VllmEngine(sys.argv[1], RolloutConfig(vllm={"dtype": sys.argv[2]}))
print(engine.dir, engine.proc.pid, engine.dtype, flush=True)
os._exit(0)  # killed: no close()
"""


def test_a_vllm_process_whose_trainer_dies_stops_and_leaves_nothing(real):
    cfg, *_ = real
    import subprocess
    import time
    from pathlib import Path

    other = "float32" if native_bf16(torch.device("cpu")) else "bfloat16"
    out = subprocess.run([sys.executable, "-c", ORPHAN, str(cfg.artifacts / "models" / "base"), other],
                         capture_output=True, text=True, check=True, cwd=repo_root).stdout.split()  # fmt: skip
    folder, pid = Path(out[0]), int(out[1])
    assert out[2] == other

    def running() -> bool:  # a zombie (exited, not yet reaped by init) does not count
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + 60
    while (folder.exists() or running()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not folder.exists() and not running()
