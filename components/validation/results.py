"""Turn GX validation results into the summary (summary.json) and the ValidationFailed message."""

from __future__ import annotations

import json
from typing import Any

from components.data.schema import DataError, cut


class ValidationFailed(DataError):
    """A suite failed; the message names each failing expectation, its column and example rows."""


def _plain(obj: Any) -> Any:
    """JSON-safe copy (numpy scalars become Python numbers)."""
    return json.loads(json.dumps(obj, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def bounded(obj: Any) -> Any:
    """A copy of `obj` with every string cut (schema.cut): what GX shows of a 50 MB value is its start and length."""
    if isinstance(obj, str):
        return cut(obj)
    if isinstance(obj, dict):
        return {bounded(k) if isinstance(k, str) else k: bounded(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(bounded(v) for v in obj)
    return obj


def bound_results(result: Any) -> Any:
    """Cut the values inside a GX suite result in place (example rows, observed values, error texts)."""
    for r in result.results:
        r.result = bounded(r.result or {})
        r.exception_info = bounded(r.exception_info or {})
    return result


def _error(exception_info: dict | None) -> str | None:
    infos = [exception_info] if exception_info and "raised_exception" in exception_info else (exception_info or {}).values()
    for info in infos:
        if isinstance(info, dict) and info.get("raised_exception"):
            return str(info.get("exception_message"))
    return None


def failed_expectation(r: Any, n_examples: int) -> dict[str, Any]:
    kwargs = {k: v for k, v in r.expectation_config.kwargs.items() if k != "batch_id"}
    res = r.result or {}
    examples = res.get("partial_unexpected_index_list") or [{"value": v} for v in res.get("partial_unexpected_list", [])]
    column = kwargs.get("column")
    examples = [dict(sorted(ex.items(), key=lambda kv: kv[0] == column)) for ex in examples]  # ids first
    return _plain(
        {
            "expectation": r.expectation_config.type,
            "column": kwargs.get("column") or kwargs.get("column_list"),
            "kwargs": kwargs,
            "unexpected_count": res.get("unexpected_count"),
            "element_count": res.get("element_count"),
            "observed_value": res.get("observed_value"),
            "examples": examples[:n_examples],
            "error": _error(r.exception_info),
        }
    )


def suite_summary(result: Any, n_examples: int) -> dict[str, Any]:
    return {
        "success": bool(result.success),
        "evaluated": len(result.results),
        "failed": [failed_expectation(r, n_examples) for r in result.results if not r.success],
    }


def _describe(suite: str, f: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v}" for k, v in f["kwargs"].items() if k in ("column", "column_list", "min_value", "max_value", "value_set", "regex"))
    head = f"  {suite}: {f['expectation']}({args})"
    if f["error"]:
        return f"{head}: error: {f['error']}"
    if f["unexpected_count"] is None:
        return f"{head}: observed {f['observed_value']!r}"
    rows = "; ".join(", ".join(f"{k}={v!r}" for k, v in ex.items()) for ex in f["examples"])
    return f"{head}: {f['unexpected_count']} of {f['element_count']} rows, e.g. {rows}"


def failure_message(suites: dict[str, dict[str, Any]], report: str) -> str:
    lines = [f"data validation failed (report: {report})"]
    for name, s in suites.items():
        lines += [_describe(name, f) for f in s["failed"]]
    return "\n".join(lines)
