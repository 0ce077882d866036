"""The CPU profile's tiny model: tokenizer and chat template built locally, save_pretrained/AutoModel round trip,
format priming data that never reads gold labels, and the stage's resolve path for real models."""

import json
import random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from components.agent.prompts import render_tool_turn
from components.config import parse_config
from components.data.synthetic import words
from components.model import base_model
from components.model.loading import RESOLVED, resolve
from components.model.priming import make_transcripts
from components.rl.toy import make_toy
from components.tracking.tracker import NullTracker


def test_tokenizer_roundtrip_and_template(tmp_path):
    toy = make_toy(tmp_path, seed=0)
    tok = toy.tokenizer
    text = '<tool_call>{"name": "search", "arguments": {"query": "Bavo rival"}}</tool_call>'
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text and ids[0] == tok.convert_tokens_to_ids("<tool_call>")
    assert tok.decode(tok.encode("Ünïcödé ✓ text", add_special_tokens=False)) == "Ünïcödé ✓ text"  # byte-level
    turn = render_tool_turn(tok, "[1] A: x")
    assert turn == "<|im_start|>user\n<tool_response>\n[1] A: x\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    toy.model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    tok2 = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert model.config.model_type == "qwen2" and tok2.encode(text, add_special_tokens=False) == ids
    x = torch.tensor([ids])
    assert torch.allclose(model(x).logits, toy.model(x).logits, atol=1e-5)


def test_priming_transcripts_copy_from_context(tmp_path):
    """Queries pair an entity already in the context with a relation from the question; answers are context entities."""
    toy = make_toy(tmp_path, seed=0)
    w = toy.world
    qs = w.questions("train")[:50]
    seqs = make_transcripts(qs, set(w.entities), set(w.relations), toy.backend, w.name, 3, toy.chat, 4, random.Random(0))
    assert len(seqs) == 50
    golds = 0
    for q, s in zip(qs, seqs):
        text = toy.tokenizer.decode(s.ids)
        qrels = {x for x in words(q.question) if x in w.relations}
        calls = [json.loads(c.split("</tool_call>")[0])["arguments"]["query"] for c in text.split("<tool_call>")[1:]]
        assert 1 <= len(calls) <= 3
        seen = {x for x in words(q.question) if x in w.entities}
        for c, obs in zip(calls, text.split("<tool_response>")[1:] + [""]):
            entity, rel = c.split(" ")
            assert entity in seen and rel in qrels
            seen |= {x for x in words(obs.split("</tool_response>")[0]) if x in w.entities}
        answer = text.split("<answer>")[-1].split("</answer>")[0]
        assert answer in seen
        golds += answer == q.answers[0]
        # only the model's turns are targets
        targets = toy.tokenizer.decode([i for i, t in zip(s.ids, s.targets) if t])
        assert "<tool_response>" not in targets and "Question" not in targets
    assert golds < 25  # random entities from context, not the gold chain


def test_real_model_is_only_resolved(tmp_path):
    cfg = parse_config({"project": {"artifacts_dir": str(tmp_path)}, "model": {"name_or_path": "Qwen/Qwen2.5-3B-Instruct"}})
    assert base_model.run(cfg, NullTracker()) == {}
    assert resolve(tmp_path / "models" / "base") == "Qwen/Qwen2.5-3B-Instruct"
    assert json.loads((tmp_path / "models" / "base" / RESOLVED).read_text())["name_or_path"] == "Qwen/Qwen2.5-3B-Instruct"
