"""verl's ToolAgentLoop with Agent-R1 process rewards: each tool-calling turn's reward sits on its closing token.

verl's loop keeps the per-call rewards (`tool_rewards`) but puts only the outcome score in `rm_scores`, on the last
token. This loop records, for every turn that called tools, the position of that turn's last generated token and
the sum of its calls' process rewards, and its output adds them to `rm_scores`, which verl's trainer reads as
`token_level_scores` -> `token_level_rewards` -> the advantage estimator (trainer.use_v1, verl's default).

Bad calls get the project's observation text and invalid-call penalty instead of verl's own message and 0.0.
"""

from __future__ import annotations

import json
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.schemas import ToolResponse
from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder, MergeResult

from components.agent.observation import error_observation
from components.agent.prompts import assistant_turn_suffix
from components.agent.rewards import process_reward
from components.config import RewardConfig
from components.train.local import grpo_process  # noqa: F401  (registers grpo_process wherever this loop runs)
from components.train.verl.export import AGENT_NAME
from components.train.verl.tool import SEEN_KEY

STEPS_KEY = "agentr1_process_steps"  # extra_fields: [[response position, process reward], ...]


class ProcessRewardOutput(AgentLoopOutput):
    process_rewards: list[tuple[int, float]] = []  # (position in the response, reward)

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        out.pop("process_rewards", None)
        scores = out.get("rm_scores")
        if scores is not None:
            for pos, reward in self.process_rewards:
                if pos < scores.shape[0]:  # turns cut off by response_length earn nothing
                    scores[pos] += reward
        return out


class TurnEndBuilder(ContinuousTokenBuilder):
    """verl's default builder, plus what the chat template writes after the model's stop token (ChatML: "\n").

    verl adds it only for the model types it knows (Qwen); a Llama-type model with a ChatML template (SmolLM2)
    would otherwise train on `<|im_end|><|im_start|>tool` but see `<|im_end|>\n<|im_start|>` at inference
    (components/rollout inserts the same suffix). The inserted tokens are outside the response mask.
    """

    def __init__(self, tokenizer: Any, **kwargs: Any):
        super().__init__(tokenizer, **kwargs)
        stop, suffix = tokenizer.eos_token or "", assistant_turn_suffix(tokenizer)
        rest = suffix[len(stop) :] if stop and suffix.startswith(stop) else ""
        self._stop_id, self._rest_ids = tokenizer.eos_token_id, tokenizer.encode(rest, add_special_tokens=False)

    def _merge_context_token_ids(self, runtime_token_ids: list[int], appended_token_ids: list[int], **kwargs: Any):
        prefix, inserted = list(runtime_token_ids), []
        if prefix and prefix[-1] == self._stop_id:
            inserted = list(self._rest_ids)
        return MergeResult(token_ids=prefix + inserted + list(appended_token_ids),
                           appended_token_count=len(appended_token_ids), kind="context",
                           inserted_token_ids=inserted)  # fmt: skip


@register(AGENT_NAME)
class AgentR1ToolAgentLoop(ToolAgentLoop):
    def __init__(self, *args: Any, reward: dict | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.reward_weights = RewardConfig(**(reward or {}))
        if type(self.continuous_token_builder) is ContinuousTokenBuilder and self.tokenizer.chat_template:
            self.continuous_token_builder = TurnEndBuilder(
                self.tokenizer, chat_template_kwargs=self.apply_chat_template_kwargs
            )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        output = await super().run(sampling_params, **kwargs)
        steps = output.extra_fields.pop(STEPS_KEY, [])
        output.extra_fields.pop(SEEN_KEY, None)
        fields = {k: getattr(output, k) for k in output.model_fields_set}
        return ProcessRewardOutput(**fields, process_rewards=steps)

    async def _handle_processing_tools_state(self, agent_data: AgentData) -> AgentState:
        mask = agent_data.response_mask
        closing = max((i for i, m in enumerate(mask) if m), default=-1)  # the token closing the tool call
        before = len(agent_data.tool_rewards)
        state = await super()._handle_processing_tools_state(agent_data)
        if closing >= 0:
            reward = float(sum(agent_data.tool_rewards[before:]))
            agent_data.extra_fields.setdefault(STEPS_KEY, []).append([closing, reward])
        return state

    async def _call_tool(
        self, tool_call: FunctionCall, tools_kwargs: dict[str, Any], agent_data: AgentData
    ) -> tuple[ToolResponse, float, dict]:
        active = getattr(agent_data, "_active_tools", self.tools)
        if tool_call.name not in active:
            return self._invalid(f"unknown tool {tool_call.name!r}")
        try:
            json.loads(tool_call.arguments)
        except (json.JSONDecodeError, TypeError):
            return self._invalid('"arguments" is not valid JSON')
        return await super()._call_tool(tool_call, tools_kwargs, agent_data)

    def _invalid(self, reason: str) -> tuple[ToolResponse, float, dict]:
        penalty = process_reward(False, (), set(), (), self.reward_weights)
        return ToolResponse(text=error_observation(reason)), penalty, {"valid": 0.0}


def agent_loop_config(reward: RewardConfig) -> list[dict[str, Any]]:
    """The `rollout.agent.agent_loop_config_path` entries that register this loop in verl's workers."""
    target = f"{AgentR1ToolAgentLoop.__module__}.{AgentR1ToolAgentLoop.__qualname__}"
    return [{"name": AGENT_NAME, "_target_": target, "reward": reward.model_dump(mode="json")}]
