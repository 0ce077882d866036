"""The verl backend of the train stage: params -> Hydra overrides -> `python -m verl.trainer.main_ppo` on Ray,
then `verl.model_merger` -> artifacts/models/trained, logged as the stage's model.

`build_command(cfg)` is pure (same params, same command); `run` writes the inputs verl reads (parquet, tool and
agent-loop YAML) under artifacts/verl/, runs the command, merges the last checkpoint and logs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components import artifacts
from components.config import VERL_ESTIMATOR, Config
from components.train.verl.verl_config import VerlConfig, verl_config

# These verl estimators sum token_level_rewards to one scalar per response before the baseline, so process
# rewards only add to the episode total there: their position (which turn earned them) is lost.
SEQUENCE_LEVEL = ("grpo", "rloo", "reinforce_plus_plus_baseline")
PROCESS_KEYS = ("valid_call", "invalid_call", "supporting", "new_info", "search_cost")
MAIN = "verl.trainer.main_ppo"
CONFIG_MODULE, CONFIG_NAME = "verl.trainer.config", "ppo_trainer"  # main_ppo's @hydra.main


class LaunchError(RuntimeError):
    """verl rejected the config or the training run failed; the message has the command's last output."""


@dataclass(frozen=True)
class Paths:
    root: Path

    @property
    def train(self) -> Path:
        return self.root / "data" / "train.parquet"

    @property
    def val(self) -> Path:
        return self.root / "data" / "val.parquet"

    @property
    def tool_config(self) -> Path:
        return self.root / "tool_config.yaml"

    @property
    def agent_loops(self) -> Path:
        return self.root / "agent_loops.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def log(self) -> Path:
        return self.root / "train.log"


def paths(cfg: Config) -> Paths:
    return Paths(artifacts.verl_workdir(cfg))


def model_path(cfg: Config, v: VerlConfig) -> str:
    if v.model_path:
        return v.model_path
    # the base_model stage turns every source (tiny, GGUF, HF dir, hub id) into this HF directory
    return str(artifacts.base_model(cfg).resolve())


def has_process_rewards(cfg: Config) -> bool:
    return any(getattr(cfg.agent.reward, k) for k in PROCESS_KEYS)


def estimator(cfg: Config) -> str:
    """verl's name for train.algorithm's estimator: the table the local trainer reads too."""
    return VERL_ESTIMATOR[cfg.train.algorithm]


