"""The champion gate, the one rule for when the register stage moves the champion alias: the new version must beat,
on `registry.metric` (one metric on one eval set),
  - the current champion by more than `registry.min_improvement` (no champion, or one without that tag: no block);
  - each of `registry.baselines` evaluated on the same set (`baseline/<system>/<metric>` in eval.json), by any margin.
A baseline the evaluation lacks does not block; it is recorded as "not evaluated". Each comparison is recorded on the
version as a `gate.vs_<other>` tag, "<version's value> vs <other's value>: <verdict>", and the reason as
`evidence.decision` (register.py). `agentr1 promote` moves the alias by hand, past this gate (registry/promote.py)."""

from __future__ import annotations

from dataclasses import dataclass

from components.config import RegisterConfig
from components.registry.promote import current_champion

TAG = "gate"  # tag prefix on the model version: gate.vs_champion, gate.vs_<baseline>
BEATS, LOSES = "beats", "does not beat"
NO_CHAMPION, NO_METRIC, NOT_EVALUATED = "no champion", "no metric", "not evaluated"  # none of these blocks


@dataclass(frozen=True)
class Comparison:
    against: str  # champion | a baseline system
    value: float  # the new version's
    other: float | None  # the champion's or the baseline's; None: nothing to compare with
    verdict: str
    note: str = ""  # the reason's words: after the value when there is one, else instead of it
    version: str | None = None  # the champion's

    def tag(self) -> str:
        other = f"{self.other:.6g}" if self.other is not None else "none"
        return f"{self.value:.6g} vs {other}{f' (v{self.version})' if self.version else ''}: {self.verdict}"

    def says(self) -> str:
        return f"{self.verdict} {self.against} {self.other:.4f}{self.note}" if self.other is not None else self.note


@dataclass(frozen=True)
class Verdict:
    promoted: bool
    reason: str
    comparisons: tuple[Comparison, ...]

    def tags(self) -> dict[str, str]:
        return {f"{TAG}.vs_{c.against}": c.tag() for c in self.comparisons}


def baseline_key(system: str, metric: str) -> str:
    """Where flattened eval.json (evaluation/eval_json.py) keeps a baseline's value of `metric`."""
    return f"baseline/{system}/{metric}"


def champion(client, reg: RegisterConfig) -> tuple[str | None, float | None]:
    """The current champion's version and its `registry.metric` tag (None, None: no champion)."""
    version = current_champion(client, reg.model_name, reg.alias)
    tags = client.get_model_version(reg.model_name, version).tags if version else {}
    return version, float(tags[reg.metric]) if reg.metric in tags else None


def vs_champion(reg: RegisterConfig, value: float, version: str | None, other: float | None) -> Comparison:
    if version is None:
        return Comparison("champion", value, None, NO_CHAMPION, "no champion yet")
    if other is None:
        return Comparison("champion", value, None, NO_METRIC, f"champion v{version} has no {reg.metric} tag", version)
    if value > other + reg.min_improvement:
        return Comparison("champion", value, other, BEATS, f" (v{version}, +{value - other:.4f})", version)
    margin = f" by more than {reg.min_improvement}" if reg.min_improvement else ""
    return Comparison("champion", value, other, LOSES, f" (v{version}){margin}", version)


def vs_baseline(reg: RegisterConfig, value: float, system: str, metrics: dict[str, float]) -> Comparison:
    other = metrics.get(baseline_key(system, reg.metric))
    if other is None:
        return Comparison(system, value, None, NOT_EVALUATED, f"{system} not evaluated on {reg.metric} (does not block)")
    return Comparison(system, value, other, BEATS if value > other else LOSES)


def judge(reg: RegisterConfig, metrics: dict[str, float], champion_version: str | None,
          champion_value: float | None) -> Verdict:  # fmt: skip
    """The verdict on a version evaluated as `metrics` (flattened eval.json), given the current champion."""
    value = metrics[reg.metric]
    comparisons = (vs_champion(reg, value, champion_version, champion_value),
                   *(vs_baseline(reg, value, s, metrics) for s in reg.baselines))  # fmt: skip
    promoted = all(c.verdict != LOSES for c in comparisons)
    return Verdict(promoted, "; ".join([f"{reg.metric}={value:.4f}", *(c.says() for c in comparisons)]), comparisons)
