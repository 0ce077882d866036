"""The agent as an MLflow pyfunc model: weights, tokenizer, agent config and the search index it needs.

`mlflow models serve -m "models:/<name>@champion" --env-manager local` then answers
{"inputs": {"question": [...]}} (or dataframe_split / dataframe_records) at /invocations with, per
question, the answer and its trajectory; the agent runs through the same code as `agentr1 ask`.
The model is logged from code (serving/model_code.py names AgentModel), so no pickled object is stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
import yaml

from components.agent.turns import turns
from components.config import Config, parse_config, with_new_keys
from components.secrets import redact_text
from components.serving.about import describe, weight_count
from components.serving.agent import KnownWords, model_corpus, open_index, reading_notice, reserved_markup, run_episodes
from components.serving.batcher import Batcher, Cancelled, TimedOut
from components.serving.requests import questions_of
from components.serving.threads import widen_request_threads

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


class AgentModel(mlflow.pyfunc.PythonModel):
    """Loads the weights once and opens the live index of the model's corpus. Concurrent requests share rollout
    batches (serving/batcher.py); a request's generation stops at the server's request timeout."""

    def load_context(self, context) -> None:
        from mlflow.environment_variables import MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT

        from components.model.loading import load_generator

        spec = yaml.safe_load(Path(context.artifacts["config"]).read_text())
        # a model registered before keys moved stores the old ones
        self.cfg, self.corpus = parse_config(with_new_keys(spec["config"]), CONFIG_FILE), spec["corpus"]
        self.about = spec.get("about") or ""
        # a profile on vLLM serves from a vLLM process of its own (it stops with the server)
        self.model, self.tok = load_generator(context.artifacts[WEIGHTS], self.cfg)
        if hasattr(self.model, "eval"):
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

        replies, _ = run_episodes(self.model, self.tok, self.backend, self.cfg, questions, self.corpus, stop_when_abandoned)
        out = []
        for q, r in zip(questions, replies):
            t = r.trajectory
            steps = turns(t.episode)
            again = {"read_again": r.read_again, "episode_answer": r.episode_answer} if r.read_again is not None else {}
            out.append({"question": q, "answer": r.answer, **again, "corpus": self.corpus,
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
                   ColSpec(text, "notice", required=False), ColSpec(text, "about", required=False),
                   ColSpec(DataType.long, "read_again", required=False),
                   ColSpec(text, "episode_answer", required=False)])  # fmt: skip


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
