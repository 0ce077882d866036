"""Cost of logging evaluation episodes as MLflow traces, against the cost of the evaluation itself.

Greedy agent episodes of the CPU profile's tiny model (random weights, so episodes run to max_turns: the
most spans) on synthetic dev questions, then the same episodes as traces into a fresh sqlite store.

    python benchmarks/bench_traces.py --questions 96 --batches 12
    MLFLOW_ENABLE_ASYNC_TRACE_LOGGING=true python benchmarks/bench_traces.py --questions 96 --batches 12

The traces are written in `--batches` calls, as evaluate writes one per system and eval set. The pipeline writes
traces synchronously (components/env.py); the second line measures MLflow's async default.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from components.config import load_config
from components.env import apply_defaults
from components.data.synthetic import generate_world
from components.model.tiny import build_model, build_tokenizer
from components.retrieval.embedded import EmbeddedBackend
from components.evaluation.agent_eval import evaluate_agent
from components.rollout.traces import from_result
from components.tracking.mlflow_traces import write_traces
from components.evaluation.machine import cpu_line  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--batches", type=int, default=1, help="write_traces calls (evaluate: one per system and set)")
    args = ap.parse_args()
    apply_defaults()
    cfg = load_config(args.params)
    torch.set_num_threads(cfg.model.tiny.num_threads)
    world = generate_world(cfg.data.synthetic)
    qs = world.questions("dev")[: args.questions]
    with tempfile.TemporaryDirectory() as tmp:
        backend = EmbeddedBackend(Path(tmp) / "index", cfg.retrieval.embedded)
        backend.build(world.name, world.passages())
        tok = build_tokenizer([p.text for p in world.passages()] + [q.question for q in qs], cfg.model.tiny.vocab_size)
        model = build_model(tok, cfg.model.tiny, cfg.project.seed).eval()
        t0 = time.perf_counter()
        results = evaluate_agent(model, tok, qs, backend, cfg.agent, cfg.retrieval.top_k)
        eval_s = time.perf_counter() - t0

        import mlflow

        mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
        exp = mlflow.create_experiment("bench", artifact_location=Path(tmp, "art").as_uri())
        episodes = [from_result(r, **{"agentr1.system": "agent", "agentr1.set": "synthetic/dev"}) for r in results]
        write_traces(episodes[:2], exp, "warm-up", "evaluate")  # store schema and tracing provider set up once
        t0 = time.perf_counter()
        size = -(-len(episodes) // args.batches)
        with mlflow.start_run(experiment_id=exp):
            for i in range(0, len(episodes), size):
                write_traces(episodes[i : i + size], exp, f"bench {i // size}", "evaluate")
        trace_s = time.perf_counter() - t0
    spans = sum(1 + len(r.steps) for r in results)
    print(f"machine: {cpu_line()}, torch threads "
          f"{torch.get_num_threads()}")  # fmt: skip
    print(f"evaluation: {len(qs)} episodes in {eval_s:.2f} s ({eval_s / len(qs) * 100:.2f} s per 100)")
    from mlflow.environment_variables import MLFLOW_ENABLE_ASYNC_TRACE_LOGGING

    mode = "async" if MLFLOW_ENABLE_ASYNC_TRACE_LOGGING.get() else "sync"
    print(f"traces ({mode}, {args.batches} batches): {len(episodes)} traces, {spans} spans, 3 assessments each, "
          f"in {trace_s:.2f} s "
          f"({trace_s / len(episodes) * 100:.2f} s per 100; {trace_s / eval_s:.2f}x the evaluation)")


if __name__ == "__main__":
    main()
