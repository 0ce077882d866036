"""Rewards: official HotpotQA/SQuAD answer metrics, the outcome reward and per-call process rewards."""

from __future__ import annotations

import html
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence, Set

from components.config import RewardConfig
from components.data.yes_no import yes_or_no


# --- answer metrics (official SQuAD v1.1 / HotpotQA evaluation normalisation) -------------------------


def normalize_answer(s: str) -> str:
    """Decode HTML entities, lower text and remove punctuation, articles and extra whitespace.

    The model reads passages HTML-escaped (components.agent.observation), so "KKR &amp; Co." is its spelling of
    "KKR & Co."; the rest is the official normalisation."""

    def remove_articles(text: str) -> str:
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text: str) -> str:
        return " ".join(text.split())

    def remove_punc(text: str) -> str:
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(html.unescape(s).lower())))


def is_yes_no(answer: str | None) -> bool:
    """A bare "yes" or "no": the guess a policy that stopped searching falls back on (2Wiki's comparisons)."""
    return answer is not None and yes_or_no(normalize_answer(answer)) is not None


def _f1_single(prediction: str, ground_truth: str) -> float:
    # HotpotQA: yes/no/noanswer must match exactly, otherwise token-level F1.
    pred, gold = normalize_answer(prediction), normalize_answer(ground_truth)
    if pred in ("yes", "no", "noanswer") or gold in ("yes", "no", "noanswer"):
        if pred != gold:
            return 0.0
    pred_tokens, gold_tokens = pred.split(), gold.split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision, recall = num_same / len(pred_tokens), num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str | None, ground_truths: Iterable[str]) -> float:
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in ground_truths))


def f1(prediction: str | None, ground_truths: Iterable[str]) -> float:
    if prediction is None:
        return 0.0
    return max((_f1_single(prediction, g) for g in ground_truths), default=0.0)


def sub_exact_match(prediction: str | None, ground_truths: Iterable[str]) -> float:
    """1 when a normalised gold answer is a whole-word span of the normalised prediction (Agent-R1's subem)."""
    if prediction is None:
        return 0.0
    pred = f" {normalize_answer(prediction)} "
    return float(any(g and f" {g} " in pred for g in map(normalize_answer, ground_truths)))


ANSWER_METRICS = {"em": exact_match, "f1": f1, "subem": sub_exact_match}


# --- outcome and process rewards ---------------------------------------------------------------------


def outcome_reward(answer: str | None, golds: Sequence[str], w: RewardConfig) -> float:
    """Answer score (EM, F1 or subEM) plus the answer-format reward; minus the format penalty when there is no
    well-formed answer."""
    if answer is None:
        return -w.format_penalty
    return w.answer_format + ANSWER_METRICS[w.answer_metric](answer, golds)


def process_reward(
    valid: bool,
    doc_ids: Sequence[str],
    seen_ids: Set[str],
    supporting_ids: Iterable[str],
    w: RewardConfig,
) -> float:
    """Reward of one turn that was not an answer, placed on its last token. `seen_ids` is only read.

    A valid call pays the search cost and earns the configured bonuses; an invalid one gets the penalty.
    """
    if not valid:
        return -w.invalid_call
    new = [d for d in doc_ids if d not in seen_ids]
    r = w.valid_call - w.search_cost
    if new:
        r += w.new_info
    if set(new) & set(supporting_ids):
        r += w.supporting
    return r


def _keeps_bonuses(answer: str | None, golds: Sequence[str], w: RewardConfig) -> bool:
    """Whether an episode keeps its call bonuses under `bonus_gate`: always, with an answer, or with a right one
    (the answer metric above 0)."""
    if w.bonus_gate == "none":
        return True
    if w.bonus_gate == "answer":
        return answer is not None
    return answer is not None and ANSWER_METRICS[w.answer_metric](answer, golds) > 0


def unearned_bonus(
    process_rewards: Iterable[float], answer: str | None, golds: Sequence[str], w: RewardConfig
) -> float:
    """The call bonuses an episode gives back when a gate says it did not earn them (taken off its outcome, so its
    total is its outcome plus its penalties); else 0."""
    return 0.0 if _keeps_bonuses(answer, golds, w) else sum(max(r, 0.0) for r in process_rewards)
