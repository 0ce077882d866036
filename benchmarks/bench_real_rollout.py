"""Rollout engine speed against its references, side by side in one run, for the real models and the tiny one.

For each model and batch (episodes = questions x group), on the same machine in the same run:
  - each engine (`--engines`: vLLM in its own process, and the batched engine over transformers): generated
    tokens/s, episode tokens/s (every token of every trajectory), seconds per episode, and where its time went
    (the transformers engine: prefill, decode forwards, sampling, bookkeeping, tools; vLLM: its steps, tools, the
    rest);
  - a plain HF decode loop: `model(input_ids=tok, past_key_values=DynamicCache())` after a 200-token prompt, greedy,
    the same batch, in the engine's dtype (and fp32);
  - the GEMM ceiling: a [batch, hidden] x [hidden, intermediate] matmul's GFLOP/s over the model's FLOPs per token,
    beside the tokens each engine computed a second (prefilled and generated: what a rollout costs in matmuls);
  - one RL step of the local trainer (8 questions x 8 episodes by default) on the profile's own engine: rollout
    and update seconds, and the update's floor: its FLOPs (attention scores left out) at a wide GEMM's rate.

    python benchmarks/bench_real_rollout.py --models real qwen tiny --batches 16 64 128

The tiny model runs on the transformers engine alone (its 8-dim attention heads are below vLLM's minimum of 32).

Needs each profile's prepare, index and base_model outputs (`agentr1 prepare/validate/index/base-model [-S ...]`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import time

import torch
import yaml
from transformers import DynamicCache

from components import artifacts
from components.config import load_config
from components.data.prepare import read_questions
from components.model.loading import RolloutWeights, autocast, load_model, pick_device, uses_autocast
from components.retrieval.factory import make_backend
from components.train.local.train import Trainer, split_questions
from components.rollout.engine import RolloutStats
from components.rollout.episode_setup import episode_setup
from components.rollout.vllm_engine import VllmEngine
from components.tracking.tracker import NullTracker  # noqa: F401  (Trainer's tracker-free use)
from components.tracking.runs import commit as git_commit
from components.evaluation.machine import cpu_line, gpu_line  # noqa: E402


def flops_per_token(model) -> float:
    """2 x the parameters a token multiplies through (decoder body and output head; embeddings are lookups)."""
    body = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n)
    head = model.get_output_embeddings().weight.numel()
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    return 2.0 * (body + (head if tied else 0))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_ceiling(model, rows: int, dtype: torch.dtype, seconds: float = 1.5) -> tuple[float, float]:
    """GFLOP/s of the model's widest decode matmul at `rows` rows, and the tokens/s that rate allows."""
    h, i, device = model.config.hidden_size, model.config.intermediate_size, model.device
    x, w = torch.randn(rows, h, dtype=dtype, device=device), torch.randn(i, h, dtype=dtype, device=device)
    torch.nn.functional.linear(x, w)
    sync(device)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10 if device.type == "cuda" else 1):  # launches are asynchronous: time batches of them
            torch.nn.functional.linear(x, w)
            n += 1
        sync(device)
    gflops = 2 * rows * h * i * n / (time.perf_counter() - t0) / 1e9
    return gflops, gflops * 1e9 / flops_per_token(model)


