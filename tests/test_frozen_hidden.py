"""Starting an update at the first trained layer, from the frozen layers' output the rollout kept: the same hidden
states, log-probs and gradients as running the whole model."""

from __future__ import annotations

import copy

import pytest
import torch

from components.model.top_layers import top_forward
from components.train.local.batch import collate
from components.train.local.losses import policy_logprobs
from components.rollout.engine import rollout
from tests.toy import make_toy

FROZEN = 1  # of the toy's 2 layers


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return make_toy(tmp_path_factory.mktemp("toy"), seed=0)


@pytest.fixture(scope="module")
def trajs(toy):
    qs = toy.world.questions("train")[:5]
    return rollout(toy.model, toy.chat, toy.env(), [q for q in qs for _ in range(2)], toy.agent, temperature=1.0,
                   generator=torch.Generator().manual_seed(2), capture_layer=FROZEN)  # fmt: skip


def test_the_rollout_keeps_the_layer_input_a_full_forward_computes(toy, trajs):
    for t in trajs:
        ids = torch.tensor([t.input_ids])
        with torch.no_grad():
            states = toy.model(input_ids=ids, output_hidden_states=True).hidden_states[FROZEN][0]
        assert t.hidden.shape == (len(t.input_ids) - 1, toy.model.config.hidden_size)
        assert torch.allclose(t.hidden, states[:-1], atol=1e-5)


def test_top_forward_equals_the_whole_decoder_on_a_left_padded_batch(toy, trajs):
    batch = collate(trajs, toy.chat.pad_id)
    with torch.no_grad():
        out = toy.model.base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                   position_ids=batch.position_ids, output_hidden_states=True)  # fmt: skip
        top = top_forward(toy.model.base_model, out.hidden_states[FROZEN], batch.attention_mask, batch.position_ids, FROZEN)
    real = batch.attention_mask.bool()
    assert torch.allclose(top[real], out.last_hidden_state[real], atol=1e-5)


def test_kept_hidden_states_give_the_same_logprobs_and_gradients(toy, trajs):
    full, kept = collate(trajs, toy.chat.pad_id), collate(trajs, toy.chat.pad_id, hidden_layer=FROZEN)
    assert full.hidden is None and kept.hidden is not None
    grads = []
    for batch in (full, kept):
        model = copy.deepcopy(toy.model)
        model.requires_grad_(False)
        model.model.layers[FROZEN].requires_grad_(True)
        logp, _ = policy_logprobs(model, batch, 1.0, batch.action_mask)
        (logp * batch.action_mask).sum().backward()
        grads.append((logp.detach(), [p.grad for p in model.parameters() if p.requires_grad]))
    (a, ga), (b, gb) = grads
    assert torch.allclose(a, b, atol=1e-5)
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(ga, gb))
    trimmed, _ = kept.trimmed(torch.arange(3))
    assert trimmed.hidden.shape[:2] == trimmed.input_ids.shape  # trimming keeps the states aligned with the tokens


@pytest.mark.parametrize("kept", [False, True])
def test_a_padded_batch_scores_each_row_as_that_row_alone(toy, trajs, kept):
    """Left-padded prompts, right-padded responses, with or without the kept hidden states: every row's log-probs
    are the ones the model gives that episode on its own, with no padding anywhere."""
    varied = []
    for i, t in enumerate(trajs):  # prompts of different lengths: the toy's are all alike
        t = copy.deepcopy(t)
        cut = i % 4
        for name in ("input_ids", "action_mask", "rewards", "logprobs"):
            setattr(t, name, getattr(t, name)[cut:])
        t.prompt_len -= cut
        with torch.no_grad():
            out = toy.model(input_ids=torch.tensor([t.input_ids]), output_hidden_states=True)
        t.hidden = out.hidden_states[FROZEN][0, :-1]
        varied.append(t)
    trajs = varied
    batch = collate(trajs, toy.chat.pad_id, hidden_layer=FROZEN if kept else None)
    P = batch.prompt_width
    assert len({t.prompt_len for t in trajs}) == 4  # the prompts are padded by different amounts
    with torch.no_grad():
        logp, _ = policy_logprobs(toy.model, batch, 1.0, batch.response_mask)
        for i, t in enumerate(trajs):
            alone = toy.model(input_ids=torch.tensor([t.input_ids])).logits[0].float().log_softmax(-1)
            want = alone[t.prompt_len - 1 : -1].gather(1, torch.tensor(t.input_ids[t.prompt_len :])[:, None])[:, 0]
            assert torch.allclose(logp[i, : t.response_len], want, atol=1e-5), i
            assert torch.count_nonzero(logp[i, t.response_len :]) == 0
    assert P == max(t.prompt_len for t in trajs)


def test_the_masked_log_probs_take_one_logsumexp_for_all_tokens(toy, trajs, monkeypatch):
    """verl's CPU log-prob loops over the first dimension with one logsumexp (and its backward) per row; the masked
    tokens go in as one row, so the count stays at two (log-probs, entropy) however many tokens there are."""
    batch = collate(trajs, toy.chat.pad_id)
    calls, real = [], torch.logsumexp
    monkeypatch.setattr(torch, "logsumexp", lambda *a, **k: calls.append(1) or real(*a, **k))
    with torch.no_grad():
        logp, _ = policy_logprobs(toy.model, batch, 1.0, batch.action_mask)
    assert int(batch.action_mask.sum()) > 50
    assert len(calls) <= 2
    assert torch.count_nonzero(logp) > 50
