"""`train.verl`: the knobs only the verl backend has. Everything shared (algorithm, n, LRs, KL, steps)
comes from `train`, `agent` and `model`, so switching `train.backend` changes nothing else.

Attach as `TrainConfig.verl: VerlConfig = VerlConfig()` (params.yaml `train.verl`); `verl_config(cfg)` reads it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from components.secrets import no_credentials


class VerlConfig(BaseModel):
    # Same rules as components.config.Section; no import of it, so config.py can import this module.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _no_credentials(cls, value):
        return no_credentials(value)

    model_path: str | None = Field(
        default=None, description="HF model dir or id for the actor; null = the base_model stage's output"
    )
    rollout_name: Literal["vllm", "sglang"] = "vllm"
    tool_format: Literal["hermes"] = "hermes"
    n_gpus_per_node: int = Field(default=1, ge=1)
    nnodes: int = Field(default=1, ge=1)
    ray_address: str | None = Field(
        default=None, description='join an existing Ray cluster ("auto" or host:port); null = start a local one'
    )
    tensor_parallel_size: int = Field(default=1, ge=1, description="vLLM tensor parallel size per replica")
    gpu_memory_utilization: float = Field(default=0.5, gt=0, le=1)
    prompt_length: int = Field(default=1024, ge=16)
    response_length: int = Field(default=2048, ge=16, description="all turns and observations of one episode")
    max_tool_response_length: int = Field(default=1024, ge=16, description="characters kept of one observation")
    ppo_mini_batch_size: int | None = Field(default=None, ge=1, description="questions per update; null = a step")
    micro_batch_size_per_gpu: int = Field(default=4, ge=1)
    agent_workers: int = Field(default=8, ge=1, description="agent loop worker actors")
    param_offload: bool = False
    optimizer_offload: bool = False
    gradient_checkpointing: bool = True
    grpo_process_rewards: bool = Field(
        default=True, description="grpo: use the process-supervised estimator (grpo_process) instead of outcome GRPO"
    )
    eval_questions: int | None = Field(default=None, ge=1, description="dev questions in val.parquet; null = all")
    save_freq: int = Field(default=20, ge=1)
    test_freq: int = Field(default=20, ge=-1)
    val_before_train: bool = False
    max_actor_ckpt_to_keep: int | None = Field(default=2, ge=1)
    project_name: str = "agentr1"
    experiment_name: str | None = Field(default=None, description="null = tracking.experiment")
    extra_overrides: list[str] = Field(default_factory=list, description="raw Hydra overrides appended last")


def verl_config(cfg) -> VerlConfig:
    """`cfg.train.verl`, or the defaults while the section is not attached to TrainConfig."""
    return getattr(cfg.train, "verl", None) or VerlConfig()
