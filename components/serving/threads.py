"""The scoring server's request threads: enough of them for every request of a batch to wait in its own."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor


SERVER_APP = "mlflow.pyfunc.scoring_server.app"  # the module uvicorn imports to serve the model


def serving_loop():
    """The scoring server's running event loop, or None when this process is not `mlflow models serve`.

    With one worker uvicorn imports the app (and so loads the model) before it starts its loop, so from a predict
    thread the loop is found among the process's objects: the one running asyncio loop."""
    import gc
    import sys

    if SERVER_APP not in sys.modules:
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    loops = [o for o in gc.get_objects() if issubclass(type(o), asyncio.AbstractEventLoop) and o.is_running()]
    return loops[0] if len(loops) == 1 else None


def widen_request_threads(n: int) -> bool:
    """The scoring server runs each request's predict in its loop's default thread pool (asyncio.to_thread, with
    min(32, cores + 4) threads). A predict waiting for its batch holds a thread, so that pool would bound the batch:
    the loop gets a pool of `n` threads. False when there is no server loop to widen."""
    loop = serving_loop()
    if loop is None:
        return False
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="predict")
    try:
        asyncio.get_running_loop()
        loop.set_default_executor(pool)
    except RuntimeError:  # another thread: the loop sets it itself, before it runs the next request
        loop.call_soon_threadsafe(loop.set_default_executor, pool)
    return True
