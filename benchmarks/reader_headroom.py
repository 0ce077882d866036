"""What a second search could give the qwen reader: naive RAG's prompt (results above the question, the answer tag
prefilled) on the first N dev questions of a set with gold passages (HotpotQA, MuSiQue), with these result lists for
the question as the query:

- topN: the top N (top3 is naive RAG itself; top6, a second search that shows 3 new passages);
- top3+gold: the top 3, then the gold supporting passages they miss (a perfect second search);
- top3+title: the top 3, then the top 3 of a search for each missing gold passage's title, new passages only (a
  second search whose query names the missing hop);
- top3+title1: the top 3, then the first result of each missing gold passage's title search (a narrow second search);
- top3+askN: the top 3, then the top N new results of a query the model writes itself after reading the top 3 (asked
  for the entity whose passage is missing, in naive RAG's prompt; the queries are kept in the output);
- gold: the gold supporting passages alone (reading, with no distractor).

Every passage is cut as the agent's search cuts it. EM/F1 on plain generation, paired bootstrap against top3.

    python benchmarks/reader_headroom.py -S project.artifacts_dir=DIR [--dataset hotpotqa] [--limit 100]
                                         [--offset 0] [--out F.json]

Needs `agentr1 prepare` and `agentr1 index` with `-S profile=qwen` in DIR; the pretrained model is converted from
the pinned GGUF into DIR/models/pretrained if it is not there.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import dataclasses

import yaml

from components import artifacts
from components.base_model.source import materialise
from components.config import load_config
from components.data.prepare import read_passages, read_questions
from components.evaluation.baseline_table import evaluate
from components.evaluation.evaluate import select
from components.evaluation.machine import cpu_line
from components.evaluation.profile_report import paired_bootstrap
from components.model.loading import load_generator
from components.retrieval.base import Hit
from components.retrieval.factory import make_backend


class Listed:
    """A search backend whose result list for a question's own text is chosen by `mode`; other queries pass through."""

    def __init__(self, backend, questions, passages, mode: str):
        self.backend, self.mode = backend, mode
        self.found = self.missing = 0  # top3+title: missing gold passages, and how many the title searches found
        self.gold = {q.question.strip(): [passages[i] for i in q.supporting_ids if i in passages] for q in questions}
        self.asked: dict[str, str] = {}  # top3+askN: question -> the model's own follow-up query

    def search(self, alias, queries, k):
        k_real = int(self.mode[3:]) if self.mode[3:].isdigit() else k
        lists = self.backend.search(alias, queries, k_real)
        out = []
        for query, hits in zip(queries, lists):
            gold = [Hit(p.id, p.title, p.text, 0.0) for p in self.gold.get(query.strip(), [])]
            if query.endswith(ASK):  # the query-writing pass: the question's own top 3
                hits = self.backend.search(alias, [query[: -len(ASK)]], k)[0]
            elif self.mode == "gold":
                hits = gold
            elif self.mode == "top3+gold":
                seen = {h.id for h in hits}
                hits = list(hits) + [g for g in gold if g.id not in seen]
            elif self.mode.startswith("top3+ask"):
                seen, hits = {h.id for h in hits}, list(hits)
                asked = self.asked.get(query.strip(), "")
                found = self.backend.search(alias, [asked], k + int(self.mode[8:]))[0] if asked else []
                hits += [h for h in found if h.id not in seen][: int(self.mode[8:])]
                self.found += sum(g.id in {h.id for h in hits} and g.id not in seen for g in gold)
                self.missing += sum(g.id not in seen for g in gold)
            elif self.mode.startswith("top3+title"):
                seen, hits = {h.id for h in hits}, list(hits)
                missing = [g for g in gold if g.id not in seen]
                depth = 1 if self.mode == "top3+title1" else k
                for found in self.backend.search(alias, [g.title for g in missing], depth) if missing else []:
                    hits += [h for h in found if h.id not in seen]
                    seen |= {h.id for h in found}
                self.found += sum(g.id in seen for g in missing)
                self.missing += len(missing)
            out.append(hits)
        return out

    def reseed(self, *key):
        self.backend.reseed(*key)

    def close(self):
        pass


