"""The reference rollout (a test oracle): one episode at a time, one transformers `generate` per turn, greedy. Slow and plain;
the engine (rollout/engine.py) must give the same episodes (tests/test_engine_reference.py)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from components.agent.tool_env import ToolEnv
from components.config import AgentConfig
from components.data.schema import Question
from components.rollout.chat import ChatFormat
from components.rollout.episodes import record_turn, start_trajectories
from components.rollout.trajectory import Trajectory


@torch.no_grad()
def reference_rollout(model, chat: ChatFormat, env: ToolEnv, questions: Sequence[Question], cfg: AgentConfig,
                      prompts: Sequence[list[int]] | None = None, prefill: str = "") -> list[Trajectory]:  # fmt: skip
    """Greedy episodes through `model.generate`, the whole conversation re-encoded every turn."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    prefill_ids = chat.encode(prefill) if prefill else []
    out = []
    for t in start_trajectories(chat, env, questions, prompts, prefill):  # the engine's own episode start
        while True:
            budget = max(1, min(cfg.max_tokens_per_turn, cfg.max_total_tokens - len(t.input_ids)))
            ids = torch.tensor([t.input_ids], device=device)
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget, do_sample=False,
                                 eos_token_id=sorted(chat.stop_ids), pad_token_id=chat.pad_id,
                                 output_logits=True, return_dict_in_generate=True)  # fmt: skip
            tokens = gen.sequences[0, ids.shape[1] :].tolist()
            logprobs = [float(torch.log_softmax(s[0].float(), -1)[k]) for s, k in zip(gen.logits, tokens)]
            res = env.step([t.episode], [prefill + chat.decode_turn(tokens)])[0]
            if record_turn(t, tokens, logprobs, ((0, 0), (0, 0)), res, chat, env, cfg, prefill_ids) is None:
                break
        out.append(t)
    model.train(was_training)
    return out
