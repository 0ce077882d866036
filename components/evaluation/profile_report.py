"""A real-model profile end to end from prepared data: base_model (conversion + format warm-up), train, evaluate; then
one table per eval set (EM / F1 of every system), the steps, the wall time per stage and the machine.

    agentr1 profile-report [-S train.steps=30 ...] [--stages base_model,train,evaluate] [--untracked]
                           [--out benchmarks/results/real_model.md]

Needs `agentr1 prepare/validate/index -S profile=real` first (or `dvc exp run -S profile=real`). Each stage is a
tracked MLflow run, exactly as `dvc repro` runs it (or untracked with --untracked, on a GPU node without MLflow).
`-S profile=qwen` runs the qwen profile instead of `real`. The CLI runs the stages (components/cli.py); this module
renders the report.
"""

from __future__ import annotations

import csv
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from components import artifacts
from components.evaluation.machine import cpu_line, gpu_line

SYSTEMS = ["direct", "naive_rag", "pretrained_agent", "base_agent", "agent"]


def _metrics(report: dict, system: str) -> dict:
    """eval.json keeps the trained agent at the top level and every other system under `baseline`."""
    return report if system == "agent" else report.get("baseline", {}).get(system, {})


def table(report: dict, dataset: str, split: str) -> list[str]:
    cols = ["em", "f1", "answered", "yes_no", "searches", "support_recall", "turns", "em_strict", "f1_strict"]
    lines = ["| system | EM | F1 | answered | yes/no | searches | gold passages found | turns | EM / F1 strict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for system in SYSTEMS:
        m = {c: _metrics(report, system).get(c, {}).get(dataset, {}).get(split) for c in cols}
        if m["em"] is None:
            continue
        strict = f"{m['em_strict']:.3f} / {m['f1_strict']:.3f}" if m["em_strict"] is not None else ""
        yes_no = f"{m['yes_no']:.2f}" if m["yes_no"] is not None else ""  # eval.json from before the column
        found = f"{m['support_recall']:.2f}" if m["support_recall"] is not None else ""  # agents on sets with passages
        lines.append(f"| {system} | {m['em']:.3f} | {m['f1']:.3f} | {m['answered']:.2f} | {yes_no} | {m['searches']:.2f} | "
                     f"{found} | {m['turns']:.2f} | {strict} |")  # fmt: skip
    return lines


def paired_bootstrap(a: list[float], b: list[float], n: int = 10000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of a - b over paired questions and its 95 % percentile interval (questions resampled with replacement)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(d), size=(n, len(d)))
    lo, hi = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


def read_predictions(path: Path) -> list[dict]:
    """The evaluate stage's predictions.jsonl: one row per (system, set, question)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def comparisons(rows: list[dict], sets: list[str]) -> list[str]:
    """Trained agent against the base agent and naive RAG, per set: the EM and F1 differences with their
    paired-bootstrap intervals; for the synthetic world also per number of hops (the question's "of"s)."""
    score = {(r["system"], r["set"], r["question_id"], m): r[m] for r in rows for m in ("em", "f1")}
    hops = {r["question_id"]: r["question"].count(" of ") for r in rows}
    pairs = [(other, m) for m in ("em", "f1") for other in ("base_agent", "naive_rag")]
    lines = ["| set | questions | " + " | ".join(f"trained − {o} {m.upper()} [95 % CI]" for o, m in pairs) + " |",
             "|---|---|" + "---|" * len(pairs)]  # fmt: skip
    for name in sets:
        ids = sorted({q for (sys_, s_, q, _) in score if s_ == name and sys_ == "agent"})
        groups = [("all", ids)]
        if name.startswith("synthetic"):
            groups += [(f"{h}-hop", [q for q in ids if hops[q] == h]) for h in sorted({hops[q] for q in ids})]
        for label, qs in groups:
            cells = []
            for other, m in pairs:
                if not qs or any((other, name, q, m) not in score for q in qs):
                    cells.append("")
                    continue
                d, lo, hi = paired_bootstrap([score[("agent", name, q, m)] for q in qs],
                                             [score[(other, name, q, m)] for q in qs])  # fmt: skip
                cells.append(f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
            lines.append(f"| {name} {label} | {len(qs)} | " + " | ".join(cells) + " |")
    return lines


def wins_and_losses(rows: list[dict], name: str, other: str = "naive_rag", n: int = 10) -> list[str]:
    """The first `n` questions of set `name` where the trained agent's EM beats `other`'s, and the first `n` where
    it loses: the question, the gold answers and both answers (the agent's with its searches)."""
    by = {(r["system"], r["question_id"]): r for r in rows if r["set"] == name}
    pairs = [(a, by[(other, q)]) for (s, q), a in by.items() if s == "agent" and (other, q) in by]

    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")[:160]

    lines = []
    for title, keep in (("beats", lambda a, b: a["em"] > b["em"]), ("loses to", lambda a, b: a["em"] < b["em"])):
        chosen = [(a, b) for a, b in pairs if keep(a, b)]
        lines += [f"### {name}: the agent {title} {other} ({len(chosen)} of {len(pairs)} questions; the first {n})", "",
                  f"| question | gold | agent (searches) | {other} |", "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {cell(a['question'])} | {cell(' / '.join(a['answers']))} | {cell(a['prediction'])} "
                  f"({a['searches']}) | {cell(b['prediction'])} |" for a, b in chosen[:n]]  # fmt: skip
        lines.append("")
    return lines


def write(cfg, overrides: dict, seconds: dict[str, float], out: str | Path) -> list[str]:
    """The report of the run `cfg` names (`seconds`: wall time per stage run here), written to `out`; its lines."""
    metrics, curve_csv = artifacts.eval_metrics(cfg), artifacts.train_curve(cfg)
    report = json.loads(metrics.read_text()) if metrics.exists() else {}
    curve = list(csv.DictReader(curve_csv.open())) if curve_csv.exists() else []
    lines = [f"# Profile {overrides['profile']} ({cfg.model.name_or_path}), {time.strftime('%Y-%m-%d')}", "",
             f"Machine: {cpu_line()}, torch threads from train.num_threads{gpu_line()}. Overrides: {overrides}.", "",
             "Wall time: " + (", ".join(f"{k} {v / 60:.1f} min" for k, v in seconds.items()) or "not timed here") + "; "
             f"train steps: {len(curve) - 1 if curve and curve[0]['step'] == '0' else len(curve)}.", ""]  # fmt: skip
    predictions = artifacts.eval_predictions(cfg)
    rows = read_predictions(predictions) if predictions.exists() else []
    asked = Counter(r["set"] for r in rows if r["system"] == "agent")  # a set may hold fewer than its limit
    for spec in cfg.evaluate.sets if report else []:
        n = asked.get(f"{spec.dataset}/{spec.split}") or spec.limit
        lines += [f"## {spec.dataset}/{spec.split} (first {n} questions)", "",
                  *table(report, spec.dataset, spec.split), ""]  # fmt: skip
    if rows:
        lines += ["## Trained agent against the baselines (paired bootstrap over questions)", "",
                  *comparisons(rows, [f"{s.dataset}/{s.split}" for s in cfg.evaluate.sets]), ""]  # fmt: skip
        lines += ["## Where the agent beats naive RAG, and where it loses (full episodes: artifacts/eval/report.html)", ""]
        for spec in cfg.evaluate.sets:
            lines += wins_and_losses(rows, f"{spec.dataset}/{spec.split}")
    dev = [k for k in (curve[0] if curve else {}) if k.startswith("dev/") and k.endswith(("/em", "/f1"))]
    if dev:
        lines += ["## Dev curve (greedy, train.eval_questions per set)", "", "| step | " + " | ".join(dev) + " |",
                  "|---" * (len(dev) + 1) + "|"]  # fmt: skip
        lines += [f"| {r['step']} | " + " | ".join(f"{float(r[k]):.3f}" if r[k] else "" for k in dev) + " |"
                  for r in curve if any(r[k] for k in dev)]  # fmt: skip
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines
