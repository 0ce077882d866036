"""The layout of eval.json: {"em": {"synthetic": {"dev": x}}, ..., "baseline": {"direct": {"em": {...}}}}."""

from __future__ import annotations


def put(report: dict, system: str, set_name: str, summary: dict[str, float]) -> None:
    """Add one system's summary on one `dataset/split` set; the trained agent sits at the top level."""
    node = report if system == "agent" else report.setdefault("baseline", {}).setdefault(system, {})
    dataset, split = set_name.split("/")
    for metric, value in summary.items():
        node.setdefault(metric, {}).setdefault(dataset, {})[split] = round(float(value), 6)


def flat_metrics(report: dict, prefix: str = "") -> dict[str, float]:
    """Slash-joined keys, e.g. "em/synthetic/dev", "baseline/direct/em/synthetic/dev"."""
    out: dict[str, float] = {}
    for k, v in report.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, dict):
            out |= flat_metrics(v, key)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


def em_table(report: dict, metric: str = "em") -> tuple[list[str], list[tuple[str, list[float | None]]]]:
    """(sets, [(system, value per set)]) of one metric: the trained agent first, then the baselines as evaluated."""
    systems = {"agent": report.get(metric, {})} | {b: m.get(metric, {}) for b, m in report.get("baseline", {}).items()}
    sets = list(dict.fromkeys(f"{d}/{s}" for by_set in systems.values() for d, splits in by_set.items() for s in splits))
    rows = [(name, [by_set.get(s.split("/")[0], {}).get(s.split("/")[1]) for s in sets]) for name, by_set in systems.items()]
    return sets, rows