@torch.no_grad()
def plain_decode(model, rows: int, prompt_len: int = 200, new_tokens: int = 48) -> float:
    """Generated tokens/s of a plain greedy loop over transformers' DynamicCache (no masks, no holes)."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, model.config.vocab_size - 100, (rows, prompt_len), generator=gen).to(model.device)
    cache = DynamicCache()
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    sync(model.device)
    t0 = time.perf_counter()
    for _ in range(new_tokens):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
    sync(model.device)
    return rows * new_tokens / (time.perf_counter() - t0)


def engine_run(cfg, model, tok, questions, group: int, seed: int = 0) -> dict:
    """One rollout of `group` episodes per question on `model` (a transformers model, or a VllmEngine)."""
    backend = make_backend(cfg)
    episodes = episode_setup(tok, backend, questions, cfg.agent, cfg.retrieval.top_k)
    stats = RolloutStats()
    eps = [q for q in questions for _ in range(group)]
    trajs = episodes.rollout(model, eps, temperature=cfg.train.temperature, generator=torch.Generator().manual_seed(seed),
                             stats=stats, engine=cfg.rollout)  # fmt: skip
    tokens = sum(len(t.input_ids) for t in trajs)
    return {
        "engine": "vllm" if isinstance(model, VllmEngine) else "hf",
        "episodes": len(eps),
        "seconds": stats.seconds,
        "s_per_episode": stats.seconds / len(eps),
        "generated_tok_s": stats.tokens_per_s,
        "decode_tok_s": stats.generated_tokens / max(1e-9, stats.phase_seconds["decode"] + stats.phase_seconds["sample"]),  # vLLM: its steps, prefills included
        "episode_tok_s": tokens / stats.seconds,
        "generated": stats.generated_tokens,
        "prefilled": stats.prefill_tokens,
        "computed_tok_s": (stats.prefill_tokens + stats.generated_tokens) / stats.seconds,  # prefilled and generated
        "turns": sum(t.episode.turns for t in trajs) / len(trajs),
        "answered": sum(t.episode.answer is not None for t in trajs) / len(trajs),
        "phases": {k: round(v, 2) for k, v in stats.phase_seconds.items()},
        "row_fill": stats.fed_rows / max(1, stats.row_steps),  # share of computed decode rows that fed a token
        "compactions": stats.compactions,
    }


def update_flops(trainer, trajs) -> float:
    """A floor on the update's FLOPs (attention scores left out): every token through the frozen layers forward (unless
    the rollout kept their output), the trained layers forward and backward (x3), and the output head forward and
    backward at the action tokens."""
    model, dec = trainer.policy, trainer.policy.base_model
    trained = {id(p) for p in trainer.trainable}
    kept = {id(p) for layer in dec.layers[: trainer.keep_layer or 0] for p in layer.parameters()}  # the rollout's output
    body = sum(p.numel() for n, p in dec.named_parameters() if "embed_tokens" not in n and id(p) not in kept)
    body_trained = sum(p.numel() for n, p in dec.named_parameters() if "embed_tokens" not in n and id(p) in trained)
    head = model.get_output_embeddings().weight.numel()
    tokens = sum(len(t.input_ids) for t in trajs)
    actions = sum(sum(t.action_mask) for t in trajs)
    return 2.0 * (tokens * (body + 2 * body_trained) + 3 * actions * head)


def rl_steps(cfg, questions, group: int, steps: int) -> list[dict]:
    """`steps` RL steps of one trainer (with train.compile the first pays the compilation)."""
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={
        "questions_per_step": len(questions), "group_size": group, "entropy_coef": 1e-9})})  # fmt: skip
    policy, tok = load_model(artifacts.base_model(cfg), cfg, pick_device(cfg))
    trainer = Trainer(cfg, policy, tok, make_backend(cfg), questions, {}, artifacts.base_model(cfg))
    try:
        return [{"step": step, "compile": cfg.train.compile, **step_row(trainer, *trainer.step(step))}
                for step in range(steps)]  # fmt: skip
    finally:
        trainer.actor.close()


def step_row(trainer, metrics: dict, trajs) -> dict:
    policy, cfg = trainer.policy, trainer.cfg
    tokens = sum(len(t.input_ids) for t in trajs)
    # the update's matmuls are prefill-shaped: their ceiling is a wide GEMM at the trainer's precision
    gflops, _ = gemm_ceiling(policy, 2048, torch.bfloat16 if uses_autocast(cfg, policy.device) else torch.float32)
    floor_s = update_flops(trainer, trajs) / (gflops * 1e9)
    return {"engine": trainer.cfg.rollout.engine, "rollout_s": metrics["rollout_s"], "update_s": metrics["update_s"],
            "step_s": metrics["rollout_s"] + metrics["update_s"], "update_tok_s": tokens / metrics["update_s"],
            "update_gflop": update_flops(trainer, trajs) / 1e9, "update_gemm_gflops": gflops,
            "update_floor_s": floor_s}  # fmt: skip


def bench_model(name: str, sets: list[str], batches: list[int], group: int, rl_questions: int, engines: list[str],
                rl_step_count: int = 1) -> list[dict]:  # fmt: skip
    overrides = dict(s.split("=", 1) for s in sets if s)
    cfg = load_config("params.yaml", {k: yaml.safe_load(v) for k, v in overrides.items()})
    device = pick_device(cfg)
    train_qs = split_questions(read_questions(artifacts.questions(cfg)), cfg.train.datasets, "train")
    hf_cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"engine": "hf"})})
    policy, tok = load_model(artifacts.base_model(cfg), cfg, device)
    actor = RolloutWeights(policy, hf_cfg)
    dtype = next(actor.model.parameters()).dtype
    amp = (lambda: autocast(cfg, device)) if actor.model is policy else (lambda: torch.autocast("cpu", enabled=False))
    runners = {}
    if "hf" in engines:
        runners["hf"] = actor.model
    t0 = time.perf_counter()
    if "vllm" in engines and name != "tiny":
        runners["vllm"] = VllmEngine(artifacts.base_model(cfg), cfg.rollout, seed=cfg.project.seed)
    startup = time.perf_counter() - t0
    rows = []
    try:
        for model in runners.values():
            with amp():
                engine_run(hf_cfg, model, tok, train_qs[:2], 2)  # warm-up: first-call costs stay out of the timings
        for batch in batches:
            qs = random.Random(batch).sample(train_qs, max(1, batch // group))
            plain = plain_decode(actor.model, len(qs) * group)
            plain32 = plain_decode(policy, len(qs) * group) if dtype != torch.float32 else plain
            gflops, ceiling = gemm_ceiling(actor.model, len(qs) * group, dtype)
            for engine, model in runners.items():
                with amp():
                    eng = engine_run(hf_cfg, model, tok, qs, group)
                rows.append({"model": name, "dtype": model.dtype if engine == "vllm" else str(dtype).removeprefix("torch."),
                             **eng, "plain_tok_s": plain, "plain_fp32_tok_s": plain32, "gemm_gflops": gflops,
                             "ceiling_tok_s": ceiling, "vs_plain": eng["generated_tok_s"] / plain,
                             "vs_ceiling": eng["computed_tok_s"] / ceiling,
                             "startup_s": startup if engine == "vllm" else 0.0})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    finally:
        if "vllm" in runners:
            runners["vllm"].close()
    if rl_questions:
        qs = random.Random(7).sample(train_qs, rl_questions)
        for row in rl_steps(cfg, qs, group, rl_step_count):
            rows.append({"model": name, "rl_step": f"{rl_questions}x{group}", **row})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def markdown(rows: list[dict], header: str) -> str:
    out = [header, "",
           "| model | episodes | engine | dtype | engine gen tok/s | episode tok/s | s / episode | engine decode-only tok/s "
           "| plain loop tok/s (fp32) | engine / plain | GEMM GFLOP/s | ceiling tok/s | computed tok/s (of ceiling) "
           "| decode rows used |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "episodes" in r:
            out.append(f"| {r['model']} | {r['episodes']} | {r['engine']} | {r['dtype']} | {r['generated_tok_s']:.1f} | "
                       f"{r['episode_tok_s']:.0f} | {r['s_per_episode']:.2f} | {r['decode_tok_s']:.0f} | {r['plain_tok_s']:.0f} "
                       f"({r['plain_fp32_tok_s']:.0f}) | {r['vs_plain']:.2f}x | {r['gemm_gflops']:.0f} | "
                       f"{r['ceiling_tok_s']:.0f} | {r['computed_tok_s']:.0f} ({r['vs_ceiling']:.0%}) | {r['row_fill']:.0%} |")  # fmt: skip
    out += ["", "Where the engine's time went (seconds):", "",
            "| model | episodes | engine | total | prefill | decode | sample | bookkeeping | tools | tokens prefilled / generated |",
            "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "episodes" in r:
            p = r["phases"]
            out.append(f"| {r['model']} | {r['episodes']} | {r['engine']} | {r['seconds']:.1f} | {p['prefill']} | {p['decode']} | "
                       f"{p['sample']} | {p['bookkeeping']} | {p['tools']} | {r['prefilled']} / {r['generated']} |")
    steps = [r for r in rows if "rl_step" in r]
    if steps:
        out += ["", "| model | RL step | step | compile | engine | rollout s | update s | step s | update tok/s "
                "| update GFLOP (floor) | wide GEMM GFLOP/s | update floor s |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        out += [f"| {r['model']} | {r['rl_step']} | {r['step']} | {r['compile']} | {r['engine']} | {r['rollout_s']:.1f} | {r['update_s']:.1f} | "
                f"{r['step_s']:.1f} | {r['update_tok_s']:.0f} | {r['update_gflop']:.0f} | {r['update_gemm_gflops']:.0f} | "
                f"{r['update_floor_s']:.1f} |" for r in steps]  # fmt: skip
    starts = {r["model"]: r["startup_s"] for r in rows if r.get("startup_s")}
    if starts:
        out += ["", "vLLM start-up (load; eager, no compilation): " + ", ".join(f"{m} {s:.1f} s" for m, s in starts.items())]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--real-params", nargs="*", default=["profile=real"], help="key=value overrides of the real run")
    ap.add_argument("--qwen-params", nargs="*", default=["profile=qwen"], help="key=value overrides of the qwen run")
    ap.add_argument("--tiny-params", nargs="*", default=[], help="key=value overrides of the tiny run")
    ap.add_argument("--models", nargs="+", default=["real", "qwen", "tiny"])
    ap.add_argument("--engines", nargs="+", default=["vllm", "hf"], choices=["vllm", "hf"])
    ap.add_argument("--batches", type=int, nargs="*", default=[16, 64, 128], help="episodes a rollout (none: the RL step alone)")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--rl-questions", type=int, default=8, help="questions of the timed RL step (0: none)")
    ap.add_argument("--rl-steps", type=int, default=1, help="RL steps timed one after another (train.compile: the "
                    "first compiles)")  # fmt: skip
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.models:
        sets = {"real": args.real_params, "qwen": args.qwen_params}.get(name, args.tiny_params)
        rows += bench_model(name, sets, args.batches, args.group, args.rl_questions, args.engines, args.rl_steps)
    commit = git_commit()
    header = f"Machine: {cpu_line()}, {torch.get_num_threads()} threads{gpu_line()}. Date: {datetime.date.today()}. Commit: {commit}."
    print(markdown(rows, header))


if __name__ == "__main__":
    main()
