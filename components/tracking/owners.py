"""Which process runs an MLflow run, so that a run whose process was killed is ended by the next one to start.

A stage killed with SIGKILL cannot end its own run: it would stay RUNNING in the UI forever. Each stage run (and a
DVC parent while one of its stages runs) carries the tag `agentr1.owner` = host:pid:start time of its process; a
later stage on the same host marks RUNNING runs whose process is gone as KILLED.
"""

from __future__ import annotations

import socket

import psutil  # a dependency of dvc and mlflow

OWNER_TAG = "agentr1.owner"
ENDED_TAG = "agentr1.ended"


def owner() -> str:
    """This process as host:pid:start time (the start time tells a reused pid apart)."""
    me = psutil.Process()
    return f"{socket.gethostname()}:{me.pid}:{me.create_time():.3f}"


def gone(tag: str) -> bool:
    """Whether the process the tag names is known to be gone: on this host, no process with its pid and start."""
    parts = tag.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname():
        return False  # unreadable, or another host's: not ours to judge
    try:
        return abs(psutil.Process(int(parts[1])).create_time() - float(parts[2])) > 0.01
    except psutil.NoSuchProcess:
        return True
    except (ValueError, psutil.Error):
        return False


def end_dead_runs(client, experiment_id: str) -> list[str]:
    """Mark RUNNING runs of the experiment whose owner process is gone as KILLED; their ids."""
    running = client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=1000)
    dead = [r for r in running if OWNER_TAG in r.data.tags and gone(r.data.tags[OWNER_TAG])]
    for r in dead:
        client.set_tag(r.info.run_id, ENDED_TAG, "its process was gone when a later stage started")
        client.set_terminated(r.info.run_id, "KILLED")
    return [r.info.run_id for r in dead]
