"""The agent as an MLflow pyfunc model: weights, tokenizer, agent config and the search index it needs.

`mlflow models serve -m "models:/<name>@champion" --env-manager local` then answers
{"inputs": {"question": [...]}} (or dataframe_split / dataframe_records) at /invocations with, per
question, the answer and its trajectory; the agent runs through the same code as `agentr1 ask`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import yaml

from components.config import Config, parse_config
from components.secrets import redact_text

CONFIG_FILE = "agent.yaml"  # the resolved config (agent, retrieval, model settings), never credentials
WEIGHTS = "hf_model"  # artifact key of the Hugging Face directory (weights + tokenizer)


def serving_config(cfg: Config, corpus: str) -> dict[str, Any]:
    """What the served model needs besides weights: the config, the index root as an absolute path, the corpus.

    The Elasticsearch URL never carries credentials (params refuse them); the server reads ES_API_KEY or
    ES_USERNAME/ES_PASSWORD, and ES_URL, from its own environment.
    """
    raw = cfg.model_dump(mode="json")
    raw["project"]["artifacts_dir"] = str(cfg.artifacts.resolve())  # the embedded index: <artifacts>/index/<corpus>
    raw["tracking"]["tracking_uri"] = None
    return {"corpus": corpus, "backend": cfg.retrieval.backend, "config": raw}


def _bad_input(message: str):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)  # HTTP 400 from the scoring server


def questions_of(model_input) -> list[str]:
    """The questions of a request: a DataFrame or dict with a `question` column, or a list of strings."""
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        if "question" not in model_input.columns:
            raise _bad_input(f"input needs a 'question' column (got columns {list(model_input.columns)})")
        values = model_input["question"].tolist()
    elif isinstance(model_input, dict) and "question" in model_input:
        values = model_input["question"]
        values = [values] if isinstance(values, str) else list(values)
    elif isinstance(model_input, list):
        values = model_input
    else:
        raise _bad_input(f"input needs a 'question' field (got {type(model_input).__name__})")
    if not values:
        raise _bad_input("no question in the input")
    out = []
    for i, v in enumerate(values):
        if not isinstance(v, str) or not v.strip():
            raise _bad_input(f"question {i}: expected a non-empty string, got {v!r}"[:200])
        out.append(v.strip())
    return out


class AgentModel(mlflow.pyfunc.PythonModel):
    """Loads the weights once and opens the live index of the model's corpus; predict runs one episode a question."""

    def load_context(self, context) -> None:
        from components.serving.ask import open_index

        spec = yaml.safe_load(Path(context.artifacts["config"]).read_text())
        self.cfg, self.corpus = parse_config(spec["config"], CONFIG_FILE), spec["corpus"]
        self.model, self.tok = _load_hf(context.artifacts[WEIGHTS], self.cfg)
        self.model.eval()
        self.backend = open_index(self.cfg, self.corpus)

    def predict(self, context, model_input, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        import torch

        from components.serving.ask import run_agent, turns

        out = []
        for question in questions_of(model_input):
            with torch.no_grad():
                ep, stats = run_agent(self.model, self.tok, self.backend, self.cfg, question, self.corpus)
            steps = turns(ep.log)
            out.append({"question": question, "answer": ep.answer, "corpus": self.corpus,
                        "searches": sum(t.call is not None for t in steps), "turns": [vars(t) for t in steps],
                        "tokens": stats.generated_tokens})  # fmt: skip
        return out


def _load_hf(path: str | Path, cfg: Config):
    from components.model.loading import load_model

    return load_model(path, cfg)


def load_weights(model_uri: str, cfg: Config):
    """(model, tokenizer) from a registered agent model, without opening its index (for `agentr1 ask`)."""
    from mlflow.artifacts import download_artifacts
    from mlflow.models import get_model_info

    path = get_model_info(model_uri).flavors["python_function"]["artifacts"][WEIGHTS]["path"]  # artifacts/<dir name>
    return _load_hf(Path(download_artifacts(f"{model_uri.rstrip('/')}/{path}")), cfg)


def log_agent_model(cfg: Config, hf_dir: Path, corpus: str, name: str = "agent") -> Any:
    """Log the agent (weights dir + config) into the active run as a pyfunc model; returns its ModelInfo."""
    import tempfile

    import pandas as pd
    from mlflow.models import infer_signature

    from components.tracking.models import PIP_REQUIREMENTS

    if not (Path(hf_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{hf_dir}: not a Hugging Face model directory (no config.json); run the train stage")
    example = pd.DataFrame({"question": ["Who founded the company that employs Rutilu?"]})  # schema: a string column
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / CONFIG_FILE
        spec.write_text(redact_text(yaml.safe_dump(serving_config(cfg, corpus), sort_keys=False)))  # belt and braces
        return mlflow.pyfunc.log_model(
            name=name,
            python_model=AgentModel(),
            artifacts={WEIGHTS: str(hf_dir), "config": str(spec)},
            signature=infer_signature(example),  # the server runs in the project's environment (--env-manager local)
            pip_requirements=PIP_REQUIREMENTS,
        )
