"""The engine against the reference rollout (one `generate` per episode and turn): the same greedy episodes, token
for token, with the same action masks and log-probs, under both attention implementations and many row budgets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from components.config import AgentConfig, RolloutConfig, SyntheticConfig
from components.data.synthetic import generate_world
from components.retrieval.embedded import EmbeddedBackend
from components.rollout.chat import ChatFormat
from components.rollout.engine import RolloutStats, rollout
from components.rollout.episode_setup import make_env
from tests.reference_rollout import reference_rollout
from components.rollout.slots import SlotModel

PRIMED = Path(__file__).parent / "fixtures" / "primed"
WORLD_SEED = 20251 + 7  # the learning test's world: the primed model's tokenizer and format were made on it


@dataclass
class Primed:
    """The learning test's primed tiny model on its world: it calls the search tool, reads, and answers, so its
    episodes end at different turns and token counts (a random model's all run to the limits)."""

    world: object
    backend: EmbeddedBackend
    model: object
    chat: ChatFormat
    agent: AgentConfig

    def env(self):
        return make_env(self.backend, self.world.questions("dev"), self.agent, 1)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    (path,) = [p for p in PRIMED.iterdir() if p.is_dir()]
    world = generate_world(SyntheticConfig(seed=WORLD_SEED))
    backend = EmbeddedBackend(tmp_path_factory.mktemp("index"), seed=0)
    backend.build(world.name, world.passages())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    agent = AgentConfig(max_turns=3, max_tokens_per_turn=48, system_prompt=False)
    yield Primed(world, backend, model, ChatFormat.for_agent(tok, agent), agent)
    backend.close()


@pytest.mark.parametrize("attention", ["sdpa", "sdpa_gqa"])
@pytest.mark.parametrize("engine", [RolloutConfig(), RolloutConfig(max_rows=3, refill_fraction=0.0),
                                    RolloutConfig(max_rows=5, refill_fraction=1.0, full_step_fraction=1.0),
                                    RolloutConfig(compact_fraction=0.0), RolloutConfig(compact_fraction=0.95),
                                    RolloutConfig(prefill_bucket=0.0), RolloutConfig(prefill_bucket=1.0)])
def test_greedy_episodes_equal_the_reference(toy, attention, engine):
    import components.model.attention  # noqa: F401  (registers sdpa_gqa)

    toy.model.set_attn_implementation(attention)
    qs = toy.world.questions("dev")[:12]
    want = reference_rollout(toy.model, toy.chat, toy.env(), qs, toy.agent)
    got = rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, temperature=0.0, engine=engine)
    for g, w in zip(got, want):
        assert g.input_ids == w.input_ids and g.action_mask == w.action_mask and g.rewards == w.rewards
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-4)
    assert len({len(t.input_ids) for t in got}) > 1  # rows of different lengths shared the cache
    assert any(t.episode.answer is not None for t in got)  # turns ended on the end-of-turn id, episodes on answers


def test_the_cache_shrinks_to_its_busy_rows_and_sampling_is_unchanged(toy):
    """Once nothing is queued and few rows hold episodes the cache shrinks to them; the sampled episodes (same
    generator) are those of a cache that never shrinks."""
    qs = toy.world.questions("dev")[:16]
    runs = {}
    for fraction in (0.0, 0.95):
        stats = RolloutStats()
        got = rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, temperature=1.0, stats=stats,
                      generator=torch.Generator().manual_seed(5), engine=RolloutConfig(compact_fraction=fraction))  # fmt: skip
        runs[fraction] = (got, stats.compactions)
    (never, zero), (shrunk, some) = runs[0.0], runs[0.95]
    assert zero == 0 and some >= 2
    assert [t.input_ids for t in shrunk] == [t.input_ids for t in never]
    assert [t.action_mask for t in shrunk] == [t.action_mask for t in never]
    for a, b in zip(shrunk, never):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_a_prefilled_answer_tag_matches_the_reference(toy):
    qs = toy.world.questions("dev")[12:16]
    want = reference_rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, prefill="<answer>")
    got = rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, temperature=0.0, prefill="<answer>")
    assert [g.input_ids for g in got] == [w.input_ids for w in want]


def test_prefill_groups_rows_by_chunk_length_with_the_logits_and_cache_of_one_padded_batch(toy):
    """Chunks of 40, 5, 37 and 6 tokens: with `prefill_bucket` 0.75 they go in two forwards (40 + 37, then 6 + 4),
    with 0 in one padded forward; each row's logits and cached keys are the same either way."""
    gen = torch.Generator().manual_seed(0)
    chunks = [torch.randint(10, 200, (n,), generator=gen).tolist() for n in (40, 5, 37, 6)]
    out = {}
    for bucket in (0.0, 0.75):
        slots = SlotModel(toy.model, 4, 64, RolloutConfig(prefill_bucket=bucket))
        with torch.no_grad():
            logits = slots.prefill([0, 1, 2, 3], chunks, toy.chat.pad_id)
        keys = slots.cache.layers[0].keys
        out[bucket] = (logits, [keys[i, :, : len(c)] for i, c in enumerate(chunks)], slots.calls, slots.lens.tolist())
    (one, one_keys, one_calls, one_lens), (two, two_keys, two_calls, two_lens) = out[0.0], out[0.75]
    assert (one_calls, two_calls) == (1, 2)
    assert one_lens == two_lens == [40, 5, 37, 6]
    assert torch.allclose(one, two, atol=1e-4)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(one_keys, two_keys))


def test_episodes_with_the_same_history_share_every_prefill(toy):
    """Each question three times, greedy: the three episodes stay alike turn after turn, so the engine feeds every
    prompt and observation once and copies it (as many prefilled tokens as one episode a question), and the
    episodes are the reference's."""
    qs = toy.world.questions("dev")[:6]
    once, thrice = RolloutStats(), RolloutStats()
    single = rollout(toy.model, toy.chat, toy.env(), qs, toy.agent, temperature=0.0, stats=once)
    got = rollout(toy.model, toy.chat, toy.env(), [q for q in qs for _ in range(3)], toy.agent, temperature=0.0,
                  stats=thrice)  # fmt: skip
    want = reference_rollout(toy.model, toy.chat, toy.env(), qs, toy.agent)
    assert sum(t.episode.turns > 1 for t in single) >= 3  # observations were fed, not only prompts
    assert thrice.prefill_tokens == once.prefill_tokens
    for k, g in enumerate(got):
        w = want[k // 3]
        assert g.input_ids == w.input_ids and g.action_mask == w.action_mask and g.rewards == w.rewards
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-4)
