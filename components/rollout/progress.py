"""A progress bar for generation (questions done, generated tokens/s) on stderr; silent when it is not a terminal."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class GenerationProgress:
    """Pass as `rollout(..., progress=bar)`; close when done (or use as a context manager)."""

    def __init__(self, total: int, desc: str = "generate", refresh_s: float = 0.5, file=None, disable: bool | None = None):
        self.bar = tqdm(total=total, desc=desc, unit="q", disable=disable, file=file or sys.stderr, dynamic_ncols=True)
        self.tokens, self.t0, self.last, self.refresh_s = 0, time.perf_counter(), 0.0, refresh_s

    def __call__(self, new_tokens: int, finished: int) -> None:
        self.tokens += new_tokens
        now = time.perf_counter()
        self.bar.set_postfix_str(f"{self.tokens / max(now - self.t0, 1e-9):.1f} tok/s", refresh=False)
        if finished:
            self.bar.update(finished)
        if now - self.last >= self.refresh_s:
            self.bar.refresh()
            self.last = now

    def __enter__(self) -> GenerationProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
