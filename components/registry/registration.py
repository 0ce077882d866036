"""All-or-nothing registration. A model version is made only from a logged model whose every file arrived; it is
tagged pending until its evidence and description are written, then complete, and only a complete version can
become champion. A registration first removes what a killed one left: a pending version, a logged model's partial
files. Registrations into one store run one at a time on this machine (a lock keyed by the tracking URI)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

from components.tracking.locks import store_lock

REGISTRATION_TAG = "agentr1.registration"  # on a model version: pending, then complete (older versions: none)
PENDING, COMPLETE = "pending", "complete"
REGISTER_STAGE = "register"


class RegistrationError(RuntimeError):
    """A model could not be registered completely; nothing of it was left in the registry."""


@contextmanager
def registry_lock(uri: str) -> Iterator[None]:
    """One registration at a time into the store at `uri`, among the processes of this machine."""
    with store_lock(uri, "registry"):
        yield


def local_dir(uri: str) -> Path | None:
    """The directory of a file:// (or plain path) artifact location, None for a remote one."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path))
    return None


def discard_logged_model(client, model) -> None:
    """Delete a logged model that did not finish, and its partial files (when they are local)."""
    from mlflow.exceptions import MlflowException

    path = local_dir(model.artifact_location)
    if path is not None:
        shutil.rmtree(path.parent if path.name == "artifacts" else path, ignore_errors=True)
    try:
        client.delete_logged_model(model.model_id)
    except MlflowException:
        pass


def missing_files(client, model_id: str, expected: dict[str, int | None]) -> list[str]:
    """`rel path -> size` entries of `expected` that the logged model lacks or holds with another size (None: any)."""
    have: dict[str, int] = {}
    todo = [None]
    while todo:
        for f in client.list_logged_model_artifacts(model_id, todo.pop()):
            if f.is_dir:
                todo.append(f.path)
            else:
                have[f.path] = f.file_size
    return [f"{rel} ({'missing' if rel not in have else f'{have[rel]} of {size} bytes'})"
            for rel, size in sorted(expected.items()) if rel not in have or size is not None and have[rel] != size]  # fmt: skip


def _stage(client, run_id: str) -> str | None:
    from mlflow.exceptions import MlflowException

    from components.tracking.runs import STAGE_TAG

    try:
        return client.get_run(run_id).data.tags.get(STAGE_TAG)
    except MlflowException:  # the run was deleted
        return None


def recover(client, experiment_id: str | None, model_name: str) -> list[str]:
    """Remove what killed registrations left (call under registry_lock): model versions still pending, and the
    unfinished logged models of register runs. Returns one line per thing removed."""
    from mlflow.entities import LoggedModelStatus

    removed = []
    for mv in client.search_model_versions(f"name='{model_name}'"):
        if mv.tags.get(REGISTRATION_TAG) == PENDING:
            client.delete_model_version(model_name, mv.version)
            removed.append(f"{model_name} v{mv.version}: its registration did not finish; deleted")
    if experiment_id is None:
        return removed
    token = None
    while True:
        page = client.search_logged_models([experiment_id], max_results=200, page_token=token)
        for model in page:
            if model.status == LoggedModelStatus.READY or not model.source_run_id:
                continue
            if _stage(client, model.source_run_id) != REGISTER_STAGE:
                continue  # e.g. the train stage's model, which a running train may be logging now
            discard_logged_model(client, model)
            removed.append(f"logged model {model.model_id} ({model.status}): unfinished; its files removed")
        token = page.token
        if not token:
            return removed
