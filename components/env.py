"""Process-wide defaults set once at an entry point: tool state stays in the project, telemetry is off."""

from __future__ import annotations

import os
import sys
from pathlib import Path

TELEMETRY_OFF = {
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "GX_ANALYTICS_ENABLED": "False",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DVC_NO_ANALYTICS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# MKL's conditional numerical reproducibility: without it a matmul's last bits depend on its operands' memory
# alignment, so two runs of one seed can sample different tokens (docs/reproducibility.md). MKL reads it once.
REPRODUCIBLE = {"MKL_CBWR": "AUTO,STRICT"}
# A batch job writes each trace when it is logged: each flush of MLflow's async queue idles about 1 s.
SYNC_TRACES = {"MLFLOW_ENABLE_ASYNC_TRACE_LOGGING": "false"}


def apply_defaults(root: str | Path | None = None) -> None:
    """Set telemetry-off, reproducibility and state-location variables unless the user already set them (before torch
    computes anything)."""
    root = Path(root or os.getcwd()).resolve()
    for key, value in {**TELEMETRY_OFF, **REPRODUCIBLE, **SYNC_TRACES}.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_HOME", str(root / ".prefect"))
    os.environ.setdefault("DVC_SITE_CACHE_DIR", str(root / ".cache" / "dvc-site"))
    os.environ.setdefault("HF_HOME", str(root / ".cache" / "huggingface"))
    os.environ.setdefault("RAY_TMPDIR", str(root / ".cache" / "ray"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / ".cache" / "torchinductor"))  # train.compile
    # inductor's precompiled C++ headers ignore its cache dir: 150 MB in the system temp dir per venv path, never
    # removed. Compiling without them took as long (40 s for the compiled-layers test, both ways).
    os.environ.setdefault("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "0")
    if not sys.stderr.isatty():  # progress bars only on a terminal: every tqdm bar created after this is off
        os.environ.setdefault("TQDM_DISABLE", "1")  # (tqdm reads TQDM_* defaults when it is first imported)
