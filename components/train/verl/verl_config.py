"""`train.verl` for the verl backend. The schema (`VerlConfig`) lives in components/config.py: the root config
never imports a backend."""

from __future__ import annotations

from components.config import Config, VerlConfig


def verl_config(cfg: Config) -> VerlConfig:
    return cfg.train.verl
