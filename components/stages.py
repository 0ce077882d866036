"""The pipeline's stages, in order, and how one stage runs under tracking.

Each stage is a plain function `run(cfg, tracker) -> metrics` in components/; DVC (through the CLI) and the
Prefect flow both call `run_stage`, so the logic exists once.
"""

from __future__ import annotations

import gc
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from components.config import Config
from components.tracking.tracker import NullTracker


@dataclass(frozen=True)
class Stage:
    name: str
    module: str
    help: str

    def function(self) -> Callable[..., dict[str, float]]:
        return importlib.import_module(self.module).run


STAGES: dict[str, Stage] = {
    s.name: s
    for s in [
        Stage("prepare", "components.data.prepare", "Load the raw datasets in data/ (and the synthetic world) into questions/passages Parquet."),
        Stage("validate", "components.validation.validate", "Great Expectations suites over the prepared data; stops the pipeline on failure."),
        Stage("index", "components.retrieval.index", "Build one versioned search index per corpus (no-op when the corpus is unchanged)."),
        Stage("retrieval_eval", "components.retrieval.recall", "Recall@k of supporting passages with the question as the query."),
        Stage("base_model", "components.base_model.base_model", "Resolve the base model; the CPU profile builds and format-primes a tiny Qwen2."),
        Stage("train", "components.train.stage", "End-to-end RL of the search agent (local torch trainer, or verl on Ray + vLLM)."),
        Stage("evaluate", "components.evaluation.evaluate", "EM/F1 of the trained agent and the baselines, per dataset."),
        Stage("register", "components.registry.register", "Register the agent (pyfunc: weights, config, index) with compact evidence; move the champion alias only if it wins."),
    ]
}


def run_stage(name: str, cfg: Config, parent_run_id: str | None = None, track: bool = True, **kwargs) -> dict[str, float]:
    """Run one stage, as its own MLflow run (nested under `parent_run_id` when given)."""
    stage = STAGES[name]
    fn = stage.function()
    if not gc.isenabled():  # a stage command imports with the collector off (components/cli.py _run)
        gc.freeze()  # what the imports built lives as long as the process: later collections skip it
        gc.enable()
    if not track:
        return fn(cfg, NullTracker(), **kwargs)
    from components.tracking.runs import stage_run

    with stage_run(cfg, name, parent_run_id) as tracker:
        start = time.perf_counter()
        metrics = fn(cfg, tracker, **kwargs) or {}
        tracker.log_metrics({**metrics, f"stage_seconds": time.perf_counter() - start})
    if parent_run_id is not None:  # the runs page shows EM/F1 and the champion decision on the pipeline's row
        from components.tracking.runs import log_headline

        log_headline(parent_run_id, name, metrics, tracker.run_id)
    return metrics
