"""The `evaluate` stage: EM/F1 per dataset of the trained agent and of the baselines.

Systems (Agent-R1's comparison):
  agent       the trained model, multi-turn with the search tool
  base_agent  the base model with the same tools, no RL
  direct      the base model answering with no retrieval
  naive_rag   the base model, one retrieval with the question as the query, then the answer
EM and F1 use the official HotpotQA/SQuAD answer normalisation (components.agent.rewards).
The agents are scored on their strict <answer> tag; direct and naive RAG on plain generation, with the strict
parse reported beside it (em_strict, f1_strict, answered_strict). Generation runs in batches of at most
evaluate.batch_tokens, with a progress bar on a terminal. artifacts/eval/report.html shows the table and the
trajectories (html_report.py); `tracking.traces` episodes per system and set are logged as MLflow traces.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone

from components import artifacts
from components.config import Config, EvalSetSpec, flat_params
from components.data.prepare import read_questions
from components.data.schema import Question
from components.evaluation.html_report import render
from components.evaluation.eval_json import em_table, flat_metrics, put
from components.io import write_json, write_text
from components.model.loading import load_generator, rollout_autocast
from components.retrieval.factory import make_backend
from components.evaluation.agent_eval import AgentResult, evaluate_agent, summarize
from components.rollout.traces import from_result
from components.rollout.vllm_engine import VllmEngine
from components.secrets import redact_params
from components.tracking.runs import commit

# system -> (which model, rollout mode)
SYSTEMS = {
    "agent": ("trained", "agent"),
    "base_agent": ("base", "agent"),  # tools, no RL (after the format warm-up, if any)
    "pretrained_agent": ("pretrained", "agent"),  # tools, before the format warm-up
    "direct": ("pretrained", "direct"),
    "naive_rag": ("pretrained", "naive_rag"),
}
N_TRAJECTORIES = 20  # readable samples logged per system and set


def select(questions: Sequence[Question], spec: EvalSetSpec) -> list[Question]:
    chosen = [q for q in questions if q.dataset == spec.dataset and q.split == spec.split]
    if not chosen:
        raise ValueError(f"evaluate.sets: no questions for dataset={spec.dataset!r} split={spec.split!r} in prepared data")
    return chosen[: spec.limit] if spec.limit else chosen


def run(cfg: Config, tracker) -> dict[str, float]:
    questions = read_questions(artifacts.require(cfg, artifacts.questions(cfg)))
    sets = {f"{s.dataset}/{s.split}": select(questions, s) for s in cfg.evaluate.sets}
    systems = ["agent", *cfg.evaluate.baselines]
    dirs = {"trained": artifacts.trained_model(cfg), "base": artifacts.base_model(cfg), "pretrained": artifacts.pretrained_model(cfg)}
    backend = make_backend(cfg)
    models: dict[str, int] = {}  # parameters of each model loaded
    by_pair: dict[tuple[str, str], list[AgentResult]] = {}
    try:
        for which in dict.fromkeys(SYSTEMS[s][0] for s in systems):  # each model loaded once, and closed when done
            model, tokenizer = load_generator(dirs[which], cfg)
            try:
                models[which] = model.num_parameters()
                for system in (s for s in systems if SYSTEMS[s][0] == which):
                    for name, qs in sets.items():
                        with rollout_autocast(cfg, model):
                            results = evaluate_agent(model, tokenizer, qs, backend, cfg.agent, top_k=cfg.retrieval.top_k,
                                                     mode=SYSTEMS[system][1], batch_tokens=cfg.evaluate.batch_tokens,
                                                     desc=f"{system} {name}", naive_rag=cfg.evaluate.naive_rag,
                                                     reread=cfg.evaluate.reread)  # fmt: skip
                        by_pair[(system, name)] = results
                        tracker.log_text(_transcripts(results), f"trajectories/{system}/{name.replace('/', '_')}.txt")
                        tags = {"agentr1.system": system, "agentr1.set": name}
                        tracker.log_traces([from_result(r, **tags) for r in results[: cfg.tracking.traces]],
                                           f"evaluate/{system}/{name}")  # fmt: skip
            finally:
                if isinstance(model, VllmEngine):
                    model.close()
    finally:
        backend.close()

    # the report, the table and the predictions list the systems in their configured order
    by_pair = {(system, name): by_pair[(system, name)] for system in systems for name in sets}
    report: dict = {}
    rows: list[dict] = []
    predictions: list[dict] = []
    for (system, name), results in by_pair.items():
        summary = summarize(results)
        put(report, system, name, summary)
        rows.append({"system": system, "set": name, **summary, "n": len(results)})
        predictions += [{"system": system, "set": name, **_public(r)} for r in results]

    write_text(artifacts.eval_per_dataset(cfg), _csv(rows))
    write_text(artifacts.eval_predictions(cfg), "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions))
    page = render(rows, by_pair, cfg.evaluate.report_trajectories, context=_context(cfg, tracker, models), curves=_curves(cfg))
    write_text(artifacts.eval_report(cfg), page)
    write_json(artifacts.eval_metrics(cfg), report)
    sets, table = em_table(report)
    write_json(artifacts.eval_em(cfg), {system: dict(zip(sets, values)) for system, values in table})
    tracker.log_artifact(artifacts.eval_per_dataset(cfg), "eval")
    tracker.log_artifact(artifacts.eval_report(cfg), "eval")
    tracker.log_artifact(artifacts.eval_predictions(cfg), "eval")
    flat = flat_metrics(report)
    tracker.log_metrics(flat)
    return flat


def params_digest(cfg: Config) -> str:
    """A short hash of the resolved params (secrets redacted): two runs with the same digest ran the same config."""
    blob = json.dumps(redact_params(flat_params(cfg)), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _context(cfg: Config, tracker, models: dict) -> dict[str, str]:
    """What the report describes: the model, its training, the run, the code and the config."""
    source = cfg.model.package or cfg.model.name_or_path
    size = f", {models['trained']:,} parameters" if "trained" in models else ""
    run = tracker.run_id
    return {
        "model": f"{'tiny Qwen2 (CPU profile)' if source == 'tiny' else source}{size}",
        "training": f"{cfg.train.algorithm} on {', '.join(cfg.train.datasets)}, {cfg.train.backend} trainer, "
                    f"up to {cfg.train.steps} steps",  # fmt: skip
        "registered version": "decided after this page, by the register stage: artifacts/register/decision.json and "
                              "the MLflow registry" + (f" (this evaluation is MLflow run {run})" if run else ""),  # fmt: skip
        "commit": commit(os.environ.get("DVC_ROOT", ".")),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "params digest": params_digest(cfg),
    }


def _read_csv(path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _series(rows: list[dict[str, str]], column: str) -> list[tuple[float, float]]:
    return [(float(r["step"]), float(r[column])) for r in rows if r.get(column) not in (None, "")]


def _curves(cfg: Config) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """The train stage's curves: dev EM/F1 per evaluation step, mean training reward per step."""
    dev, train = _read_csv(artifacts.dev_curve(cfg)), _read_csv(artifacts.train_curve(cfg))
    target = cfg.train.datasets[0]
    return {"curve": {f"dev EM ({target})": _series(dev, "em"), f"dev F1 ({target})": _series(dev, "f1"),
                      "dev EM, mean over sets": _series(dev, "mean_em")},
            "reward-curve": {"train reward": _series(train, "train/reward")}}  # fmt: skip


def _public(r: AgentResult) -> dict:
    d = asdict(r)
    d.pop("transcript")
    d.pop("steps")
    return d


def _transcripts(results: Sequence[AgentResult]) -> str:
    return "\n\n".join(r.transcript for r in results[:N_TRAJECTORIES]) + "\n"


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for row in rows for k in row))  # plain baselines add the *_strict columns
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
