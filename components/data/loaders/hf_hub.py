"""Hugging Face `datasets`: a hub id (`load_dataset(path, split=...)`) or local json/jsonl/parquet/csv files."""

from __future__ import annotations

import tempfile
from pathlib import Path

from components.config import DatasetSpec
from components.data.loaders.common import Questions
from components.data.passages import PassageTable
from components.data.reader import answers_of, need
from components.data.schema import DataError, Question

_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def load(spec: DatasetSpec, path: Path, table: PassageTable) -> list[Question]:
    """`path` is a local file or dataset folder under data_dir when one exists, else spec.path is a hub id."""
    import datasets  # heavy; only the hf_hub format needs it

    try:
        if path.is_file():
            builder = _BUILDERS.get(path.suffix)
            if builder is None:
                raise DataError(f"{path}: hf_hub reads {sorted(_BUILDERS)} files, not {path.suffix!r}")
            ds, source = _local(datasets, builder, "train", data_files=str(path)), str(path)
        elif path.is_dir():  # a local folder laid out like a hub repo (split names from file names)
            ds, source = _local(datasets, str(path), spec.hub_split), f"{path} (split {spec.hub_split})"
        else:
            ds, source = datasets.load_dataset(spec.path, split=spec.hub_split), f"{spec.path} (split {spec.hub_split})"
    except DataError:
        raise
    except Exception as err:  # datasets raises many types (offline, bad files, cast errors)
        where = path if path.exists() else spec.path
        raise DataError(f"{where}: cannot load with datasets: {type(err).__name__}: {err}") from None
    for key in (spec.question_field, spec.answers_field):
        if key not in ds.column_names:
            raise DataError(f"{source}: missing field {key!r} (columns: {ds.column_names})")
    out = Questions(spec)
    for idx, row in enumerate(ds):
        if out.full():
            break
        where = f"{source}: row {idx}"
        raw_id = row.get(spec.id_field)
        raw_id = idx if raw_id is None else raw_id
        answers = answers_of(need(row, spec.answers_field, where, (str, list)), spec.answers_field, where)
        out.add(where, raw_id, need(row, spec.question_field, where), answers)
    return out.items


def _local(datasets, path: str, split: str, **kw):
    """Load local files in memory, with the Arrow cache in a temp dir (no state left in ~/.cache)."""
    with tempfile.TemporaryDirectory(prefix="agentr1-hf-") as cache:
        return datasets.load_dataset(path, split=split, cache_dir=cache, keep_in_memory=True, **kw)
