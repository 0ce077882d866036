"""The CPU profile's tiny model: tokenizer and chat template built locally, save_pretrained/AutoModel round trip,
format priming data that never reads gold labels, and the stage's resolve path for real models."""

import json
import random
from contextlib import nullcontext

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from components.agent.prompts import render_tool_turn
from components.config import parse_config
from components.data.synthetic import words
from components.base_model import base_model
from components.base_model.priming import PrimeResult, Sequence_, lm_step, make_transcripts, prime, probe, sft_step
from components.config import PrimingConfig
from components.model.tiny import CALL_CLOSE, CALL_OPEN
from tests.toy import make_toy
from components.tracking.tracker import NullTracker


def test_tokenizer_roundtrip_and_template(tmp_path):
    toy = make_toy(tmp_path, seed=0)
    tok = toy.tokenizer
    text = '<tool_call>{"name": "search", "arguments": {"query": "Bavo rival"}}</tool_call>'
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text and ids[0] == tok.convert_tokens_to_ids("<tool_call>")
    assert ids[1] == tok.convert_tokens_to_ids(CALL_OPEN) and ids[-2] == tok.convert_tokens_to_ids(CALL_CLOSE)
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


def _transcripts(toy, n=20, seed=0):
    w = toy.world
    qs = w.questions("train")[:n]
    return qs, make_transcripts(qs, set(w.entities), set(w.relations), toy.backend, w.name, 3, toy.chat, 4,
                                random.Random(seed))  # fmt: skip


def test_transcripts_mark_every_random_draw_with_what_it_was_drawn_from(tmp_path):
    toy = make_toy(tmp_path, seed=0)
    w, tok = toy.world, toy.tokenizer
    ent_ids = {tok.convert_tokens_to_ids(e): e for e in w.entities}
    rel_ids = {tok.convert_tokens_to_ids(r): r for r in w.relations}
    qs, seqs = _transcripts(toy)
    for q, s in zip(qs, seqs):
        drawn = [i for i, t in enumerate(s.ids) if s.targets[i] and (t in ent_ids or t in rel_ids)]
        assert sorted(s.choices) == drawn  # every entity/relation the model writes was a draw, and is marked
        qrels = {tok.convert_tokens_to_ids(x) for x in words(q.question) if x in w.relations}
        for pos, cands in s.choices.items():
            assert s.ids[pos] in cands
            if s.ids[pos] in rel_ids:
                assert set(cands) == qrels
            else:  # the entities of the context so far, and only those
                assert set(cands) == {t for t in s.ids[:pos] if t in ent_ids}


def test_lm_step_at_a_draw_is_the_expected_loss_over_its_candidates(tmp_path):
    """The soft target is exactly the mean of the hard losses the transcript's random draw could have given."""
    toy = make_toy(tmp_path, seed=0)
    _, seqs = _transcripts(toy)
    s = next(x for x in seqs if any(len(c) > 1 for c in x.choices.values()))
    pos, cands = next((p, c) for p, c in sorted(s.choices.items()) if len(c) > 1)
    targets = [0] * pos + [1]
    soft = lm_step(toy.model, [Sequence_(s.ids[: pos + 1], targets, None, {pos: cands})], toy.chat.pad_id, "cpu")
    hard = [lm_step(toy.model, [Sequence_(s.ids[:pos] + [c], targets)], toy.chat.pad_id, "cpu") for c in cands]
    assert torch.allclose(soft, torch.stack(hard).mean(), atol=1e-6)


def test_lm_step_in_micro_batches_by_length_gives_the_same_loss_and_gradient(tmp_path):
    toy = make_toy(tmp_path, seed=0)
    _, seqs = _transcripts(toy, n=12)
    batch = [s.cut(random.Random(i)) for i, s in enumerate(seqs)]
    assert len({len(s.ids) for s in batch}) > 1
    grads = []
    for micro in (None, 3):
        toy.model.zero_grad()
        loss = lm_step(toy.model, batch, toy.chat.pad_id, "cpu", micro)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in toy.model.parameters()]))
    (whole, g_whole), (parts, g_parts) = grads
    assert torch.allclose(whole, parts, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g_whole, g_parts))


