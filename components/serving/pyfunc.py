"""The agent as an MLflow pyfunc model: weights, tokenizer, agent config and the search index it needs.

`mlflow models serve -m "models:/<name>@champion" --env-manager local` then answers
{"inputs": {"question": [...]}} (or dataframe_split / dataframe_records) at /invocations with, per
question, the answer and its trajectory; the agent runs through the same code as `agentr1 ask`.
The model is logged from code (serving/model_code.py names AgentModel), so no pickled object is stored.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
import yaml

from components.config import Config, ServingConfig, parse_config
from components.secrets import redact_text
from components.serving.about import describe, weight_count
from components.serving.agent import (KnownWords, model_corpus, open_index, question_problem, reading_notice,
                                      reserved_markup, run_episodes, turns)  # fmt: skip
from components.serving.batcher import Batcher, Cancelled, TimedOut

CONFIG_FILE = "agent.yaml"  # the resolved config (agent, retrieval, model settings), never credentials
WEIGHTS = "hf_model"  # artifact key of the Hugging Face directory (weights + tokenizer)
MODEL_CODE = Path(__file__).with_name("model_code.py")


def serving_config(cfg: Config, corpus: str, about: str = "") -> dict[str, Any]:
    """What the served model needs besides weights: the config, the index root as an absolute path, the corpus.

    The Elasticsearch URL never carries credentials (params refuse them); the server reads ES_API_KEY or
    ES_USERNAME/ES_PASSWORD, and ES_URL, from its own environment.
    """
    raw = cfg.model_dump(mode="json")
    raw["project"]["artifacts_dir"] = str(cfg.artifacts.resolve())  # the embedded index: <artifacts>/index/<corpus>
    raw["tracking"]["tracking_uri"] = None
    return {"corpus": corpus, "backend": cfg.retrieval.backend, "about": about, "config": raw}


def bad_input(message: str):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)  # HTTP 400 from the scoring server


def _column(model_input) -> list:
    """The `question` values of a request, as parsed by the scoring server. With no input schema nothing is coerced,
    except by numpy: the `inputs` form turns each column into an array, so [question, 5] arrives as two strings."""
    if isinstance(model_input, pd.DataFrame):
        if "question" not in model_input.columns:
            raise bad_input(f"input needs a 'question' column (got columns {[str(c) for c in model_input.columns][:10]})")
        return model_input["question"].tolist()
    if isinstance(model_input, dict):
        if "question" not in model_input:
            raise bad_input(f"input needs a 'question' field (got fields {[str(k) for k in model_input][:10]})")
        values = model_input["question"]
    else:
        values = model_input  # a list (or array) of questions
    if isinstance(values, str):
        return [values]
    if hasattr(values, "ndim") and values.ndim == 0:  # the server parses a lone JSON value as a 0-d array
        return [values.item()]
    if hasattr(values, "tolist"):
        values = values.tolist()
    if not isinstance(values, list):
        raise bad_input(f"the questions must be a list of strings, got {type(values).__name__}")
    return values


def questions_of(model_input, limits: ServingConfig, markup: tuple[str, ...] = ()) -> list[str]:
    """The questions of a request, each a non-empty string within the limits; a 400 names the first bad one."""
    values = _column(model_input)
    if not values:
        raise bad_input("no question in the input")
    if len(values) > limits.max_questions:
        raise bad_input(f"{len(values)} questions in one request; at most {limits.max_questions} (serving.max_questions)")
    out = []
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise bad_input(f"question {i}: expected a non-empty string, got {type(v).__name__} {_short(v)}")
        problem = question_problem(v.strip(), limits.max_question_chars, markup)
        if problem is not None:
            raise bad_input(f"question {i}: {problem}")
        out.append(v.strip())
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


SERVER_APP = "mlflow.pyfunc.scoring_server.app"  # the module uvicorn imports to serve the model


def serving_loop():
    """The scoring server's running event loop, or None when this process is not `mlflow models serve`.

    With one worker uvicorn imports the app (and so loads the model) before it starts its loop, so from a predict
    thread the loop is found among the process's objects: the one running asyncio loop."""
    import gc
    import sys

    if SERVER_APP not in sys.modules:
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    loops = [o for o in gc.get_objects() if issubclass(type(o), asyncio.AbstractEventLoop) and o.is_running()]
    return loops[0] if len(loops) == 1 else None


def widen_request_threads(n: int) -> bool:
    """The scoring server runs each request's predict in its loop's default thread pool (asyncio.to_thread, with
    min(32, cores + 4) threads). A predict waiting for its batch holds a thread, so that pool would bound the batch:
    the loop gets a pool of `n` threads. False when there is no server loop to widen."""
    loop = serving_loop()
    if loop is None:
        return False
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="predict")
    try:
        asyncio.get_running_loop()
        loop.set_default_executor(pool)
    except RuntimeError:  # another thread: the loop sets it itself, before it runs the next request
        loop.call_soon_threadsafe(loop.set_default_executor, pool)
    return True


