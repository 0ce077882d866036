"""The project's SearchTool as a verl `BaseTool`, and the tool YAML verl loads it from.

Schema, argument validation, observation text and process reward all come from components.agent, so the local
trainer and verl see the same tool. The episode's state (which passages it has already seen) lives in
`agent_data.extra_fields`, because verl creates and releases a tool instance around every single call.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any
from uuid import uuid4

import yaml
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from components.agent.observation import error_observation
from components.agent.rewards import process_reward
from components.agent.tools import SearchTool, tool_schema, validate_arguments
from components.config import Config, parse_config
from components.io import write_text

SEEN_KEY = "agentr1_seen_ids"  # agent_data.extra_fields: passage ids this episode has retrieved


class AgentR1SearchTool(BaseTool):
    """tools[].config: {type: native, agentr1: <the resolved params, as a mapping>}."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        self.cfg: Config = parse_config(config["agentr1"], source="tool config agentr1")
        from components.retrieval.factory import make_backend

        self.backend = make_backend(self.cfg)
        self._lock = threading.Lock()  # backends keep per-index caches; one search at a time per worker
        self.tools: dict[str, SearchTool] = {}  # one SearchTool per corpus (= index alias)
        self._instances: dict[str, dict[str, Any]] = {}
        super().__init__(config, tool_schema or schema())

    def _tool(self, corpus: str) -> SearchTool:
        if corpus not in self.tools:
            top_k = self.cfg.agent.own_top_k(self.cfg.retrieval.top_k)
            self.tools[corpus] = SearchTool(self.backend, alias=corpus, top_k=top_k)
        return self.tools[corpus]

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid4().hex
        create = kwargs.get("create_kwargs") or {}
        if "corpus" not in create:
            raise ValueError("search tool: extra_info.tools_kwargs.search.create_kwargs has no 'corpus'")
        self._instances[instance_id] = {
            "corpus": str(create["corpus"]),
            "supporting_ids": [str(s) for s in create.get("supporting_ids") or []],
        }
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        state = self._instances[instance_id]
        extra = getattr(kwargs.get("agent_data"), "extra_fields", None)
        seen = set(extra.get(SEEN_KEY, ())) if extra is not None else set()
        w = self.cfg.agent.reward
        tool = self._tool(state["corpus"])
        reason = validate_arguments(tool, parameters)
        if reason is not None:
            return ToolResponse(text=error_observation(reason)), process_reward(False, (), seen, (), w), {"valid": 0.0}

        def search():
            with self._lock:
                return tool.execute([parameters])[0]

        result = await asyncio.to_thread(search)
        reward = process_reward(result.success, result.doc_ids, seen, state["supporting_ids"], w)
        if extra is not None:
            extra[SEEN_KEY] = sorted(seen | set(result.doc_ids))
        return ToolResponse(text=result.text), reward, {"valid": float(result.success), "hits": len(result.doc_ids)}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)


def schema() -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema.model_validate(tool_schema(SearchTool))


def absolute(cfg: Config) -> Config:
    """The same params with project paths made absolute, for Ray workers started in another directory."""
    project = cfg.project.model_copy(
        update={"data_dir": str(Path(cfg.project.data_dir).resolve()), "artifacts_dir": str(cfg.artifacts.resolve())}
    )
    return cfg.model_copy(update={"project": project})


def tool_config(cfg: Config) -> dict[str, Any]:
    return {
        "tools": [
            {
                "class_name": f"{AgentR1SearchTool.__module__}.{AgentR1SearchTool.__qualname__}",
                "config": {"type": "native", "agentr1": absolute(cfg).model_dump(mode="json")},
                "tool_schema": tool_schema(SearchTool),
            }
        ]
    }


def write_tool_config(cfg: Config, path: str | Path) -> Path:
    write_text(path, yaml.safe_dump(tool_config(cfg), sort_keys=False))
    return Path(path)
