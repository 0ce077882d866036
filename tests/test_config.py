from pathlib import Path

import pytest

from components.config import ConfigError, flatten, load_config


def test_repo_params_load(repo_root):
    cfg = load_config(repo_root / "params.yaml")
    assert cfg.retrieval.backend in ("embedded", "elasticsearch")
    flat = flatten(cfg)
    assert flat["retrieval.top_k"] == str(cfg.retrieval.top_k)
    assert all("." in k for k in flat)


def test_unknown_key_named(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("retrieval:\n  topk: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "retrieval.topk" in str(e.value) and "unknown key" in str(e.value) and str(p) in str(e.value)


def test_wrong_type_named(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("retrieval:\n  top_k: many\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "retrieval.top_k" in str(e.value) and "'many'" in str(e.value)


def test_bad_enum_and_nested_list(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("retrieval:\n  backend: solr\n  eval_k: [1, x]\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "retrieval.backend" in msg and "retrieval.eval_k.1" in msg


def test_not_yaml_and_missing(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_bytes(b"retrieval: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yaml")


def test_overrides_are_validated(repo_root):
    cfg = load_config(repo_root / "params.yaml", {"retrieval.top_k": 7})
    assert cfg.retrieval.top_k == 7
    with pytest.raises(ConfigError, match="retrieval.top_k"):
        load_config(repo_root / "params.yaml", {"retrieval.top_k": -1})
