"""Starting an update at the first trained layer, from the frozen layers' output the rollout kept: the same hidden
states, log-probs and gradients as running the whole model."""

from __future__ import annotations

import copy

import pytest
import torch

from components.model.top_layers import top_forward
from components.train.local.batch import collate
from components.train.local.losses import policy_logprobs, response_hidden, to_front, token_logprobs
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


@pytest.fixture(scope="module")
def varied(toy, trajs):
    """The trajectories with prompts of different lengths (the toy's are all alike), their hidden states kept."""
    out = []
    for i, t in enumerate(trajs):
        t = copy.deepcopy(t)
        cut = i % 4
        for name in ("input_ids", "action_mask", "rewards", "logprobs"):
            setattr(t, name, getattr(t, name)[cut:])
        t.prompt_len -= cut
        with torch.no_grad():
            states = toy.model(input_ids=torch.tensor([t.input_ids]), output_hidden_states=True).hidden_states
        t.hidden = states[FROZEN][0, :-1]
        out.append(t)
    return out


def test_the_rollout_keeps_the_layer_input_a_full_forward_computes(toy, trajs):
    for t in trajs:
        ids = torch.tensor([t.input_ids])
        with torch.no_grad():
            states = toy.model(input_ids=ids, output_hidden_states=True).hidden_states[FROZEN][0]
        assert t.hidden.shape == (len(t.input_ids) - 1, toy.model.config.hidden_size)
        assert torch.allclose(t.hidden, states[:-1], atol=1e-5)


def test_top_forward_equals_the_whole_decoder_on_rows_rolled_to_the_front(toy, varied):
    """top_forward runs causal attention with no padding mask: on a batch whose rows start at column 0 it gives
    the whole decoder's hidden states on every real token."""
    batch = collate(varied, toy.chat.pad_id)
    shift = batch.left_padding
    assert shift.any()  # the rows are padded on the left by different amounts
    ids, attn, pos = (to_front(x, shift) for x in (batch.input_ids, batch.attention_mask, batch.position_ids))
    with torch.no_grad():
        out = toy.model.base_model(input_ids=ids, attention_mask=attn, position_ids=pos, output_hidden_states=True)
        top = top_forward(toy.model.base_model, out.hidden_states[FROZEN], pos, FROZEN)
    real = attn.bool()
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
def test_a_padded_batch_scores_each_row_as_that_row_alone(toy, varied, kept):
    """Left-padded prompts, right-padded responses, with or without the kept hidden states: every row's log-probs
    are the ones the model gives that episode on its own, with no padding anywhere."""
    batch = collate(varied, toy.chat.pad_id, hidden_layer=FROZEN if kept else None)
    P = batch.prompt_width
    assert len({t.prompt_len for t in varied}) == 4  # the prompts are padded by different amounts
    with torch.no_grad():
        logp, _ = policy_logprobs(toy.model, batch, 1.0, batch.response_mask)
        for i, t in enumerate(varied):
            alone = toy.model(input_ids=torch.tensor([t.input_ids])).logits[0].float().log_softmax(-1)
            want = alone[t.prompt_len - 1 : -1].gather(1, torch.tensor(t.input_ids[t.prompt_len :])[:, None])[:, 0]
            assert torch.allclose(logp[i, : t.response_len], want, atol=1e-5), i
            assert torch.count_nonzero(logp[i, t.response_len :]) == 0
    assert P == max(t.prompt_len for t in varied)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_log_probs_and_entropies_are_verls(toy, trajs, temperature):
    """One log-softmax gives both (losses.token_logprobs): the values and gradients of verl's logprobs_from_logits
    and entropy_from_logits on the same logits."""
    import verl.utils.torch_functional as verl_F

    batch = collate(trajs, toy.chat.pad_id)
    sel = batch.action_mask.bool()
    assert int(sel.sum()) > 50
    hidden = response_hidden(toy.model, batch)[sel].detach()
    got, want = [], []
    for ours in (True, False):
        h = hidden.clone().requires_grad_(True)
        logits = toy.model.get_output_embeddings()(h).float() / temperature
        labels = batch.responses[sel]
        if ours:
            logp, entropy = token_logprobs(logits, labels)
        else:
            logp, entropy = verl_F.logprobs_from_logits(logits[None], labels[None])[0], verl_F.entropy_from_logits(logits)
        (logp.sum() + 0.1 * entropy.sum()).backward()
        (got if ours else want).append((logp.detach(), entropy.detach(), h.grad))
    for a, b in zip(got[0], want[0]):
        assert torch.allclose(a, b, atol=1e-5), float((a - b).abs().max())
    logp, entropy = policy_logprobs(toy.model, batch, temperature, batch.action_mask)
    assert torch.allclose(logp[sel], want[0][0], atol=1e-5) and torch.allclose(entropy[sel], want[0][1], atol=1e-5)
    assert torch.count_nonzero(logp[~sel]) == 0 and torch.count_nonzero(entropy[~sel]) == 0
    alone, none = policy_logprobs(toy.model, batch, temperature, batch.action_mask, entropy=False)  # no entropy bonus
    assert none is None and torch.equal(alone, logp)
