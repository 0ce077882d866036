"""The vLLM side of the rollout: a process of its own, in its own environment (.venv-vllm), fed token ids.

It imports only the standard library, torch, safetensors and vLLM: vLLM's CPU build pins a fastapi that the
project's Prefect cannot live with, so the two never share an interpreter (docs/rollout-engine.md). The trainer's
process starts it (components/rollout/vllm_engine.py) and talks to it over a Unix socket with
`multiprocessing.connection` (this side listens): each message is a (verb, payload) tuple of plain Python values.

Verbs:
  add     requests [{id, prompt, max_tokens, temperature, stop}] join the running batch
  step    engine steps until at least one request ends; returns [(id, token_ids, logprobs, prompt tokens computed)]
  reload  weights from a safetensors file (the tensors named there; the others keep theirs)
  reset   drop unfinished requests, empty the prefix cache and seed the sampler (a rollout that starts there
          repeats exactly; one stopped halfway, e.g. a cancelled serving request, leaves nothing behind)
  score   the log-prob of each token of fixed sequences given the ones before (prompt log-probs)
  close   stop

Usage: python vllm_worker.py SOCKET AUTHKEY_HEX MODEL_DIR MAX_MODEL_LEN KV_CACHE_MB SEED DTYPE
  (MAX_MODEL_LEN 0: the model's; DTYPE auto, bfloat16 or float32; "ready" answers with the dtype it chose)
"""

import os
import shutil
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine runs in this process: no third process
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_DO_NOT_TRACK", "1")

from multiprocessing.connection import Listener  # noqa: E402

LIVE: set[str] = set()  # ids of the requests added and not yet returned by `step`


def _dtype(setting: str) -> str:
    """"auto": bf16 where the hardware computes it (a GPU that supports it; a CPU with AVX512-BF16 or AMX), else fp32.
    Emulated bf16 generated 2.9x slower than fp32 on an AVX2 EPYC. The same rule as components/model/loading.py's
    `native_bf16`, which this process cannot import."""
    if setting != "auto":
        return setting
    import torch

    if torch.cuda.is_available():
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    caps = torch.cpu.get_capabilities()
    return "bfloat16" if caps.get("avx512_bf16") or caps.get("amx_bf16") else "float32"


def _engine(model_dir: str, max_model_len: int, kv_cache_mb: int, seed: int, dtype: str):
    from vllm import EngineArgs, LLMEngine

    args = EngineArgs(model=model_dir, dtype=dtype, max_model_len=max_model_len or None, seed=seed, enforce_eager=True,
                      kv_cache_memory_bytes=kv_cache_mb << 20, block_size=64, enable_prefix_caching=True,
                      logprobs_mode="processed_logprobs", max_logprobs=1, disable_log_stats=True)  # fmt: skip
    return LLMEngine.from_engine_args(args)


def _sampling(r: dict):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(max_tokens=r["max_tokens"], temperature=r["temperature"], logprobs=0,
                          stop_token_ids=r["stop"], detokenize=False, skip_special_tokens=False,
                          output_kind=RequestOutputKind.FINAL_ONLY)  # fmt: skip


def _sampled_logprobs(out) -> list[float]:
    return [float(lp[t].logprob) for t, lp in zip(out.token_ids, out.logprobs)]


def _step(engine) -> list:
    """Engine steps until some request ends (or none is left): each ended request's id, tokens, their log-probs,
    and how many of its prompt tokens were computed (not found in the prefix cache)."""
    while engine.has_unfinished_requests():
        done = [o for o in engine.step() if o.finished]
        if done:
            LIVE.difference_update(o.request_id for o in done)
            return [(o.request_id, list(o.outputs[0].token_ids), _sampled_logprobs(o.outputs[0]),
                     len(o.prompt_token_ids) - (o.num_cached_tokens or 0)) for o in done]  # fmt: skip
    return []


def _retie_head(model) -> None:
    """A tied output layer reads the new embedding: vLLM's reload skips `lm_head.weight` of a tied model, and on
    CPU the head multiplies with its own packed copy of the weight, made at load time."""
    head, inner = getattr(model, "lm_head", None), getattr(model, "model", None)
    if head is None or inner is None or not getattr(model.config, "tie_word_embeddings", False):
        return
    head.weight = inner.embed_tokens.weight
    head.quant_method.process_weights_after_loading(head)


def _reload(engine, path: str) -> None:
    from safetensors.torch import load_file

    weights = load_file(path)
    engine.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights.items()), "is_checkpoint_format": True})
    if any(name.endswith("embed_tokens.weight") for name in weights):
        engine.apply_model(_retie_head)
    engine.reset_prefix_cache()  # cached keys and values were computed with the old weights


def _reset(engine, seed: int) -> None:
    """No cached prefix, and the sampler's generator at `seed`. Requests carry no seed of their own: on CPU, vLLM
    rewinds a request's generator with a CUDA-only call when it splits a prompt over steps (chunked prefill)."""
    import torch

    if LIVE:
        engine.abort_request(sorted(LIVE))
        LIVE.clear()
    while engine.has_unfinished_requests():  # the aborts take effect at the next step
        engine.step()
    engine.reset_prefix_cache()
    torch.manual_seed(seed)


def _score(engine, seqs: list[list[int]]) -> list[list[float]]:
    """log p(token_i | tokens before i) for i >= 1 of each sequence, under the engine's current weights."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    engine.reset_prefix_cache()  # prompt log-probs are computed only for tokens that are prefilled
    sp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False,
                        output_kind=RequestOutputKind.FINAL_ONLY)  # fmt: skip
    for i, s in enumerate(seqs):
        engine.add_request(f"score-{i}", {"prompt_token_ids": s}, sp)
    got = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.finished:
                got[o.request_id] = [float(lp[t].logprob) for t, lp in zip(o.prompt_token_ids[1:], o.prompt_logprobs[1:])]
    return [got[f"score-{i}"] for i in range(len(seqs))]


def main(argv: list[str]) -> None:
    sock, key, model_dir, max_len, kv_mb, seed, dtype = argv
    dtype = _dtype(dtype)
    with Listener(sock, family="AF_UNIX", authkey=bytes.fromhex(key)) as listener:
        conn = listener.accept()  # the parent, which started this process
    try:
        engine = _engine(model_dir, int(max_len), int(kv_mb), int(seed), dtype)
    except Exception as err:  # noqa: BLE001 - the parent prints it as one line
        conn.send(("error", f"vLLM could not load {model_dir}: {type(err).__name__}: {err}"))
        return
    conn.send(("ready", dtype))
    while True:
        try:
            verb, payload = conn.recv()
        except (EOFError, OSError):  # the parent is gone without a word: nobody else will remove the folder
            shutil.rmtree(os.path.dirname(sock), ignore_errors=True)
            return
        try:
            if verb == "add":
                for r in payload:
                    engine.add_request(r["id"], {"prompt_token_ids": r["prompt"]}, _sampling(r))
                    LIVE.add(r["id"])
                reply = None
            elif verb == "step":
                reply = _step(engine)
            elif verb == "reload":
                reply = _reload(engine, payload)
            elif verb == "reset":
                reply = _reset(engine, payload)
            elif verb == "score":
                reply = _score(engine, payload)
            elif verb == "close":
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown verb {verb!r}")
        except Exception as err:  # noqa: BLE001 - the parent raises it with this text
            conn.send(("error", f"{verb}: {type(err).__name__}: {err}"))
            continue
        conn.send(("ok", reply))


if __name__ == "__main__":
    main(sys.argv[1:])
