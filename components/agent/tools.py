"""Tools: one atomic action each, described by a JSON schema and executed in batches (Agent-R1 `Tool`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

import jsonschema

from components.agent.observation import error_observation, format_entry, numbered
from components.retrieval.base import SearchBackend, SearchError

log = logging.getLogger(__name__)
# What the model reads when a search fails: never the backend's error (URLs, index names, server internals),
# which goes to the log for the operator.
SEARCH_FAILED = "search failed: the search service is unavailable"


@dataclass(frozen=True)
class ToolResult:
    text: str  # observation content shown to the model (already escaped)
    success: bool
    doc_ids: tuple[str, ...] = field(default=())  # passages returned, for process rewards
    entries: tuple[str, ...] = field(default=())  # each passage as shown, without its rank


@runtime_checkable
class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object

    def execute(self, calls: Sequence[dict[str, Any]]) -> list[ToolResult]:
        """Run a batch of already validated argument objects; one result per call, never raises on bad input."""
        ...


def tool_schema(tool: Tool) -> dict[str, Any]:
    """OpenAI/hermes function description, as chat templates and verl's tool config expect it."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def declared_tools() -> list[dict[str, Any]]:
    """The agent's tools as the chat template is told about them (`tools=`), the same list verl's agent loop passes."""
    return [tool_schema(SearchTool)]


@lru_cache(maxsize=64)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    """The schema checked once and compiled (jsonschema.validate re-checks it on every call: most of a step)."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_arguments(tool: Tool, arguments: Any) -> str | None:
    """None if `arguments` fits the tool's schema, else a one-line reason (the error jsonschema.validate raises)."""
    validator = _validator(json.dumps(tool.parameters))
    err = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path) or "arguments"
    return f"{where}: {err.message}"


class SearchTool:
    """Search the corpus behind `alias` on a SearchBackend; returns the top_k passages."""

    name = "search"
    description = "Search the knowledge base and return the most relevant passages."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 1, "description": "search keywords"}},
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, backend: SearchBackend, alias: str, top_k: int = 3, cut: Callable[[str], str] | None = None):
        self.backend, self.alias, self.top_k, self.cut = backend, alias, top_k, cut

    def execute(self, calls: Sequence[dict[str, Any]], top_k: int | None = None) -> list[ToolResult]:
        """The calls' results, `top_k` passages each (default the tool's)."""
        if not calls:
            return []
        queries = [str(c["query"]).strip() for c in calls]
        try:
            hit_lists = self.backend.search(self.alias, queries, top_k or self.top_k)
        except SearchError as err:
            log.warning("search of %r failed (%d calls): %s", self.alias, len(calls), err)
            return [ToolResult(error_observation(SEARCH_FAILED), False) for _ in calls]
        results = []
        for hits in hit_lists:
            if not hits:
                results.append(ToolResult("No results.", True))
            else:
                entries = tuple(format_entry(h, self.cut) for h in hits)
                results.append(ToolResult(numbered(entries), True, tuple(h.id for h in hits), entries))
        return results
