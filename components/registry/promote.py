"""Moving the champion alias by hand (`promote`) and back (`rollback`), each move recorded on the model version.
The register stage moves it only through the champion gate (registry/gate.py); a move by hand is not gated."""

from __future__ import annotations

import getpass
import json
from dataclasses import dataclass
from datetime import datetime, timezone

from components.config import Config

HISTORY_TAG = "champion.history"  # registered-model tag: JSON list of earlier champions, oldest first


class PromotionError(Exception):
    """A move of the champion alias that cannot be made."""


@dataclass(frozen=True)
class Move:
    action: str  # promote | rollback
    model_name: str
    old_version: str | None
    new_version: str
    by: str
    at: str
    reason: str


def _client():
    import mlflow

    return mlflow.MlflowClient()


def current_champion(client, name: str, alias: str) -> str | None:
    """The version the alias points at, None when it points nowhere."""
    from mlflow.exceptions import MlflowException

    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def _history(client, name: str) -> list[str]:
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(name)
    except MlflowException:
        raise PromotionError(f"no registered model {name!r}; run the register stage first") from None
    return json.loads(model.tags.get(HISTORY_TAG, "[]"))


def _record(client, cfg: Config, move: Move) -> None:
    name, alias = cfg.registry.model_name, cfg.registry.alias
    client.set_registered_model_alias(name, alias, move.new_version)
    tags = {"action": move.action, "by": move.by, "at": move.at, "reason": move.reason,
            "old_version": move.old_version or "", "new_version": move.new_version}  # fmt: skip
    for key, value in tags.items():
        client.set_model_version_tag(name, move.new_version, f"{alias}.{key}", value)


def move_champion(client, cfg: Config, new_version: str, action: str, reason: str, user: str | None = None) -> Move:
    """Point the alias at `new_version`, remember the old champion for rollback, and tag the move on the version.
    A version whose registration has not finished (registry/registration.py) is refused."""
    from components.registry.registration import PENDING, REGISTRATION_TAG

    name, alias = cfg.registry.model_name, cfg.registry.alias
    if client.get_model_version(name, str(new_version)).tags.get(REGISTRATION_TAG) == PENDING:
        raise PromotionError(f"{name} v{new_version}: its registration has not finished (its files may be incomplete)")
    history, old = _history(client, name), current_champion(client, name, alias)
    move = Move(action, name, old, str(new_version), user or _user(), _now(), reason.strip())
    if old is not None:
        client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(history + [old]))
    _record(client, cfg, move)
    return move


def promote(cfg: Config, version: int, reason: str, user: str | None = None) -> Move:
    from mlflow.exceptions import MlflowException

    name, alias, metric = cfg.registry.model_name, cfg.registry.alias, cfg.registry.metric
    if not reason.strip():
        raise PromotionError("--reason is empty; say why the champion moves")
    client = _client()
    _history(client, name)  # the model must exist
    try:
        mv = client.get_model_version(name, str(version))
    except MlflowException:
        raise PromotionError(f"{name} has no version {version}") from None
    if metric not in mv.tags:
        raise PromotionError(f"{name} v{version} has no evaluation metrics (no {metric!r} tag); evaluate and register it first")
    if current_champion(client, name, alias) == str(version):
        raise PromotionError(f"{name} v{version} is already {alias!r}")
    return move_champion(client, cfg, str(version), "promote", reason, user)


def rollback(cfg: Config, reason: str = "rollback", user: str | None = None) -> Move:
    name, alias = cfg.registry.model_name, cfg.registry.alias
    client = _client()
    history = _history(client, name)
    if not history:
        raise PromotionError(f"{name}: no previous {alias!r} to roll back to")
    old, new = current_champion(client, name, alias), history[-1]
    move = Move("rollback", name, old, new, user or _user(), _now(), reason.strip() or "rollback")
    client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(history[:-1]))
    _record(client, cfg, move)
    return move


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        return "unknown"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
