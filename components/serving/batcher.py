"""Dynamic batching for the served agent: the questions of concurrent requests are generated as one rollout batch.

Each request waits (in its own server thread) until its questions are answered or its deadline passes. One worker
thread takes every waiting question, up to `batch_size` (after waiting up to `wait_s` for more to arrive), runs them
as one batch, and hands each request its answers.
A batch stops as soon as every request in it is past its deadline: nobody waits for that work any more.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

RunBatch = Callable[[list[str], Callable[[], bool]], list[Any]]  # (questions, stop?) -> one result a question


class TimedOut(Exception):
    """The request's deadline passed before its answers were ready."""


class Cancelled(Exception):
    """Raised inside a batch's generation to stop it (no request in the batch is still waiting)."""


class _Request:
    def __init__(self, questions: list[str], deadline: float):
        self.questions, self.deadline = questions, deadline
        self.results: list[Any] = [None] * len(questions)
        self.left = len(questions)  # questions not answered yet
        self.taken = 0  # questions already handed to a batch
        self.error: BaseException | None = None
        self.done = threading.Event()

    def expired(self, now: float) -> bool:
        return now >= self.deadline

    def fail(self, error: BaseException) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class Batcher:
    def __init__(self, run: RunBatch, batch_size: int, wait_s: float = 0.0, idle_s: float = 30.0):
        self._run, self.batch_size, self.wait_s, self.idle_s = run, batch_size, wait_s, idle_s
        self._cond = threading.Condition()
        self._queue: deque[_Request] = deque()
        self._worker: threading.Thread | None = None  # started by a request, gone after idle_s without one
        self.batches = 0  # batches run so far

    def submit(self, questions: list[str], timeout_s: float) -> list[Any]:
        """The results for `questions`, in order; TimedOut after `timeout_s`, or the batch's own error."""
        req = _Request(list(questions), time.monotonic() + timeout_s)
        with self._cond:
            self._queue.append(req)
            self._cond.notify()
            if self._worker is None:
                self._worker = threading.Thread(target=self._loop, name="agent-batches", daemon=True)
                self._worker.start()
        if not req.done.wait(timeout_s):
            req.fail(TimedOut(f"no answer within {timeout_s:g} s"))  # the batch that holds it stops if it is the last
        if req.error is not None:
            raise req.error
        return req.results

    def _take(self) -> list[tuple[_Request, int]] | None:
        """(request, question index) pairs of the next batch: waiting requests in arrival order, up to batch_size.
        None after idle_s without a request: the worker ends (the next request starts another)."""
        with self._cond:
            while True:
                now = time.monotonic()
                while self._queue and (self._queue[0].done.is_set() or self._queue[0].expired(now)):
                    self._queue.popleft().fail(TimedOut("the deadline passed while the request waited"))
                if self._queue:
                    break
                if not self._cond.wait(self.idle_s) and not self._queue:
                    self._worker = None
                    return None
            until = now + self.wait_s  # a moment for the requests that arrive together to share the batch
            while self._waiting() < self.batch_size and (left := until - time.monotonic()) > 0:
                self._cond.wait(left)
            items: list[tuple[_Request, int]] = []
            while self._queue and len(items) < self.batch_size:
                req = self._queue[0]
                if req.done.is_set() or req.expired(now):
                    self._queue.popleft().fail(TimedOut("the deadline passed while the request waited"))
                    continue
                take = min(self.batch_size - len(items), len(req.questions) - req.taken)
                items += [(req, req.taken + k) for k in range(take)]
                req.taken += take
                if req.taken == len(req.questions):
                    self._queue.popleft()
            return items

    def _waiting(self) -> int:
        return sum(len(r.questions) - r.taken for r in self._queue)

    def _loop(self) -> None:
        while True:
            items = self._take()
            if items is None:
                return
            if not items:
                continue
            reqs = list(dict.fromkeys(r for r, _ in items))

            def abandoned(reqs=reqs) -> bool:
                now = time.monotonic()
                return all(r.done.is_set() or r.expired(now) for r in reqs)

            try:
                outs = self._run([r.questions[i] for r, i in items], abandoned)
            except Cancelled:
                for r in reqs:
                    r.fail(TimedOut("generation stopped: the deadline passed"))
            except Exception as e:  # noqa: BLE001 - the error belongs to the requests, the worker goes on
                for r in reqs:
                    r.fail(e)
            else:
                for (r, i), out in zip(items, outs):
                    r.results[i] = out
                    r.left -= 1
                    if r.left == 0:
                        r.done.set()
            self.batches += 1
