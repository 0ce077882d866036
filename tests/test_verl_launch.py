"""The launch command: for every algorithm we offer, verl's main_ppo config (Hydra, composed as `--cfg job` would)
takes our overrides and verl's validate_config accepts the result."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import get_args

import pytest

from components.config import VERL_ESTIMATOR, Algorithm, load_config
from components.train.verl import launch
from components.train.verl.verl_config import VerlConfig
from verl.trainer.ppo.utils import need_critic
from tests.verl_fixtures import make_cfg, save_tiny_model

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = list(get_args(Algorithm))
EXPECTED = VERL_ESTIMATOR  # one name, one estimator: grpo stays outcome GRPO with process rewards on
PROFILES = {"real": 3, "qwen": 4}  # profile -> its agent.max_turns


@pytest.fixture(scope="module")
def accepted(tmp_path_factory):
    """algorithm -> (params Config, the config verl composed and validated)."""
    root = tmp_path_factory.mktemp("launch")
    cfgs = {a: make_cfg(root / a, algorithm=a, kl_coef=0.01 if a == "grpo" else 0.0) for a in ALGORITHMS}
    save_tiny_model(cfgs["ppo"])  # the critic's config reads the model's
    for profile in PROFILES:  # SmolLM2 (`-S profile=real`), Qwen2.5-Coder (`-S profile=qwen`)
        cfgs[profile] = load_config(ROOT / "params.yaml", {"profile": profile})
    return {a: (c, launch.validate(launch.compose(c))) for a, c in cfgs.items()}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_verl_accepts_every_algorithm(accepted, algorithm):
    cfg, job = accepted[algorithm]
    assert job.algorithm.adv_estimator == EXPECTED[algorithm]
    assert need_critic(job) == (algorithm == "ppo")  # only PPO's GAE trains a critic
    if algorithm == "ppo":
        assert job.critic.model.path == job.actor_rollout_ref.model.path
    rollout = job.actor_rollout_ref.rollout
    assert rollout.name == "vllm" and rollout.n == cfg.train.group_size
    assert rollout.multi_turn.enable and rollout.multi_turn.format == "hermes"
    assert rollout.multi_turn.max_assistant_turns == cfg.agent.max_turns
    assert rollout.multi_turn.tool_config_path == str(launch.paths(cfg).tool_config)
    assert rollout.agent.default_agent_loop == "agentr1_tool_agent"
    assert rollout.agent.agent_loop_manager_class == "components.train.verl.manager.AgentR1AgentLoopManager"
    assert job.data.train_batch_size == cfg.train.questions_per_step
    assert job.actor_rollout_ref.actor.optim.lr == cfg.train.lr
    assert "hf_model" in job.actor_rollout_ref.actor.checkpoint.save_contents
    assert job.trainer.save_freq > 0 and job.trainer.resume_mode == "auto"
    assert "mlflow" in job.trainer.logger
    assert job.reward.custom_reward_function.path.endswith("components/train/verl/reward.py")
    assert job.reward.custom_reward_function.reward_kwargs.format_penalty == cfg.agent.reward.format_penalty


@pytest.mark.parametrize("profile", PROFILES)
def test_verl_accepts_the_real_profiles(accepted, profile):
    """A real profile's model source is a GGUF (in a package, or split over wheels); verl trains the base_model stage's
    HF directory made from it."""
    cfg, job = accepted[profile]
    assert cfg.model.name_or_path.endswith(".gguf")
    assert job.actor_rollout_ref.model.path == str(cfg.artifacts.resolve() / "models" / "base")
    rollout = job.actor_rollout_ref.rollout
    assert rollout.multi_turn.max_assistant_turns == cfg.agent.max_turns == PROFILES[profile]
    assert rollout.n == cfg.train.group_size and job.data.train_batch_size == cfg.train.questions_per_step
    assert job.reward.custom_reward_function.reward_kwargs.answer_metric == cfg.agent.reward.answer_metric == "f1"
    assert job.actor_rollout_ref.actor.optim.lr == cfg.train.lr


def test_kl_settings_reach_the_actor(accepted):
    _, job = accepted["grpo"]
    assert job.actor_rollout_ref.actor.use_kl_loss is True
    assert job.actor_rollout_ref.actor.kl_loss_coef == 0.01
    assert job.actor_rollout_ref.actor.kl_loss_type == "low_var_kl"
    assert accepted["rloo"][1].actor_rollout_ref.actor.use_kl_loss is False


def test_outcome_only_params_keep_verl_grpo(tmp_path):
    cfg = make_cfg(tmp_path).model_copy(deep=True)
    reward = cfg.agent.reward.model_copy(update={k: 0.0 for k in launch.PROCESS_KEYS})
    cfg = cfg.model_copy(update={"agent": cfg.agent.model_copy(update={"reward": reward})})
    assert launch.estimator(cfg) == "grpo"


def test_command_is_main_ppo_with_quoted_values(tmp_path):
    cfg = make_cfg(tmp_path)
    cmd = launch.build_command(cfg, env={"MLFLOW_TRACKING_URI": "sqlite:////x/mlflow.db"})
    assert cmd[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.MLFLOW_TRACKING_URI='sqlite:////x/mlflow.db'" in cmd
    assert "trainer.logger=[console,mlflow]" in cmd
    assert shlex.split(shlex.join(cmd)) == cmd
    assert launch.build_command(cfg) == launch.build_command(cfg)  # pure in params


def test_multi_node_and_extra_overrides(tmp_path, monkeypatch):
    v = VerlConfig(nnodes=2, n_gpus_per_node=8, ray_address="auto", extra_overrides=["trainer.val_only=true"])
    monkeypatch.setattr(launch, "verl_config", lambda cfg: v)
    o = launch.overrides(make_cfg(tmp_path))
    assert {"trainer.nnodes=2", "trainer.n_gpus_per_node=8", "+ray_kwargs.ray_init.address=auto"} <= set(o)
    assert o[-1] == "trainer.val_only=true"


@pytest.mark.parametrize("gate", ["answer", "right_answer"])
def test_a_reward_verl_cannot_pay_is_refused_by_name(tmp_path, gate):
    cfg = make_cfg(tmp_path)
    cfg = cfg.model_copy(update={"agent": cfg.agent.model_copy(update={"reward": cfg.agent.reward.model_copy(
        update={"bonus_gate": gate})})})  # fmt: skip
    with pytest.raises(launch.LaunchError, match=f"agent.reward.bonus_gate: {gate}:"):
        launch.overrides(cfg)


@pytest.mark.parametrize(("override", "named"), [("trainer.no_such_key=1", "no_such_key"), ("trainer.total_epochs=[abc", r"\[abc")])
def test_verl_rejects_a_bad_override_with_its_message(tmp_path, monkeypatch, override, named):
    v = VerlConfig(extra_overrides=[override])  # a key verl lacks; a value Hydra cannot parse
    monkeypatch.setattr(launch, "verl_config", lambda cfg: v)
    with pytest.raises(launch.LaunchError, match=named):
        launch.compose(make_cfg(tmp_path))


def test_compose_in_process_equals_what_main_ppo_prints(tmp_path):
    """The in-process compose is the config the real command line composes (`main_ppo ... --cfg job`), byte for byte,
    with a quoted value that has a space in it."""
    import subprocess

    cfg = make_cfg(tmp_path)
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/ml flow.db"}
    cli = subprocess.run(launch.build_command(cfg, env) + ["--cfg", "job"], capture_output=True, text=True,
                         timeout=300, env=launch._quiet_env())  # fmt: skip
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert launch.compose(cfg, env) == cli.stdout


def test_validate_config_refusal_is_a_launch_error(accepted):
    from omegaconf import OmegaConf

    _, job = accepted["rloo"]
    bad = OmegaConf.to_yaml(job).replace("train_batch_size: 4", "train_batch_size: 3")
    with pytest.raises(launch.LaunchError, match="validate_config refused"):
        launch.validate(bad)


def test_driver_loads_manager_class_and_our_registrations():
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ
    from verl.utils.import_utils import load_class_from_fqn

    cls = load_class_from_fqn(launch._manager_class(), "AgentLoopManager")  # as verl's TaskRunner does
    assert issubclass(cls, AgentLoopManagerTQ)
    assert get_adv_estimator_fn("grpo_process").__module__ == "components.train.local.grpo_process"
    assert _agent_loop_registry["agentr1_tool_agent"]["_target_"].endswith("AgentR1ToolAgentLoop")


def test_dry_run_shows_command_and_accepted_config(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    text = launch.describe(make_cfg(tmp_path))
    command = text.splitlines()[1]
    assert shlex.split(command)[1:3] == ["-m", "verl.trainer.main_ppo"]
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.MLFLOW_TRACKING_URI='{uri}'" in shlex.split(command)
    job = text.split("# config verl accepted (--cfg job)\n", 1)[1]
    assert "adv_estimator: grpo\n" in job
    assert "# note: grpo sums token-level rewards per response" in text  # process rewards are on in make_cfg
    process = launch.compose(make_cfg(tmp_path, algorithm="grpo_process"))
    assert "adv_estimator: grpo_process" in process
    assert f"MLFLOW_TRACKING_URI: {uri}" in job
