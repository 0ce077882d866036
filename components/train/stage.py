"""The `train` stage: dispatch to the configured backend, then record the learning curve and the model URI.

Both backends write the same outputs, so evaluate and register take either unchanged:
artifacts/models/trained (HF format), artifacts/train/model.json (MLflow model URI), artifacts/train/curve.csv
(every metric per step) and artifacts/train/dev_curve.csv (dev EM/F1 per evaluation step, the DVC plot).
Each train.algorithm is one advantage estimator on both: the verl function that components.config.VERL_ESTIMATOR
names for it.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from components import artifacts
from components.config import Config
from components.io import write_json, write_text
from components.tracking.tracker import NullTracker


class CurveRecorder(NullTracker):
    """Forwards everything to the stage's tracker and keeps the per-step metrics for the DVC plot."""

    def __init__(self, inner: NullTracker):
        self._inner = inner
        self.run_id = inner.run_id
        self.rows: dict[int, dict[str, float]] = {}
        self.model_uri: str | None = None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if step is not None:
            self.rows.setdefault(step, {}).update({k: float(v) for k, v in metrics.items() if v is not None})
        self._inner.log_metrics(metrics, step=step)

    def log_model(self, hf_dir: str | Path, name: str) -> str | None:
        self.model_uri = self._inner.log_model(hf_dir, name)
        return self.model_uri

    def log_artifact(self, path, artifact_path=None) -> None:
        self._inner.log_artifact(path, artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self._inner.log_text(text, artifact_file)

    def log_dict(self, obj, artifact_file: str) -> None:
        self._inner.log_dict(obj, artifact_file)

    def log_input(self, path, context: str) -> None:
        self._inner.log_input(path, context)

    def set_tags(self, tags: dict[str, str]) -> None:
        self._inner.set_tags(tags)

    def log_traces(self, episodes, session: str) -> None:
        self._inner.log_traces(episodes, session)

    def trace_tags(self, key: str, value: str) -> list[dict[str, str]]:
        return self._inner.trace_tags(key, value)

    def csv(self) -> str:
        keys = sorted({k for row in self.rows.values() for k in row})
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=["step", *keys], extrasaction="ignore")
        writer.writeheader()
        for step in sorted(self.rows):
            writer.writerow({"step": step, **self.rows[step]})
        return out.getvalue()

    def dev_csv(self, target: str) -> str:
        """Steps with a dev evaluation: EM/F1 of `dev/<target>` and the EM averaged over every dev set."""
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["step", "em", "f1", "mean_em"])
        for step in sorted(self.rows):
            row = self.rows[step]
            ems = [v for k, v in row.items() if k.startswith("dev/") and k.endswith("/em")]
            if ems:
                writer.writerow([step, row.get(f"dev/{target}/em", ""), row.get(f"dev/{target}/f1", ""),
                                 sum(ems) / len(ems)])  # fmt: skip
        return out.getvalue()


def run(cfg: Config, tracker: NullTracker) -> dict[str, float]:
    recorder = CurveRecorder(tracker)
    if cfg.train.backend == "verl":
        from components.train.verl.launch import run as backend_run
    else:
        from components.train.local.train import run as backend_run
    metrics = backend_run(cfg, recorder)

    trained = artifacts.trained_model(cfg)
    if recorder.model_uri is None and tracker.run_id is not None:
        recorder.log_model(trained, "agent")
    write_text(artifacts.train_curve(cfg), recorder.csv())
    write_text(artifacts.dev_curve(cfg), recorder.dev_csv(cfg.train.datasets[0]))
    write_json(
        artifacts.train_model_json(cfg),
        {"model_uri": recorder.model_uri, "run_id": tracker.run_id, "path": str(trained), "backend": cfg.train.backend},
    )
    # The stage's summary is logged without a step (MLflow files it under step 0): leave out what the curve
    # already holds per step (dev/* of the final evaluation), so no step of a per-step metric appears twice.
    per_step = {k for row in recorder.rows.values() for k in row}
    return {k: v for k, v in metrics.items() if k not in per_step}
