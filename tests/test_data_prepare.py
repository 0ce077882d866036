"""The prepare stage end to end on the shipped data, Parquet round trip, and the hf_hub loader via local files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from components.config import DatasetSpec, load_config, parse_config
from components.data.loaders import LOADERS
from components.data.passages import PassageTable
from components.data.prepare import read_passages, read_questions, run
from components.data.schema import DataError
from components.tracking.tracker import NullTracker

ROOT = Path(__file__).resolve().parents[1]


class RecordingTracker(NullTracker):
    def __init__(self) -> None:
        self.inputs: list[tuple[Path, str]] = []

    def log_input(self, path, context):
        self.inputs.append((Path(path), context))


def test_prepare_default_params(tmp_path):
    cfg = load_config(ROOT / "params.yaml", {"project.artifacts_dir": str(tmp_path), "project.data_dir": str(ROOT / "data")})
    tracker = RecordingTracker()
    metrics = run(cfg, tracker)
    out = tmp_path / "prepared"
    assert sorted(p.name for p in out.iterdir()) == ["passages.parquet", "questions.parquet"]
    assert tracker.inputs == [(out / "questions.parquet", "prepare.questions"), (out / "passages.parquet", "prepare.passages")]
    qs, ps = read_questions(out / "questions.parquet"), read_passages(out / "passages.parquet")
    assert metrics["questions_total"] == len(qs) and metrics["passages_total"] == len(ps)
    assert metrics["questions/hotpotqa/dev"] == 300 and metrics["questions/nq/test"] == 1000
    assert metrics["questions/hotpotqa/train"] == 100 and metrics["questions/hotpotqa_dev1025/dev"] == 1025
    assert metrics["questions/musique/train"] == 100 and metrics["questions/musique/dev"] == 192
    assert (metrics["questions/2wiki/train"], metrics["questions/2wiki/dev"]) == (396, 104)
    syn = cfg.data.synthetic
    assert metrics["questions/synthetic/train"] == syn.n_train and metrics["questions/synthetic_cf/dev"] == syn.n_dev
    assert metrics["passages/synthetic"] == metrics["passages/synthetic_cf"] == syn.n_entities * syn.n_relations
    ids = {p.id for p in ps}
    assert len(ids) == len(ps) and len({q.id for q in qs}) == len(qs)
    corpus_of = {p.id: p.corpus for p in ps}
    assert all(corpus_of[i] == q.corpus for q in qs for i in q.supporting_ids)
    schema = pq.read_schema(out / "questions.parquet")
    assert str(schema.field("answers").type) == "list<element: string>"


def test_parquet_round_trip_is_exact(tmp_path):
    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path), "data_dir": str(ROOT / "data")},
                        "data": {"synthetic": {"n_entities": 40, "n_relations": 3, "n_train": 50, "n_dev": 10, "n_test": 10},
                                 "datasets": [{"name": "hp", "format": "hotpotqa_ircot", "path": "hotpotqa/dev_distractor_ircot_300.jsonl", "limit": 5}]}})  # fmt: skip
    from components.data.prepare import load_all

    qs, ps = load_all(cfg.data, cfg.data_root)
    run(cfg, NullTracker())
    assert read_questions(tmp_path / "prepared/questions.parquet") == qs
    assert read_passages(tmp_path / "prepared/passages.parquet") == ps


def test_duplicate_dataset_names_rejected(tmp_path):
    spec = {"name": "nq", "format": "flashrag", "path": "nq/test_1000_flashrag.jsonl"}
    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path), "data_dir": str(ROOT / "data")},
                        "data": {"datasets": [spec, spec], "synthetic": {"enabled": False}}})  # fmt: skip
    with pytest.raises(DataError, match=r"data.datasets\[1\].name: 'nq'"):
        run(cfg, NullTracker())
    assert not (tmp_path / "prepared").exists()


def test_one_name_may_carry_several_splits_and_id_ranges_must_be_ordered(tmp_path):
    from components.config import ConfigError
    from components.validation.validate import ValidationFailed
    from components.validation.validate import run as validate

    path = "2wikimultihopqa/train_500_with_context.json"
    specs = [{"name": "2w", "format": "2wiki_context", "path": path, "split": "train", "id_hash_range": [0.0, 0.9]},
             {"name": "2w", "format": "2wiki_context", "path": path, "split": "dev", "id_hash_range": [0.8, 1.0]}]  # fmt: skip
    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path), "data_dir": str(ROOT / "data")},
                        "data": {"datasets": specs, "synthetic": {"enabled": False}}})  # fmt: skip
    metrics = run(cfg, NullTracker())
    assert metrics["questions/2w/train"] + metrics["questions/2w/dev"] > 500  # [0.8, 0.9) is in both
    with pytest.raises(ValidationFailed, match=r"train_eval_id_overlap='(dev|train):2w:"):
        validate(cfg, NullTracker())
    with pytest.raises(ConfigError, match=r"data.datasets.0.id_hash_range"):
        parse_config({"data": {"datasets": [{**specs[0], "id_hash_range": [0.8, 0.2]}]}})


def _rows():
    return [
        {"id": "a1", "question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare", "William Shakespeare"]},
        {"id": "a2", "question": "Capital of France?", "golden_answers": ["Paris"]},
        {"id": "a3", "question": "Largest planet?", "golden_answers": ["Jupiter"]},
    ]


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_hf_hub_reads_local_files_through_datasets(tmp_path, suffix):
    import pandas as pd

    path = tmp_path / f"qa.{suffix}"
    if suffix == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    else:
        pd.DataFrame(_rows()).to_parquet(path)
    spec = DatasetSpec(name="local", format="hf_hub", path=str(path), split="test")
    qs = LOADERS["hf_hub"](spec, path, PassageTable())
    assert [q.id for q in qs] == ["local:a1", "local:a2", "local:a3"]
    assert qs[0].answers == ["Shakespeare", "William Shakespeare"] and qs[0].split == "test"


def test_hf_hub_dataset_folder_with_split_and_custom_fields(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    rows = [{"query": r["question"], "answer": r["golden_answers"][0]} for r in _rows()]
    (repo / "train.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (repo / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))
    spec = DatasetSpec(name="hub", format="hf_hub", path="repo", hub_split="validation",
                       question_field="query", answers_field="answer")  # fmt: skip
    qs = LOADERS["hf_hub"](spec, repo, PassageTable())
    assert [(q.id, q.question, q.answers) for q in qs] == [("hub:0", "Capital of France?", ["Paris"]), ("hub:1", "Largest planet?", ["Jupiter"])]


def test_hf_hub_missing_column_named(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"id": "x", "question": "q?", "answer": "a"}) + "\n")
    spec = DatasetSpec(name="local", format="hf_hub", path=str(path))
    with pytest.raises(DataError, match=r"qa.jsonl: missing field 'golden_answers'"):
        LOADERS["hf_hub"](spec, path, PassageTable())


def test_hf_hub_unreachable_hub_id_is_a_data_error(tmp_path):
    """A real hub id offline: the error names the id (run in a subprocess so HF_HUB_OFFLINE applies at import)."""
    code = (
        "from pathlib import Path\n"
        "from components.config import DatasetSpec\n"
        "from components.data.loaders import LOADERS\n"
        "from components.data.passages import PassageTable\n"
        "spec = DatasetSpec(name='fr', format='hf_hub', path='RUC-NLPIR/FlashRAG_datasets', hub_split='test')\n"
        "LOADERS['hf_hub'](spec, Path('/nonexistent') / spec.path, PassageTable())\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "DataError: RUC-NLPIR/FlashRAG_datasets: cannot load with datasets" in proc.stderr
