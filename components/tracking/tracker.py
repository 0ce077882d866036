"""What a stage may report while it runs. Stages take a Tracker; only MlflowTracker knows about MLflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from components.io import sha256_of


class NullTracker:
    """Drops everything; for unit tests and plain library use."""

    run_id: str | None = None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...

    def log_text(self, text: str, artifact_file: str) -> None: ...

    def log_dict(self, obj: Any, artifact_file: str) -> None: ...

    def log_input(self, path: str | Path, context: str) -> None: ...

    def log_model(self, hf_dir: str | Path, name: str) -> str | None:
        return None

    def set_tags(self, tags: dict[str, str]) -> None: ...

    def log_traces(self, episodes, session: str) -> None:
        """Episodes (components.tracking.mlflow_traces.EpisodeTrace) as MLflow traces of this run."""

    def trace_tags(self, key: str, value: str) -> list[dict[str, str]]:
        """The tags of every trace in this run's experiment that has tag `key` = `value`."""
        return []


Tracker = NullTracker  # the interface; MlflowTracker implements the same methods


class MlflowTracker(NullTracker):
    """Logs into the active MLflow run `run_id`."""

    def __init__(self, run_id: str):
        import mlflow

        self._mlflow = mlflow
        self._client = mlflow.MlflowClient()
        self.run_id = run_id

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        clean = {metric_key(k): float(v) for k, v in metrics.items() if v is not None}
        if clean:
            self._mlflow.log_metrics(clean, step=step, run_id=self.run_id)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self._client.log_artifacts(self.run_id, str(path), artifact_path or path.name)
        elif path.exists():
            self._client.log_artifact(self.run_id, str(path), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self._client.log_text(self.run_id, text, artifact_file)

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self._client.log_text(self.run_id, json.dumps(obj, indent=2, default=str), artifact_file)

    def log_input(self, path: str | Path, context: str) -> None:
        """Record a Parquet input or output with its content digest (mlflow.log_input)."""
        import pandas as pd
        from mlflow.data.pandas_dataset import from_pandas

        path = Path(path)
        df = pd.read_parquet(path)
        ds = from_pandas(df.astype(str), source=_local_source(path.resolve()), name=path.stem, digest=sha256_of(path)[:16])
        self._require_active()
        self._mlflow.log_input(ds, context=context)

    def _require_active(self) -> None:
        active = self._mlflow.active_run()
        if active is None or active.info.run_id != self.run_id:
            raise RuntimeError(f"MLflow run {self.run_id} must be the active run in this thread")

    def log_model(self, hf_dir: str | Path, name: str) -> str | None:
        from components.tracking.models import log_hf_model

        self._require_active()
        return log_hf_model(Path(hf_dir), name)

    def set_tags(self, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self._client.set_tag(self.run_id, k, v)

    def log_traces(self, episodes, session: str) -> None:
        from components.tracking.mlflow_traces import write_traces

        if episodes:
            self._require_active()  # traces link to the active run
            run = self._client.get_run(self.run_id)
            write_traces(episodes, run.info.experiment_id, session, run.data.tags.get("agentr1.stage", ""))

    def trace_tags(self, key: str, value: str) -> list[dict[str, str]]:
        experiment_id = self._client.get_run(self.run_id).info.experiment_id
        found, token = [], None
        while True:
            page = self._client.search_traces([experiment_id], filter_string=f"tags.`{key}` = '{value}'",
                                              include_spans=False, max_results=500, page_token=token)  # fmt: skip
            found += [dict(t.info.tags) for t in page]
            token = page.token
            if not token:
                return found


def _local_source(path: Path):
    """The file as MLflow's local dataset source. A plain path string is ambiguous to MLflow's resolver (it registers
    the local source class twice and warns on every input), so the class is picked by its source type."""
    from mlflow.data.dataset_source_registry import get_registered_sources

    local = next(c for c in get_registered_sources() if c._get_source_type() == "local")
    return local(str(path))


def metric_key(key: str) -> str:
    # MLflow keys allow alphanumerics, _ - . / and spaces; map the rest (e.g. '@' in recall@5).
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in key)
