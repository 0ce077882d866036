"""The layout of eval.json: {"em": {"synthetic": {"dev": x}}, ..., "baseline": {"direct": {"em": {...}}}}."""

from __future__ import annotations


def put(report: dict, system: str, set_name: str, summary: dict[str, float]) -> None:
    """Add one system's summary on one `dataset/split` set; the trained agent sits at the top level."""
    node = report if system == "agent" else report.setdefault("baseline", {}).setdefault(system, {})
    dataset, split = set_name.split("/")
    for metric, value in summary.items():
        node.setdefault(metric, {}).setdefault(dataset, {})[split] = round(float(value), 6)


def flatten(report: dict, prefix: str = "") -> dict[str, float]:
    """Slash-joined keys, e.g. "em/synthetic/dev", "baseline/direct/em/synthetic/dev"."""
    out: dict[str, float] = {}
    for k, v in report.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, dict):
            out |= flatten(v, key)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out
