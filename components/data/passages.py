"""The passage table: stable, unique passage ids; one id per distinct (corpus, title, text), HTML entities
decoded and whitespace collapsed."""

from __future__ import annotations

import html
from collections import defaultdict

from components.data.schema import Passage


class PassageTable:
    """Collects passages across loaders. Ids are `<dataset>:<title>:<n>`, n counting distinct texts per title."""

    def __init__(self) -> None:
        self._ids: dict[tuple[str, str, str], str] = {}
        self._per_title: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.passages: list[Passage] = []

    def add(self, dataset: str, title: str, text: str, corpus: str = "wiki") -> str:
        # HTML entities decoded (HotpotQA's titles hold "&amp;", shown to the model as "&amp;amp;") and spacing
        # collapsed, so that layouts differing in either dedupe
        title, text = (" ".join(html.unescape(field).split()) for field in (title, text))
        key = (corpus, title, text)
        if key in self._ids:
            return self._ids[key]
        n = self._per_title[(dataset, title)]
        self._per_title[(dataset, title)] = n + 1
        pid = f"{dataset}:{title}:{n}"
        self._ids[key] = pid
        self.passages.append(Passage(pid, title, text, corpus))
        return pid

    def extend(self, passages: list[Passage]) -> None:
        """Add passages that already carry their ids (the synthetic worlds)."""
        for p in passages:
            self._ids[(p.corpus, p.title, p.text)] = p.id
            self.passages.append(p)

    def __len__(self) -> int:
        return len(self.passages)
