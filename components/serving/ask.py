"""`agentr1 ask`: one question to a registered agent (the champion by default) over the live search index."""

from __future__ import annotations

import html
import time
from dataclasses import asdict, dataclass, field

from components.agent.turns import Turn, turns
from components.config import Config
from components.serving.about import describe
from components.serving.agent import (AskError, KnownWords, model_corpus, open_index, question_problem, reading_notice,
                                      reserved_markup, run_episodes)  # fmt: skip
from components.serving.resolve import Target, resolve

SNIPPET_CHARS = 160  # of each observation in the printed view (--json keeps them whole)

__all__ = ["Answer", "AskError", "ask", "ask_served", "render"]


@dataclass
class Answer:
    question: str
    answer: str | None
    model_name: str  # the registered model, or the URL of the server that answered
    model_version: str  # "" when a server answered
    corpus: str
    about: str = ""  # the model, its world, its training data
    notice: str | None = None  # said before the answer when the model cannot read the question
    turns: list[Turn] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    read_again: int | None = None  # passages read again for the answer (evaluate.reread); None: the episode's own
    episode_answer: str | None = None  # the episode's own answer, when it read again

    def to_dict(self) -> dict:
        return asdict(self)


def load(target: Target, cfg: Config):
    """(model, tokenizer) of a registered version, on the configured device."""
    from components.model.loading import load_model, pick_device

    if target.problem:
        raise AskError(target.problem)
    try:
        if target.flavor == "transformers":
            import mlflow

            loaded = mlflow.transformers.load_model(target.path, return_type="components")
            model, tok = loaded["model"], loaded["tokenizer"]
        else:
            model, tok = load_model(target.path, cfg)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise AskError(f"{target.name} v{target.version} ({target.source}): cannot load the model: {first}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.to(pick_device(cfg)).eval(), tok


def ask(cfg: Config, question: str, version: int | None = None, alias: str | None = None,
        corpus: str | None = None) -> Answer:  # fmt: skip
    question = question.strip()
    problem = question_problem(question, cfg.serving.max_question_chars, ())
    if problem is not None:
        raise AskError(problem)
    corpus = corpus or model_corpus(cfg)
    t0 = time.perf_counter()
    target = resolve(cfg, version, alias)
    t_registry = time.perf_counter()
    backend = open_index(cfg, corpus)
    try:
        t_index = time.perf_counter()
        model, tok = load(target, cfg)
        problem = question_problem(question, cfg.serving.max_question_chars, reserved_markup(tok))
        if problem is not None:
            raise AskError(problem)
        about = target.about or describe(cfg, sum(p.numel() for p in model.parameters()), len(tok))
        t_model = time.perf_counter()
        (reply,), stats = run_episodes(model, tok, backend, cfg, [question], corpus)
        t_agent = time.perf_counter()
    finally:
        backend.close()
    timings = {"registry_s": t_registry - t0, "index_s": t_index - t_registry, "load_model_s": t_model - t_index,
               "agent_s": t_agent - t_model, "tool_s": stats.tool_seconds, "tokens": float(stats.generated_tokens),
               "tokens_per_s": stats.tokens_per_s, "total_s": t_agent - t0}  # fmt: skip
    notice = reading_notice(question, KnownWords(tok), cfg.serving.unknown_words)
    ep = reply.trajectory.episode
    again = reply.read_again is not None
    return Answer(question, reply.answer, target.name, target.version, corpus, about, notice, turns(ep), timings,
                  reply.read_again, ep.answer if again else None)  # fmt: skip


def ask_served(url: str, question: str, timeout_s: float = 120.0) -> Answer:
    """One question to the agent a running `mlflow models serve` holds in memory: no model to import or load."""
    import json
    import urllib.error
    import urllib.request

    t0 = time.perf_counter()
    body = json.dumps({"inputs": {"question": [question.strip()]}}).encode()
    req = urllib.request.Request(f"{url.rstrip('/')}/invocations", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            (pred,) = json.loads(r.read())["predictions"]
    except urllib.error.HTTPError as e:
        reply = e.read().decode(errors="replace")
        try:
            reply = json.loads(reply).get("message", reply)
        except ValueError:
            pass
        raise AskError(f"{url}: HTTP {e.code}: {reply.strip().splitlines()[-1][-300:] if reply.strip() else e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
        raise AskError(f"{url}: no answer from a served agent ({getattr(e, 'reason', e)})") from None
    steps = [Turn(t["text"], t["call"], t["observation"]) for t in pred["turns"]]
    return Answer(pred["question"], pred["answer"], url, "", pred["corpus"], pred.get("about", ""),
                  pred.get("notice"), steps, {"tokens": float(pred["tokens"]), "total_s": time.perf_counter() - t0},
                  pred.get("read_again"), pred.get("episode_answer"))  # fmt: skip


def _text(s: str) -> str:
    """What the model saw, as a person reads it: observations escape "<" and ">" as HTML entities."""
    return html.unescape(s)


def render(a: Answer) -> str:
    """Plain text: what the model is, a warning when it cannot read the question, each call, a snippet of each
    observation, the answer and the timings."""
    head = f"model {a.model_name} v{a.model_version}: {a.about}" if a.model_version else f"model served at {a.model_name}: {a.about}"
    if f"'{a.corpus}' corpus" not in a.about:
        head += f" (searching the '{a.corpus}' index)"
    lines = [head]
    if a.notice:
        lines.append(f"note: {a.notice}")
    lines.append(f"Q: {a.question}")
    for i, t in enumerate(a.turns, 1):
        if t.call is not None:
            args = ", ".join(f"{k}={v!r}" for k, v in t.call["arguments"].items())
            lines.append(f"[{i}] call {t.call['name']}({_text(args)})")
        elif t.observation is not None:
            lines.append(f"[{i}] invalid turn: {t.text.strip()[:SNIPPET_CHARS]!r}")
        if t.observation is not None:
            obs = _text(" ".join(t.observation.split()))
            lines.append(f"    -> {obs[:SNIPPET_CHARS]}{'...' if len(obs) > SNIPPET_CHARS else ''}")
    if a.read_again is not None:
        own = _text(a.episode_answer) if a.episode_answer is not None else "(no answer)"
        passages = f"{a.read_again} passage{'s' if a.read_again != 1 else ''}"
        lines.append(f"episode's answer: {own}; read again over the {passages} it was shown:")
    lines.append(f"A: {_text(a.answer) if a.answer is not None else '(no answer)'}")
    tm = a.timings
    if "agent_s" not in tm:  # asked over HTTP
        lines.append(f"time: {tm['tokens']:.0f} tokens, total {tm['total_s']:.2f}s")
        return "\n".join(lines)
    lines.append(f"time: registry {tm['registry_s']:.2f}s, index {tm['index_s']:.2f}s, model {tm['load_model_s']:.2f}s, agent {tm['agent_s']:.2f}s "
                 f"({tm['tokens']:.0f} tokens, {tm['tokens_per_s']:.1f} tok/s, tools {tm['tool_s']:.3f}s), "
                 f"total {tm['total_s']:.2f}s")  # fmt: skip
    return "\n".join(lines)