class AgentModel(mlflow.pyfunc.PythonModel):
    """Loads the weights once and opens the live index of the model's corpus. Concurrent requests share rollout
    batches (serving/batcher.py); a request's generation stops at the server's request timeout."""

    def load_context(self, context) -> None:
        from mlflow.environment_variables import MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT

        from components.model.loading import load_model

        spec = yaml.safe_load(Path(context.artifacts["config"]).read_text())
        self.cfg, self.corpus = parse_config(spec["config"], CONFIG_FILE), spec["corpus"]
        self.about = spec.get("about") or ""
        self.model, self.tok = load_model(context.artifacts[WEIGHTS], self.cfg)
        self.model.eval()
        self.backend = open_index(self.cfg, self.corpus)
        self.markup = reserved_markup(self.tok)
        self.known = KnownWords(self.tok)
        self.timeout_s = float(MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT.get())  # the server answers 504 after this
        self.batcher = Batcher(self._run_batch, self.cfg.serving.batch_size, self.cfg.serving.batch_wait_ms / 1000)
        self.widened = widen_request_threads(self.cfg.serving.max_concurrent)  # else at the first request

    def _run_batch(self, questions: list[str], abandoned) -> list[dict[str, Any]]:
        def stop_when_abandoned(_tokens: int, _finished: int) -> None:
            if abandoned():
                raise Cancelled()

        trajs, _ = run_episodes(self.model, self.tok, self.backend, self.cfg, questions, self.corpus, stop_when_abandoned)
        out = []
        for q, t in zip(questions, trajs):
            steps = turns(t.episode.log)
            out.append({"question": q, "answer": t.episode.answer, "corpus": self.corpus,
                        "searches": sum(s.call is not None for s in steps), "turns": [vars(s) for s in steps],
                        "tokens": t.n_action_tokens, "about": self.about,
                        "notice": reading_notice(q, self.known, self.cfg.serving.unknown_words)})  # fmt: skip
        return out

    # pd.DataFrame: MLflow's "no schema inference" hint. The model has no input schema, so the scoring server hands
    # over what it parsed without coercing it (a DataFrame, or the `inputs` dict/list); questions_of checks each value.
    def predict(self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        questions = questions_of(model_input, self.cfg.serving, self.markup)
        if not self.widened:
            self.widened = widen_request_threads(self.cfg.serving.max_concurrent)
        try:
            return self.batcher.submit(questions, self.timeout_s)
        except TimedOut as e:
            from mlflow.exceptions import MlflowException

            raise MlflowException(f"request timed out: {e}") from None


def load_weights(model_uri: str, cfg: Config):
    """(model, tokenizer) from a registered agent model, without opening its index (for `agentr1 ask`)."""
    from mlflow.artifacts import download_artifacts
    from mlflow.models import get_model_info

    from components.model.loading import load_model

    path = get_model_info(model_uri).flavors["python_function"]["artifacts"][WEIGHTS]["path"]  # artifacts/<dir name>
    return load_model(Path(download_artifacts(f"{model_uri.rstrip('/')}/{path}")), cfg)


def example_question(cfg: Config, corpus: str) -> str:
    """A question from the model's own world (a dev question of the synthetic world), for the input example."""
    if corpus.startswith("synthetic"):
        from components.data.synthetic import generate_world

        return generate_world(cfg.data.synthetic, counterfactual=corpus != "synthetic").questions("dev")[0].question
    return "Which country is the Eiffel Tower in?"


def about_model(cfg: Config, hf_dir: Path) -> str:
    import json

    vocab = json.loads((Path(hf_dir) / "config.json").read_text()).get("vocab_size", 0)
    return describe(cfg, weight_count(hf_dir), int(vocab))


def _output_schema():
    from mlflow.types.schema import Array, ColSpec, DataType, Object, Property, Schema

    text = DataType.string
    call = Object([Property("name", text), Property("arguments", Object([Property("query", text, required=False)]))])
    turn = Object([Property("text", text), Property("call", call, required=False), Property("observation", text, required=False)])
    return Schema([ColSpec(text, "question"), ColSpec(text, "answer", required=False), ColSpec(text, "corpus"),
                   ColSpec(DataType.long, "searches"), ColSpec(Array(turn), "turns"), ColSpec(DataType.long, "tokens"),
                   ColSpec(text, "notice", required=False), ColSpec(text, "about", required=False)])  # fmt: skip


OUTPUT_SCHEMA = _output_schema()  # one prediction per question; answer and notice may be null


def log_agent_model(cfg: Config, hf_dir: Path, corpus: str | None = None, name: str = "agent") -> Any:
    """Log the agent (weights dir + config) into the active run as a pyfunc model from code; returns its ModelInfo.

    MLflow loads the logged model once and answers the input example with it (a check that it serves)."""
    import tempfile

    from mlflow.models import ModelSignature

    from components.tracking.models import PIP_REQUIREMENTS

    if not (Path(hf_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{hf_dir}: not a Hugging Face model directory (no config.json); run the train stage")
    corpus = corpus or model_corpus(cfg)
    about = about_model(cfg, Path(hf_dir))
    example = {"question": [example_question(cfg, corpus)]}  # the `inputs` form of a request
    # outputs only: an input schema would make the server coerce null or 5 into the strings "None" and "5"
    signature = ModelSignature(outputs=OUTPUT_SCHEMA)
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / CONFIG_FILE
        spec.write_text(redact_text(yaml.safe_dump(serving_config(cfg, corpus, about), sort_keys=False)))  # belt and braces
        return mlflow.pyfunc.log_model(
            name=name,
            python_model=str(MODEL_CODE),
            artifacts={WEIGHTS: str(hf_dir), "config": str(spec)},
            signature=signature,
            input_example=example,
            pip_requirements=PIP_REQUIREMENTS,  # the server runs in the project's environment (--env-manager local)
        )