def _value(v: Any) -> str:
    """A Hydra override value: lists as [a,b], plain words bare, anything else single-quoted."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ",".join(_value(x) for x in v) + "]"
    s = str(v)
    if re.fullmatch(r"[A-Za-z0-9_./-]+", s) and s not in ("true", "false", "null"):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def overrides(cfg: Config, env: Mapping[str, str] | None = None) -> list[str]:
    """Every Hydra override the run needs, derived from params only (plus `env` for Ray workers)."""
    if cfg.agent.reward.bonus_gate != "none":  # verl pays each call's reward as it happens
        raise LaunchError(
            f"agent.reward.bonus_gate: {cfg.agent.reward.bonus_gate}: only the local trainer honours it; set it to none"
        )
    v, t, a, p = verl_config(cfg), cfg.train, cfg.agent, paths(cfg)
    model = model_path(cfg, v)
    mini_batch = v.ppo_mini_batch_size or t.questions_per_step
    use_kl = t.kl_coef > 0
    o: dict[str, Any] = {
        # algorithm
        "algorithm.adv_estimator": estimator(cfg),
        "algorithm.gamma": t.gamma,
        "algorithm.lam": t.lam,
        "algorithm.use_kl_in_reward": False,
        # data
        "data.train_files": str(p.train),
        "data.val_files": str(p.val),
        "data.train_batch_size": t.questions_per_step,
        "data.max_prompt_length": v.prompt_length,
        "data.max_response_length": v.response_length,
        "data.return_raw_chat": True,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.seed": cfg.project.seed,
        # actor
        "actor_rollout_ref.model.path": model,
        "actor_rollout_ref.model.enable_gradient_checkpointing": v.gradient_checkpointing,
        "actor_rollout_ref.actor.optim.lr": t.lr,
        "actor_rollout_ref.actor.optim.weight_decay": t.weight_decay,
        "actor_rollout_ref.actor.grad_clip": t.max_grad_norm,
        "actor_rollout_ref.actor.clip_ratio": t.clip_ratio,
        "actor_rollout_ref.actor.entropy_coeff": t.entropy_coef,
        "actor_rollout_ref.actor.loss_agg_mode": t.loss_agg_mode,
        "actor_rollout_ref.actor.ppo_epochs": t.ppo_epochs,
        "actor_rollout_ref.actor.ppo_mini_batch_size": mini_batch,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": v.micro_batch_size_per_gpu,
        "actor_rollout_ref.actor.use_kl_loss": use_kl,
        "actor_rollout_ref.actor.kl_loss_coef": t.kl_coef,
        "actor_rollout_ref.actor.kl_loss_type": t.kl_penalty,
        "actor_rollout_ref.actor.fsdp_config.param_offload": v.param_offload,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": v.optimizer_offload,
        "actor_rollout_ref.actor.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": v.micro_batch_size_per_gpu,
        # rollout: vLLM, multi-turn with our tool and agent loop
        "actor_rollout_ref.rollout.name": v.rollout_name,
        "actor_rollout_ref.rollout.n": t.group_size,
        "actor_rollout_ref.rollout.temperature": t.temperature,
        "actor_rollout_ref.rollout.gpu_memory_utilization": v.gpu_memory_utilization,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": v.tensor_parallel_size,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": v.micro_batch_size_per_gpu,
        "actor_rollout_ref.rollout.multi_turn.enable": True,
        "actor_rollout_ref.rollout.multi_turn.format": v.tool_format,
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": a.max_turns,
        "actor_rollout_ref.rollout.multi_turn.max_user_turns": max(a.max_turns - 1, 1),
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length": v.max_tool_response_length,
        "actor_rollout_ref.rollout.multi_turn.tool_config_path": str(p.tool_config),
        "actor_rollout_ref.rollout.agent.num_workers": v.agent_workers,
        "actor_rollout_ref.rollout.agent.default_agent_loop": _agent_name(),
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(p.agent_loops),
        "+actor_rollout_ref.rollout.agent.agent_loop_manager_class": _manager_class(),
        # reward: the project's outcome reward; process rewards come from the tool through the agent loop
        "reward.custom_reward_function.path": str(Path(__file__).with_name("reward.py")),
        "reward.custom_reward_function.name": "compute_score",
        "+reward.custom_reward_function.reward_kwargs.answer_metric": a.reward.answer_metric,
        "+reward.custom_reward_function.reward_kwargs.answer_format": a.reward.answer_format,
        "+reward.custom_reward_function.reward_kwargs.format_penalty": a.reward.format_penalty,
        # trainer: steps, checkpoints, resume, logging
        "trainer.total_training_steps": t.steps,
        "trainer.total_epochs": 1_000_000,  # steps decide; epochs only bound the data loader
        "trainer.nnodes": v.nnodes,
        "trainer.n_gpus_per_node": v.n_gpus_per_node,
        "trainer.save_freq": v.save_freq,
        "trainer.test_freq": v.test_freq,
        "trainer.val_before_train": v.val_before_train,
        "trainer.resume_mode": "auto",
        "trainer.default_local_dir": str(p.checkpoints),
        "trainer.max_actor_ckpt_to_keep": v.max_actor_ckpt_to_keep,
        "trainer.max_critic_ckpt_to_keep": v.max_actor_ckpt_to_keep,
        "trainer.logger": ["console", "mlflow"],
        "trainer.project_name": cfg.tracking.experiment,
        "trainer.experiment_name": v.experiment_name or f"{cfg.tracking.experiment}-{t.algorithm}",
    }
    if t.algorithm == "ppo":
        o |= {
            "critic.model.path": model,
            "critic.optim.lr": t.critic_lr,
            "critic.cliprange_value": t.value_clip,
            "critic.ppo_micro_batch_size_per_gpu": v.micro_batch_size_per_gpu,
            "critic.model.enable_gradient_checkpointing": v.gradient_checkpointing,
        }
    if v.ray_address:
        o["+ray_kwargs.ray_init.address"] = v.ray_address
    for key, value in (env or {}).items():
        o[f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}"] = value
    return [f"{k}={_value(val)}" for k, val in o.items()] + list(v.extra_overrides)


def build_command(cfg: Config, env: Mapping[str, str] | None = None) -> list[str]:
    return [sys.executable, "-m", MAIN, *overrides(cfg, env)]


def _agent_name() -> str:
    from components.train.verl.export import AGENT_NAME

    return AGENT_NAME


def _manager_class() -> str:
    return "components.train.verl.manager.AgentR1AgentLoopManager"


# --- what verl accepted ------------------------------------------------------------------------------


def compose(cfg: Config, env: Mapping[str, str] | None = None) -> str:
    """The job config verl composes from our command's overrides, as YAML text (what `--cfg job` prints); LaunchError
    if it refuses. Hydra composes in this process, from main_ppo's config module: no interpreter starts to import Ray."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_module(CONFIG_MODULE, version_base=None):
            job = hydra_compose(CONFIG_NAME, overrides=overrides(cfg, env))
    except (HydraException, OmegaConfBaseException) as err:
        raise LaunchError(f"verl rejected the overrides: {err}") from err
    return OmegaConf.to_yaml(job)