def test_sft_step_backpropagates_each_micro_batch_and_takes_lm_steps_step(tmp_path):
    """sft_step in micro-batches (each backpropagated at once, to hold one micro-batch's activations) returns
    lm_step's loss and moves the weights as one backward of lm_step's whole-batch loss does."""
    toy = make_toy(tmp_path, seed=0)
    _, seqs = _transcripts(toy, n=12)
    batch = [s.cut(random.Random(i)) for i, s in enumerate(seqs)]
    start = [p.detach().clone() for p in toy.model.parameters()]
    after = []
    for micro in (None, 3):
        with torch.no_grad():
            for p, s in zip(toy.model.parameters(), start):
                p.copy_(s)
        params = list(toy.model.parameters())
        opt = torch.optim.SGD(params, lr=0.5)
        if micro is None:  # the reference: one backward of lm_step's mean loss
            opt.zero_grad()
            loss = lm_step(toy.model, batch, toy.chat.pad_id, "cpu")
            loss.backward()
            opt.step()
            loss = float(loss)
        else:
            # no clipping (1e9), so that a wrong gradient scale shows
            loss = sft_step(toy.model, opt, params, batch, toy.chat.pad_id, "cpu", nullcontext(), micro, 1e9)
        after.append((loss, [p.detach().clone() for p in params]))
    (ref_loss, ref), (loss, got) = after
    assert abs(ref_loss - loss) < 1e-5 and any(not torch.equal(a, b) for a, b in zip(ref, start))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ref, got))


def test_priming_phases_end_when_their_probe_passes_or_at_their_cap(tmp_path):
    toy = make_toy(tmp_path, seed=0)
    _, seqs = _transcripts(toy, n=40)
    train, probes = seqs[:30], seqs[30:]
    before = probe(toy.model, probes, toy.chat.pad_id, "cpu")
    assert 0 <= before["first_call_p"] < 0.01 and 0 <= before["choice_p"] < 0.5 and before["choice_kl"] > 0.5
    reached = PrimingConfig(first_call_p=0.0, choice_kl=100.0, batch_size=4)
    out = prime(toy.model, train, probes, [], reached, toy.chat.pad_id, random.Random(0))
    assert (out.first_turn_steps, out.full_steps, out.losses) == (0, 0, [])
    capped = PrimingConfig(first_turn_steps=3, steps=2, probe_every=1, batch_size=4)
    out = prime(toy.model, train, probes, [], capped, toy.chat.pad_id, random.Random(0))
    assert isinstance(out, PrimeResult) and (out.first_turn_steps, out.full_steps, len(out.losses)) == (3, 2, 5)
    assert all(0 <= out.scores[k] <= 1 for k in ("first_call_p", "choice_p")) and out.scores["choice_kl"] >= 0


def test_priming_at_its_step_cap_is_an_info_line_not_a_warning(tmp_path, caplog):
    """The CPU profile's phase 2 usually ends at its cap: an expected condition, reported once as information."""
    import logging
    import warnings

    from components.data import prepare
    from tests.toy import small_raw

    cfg = parse_config(small_raw(tmp_path / "art"))  # 3 + 3 priming steps: both probes stop at their caps
    prepare.run(cfg, NullTracker())
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO, "components"):
        warnings.simplefilter("always")
        metrics = base_model.run(cfg, NullTracker())
    capped = [r for r in caplog.records if "format priming ran to its step cap" in r.getMessage()]
    assert capped and all(r.levelno == logging.INFO for r in capped)
    assert f"choice_kl={metrics['prime_choice_kl']:.3f}" in " ".join(r.getMessage() for r in capped)
    assert not [w for w in caught if "priming" in str(w.message)]
