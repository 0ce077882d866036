"""Which registered version `agentr1 ask` asks, and where its files are.

One registry lookup (the alias or the version, then the model's files). On a local sqlite store the answer is kept
in .cache/agentr1/ask.json with the store file's identity (inode, size, mtime): while the store is unchanged no
version, alias or model can have moved, so the next `ask` needs neither the lookup nor the import of MLflow.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from components.config import Config
from components.serving.agent import AskError
from components.tracking.locks import store_file
from components.tracking.runs import tracking_uri

CACHE = Path(".cache") / "agentr1" / "ask.json"
CONFIG_FILE, WEIGHTS = "agent.yaml", "hf_model"  # the pyfunc model's artifacts (serving/pyfunc.py)


@dataclass(frozen=True)
class Target:
    name: str
    version: str
    source: str
    flavor: str  # "pyfunc" (the agent model: weights + agent.yaml) or "transformers"
    path: str  # local directory: the Hugging Face weights (pyfunc) or the MLflow model (transformers)
    about: str  # what the model is (from agent.yaml), "" when the version does not say
    problem: str = ""  # why its files cannot be loaded (reported after the index check, never cached)


def _identity(db: Path) -> list[int] | None:
    """The store's identity; it changes with every write to the store (and its write-ahead log, if any)."""
    try:
        files = [db.stat()] + [Path(f"{db}-wal").stat()] if Path(f"{db}-wal").exists() else [db.stat()]
    except OSError:
        return None
    return [v for s in files for v in (s.st_ino, s.st_size, s.st_mtime_ns)]


def resolve(cfg: Config, version: int | None = None, alias: str | None = None) -> Target:
    """The version to ask (the registry alias by default): from the cache while the store is unchanged."""
    uri, name = tracking_uri(cfg), cfg.registry.model_name
    wanted = f"version {version}" if version is not None else f"alias {alias or cfg.registry.alias!r}"
    db = store_file(uri)
    key = {"uri": uri, "name": name, "wanted": wanted, "store": _identity(db) if db else None}
    if db is not None and key["store"] is not None:
        try:
            cached = json.loads(CACHE.read_text())
            if cached["key"] == key and Path(cached["target"]["path"]).exists() and not cached["target"]["problem"]:
                return Target(**cached["target"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    target = _lookup(uri, name, version, alias or cfg.registry.alias, wanted)
    if db is not None and not target.problem and key["store"] is not None and key["store"] == _identity(db):  # unchanged
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        tmp = CACHE.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "target": asdict(target)}))
        tmp.replace(CACHE)
    return target


def _lookup(uri: str, name: str, version: int | None, alias: str, wanted: str) -> Target:
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(uri)  # models:/ URIs resolve against it
    client = mlflow.MlflowClient(uri)
    try:
        mv = client.get_model_version(name, str(version)) if version is not None else client.get_model_version_by_alias(name, alias)
    except MlflowException:
        try:
            client.get_registered_model(name)
        except MlflowException:
            raise AskError(f"no registered model {name!r}; run the register stage (agentr1 register or dvc repro)") from None
        raise AskError(f"registered model {name!r} has no {wanted}") from None
    model_uri = f"models:/{mv.name}/{mv.version}"
    try:
        flavors = mlflow.models.get_model_info(model_uri).flavors
        if "transformers" in flavors:
            return Target(mv.name, str(mv.version), mv.source, "transformers", mlflow.artifacts.download_artifacts(model_uri), "")
        files = flavors["python_function"]["artifacts"]
        weights = mlflow.artifacts.download_artifacts(f"{model_uri}/{files[WEIGHTS]['path']}")
        spec = Path(mlflow.artifacts.download_artifacts(f"{model_uri}/{files['config']['path']}"))
    except (MlflowException, OSError, KeyError, ValueError) as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        return Target(mv.name, str(mv.version), mv.source, "", "", "", f"{mv.name} v{mv.version} ({mv.source}): cannot load the model: {first}")
    import yaml

    about = (yaml.safe_load(spec.read_text()) or {}).get("about") or ""
    return Target(mv.name, str(mv.version), mv.source, "pyfunc", weights, about)

