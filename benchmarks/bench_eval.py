"""Evaluation speed and peak memory of the baselines and the base agent on a real model.

One process loads the model once, then runs each system on the same questions; after each it prints the
questions/s, the generated tokens/s and the process's peak RSS so far (resource.getrusage ru_maxrss).

    python benchmarks/bench_eval.py --model /tmp/smol/hf --questions 100 --systems direct naive_rag base_agent
(needs prepare and index to have run; the agent settings are params.yaml's, with the overrides below)
"""

from __future__ import annotations

import argparse
import inspect
import json
import resource
import time

import torch

from components.config import load_config
from components import artifacts
from components.data.prepare import read_questions
from components.evaluation.evaluate import SYSTEMS
from components.retrieval.factory import make_backend
from components.rollout.engine import RolloutStats
from components.evaluation.agent_eval import evaluate_agent, summarize
from components.evaluation.machine import cpu_line  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--model", required=True, help="a save_pretrained model dir")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--systems", nargs="+", default=["direct", "naive_rag", "base_agent"])
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-tokens-per-turn", type=int, default=64)
    ap.add_argument("--max-total-tokens", type=int, default=1536)
    ap.add_argument("--batch-tokens", type=int, default=32768)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = load_config(args.params)
    agent = cfg.agent.model_copy(update={"system_prompt": True, "max_turns": args.max_turns,
                                         "max_tokens_per_turn": args.max_tokens_per_turn,
                                         "max_total_tokens": args.max_total_tokens})  # fmt: skip
    qs = [q for q in read_questions(artifacts.questions(cfg)) if q.dataset == args.dataset]
    qs = qs[: args.questions]
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).eval()
    backend = make_backend(cfg)
    # the same script runs against the engine before token-budget batching (no batch_tokens argument)
    budget = {"batch_tokens": args.batch_tokens} if "batch_tokens" in inspect.signature(evaluate_agent).parameters else {}
    rows = [{"system": "(model loaded)", "peak_rss_mb": round(peak_rss_mb())}]
    print(f"{len(qs)} {args.dataset} questions, {cpu_line()}, {torch.get_num_threads()} threads, "
          f"{args.dtype}, {budget or 'one batch'}; model loaded, peak RSS {rows[0]['peak_rss_mb']} MB", flush=True)
    for system in args.systems:
        stats = RolloutStats()
        t0 = time.perf_counter()
        res = evaluate_agent(model, tok, qs, backend, agent, top_k=args.top_k, mode=SYSTEMS[system][1], stats=stats,
                             **budget)  # fmt: skip
        s = time.perf_counter() - t0
        m = summarize(res)
        row = {"system": system, "questions": len(qs), "seconds": round(s, 1), "questions_per_s": round(len(qs) / s, 3),
               "generated_tokens": stats.generated_tokens, "gen_tokens_per_s": round(stats.generated_tokens / s, 1),
               "peak_rss_mb": round(peak_rss_mb()), **{k: round(v, 3) for k, v in m.items()}}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    backend.close()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
