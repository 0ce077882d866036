"""The prepare stage: every configured dataset (and the synthetic worlds) into questions/passages Parquet."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from components import artifacts
from components.artifacts import PASSAGES_FILE, QUESTIONS_FILE
from components.config import Config, DataConfig, DatasetSpec
from components.data.loaders import LOADERS
from components.data.passages import PassageTable
from components.data.schema import DataError, Passage, Question
from components.data.synthetic import COUNTERFACTUAL, FACTUAL, SPLITS, generate_world
from components.io import atomic_path, remove

QUESTION_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question", pa.string()),
        ("answers", pa.list_(pa.string())),
        ("dataset", pa.string()),
        ("split", pa.string()),
        ("supporting_ids", pa.list_(pa.string())),
        ("corpus", pa.string()),
        ("hops", pa.list_(pa.string())),
    ]
)
PASSAGE_SCHEMA = pa.schema([(f, pa.string()) for f in ("id", "title", "text", "corpus")])


def load_all(data: DataConfig, data_root: Path) -> tuple[list[Question], list[Passage]]:
    """Every configured dataset, then the synthetic worlds; raises DataError on the first bad input."""
    parts = [(s.name, s.split) for s in data.datasets]  # one dataset may have several splits, each from one spec
    table, questions = PassageTable(), []
    bar = tqdm(total=len(data.datasets) + data.synthetic.enabled, desc="prepare", unit="file", disable=None, dynamic_ncols=True)
    with bar:
        for i, spec in enumerate(data.datasets):
            bar.set_postfix_str(spec.path, refresh=False)
            questions += _load_spec(i, spec, parts, data_root, table)
            bar.update()
        if data.synthetic.enabled:
            bar.set_postfix_str("synthetic worlds", refresh=False)
            world = generate_world(data.synthetic)
            table.extend(world.passages())
            questions += [q for split in SPLITS for q in world.questions(split)]
            if data.synthetic.counterfactual:
                cf = generate_world(data.synthetic, counterfactual=True)
                table.extend(cf.passages())
                questions += cf.questions("dev")
            bar.update()
    return questions, table.passages


def _load_spec(i: int, spec: DatasetSpec, parts: list[tuple[str, str]], data_root: Path, table: PassageTable) -> list[Question]:
    key = f"data.datasets[{i}]"
    if spec.name in (FACTUAL, COUNTERFACTUAL):
        raise DataError(f"{key}.name: {spec.name!r} is reserved for the synthetic worlds")
    if parts[i] in parts[:i]:
        raise DataError(
            f"{key}.name: {spec.name!r} split {spec.split!r} is already used by data.datasets[{parts.index(parts[i])}]"
        )
    path = data_root / spec.path
    if spec.format != "hf_hub" and not path.is_file():
        raise DataError(f"{path}: file not found ({key}.path)")
    return LOADERS[spec.format](spec, path, table)


def write_questions(path: Path, questions: list[Question]) -> None:
    cols = {f: [getattr(q, f) for q in questions] for f in QUESTION_SCHEMA.names}
    pq.write_table(pa.table(cols, schema=QUESTION_SCHEMA), path)


def write_passages(path: Path, passages: list[Passage]) -> None:
    cols = {f: [getattr(p, f) for p in passages] for f in PASSAGE_SCHEMA.names}
    pq.write_table(pa.table(cols, schema=PASSAGE_SCHEMA), path)


def read_questions(path: str | Path) -> list[Question]:
    return [Question(**row) for row in pq.read_table(path, schema=QUESTION_SCHEMA).to_pylist()]


def read_passages(path: str | Path) -> list[Passage]:
    return [Passage(**row) for row in pq.read_table(path, schema=PASSAGE_SCHEMA).to_pylist()]


def counts(questions: list[Question], passages: list[Passage]) -> dict[str, float]:
    """questions/<dataset>/<split>, passages/<corpus>, and the totals."""
    metrics: dict[str, float] = {}
    for (dataset, split), n in sorted(Counter((q.dataset, q.split) for q in questions).items()):
        metrics[f"questions/{dataset}/{split}"] = n
    for corpus, n in sorted(Counter(p.corpus for p in passages).items()):
        metrics[f"passages/{corpus}"] = n
    metrics["questions_total"] = len(questions)
    metrics["passages_total"] = len(passages)
    return metrics


def run(cfg: Config, tracker) -> dict[str, float]:
    """Writes artifacts/prepared/{questions,passages}.parquet together, or nothing (stale outputs removed)."""
    out = artifacts.prepared(cfg)
    try:
        questions, passages = load_all(cfg.data, cfg.data_root)
        with atomic_path(out) as tmp:
            tmp.mkdir()
            write_questions(tmp / QUESTIONS_FILE, questions)
            write_passages(tmp / PASSAGES_FILE, passages)
    except DataError:
        remove(out)
        raise
    except UnicodeEncodeError as err:  # a text no reader checked (the readers name file and line): Parquet is UTF-8
        remove(out)
        bad = err.object[err.start : err.end]
        raise DataError(f"{out}: a loaded text is not encodable as UTF-8 ({err.reason}: {bad!r})") from None
    tracker.log_input(artifacts.questions(cfg), context="prepare.questions")
    tracker.log_input(artifacts.passages(cfg), context="prepare.passages")
    return counts(questions, passages)