ASK = ("\nDo not answer yet. Which person, place, work or thing, named in the results above or in the question, "
       "should be searched next to find the fact the results miss? Give its name only.")


def ask(cfg, model, tok, questions, backend) -> dict[str, str]:
    """The model's follow-up query for each question, written in naive RAG's prompt after the question's top 3."""
    asking = [dataclasses.replace(q, question=q.question.strip() + ASK) for q in questions]
    m = evaluate(cfg, "naive_rag", model, tok, asking, backend)
    return {q.question.strip(): r["prediction"] or "" for q, r in zip(questions, m["results"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-S", "--set", action="append", default=[])
    ap.add_argument("--dataset", default="hotpotqa", choices=["hotpotqa", "musique"])  # 2Wiki dev has no passages
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--offset", type=int, default=0, help="skip the first N of the limit's questions")
    ap.add_argument("--modes", default="top3,top6,top3+gold,gold")
    ap.add_argument("--out", type=Path, default=Path("reader_headroom.json"))
    args = ap.parse_args()
    overrides = {"profile": "qwen"} | {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    cfg = load_config("params.yaml", overrides)
    (spec,) = [s for s in cfg.evaluate.sets if s.dataset == args.dataset]
    questions = select(read_questions(artifacts.questions(cfg)), spec.model_copy(update={"limit": args.limit}))
    questions = questions[args.offset :]
    passages = {p.id: p for p in read_passages(artifacts.passages(cfg))}
    pretrained = artifacts.pretrained_model(cfg)
    if not pretrained.exists():
        materialise(cfg.model, pretrained)
    model, tok = load_generator(pretrained, cfg)
    backend = make_backend(cfg)
    done = json.loads(args.out.read_text()) if args.out.exists() else {"machine": cpu_line(), "modes": {}}
    try:
        for mode in args.modes.split(","):
            if mode in done["modes"]:
                continue
            t0 = time.perf_counter()
            listed = Listed(backend, questions, passages, mode)
            if mode.startswith("top3+ask"):
                if "asked" not in done:
                    done["asked"] = ask(cfg, model, tok, questions, listed)
                    args.out.write_text(json.dumps(done, indent=1))
                listed.asked = done["asked"]
            m = evaluate(cfg, "naive_rag", model, tok, questions, listed)
            done["modes"][mode] = {"em": m["em"], "f1": m["f1"], "wall_s": time.perf_counter() - t0,
                                   "missing": listed.missing, "found": listed.found, "results": m["results"]}  # fmt: skip
            args.out.write_text(json.dumps(done, indent=1))
            print(f"{mode}: EM {m['em']:.3f} F1 {m['f1']:.3f} ({time.perf_counter() - t0:.0f} s); missing gold passages "
                  f"{listed.missing}, found by title {listed.found}", flush=True)  # fmt: skip
    finally:
        model.close() if hasattr(model, "close") else None
        backend.close()
    base = [r["em"] for r in done["modes"]["top3"]["results"]]
    print(f"{done['machine']}; {len(base)} {args.dataset} dev questions")
    print("| result list | EM | F1 | against top3 (EM, 95 % paired bootstrap) | won / lost |")
    print("|---|---|---|---|---|")
    for mode, m in done["modes"].items():
        em = [r["em"] for r in m["results"]]
        d, lo, hi = paired_bootstrap(em, base)
        won = sum(a > b for a, b in zip(em, base))
        lost = sum(a < b for a, b in zip(em, base))
        print(f"| {mode} | {m['em']:.3f} | {m['f1']:.3f} | {d:+.2f} [{lo:+.2f}, {hi:+.2f}] | {won} / {lost} |")


if __name__ == "__main__":
    main()
