"""Validate throughput in rows/s (questions + passages): (a) the real prepared data, (b) a 100k-row synthetic frame.

Per phase: derived columns, GX suites (no docs), GX suites + data docs, answer coverage, and the whole
`validate_frames` call with data docs; best of --repeats runs. The one-off GX import is reported apart.

    .venv/bin/python benchmarks/bench_validate.py [--prepared artifacts/prepared] [--rows 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.env import apply_defaults  # noqa: E402

apply_defaults(ROOT)
_t = time.perf_counter()
from components.config import ValidationConfig, load_config  # noqa: E402
from components.tracking.tracker import NullTracker  # noqa: E402
from components.validation import coverage, derive, gx_run, suites  # noqa: E402
from components.validation.validate import validate_frames  # noqa: E402

IMPORT_S = time.perf_counter() - _t


def real_prepared(prepared: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The prepared Parquet if present, else run the prepare stage on the shipped data into a temp dir."""
    if not (prepared / "questions.parquet").exists():
        from components.data.prepare import run as prepare

        tmp = Path(tempfile.mkdtemp(prefix="bench_validate_"))
        prepare(load_config(ROOT / "params.yaml", {"project.artifacts_dir": str(tmp)}), NullTracker())
        prepared = tmp / "prepared"
    return pd.read_parquet(prepared / "questions.parquet"), pd.read_parquet(prepared / "passages.parquet")


def synthetic(n: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """n questions and n passages; each question has 1-2 answers that appear in its supporting passage."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(5000)])
    pid = [f"p{i}" for i in range(n)]
    ans = [f"{a} {b}" for a, b in words[rng.integers(0, len(words), (n, 2))]]
    text = [" ".join(words[rng.integers(0, len(words), 30)]) + f" {a}." for a in ans]
    passages = pd.DataFrame({"id": pid, "title": pid, "text": text, "corpus": "bench"})
    splits = np.array(["train", "dev", "test"])[rng.integers(0, 3, n)]
    questions = pd.DataFrame(
        {
            "id": [f"q{i}" for i in range(n)],
            "question": [f"Which entity is linked to {i} and w{i % 5000}?" for i in range(n)],
            "answers": [[a] if i % 2 else [a, a.upper()] for i, a in enumerate(ans)],
            "dataset": "bench",
            "split": splits,
            "supporting_ids": [[p] for p in pid],
            "corpus": "bench",
        }
    )
    return questions, passages


def best(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def measure(name: str, q: pd.DataFrame, p: pd.DataFrame, v: ValidationConfig, repeats: int) -> list[tuple]:
    rows = len(q) + len(p)
    qd = derive.questions_frame(q, p, v.eval_splits)
    frames = {"questions": qd, "answers": derive.answers_frame(qd), "passages": p}
    specs = suites.all_suites(v)
    with tempfile.TemporaryDirectory() as tmp:
        docs = iter(range(10**6))
        phases = {
            "derive": lambda: derive.answers_frame(derive.questions_frame(q, p, v.eval_splits)),
            "gx suites": lambda: gx_run.run_suites(frames, specs, v.n_examples),
            "gx suites + docs": lambda: gx_run.run_suites(frames, specs, v.n_examples, Path(tmp) / str(next(docs))),
            "answer coverage": lambda: coverage.answer_coverage(qd, p),
            "validate (all)": lambda: validate_frames(q, p, v, Path(tmp) / str(next(docs))),
        }
        out = []
        for phase, fn in phases.items():
            s = best(fn, repeats)
            out.append((name, f"{len(q)}+{len(p)}", phase, s, rows / s))
    success = validate_frames(q, p, v).success
    print(f"{name}: suites {'pass' if success else 'FAIL'}", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepared", type=Path, default=ROOT / "artifacts" / "prepared")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    v = load_config(ROOT / "params.yaml").validation
    table = measure("real prepared", *real_prepared(args.prepared), v, args.repeats)
    table += measure(f"synthetic {args.rows // 1000}k", *synthetic(args.rows), v, args.repeats)

    print(f"GX + stage import (once per process): {IMPORT_S:.2f} s")
    print(f"{'data':<16} {'questions+passages':>20} {'phase':<18} {'seconds':>8} {'rows/s':>10}")
    for data, size, phase, s, rps in table:
        print(f"{data:<16} {size:>20} {phase:<18} {s:>8.3f} {rps:>10,.0f}")


if __name__ == "__main__":
    main()
