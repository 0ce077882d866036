"""Yes/no answers (2Wiki's and HotpotQA's comparisons): a set with as many of each, or with none."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

YES_NO = ("yes", "no")  # comparison answers: shown by no passage, named by no question

T = TypeVar("T")


def yes_or_no(answer: str | None) -> str | None:
    """"yes" or "no" when the answer is one of them (any case, spaces around), else None."""
    word = (answer or "").strip().lower()
    return word if word in YES_NO else None


def balance_yes_no(items: Sequence[T], answer_of: Callable[[T], str | None], rng: random.Random) -> list[T]:
    """`items` with as many "yes" as "no" answers: a random subset of the larger side, every item kept in order."""
    sides = {a: [i for i, x in enumerate(items) if yes_or_no(answer_of(x)) == a] for a in YES_NO}
    n = min(map(len, sides.values()))
    dropped = {i for side in sides.values() for i in set(side) - set(rng.sample(side, n))}
    return [x for i, x in enumerate(items) if i not in dropped]


def without_yes_no(items: Sequence[T], answer_of: Callable[[T], str | None]) -> list[T]:
    """`items` whose answer is neither "yes" nor "no", in order."""
    return [x for x in items if yes_or_no(answer_of(x)) is None]
