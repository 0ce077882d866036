"""Where a synthetic-world agent succeeds or fails, decision by decision, on sampled train episodes.

For k-hop questions the gold chain is known, so each episode's calls can be checked hop by hop:
  - first query right; second query right given the first (and its entity alone);
  - every supporting fact found; answer right given every supporting fact found; EM.
Use it on the primed base (what RL starts from) or on a trained model (--model artifacts/models/trained).

    python benchmarks/prior_decisions.py --params params.yaml --questions 64 --group 8
(needs prepare, index and base_model to have run)
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import torch

from components.config import load_config
from components import artifacts
from components.data.prepare import read_questions
from components.model.loading import load_model
from components.retrieval.factory import make_backend
from components.rollout.chat import ChatFormat
from components.rollout.engine import rollout
from components.rollout.evaluate import make_env


def queries(text: str) -> list[str]:
    """The query of every call in a decoded episode; '?' for a call that is not valid JSON."""
    out = []
    for part in text.split("<tool_call>")[1:]:
        try:
            out.append(json.loads(part.split("</tool_call>")[0])["arguments"]["query"])
        except (ValueError, KeyError, TypeError):
            out.append("?")
    return out


def gold_queries(supporting_ids: list[str]) -> list[str]:
    """synthetic:<subject>:<relation> -> "<subject> <relation>", the query that finds that fact."""
    return [" ".join(s.split(":")[1:3]) for s in supporting_ids]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--model", default=None, help="model dir (default: artifacts/models/base)")
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--group", type=int, default=8, help="sampled episodes per question")
    args = ap.parse_args()
    cfg = load_config(args.params)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    model, tok = load_model(args.model or artifacts.base_model(cfg), cfg, torch.device("cpu"))
    chat = ChatFormat.for_agent(tok, cfg.agent)
    qs = [q for q in read_questions(artifacts.questions(cfg))
          if q.dataset == "synthetic" and q.split == "train"][: args.questions]  # fmt: skip
    env = make_env(make_backend(cfg), qs, cfg.agent, cfg.retrieval.top_k)
    trajs = rollout(model, chat, env, [q for q in qs for _ in range(args.group)], cfg.agent, temperature=1.0,
                    generator=torch.Generator().manual_seed(cfg.project.seed))  # fmt: skip
    c: Counter[str] = Counter()
    for t in trajs:
        calls = queries(tok.decode(t.input_ids[t.prompt_len :]))
        want = gold_queries(t.episode.question.supporting_ids)
        first = bool(calls) and calls[0] == want[0]
        all_found = all(w in calls for w in want)
        c["episodes"] += 1
        c[f"searches={len(calls)}"] += 1
        c["first"] += first
        if len(want) > 1 and first:
            c["after_first"] += 1
            c["second"] += len(calls) > 1 and calls[1] == want[1]
            c["second_entity"] += len(calls) > 1 and calls[1].split(" ")[0] == want[1].split(" ")[0]
        c["all_found"] += all_found
        c["answer_given_all"] += all_found and t.episode.em > 0
        c["em"] += t.episode.em
    n = c["episodes"]
    share = lambda a, b: f"{c[a] / c[b]:.1%}" if c[b] else "n/a"  # noqa: E731
    print(f"{n} sampled episodes, {args.questions} train questions x {args.group}")
    print(f"  first query right            {c['first'] / n:.1%}")
    print(f"  second right | first right   {share('second', 'after_first')} (its entity: {share('second_entity', 'after_first')})")
    print(f"  every supporting fact found  {c['all_found'] / n:.1%}")
    print(f"  answer right | all found     {share('answer_given_all', 'all_found')}")
    print(f"  EM                           {c['em'] / n:.1%}")
    print("  searches: " + ", ".join(f"{k.split('=')[1]}: {v}" for k, v in sorted(c.items()) if k.startswith("searches=")))


if __name__ == "__main__":
    main()
