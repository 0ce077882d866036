"""`agentr1 ask`: one question to a registered agent (the champion by default) over the live search index."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from components import artifacts
from components.agent.parser import ToolCall, parse_turn
from components.config import Config
from components.data.schema import Question
from components.retrieval.base import SearchError

SNIPPET_CHARS = 160  # of each observation in the printed view (--json keeps them whole)


class AskError(Exception):
    """A question that cannot be asked: empty, no such model or alias, or no index to search."""


@dataclass
class Turn:
    text: str  # the model's turn as generated
    call: dict | None  # {"name", "arguments"} when the turn is a tool call
    observation: str | None  # what the environment answered


@dataclass
class Answer:
    question: str
    answer: str | None
    model_name: str
    model_version: str
    corpus: str
    turns: list[Turn] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def model_corpus(cfg: Config) -> str:
    """The corpus the model was trained to search: synthetic worlds have their own, the rest search wiki."""
    name = cfg.train.datasets[0]
    return name if name.startswith("synthetic") else "wiki"


def resolve_version(cfg: Config, version: int | None = None, alias: str | None = None):
    """The registered model version to ask (the registry alias by default)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client, name = mlflow.MlflowClient(), cfg.registry.model_name
    try:
        client.get_registered_model(name)
    except MlflowException:
        raise AskError(f"no registered model {name!r}; run the register stage (agentr1 register or dvc repro)") from None
    try:
        if version is not None:
            return client.get_model_version(name, str(version))
        return client.get_model_version_by_alias(name, alias or cfg.registry.alias)
    except MlflowException:
        what = f"version {version}" if version is not None else f"alias {alias or cfg.registry.alias!r}"
        raise AskError(f"registered model {name!r} has no {what}") from None


def open_index(cfg: Config, corpus: str):
    """The search backend with a live index of `corpus`; AskError when there is none. The caller closes it."""
    from components.retrieval.factory import make_backend

    backend = make_backend(cfg)
    try:
        live = backend.live_version(corpus)
    except SearchError as e:
        backend.close()
        raise AskError(f"search index for corpus {corpus!r}: {e}") from None
    if live is None:
        backend.close()
        where = artifacts.index(cfg) / corpus if cfg.retrieval.backend == "embedded" else cfg.retrieval.elasticsearch.url
        raise AskError(f"no live search index for corpus {corpus!r} at {where}; run `agentr1 index` (or `dvc repro index`)")
    return backend


def load_version(mv, cfg: Config):
    """(model, tokenizer) of a registered version: the served agent (pyfunc) or a plain transformers model."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from components.model.loading import pick_device

    uri = f"models:/{mv.name}/{mv.version}"
    try:
        if "transformers" in mlflow.models.get_model_info(uri).flavors:
            loaded = mlflow.transformers.load_model(uri, return_type="components")
            model, tok = loaded["model"], loaded["tokenizer"]
        else:
            from components.serving.pyfunc import load_weights

            model, tok = load_weights(uri, cfg)
    except (MlflowException, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise AskError(f"{mv.name} v{mv.version} ({mv.source}): cannot load the model: {first}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.to(pick_device(cfg)), tok


def run_agent(model, tok, backend, cfg: Config, question: str, corpus: str):
    """One greedy episode of the agent on `question` over `backend`: (episode, rollout stats)."""
    from components.model.loading import autocast
    from components.rollout.chat import ChatFormat
    from components.rollout.engine import RolloutStats, rollout
    from components.rollout.evaluate import make_env

    q = Question(id="ask", question=question, answers=[], dataset="ask", split="ask", corpus=corpus)
    chat = ChatFormat.for_agent(tok, cfg.agent, getattr(model, "generation_config", None))
    env = make_env(backend, [q], cfg.agent, cfg.retrieval.top_k, chat)
    stats = RolloutStats()
    with autocast(cfg, model.device):
        (traj,) = rollout(model, chat, env, [q], cfg.agent, temperature=0.0, stats=stats)
    return traj.episode, stats


def ask(cfg: Config, question: str, version: int | None = None, alias: str | None = None,
        corpus: str | None = None) -> Answer:  # fmt: skip
    question = question.strip()
    if not question:
        raise AskError("the question is empty")
    corpus = corpus or model_corpus(cfg)
    t0 = time.perf_counter()
    mv = resolve_version(cfg, version, alias)
    t_registry = time.perf_counter()
    backend = open_index(cfg, corpus)
    try:
        t_index = time.perf_counter()
        model, tok = load_version(mv, cfg)
        t_model = time.perf_counter()
        ep, stats = run_agent(model, tok, backend, cfg, question, corpus)
        t_agent = time.perf_counter()
    finally:
        backend.close()
    timings = {"registry_s": t_registry - t0, "index_s": t_index - t_registry, "load_model_s": t_model - t_index, "agent_s": t_agent - t_model,
               "tool_s": stats.tool_seconds, "tokens": float(stats.generated_tokens),
               "tokens_per_s": stats.tokens_per_s, "total_s": t_agent - t0}  # fmt: skip
    return Answer(question, ep.answer, mv.name, str(mv.version), corpus, turns(ep.log), timings)


def turns(log: list[tuple[str, str]]) -> list[Turn]:
    turns: list[Turn] = []
    for role, text in log[1:]:
        if role == "assistant":
            action = parse_turn(text)
            call = {"name": action.name, "arguments": action.arguments} if isinstance(action, ToolCall) else None
            turns.append(Turn(text, call, None))
        elif role == "tool" and turns:
            turns[-1].observation = text
    return turns


def render(a: Answer) -> str:
    """Plain text: each call, a snippet of each observation, the answer and the timings."""
    lines = [f"model {a.model_name} v{a.model_version}  corpus {a.corpus}", f"Q: {a.question}"]
    for i, t in enumerate(a.turns, 1):
        if t.call is not None:
            args = ", ".join(f"{k}={v!r}" for k, v in t.call["arguments"].items())
            lines.append(f"[{i}] call {t.call['name']}({args})")
        elif t.observation is not None:
            lines.append(f"[{i}] invalid turn: {t.text.strip()[:SNIPPET_CHARS]!r}")
        if t.observation is not None:
            obs = " ".join(t.observation.split())
            lines.append(f"    -> {obs[:SNIPPET_CHARS]}{'...' if len(obs) > SNIPPET_CHARS else ''}")
    lines.append(f"A: {a.answer if a.answer is not None else '(no answer)'}")
    tm = a.timings
    lines.append(f"time: registry {tm['registry_s']:.2f}s, index {tm['index_s']:.2f}s, model {tm['load_model_s']:.2f}s, agent {tm['agent_s']:.2f}s "
                 f"({tm['tokens']:.0f} tokens, {tm['tokens_per_s']:.1f} tok/s, tools {tm['tool_s']:.3f}s), "
                 f"total {tm['total_s']:.2f}s")  # fmt: skip
    return "\n".join(lines)
