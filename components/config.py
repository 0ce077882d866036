"""The one typed config: `params.yaml` validated into `Config` before any work starts.

Every section forbids unknown keys, so a typo fails at load with the key's dotted path.
Each area owns its section class below; add fields there, with defaults, and mirror them in params.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ConfigError(ValueError):
    """params.yaml is unreadable or does not match the schema; the message names file and key."""


# --- project -------------------------------------------------------------------------------------


class ProjectConfig(Section):
    seed: int = 0
    data_dir: str = "data"
    artifacts_dir: str = "artifacts"


# --- data ----------------------------------------------------------------------------------------

DatasetFormat = Literal[
    "hotpotqa_hf",  # Hugging Face layout: question, answer, supporting_facts, context
    "hotpotqa_ircot",  # IRCoT jsonl: question_id, question_text, answers_objects, contexts
    "musique",
    "2wiki",
    "flashrag",  # id, question, golden_answers
    "kilt",  # KILT wiki pages: wikipedia_title, text[]
    "hf_hub",  # a Hugging Face `datasets` hub id (or local files through `datasets`)
]


class DatasetSpec(Section):
    name: str
    format: DatasetFormat
    path: str = Field(description="file under data_dir, or a hub id for format hf_hub")
    split: Literal["train", "dev", "test"] = "dev"
    limit: int | None = Field(default=None, ge=1)
    # hf_hub only: which columns hold the question and the answers.
    hub_split: str = "train"
    question_field: str = "question"
    answers_field: str = "golden_answers"


class SyntheticConfig(Section):
    enabled: bool = True
    seed: int = 13
    n_entities: int = Field(default=200, ge=3)
    n_relations: int = Field(default=8, ge=1, le=16)
    hops: int = Field(default=2, ge=1, le=4, description="hops of the longest questions")
    min_hops: int | None = Field(default=None, ge=1, le=4, description="shortest questions; None = all `hops`")
    n_train: int = Field(default=2000, ge=1)
    n_dev: int = Field(default=200, ge=1)
    n_test: int = Field(default=200, ge=1)
    counterfactual: bool = Field(default=True, description="also write the redrawn world: corpus and dev questions")


class DataConfig(Section):
    datasets: list[DatasetSpec] = Field(default_factory=list)
    synthetic: SyntheticConfig = SyntheticConfig()


# --- validation ----------------------------------------------------------------------------------


class ValidationConfig(Section):
    question_min_chars: int = 5
    question_max_chars: int = 1000
    answer_max_chars: int = 300
    passage_min_chars: int = 1
    passage_max_chars: int = 20000
    allowed_splits: list[str] = Field(default_factory=lambda: ["train", "dev", "test"])
    eval_splits: list[str] = Field(default_factory=lambda: ["dev", "test"])
    n_examples: int = Field(default=5, ge=1, description="example rows shown per failing expectation")


# --- retrieval -----------------------------------------------------------------------------------


class EmbeddedConfig(Section):
    engine: Literal["bm25s"] = "bm25s"
    k1: float = 1.2
    b: float = 0.75


class ElasticsearchConfig(Section):
    url: str = "http://127.0.0.1:9200"  # ES_URL in the environment wins
    analyzer: Literal["standard", "english"] = "english"
    title_boost: float = 2.0
    bulk_chunk_size: int = 2000
    request_timeout_s: float = 30.0
    max_retries: int = 3
    retention: int = Field(default=2, ge=1, description="index versions kept per alias")
    embedding_model: str | None = None


class RetrievalConfig(Section):
    backend: Literal["embedded", "elasticsearch"] = "embedded"
    top_k: int = Field(default=3, ge=1, description="passages the search tool returns")
    eval_k: list[int] = Field(default_factory=lambda: [1, 5, 10])
    embedded: EmbeddedConfig = EmbeddedConfig()
    elasticsearch: ElasticsearchConfig = ElasticsearchConfig()


# --- tracking ------------------------------------------------------------------------------------


class TrackingConfig(Section):
    experiment: str = "agentr1"
    tracking_uri: str | None = None  # MLFLOW_TRACKING_URI wins; default sqlite inside the project


class ScheduleConfig(Section):
    cron: str = "0 3 * * *"
    timezone: str = "UTC"


# --- root ----------------------------------------------------------------------------------------


class Config(Section):
    project: ProjectConfig = ProjectConfig()
    data: DataConfig = DataConfig()
    validation: ValidationConfig = ValidationConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    tracking: TrackingConfig = TrackingConfig()
    schedule: ScheduleConfig = ScheduleConfig()

    @property
    def artifacts(self) -> Path:
        return Path(self.project.artifacts_dir)

    @property
    def data_root(self) -> Path:
        return Path(self.project.data_dir)


def _describe(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid params"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        if e["type"] == "extra_forbidden":
            lines.append(f"  {key}: unknown key")
        else:
            lines.append(f"  {key}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse_config(raw: dict[str, Any], source: str = "params.yaml") -> Config:
    try:
        return Config.model_validate(raw or {})
    except ValidationError as err:
        raise ConfigError(_describe(err, source)) from None


def load_config(path: str | Path = "params.yaml", overrides: dict[str, Any] | None = None) -> Config:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(raw).__name__}")
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    return parse_config(raw, str(path))


def _set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    node = raw
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def flatten(cfg: Config) -> dict[str, str]:
    """Dotted key -> string value, for MLflow params."""
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v)
        else:
            out[prefix] = str(value)

    walk("", cfg.model_dump(mode="json"))
    return out
