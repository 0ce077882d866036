"""Episodes as MLflow traces: one trace per episode, a CHAT_MODEL span per model turn and a TOOL span per
tool call, built after the fact from the recorded steps and their wall-clock times (the rollout is batched,
so spans cannot be live). EM, F1 and the outcome are trace tags and feedback assessments. The episodes are
components.rollout.traces.EpisodeTrace records (plain data)."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

SOURCE_ID = "agentr1.rewards"


def write_traces(episodes: Sequence, experiment_id: str, session: str, stage: str) -> list[str]:
    """Log the traces into `experiment_id` (linked to the active run, if any); returns their trace ids."""
    state = random.getstate()
    # OpenTelemetry draws trace and span ids from `random`, whose state a resumed training restored from its
    # checkpoint: fresh entropy instead, else a resumed run reuses (overwrites) the killed run's trace ids. The
    # training's own state is put back, so logging traces never changes what it draws.
    random.seed()
    try:
        return _write(episodes, experiment_id, session, stage)
    finally:
        random.setstate(state)


def _write(episodes: Sequence, experiment_id: str, session: str, stage: str) -> list[str]:
    import mlflow
    from mlflow.entities import AssessmentSource, SpanType

    ids = []
    for e in episodes:
        now = time.time_ns()
        times = [(s["start_ns"], s["end_ns"]) for s in e.steps if s["start_ns"]]
        start, end = (min(a for a, _ in times), max(b for _, b in times)) if times else (now, now)
        scores = {"em": e.em, "f1": e.f1, "outcome": e.outcome}
        tags = {"agentr1.stage": stage, "agentr1.question_id": e.question_id, **e.tags,
                **{k: f"{v:.4g}" for k, v in scores.items()}}  # fmt: skip
        root = mlflow.start_span_no_context(
            "episode", span_type=SpanType.AGENT, inputs={"question": e.question, "gold": e.gold},
            experiment_id=experiment_id, start_time_ns=start, tags=tags,
            metadata={"mlflow.trace.session": session, "mlflow.trace.user": e.tags.get("agentr1.system", stage)},
            attributes={"question_id": e.question_id, "process_reward": e.process, **scores},
        )  # fmt: skip
        previous = {"role": "user", "content": e.question}
        for k, s in enumerate(e.steps):
            a, b = (s["start_ns"], s["end_ns"]) if s["start_ns"] else (start, end)
            if s["kind"] == "model":
                span = mlflow.start_span_no_context(f"model turn {k // 2 + 1}", span_type=SpanType.CHAT_MODEL,
                                                    parent_span=root, inputs={"messages": [previous]}, start_time_ns=a)  # fmt: skip
                span.end(outputs={"role": "assistant", "content": s["text"]}, end_time_ns=b)
            else:
                span = mlflow.start_span_no_context(
                    s["name"], span_type=SpanType.TOOL, parent_span=root, inputs={"query": s["query"]},
                    start_time_ns=a, attributes={"hits": len(s["hits"]), "ok": s["ok"], "latency_s": (b - a) / 1e9,
                                "forced": s.get("forced", False)},  # forced: the environment's search, in the prompt
                )  # fmt: skip
                span.end(outputs={"hits": s["hits"], "observation": s["text"]}, end_time_ns=b)
                previous = {"role": "tool", "content": s["text"]}
        root.end(outputs={"answer": e.answer}, end_time_ns=end)
        ids.append(root.trace_id)
    mlflow.flush_trace_async_logging()  # assessments need the traces in the store
    source = AssessmentSource(source_type="CODE", source_id=SOURCE_ID)
    for trace_id, e in zip(ids, episodes):
        for name, value in (("em", e.em), ("f1", e.f1), ("outcome", e.outcome)):
            mlflow.log_feedback(trace_id=trace_id, name=name, value=float(value), source=source)
    return ids