def validate(job_yaml: str) -> Any:
    """Run verl's own checks on a composed config (what main_ppo does before starting Ray); return it."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from components.train.local import grpo_process  # noqa: F401  (grpo_process)

    config = OmegaConf.create(job_yaml)
    try:
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
        get_adv_estimator_fn(config.algorithm.adv_estimator)
    except (AssertionError, ValueError, OSError) as err:  # OSError: the model path does not load
        raise LaunchError(f"verl's validate_config refused the composed config: {err}") from err
    return config


def describe(cfg: Config) -> str:
    """The exact launch command and the config verl composed and validated from it."""
    import shlex

    from components.tracking.runs import tracking_uri

    env = {"MLFLOW_TRACKING_URI": tracking_uri(cfg)}
    command = shlex.join(build_command(cfg, env))
    job = compose(cfg, env)
    validate(job)
    notes = ["# run adds +ray_kwargs.ray_init.runtime_env.env_vars.MLFLOW_RUN_ID=<verl run nested under the stage run>"]
    if has_process_rewards(cfg) and estimator(cfg) in SEQUENCE_LEVEL:
        notes.append(
            f"# note: {estimator(cfg)} sums token-level rewards per response; process rewards count only in the total "
            "(train.algorithm: grpo_process keeps their place)"
        )
    return "\n".join(["# launch command", command, *notes, "# config verl accepted (--cfg job)", job])


def dry_run(cfg: Config) -> str:
    text = describe(cfg)
    print(text)
    return text


def _quiet_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.update(extra or {})
    return env


def _tail(text: str, n: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


# --- the stage -----------------------------------------------------------------------------------------


def write_inputs(cfg: Config) -> Paths:
    """The files verl reads: train/val parquet, the tool YAML and the agent-loop YAML."""
    from components.io import write_text
    from components.train.verl.agent_loop import agent_loop_config
    from components.train.verl.export import export
    from components.train.verl.tool import write_tool_config

    p = paths(cfg)
    export(cfg, p.train.parent, verl_config(cfg).eval_questions)
    write_tool_config(cfg, p.tool_config)
    write_text(p.agent_loops, yaml.safe_dump(agent_loop_config(cfg.agent.reward), sort_keys=False))
    return p


def run(cfg: Config, tracker, dry_run: bool = False) -> dict[str, float]:
    p = write_inputs(cfg)
    if dry_run:
        print(describe(cfg))
        return {}
    from components.tracking.runs import tracking_uri

    env = {"MLFLOW_TRACKING_URI": tracking_uri(cfg)}
    child = _child_run(cfg, tracker)
    if child:
        env["MLFLOW_RUN_ID"] = child
    cmd = build_command(cfg, env)
    p.log.parent.mkdir(parents=True, exist_ok=True)
    with open(p.log, "w", encoding="utf-8") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=_quiet_env(env)).returncode
    if code != 0:
        if child:
            import mlflow

            mlflow.MlflowClient().set_terminated(child, "FAILED")
        raise LaunchError(f"verl training failed (exit {code}); log {p.log}:\n{_tail(p.log.read_text())}")
    trained = merge(cfg)
    tracker.log_model(trained, "agent")
    _replay_curve(child, tracker)
    return _final_metrics(child)


def latest_checkpoint(checkpoints: Path) -> Path:
    tracker_file = checkpoints / "latest_checkpointed_iteration.txt"
    if not tracker_file.exists():
        raise LaunchError(f"{tracker_file}: no checkpoint written (trainer.save_freq must be > 0)")
    step = tracker_file.read_text().strip()
    actor = checkpoints / f"global_step_{step}" / "actor"
    if not actor.is_dir():
        raise LaunchError(f"{actor}: checkpoint named by {tracker_file} is missing")
    return actor


def merge(cfg: Config) -> Path:
    """`verl.model_merger merge` of the last actor checkpoint into artifacts/models/trained (atomically)."""
    from components.io import atomic_path

    actor = latest_checkpoint(paths(cfg).checkpoints)
    target = artifacts.trained_model(cfg)
    with atomic_path(target) as tmp:
        cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
               "--local_dir", str(actor), "--target_dir", str(tmp)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_quiet_env())
        if proc.returncode != 0:
            raise LaunchError(f"model merge of {actor} failed:\n{_tail(proc.stderr or proc.stdout)}")
    return target


def _child_run(cfg: Config, tracker) -> str | None:
    """An MLflow run nested under the stage's run, for verl's own logger to write into (MLFLOW_RUN_ID)."""
    if getattr(tracker, "run_id", None) is None:
        return None
    import mlflow

    client = mlflow.MlflowClient()
    parent = client.get_run(tracker.run_id)
    run = client.create_run(
        parent.info.experiment_id,
        run_name="verl",
        tags={"mlflow.parentRunId": tracker.run_id, "agentr1.backend": "verl"},
    )
    return run.info.run_id


CURVE_KEYS = ("critic/score/mean", "critic/rewards/mean", "response_length/mean", "val-core/")


def _final_metrics(run_id: str | None) -> dict[str, float]:
    """The last value of verl's score, reward and validation metrics, from the run it logged to."""
    if run_id is None:
        return {}
    import mlflow

    metrics = mlflow.MlflowClient().get_run(run_id).data.metrics
    return {f"verl/{k}": float(v) for k, v in metrics.items() if k.startswith(CURVE_KEYS)}


def _replay_curve(run_id: str | None, tracker) -> None:
    """Copy verl's per-step curve into the stage tracker (the stage run and the train stage's curve.csv)."""
    if run_id is None:
        return
    import mlflow

    client = mlflow.MlflowClient()
    for key in client.get_run(run_id).data.metrics:
        if key.startswith(CURVE_KEYS):
            for m in client.get_metric_history(run_id, key):
                tracker.log_metrics({f"verl/{key}": m.value}, step=m.step)
