"""The few lines `make run` ends with: EM per system and set, the champion, where the report is, how to open the UI."""

from __future__ import annotations

import json

from components import artifacts
from components.config import Config
from components.evaluation.eval_json import em_table


def render(cfg: Config) -> str:
    """A plain-text summary of the last evaluate and register stages; says which stage to run when one is missing."""
    eval_path, decision_path = artifacts.eval_metrics(cfg), artifacts.decision(cfg)
    if not eval_path.exists():
        return f"No results yet: {eval_path} is missing (run `make run` or `dvc repro`)."
    sets, rows = em_table(json.loads(eval_path.read_text()))
    width = max(len(s) for s, _ in rows) + 2
    lines = ["EM per system and set (" + str(eval_path) + "):",
             " " * width + "".join(f"{s:>18}" for s in sets)]  # fmt: skip
    lines += [f"{system:<{width}}" + "".join(f"{v:>18.3f}" if v is not None else f"{'-':>18}" for v in values)
              for system, values in rows]  # fmt: skip
    if decision_path.exists():
        d = json.loads(decision_path.read_text())
        champion = d["version"] if d["promoted"] else d.get("champion_version")
        stays = f"champion stays v{champion}" if champion is not None else "no champion yet"
        verdict = "promoted to champion" if d["promoted"] else f"not promoted, {stays}"
        lines.append(f"Registered {d['model_name']} v{d['version']}: {verdict} ({d['reason']}).")
    else:
        lines.append(f"Not registered yet: {decision_path} is missing (run `dvc repro register`).")
    report = artifacts.eval_report(cfg)
    lines += [f"Report:    {report}  (one self-contained page: open it in a browser)",
              "MLflow UI: make ui  (runs, metrics, the registered model and its champion)"]
    example = _answered(cfg)
    if example:
        lines += [f'Ask it:    agentr1 ask "{example}"',
                  "           (or `make serve`, then `agentr1 ask --url http://127.0.0.1:5001 ...`: the model stays loaded)"]
    return "\n".join(lines)


def _answered(cfg: Config) -> str | None:
    """A question the trained agent answered right in evaluation: an `agentr1 ask` example that works."""
    path = artifacts.eval_predictions(cfg)
    if not path.exists():
        return None
    with path.open(encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            # not the counterfactual world: `ask` searches the model's own corpus, the factual one
            if p.get("system") == "agent" and p.get("em") == 1.0 and not p["set"].startswith("synthetic_cf/") \
                    and '"' not in p["question"]:
                return p["question"]
    return None
