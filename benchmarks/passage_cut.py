"""How long must a retrieved passage be to hold the answer? Answer-string recall of the search results, cut at N tokens.

For each dev question: one search with the question as the query (naive RAG's search, top_k passages), each passage cut
to its first N tokens of the profile's tokenizer exactly as the search tool cuts it (agent.passage_max_tokens), and
the observation text checked for a gold answer (official normalisation, whole words). yes/no answers are left out
(they appear in any text). Also the observation's length in tokens, which the episode budget has to hold.

    python benchmarks/passage_cut.py [--profile qwen] [--cuts 64 128 256 0] [--top-k 3 5] [--tokenizer DIR]

Needs the profile's prepared data and index (`agentr1 prepare/validate/index -S profile=qwen`) and a tokenizer
(default: artifacts/models/pretrained, written by base_model).
"""

from __future__ import annotations

import argparse
import statistics
import time

from components import artifacts
from components.agent.observation import format_hits
from components.agent.rewards import normalize_answer
from components.config import load_config
from components.data.prepare import read_questions
from components.env import apply_defaults
from components.retrieval.factory import make_backend
from components.rollout.chat import ChatFormat

SETS = [("hotpotqa", "dev"), ("2wiki", "dev"), ("musique", "dev")]


def holds_answer(text: str, answers: list[str]) -> bool:
    hay = f" {normalize_answer(text)} "
    return any(f" {a} " in hay for a in (normalize_answer(x) for x in answers) if a)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="qwen")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--tokenizer", default=None, help="HF dir with the tokenizer (default: the pretrained model)")
    ap.add_argument("--cuts", type=int, nargs="+", default=[64, 128, 256, 0], help="tokens per passage; 0 = uncut")
    ap.add_argument("--top-k", type=int, nargs="+", default=[3, 5])
    args = ap.parse_args()
    apply_defaults()
    from transformers import AutoTokenizer

    cfg = load_config(args.params, {"profile": args.profile})
    tok = AutoTokenizer.from_pretrained(args.tokenizer or artifacts.pretrained_model(cfg))
    chat = ChatFormat(tok, None)
    questions = read_questions(artifacts.require(cfg, artifacts.questions(cfg)))
    backend = make_backend(cfg)
    t0 = time.perf_counter()
    rows = []
    try:
        for dataset, split in SETS:
            qs = [q for q in questions if q.dataset == dataset and q.split == split]
            qs = [q for q in qs if not {normalize_answer(a) for a in q.answers} & {"yes", "no"}]
            hits = {}
            for corpus in sorted({q.corpus for q in qs}):
                idx = [i for i, q in enumerate(qs) if q.corpus == corpus]
                found = backend.search(corpus, [qs[i].question for i in idx], max(args.top_k))
                hits.update(zip(idx, found))
            for k in args.top_k:
                for n in args.cuts:
                    cut = chat.cutter(n or None)
                    obs = [format_hits(hits[i][:k], cut) for i in range(len(qs))]
                    recall = sum(holds_answer(o, q.answers) for o, q in zip(obs, qs)) / len(qs)
                    lengths = [len(chat.encode(o)) for o in obs]
                    rows.append((f"{dataset}/{split}", len(qs), k, n or "uncut", recall, statistics.mean(lengths),
                                 sorted(lengths)[int(0.95 * (len(lengths) - 1))]))  # fmt: skip
    finally:
        backend.close()
    print("| set | questions (no yes/no) | top_k | passage tokens | answer in results | observation tokens, mean | p95 |")
    print("|---|---|---|---|---|---|---|")
    for s, n, k, cut, r, mean, p95 in rows:
        print(f"| {s} | {n} | {k} | {cut} | {r:.3f} | {mean:.0f} | {p95} |")
    print(f"\n({time.perf_counter() - t0:.0f} s; tokenizer {tok.name_or_path})")


if __name__ == "__main__":
    main()
