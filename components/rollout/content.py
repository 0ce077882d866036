"""Which sampled tokens are content (a call's query, an answer's text) rather than format, and the sampling
entropy over them: the exploration that matters once the format is learned, since format tokens become
near-deterministic and pull the per-token mean down whatever the content does."""

from __future__ import annotations

from collections.abc import Sequence

from components.agent.parser import ANSWER_CLOSE, ANSWER_OPEN
from components.rollout.chat import ChatFormat
from components.rollout.trajectory import Trajectory

QUERY_OPEN = '"query": "'


def content_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of a turn's content: the query after `"query": "` up to its closing quote, the answer
    after `<answer>` up to `</answer>`; an unclosed one runs to the end of the turn."""
    spans = []
    for opener, closer in ((QUERY_OPEN, '"}'), (ANSWER_OPEN, ANSWER_CLOSE)):
        start = text.find(opener)
        if start >= 0:
            start += len(opener)
            end = text.find(closer, start)
            spans.append((start, end if end >= 0 else len(text)))
    return spans


def content_mask(chat: ChatFormat, tokens: Sequence[int]) -> list[bool]:
    """For each token of a model turn: whether it overlaps the turn's content (tokens decoded one by one; a stop
    token never is)."""
    pieces = [chat.tok.decode([t], skip_special_tokens=False) for t in tokens]
    text, starts = "".join(pieces), []
    pos = 0
    for p in pieces:
        starts.append(pos)
        pos += len(p)
    spans = content_spans(text)
    return [t not in chat.stop_ids and any(s < ce and cs < s + len(p) for cs, ce in spans)
            for t, s, p in zip(tokens, starts, pieces)]  # fmt: skip


def content_entropy(trajs: Sequence[Trajectory], chat: ChatFormat) -> float:
    """Mean surprisal (-log-prob under the sampling distribution) of the sampled content tokens: an unbiased
    estimate of the sampling entropy there, in nats per token; 0.0 when no turn has content."""
    total, n = 0.0, 0
    for t in trajs:
        for start, end in t.turn_spans:
            for is_content, lp in zip(content_mask(chat, t.input_ids[start:end]), t.logprobs[start:end]):
                if is_content:
                    total, n = total - lp, n + 1
    return total / n if n else 0.0
