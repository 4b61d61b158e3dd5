"""Latent rollout: KV-cached equals uncached, latents land at their slot, padding does not leak."""

from __future__ import annotations

import pytest
import torch

from coral.recursivemas.links import InnerLink
from coral.recursivemas.rollout import (
    answer_nll,
    assemble,
    greedy_decode,
    latent_rollout,
    latent_rollout_uncached,
    slot_marker,
    split_prompt,
)
from tests.recursivemas.conftest import tiny_agent


def _prompts(agent, texts):
    return [split_prompt(agent.render([{"role": "user", "content": t}]), agent.encode) for t in texts]


def test_kv_cached_rollout_equals_the_uncached_one():
    torch.manual_seed(0)
    agent = tiny_agent(32, seed=0)
    inner = InnerLink(32)
    prompts = _prompts(agent, [f"plan: {slot_marker('planner')} now solve", "a much longer question " * 3
                               + slot_marker("planner")])
    latents = [{"planner": torch.randn(4, 32)}, {"planner": torch.randn(4, 32)}]
    embedded = assemble(agent.model, prompts, latents)
    with torch.no_grad():
        cached = latent_rollout(agent.model, inner, embedded, steps=6)
        uncached = latent_rollout_uncached(agent.model, inner, embedded, steps=6)
    assert cached.shape == (2, 6, 32)
    assert torch.allclose(cached, uncached, atol=1e-5)


def test_a_rows_thoughts_do_not_depend_on_the_rows_padded_beside_it():
    agent = tiny_agent(32, seed=0)
    inner = InnerLink(32)
    short, long = _prompts(agent, ["short", "a much longer question than the other one"])
    with torch.no_grad():
        alone = latent_rollout(agent.model, inner, assemble(agent.model, [short], [{}]), steps=4)
        batched = latent_rollout(agent.model, inner, assemble(agent.model, [long, short], [{}, {}]), steps=4)
    assert torch.allclose(alone[0], batched[1], atol=1e-5)


def test_latents_land_exactly_at_their_slot():
    agent = tiny_agent(32, seed=0)
    prompt = _prompts(agent, [f"before {slot_marker('critic')} after"])[0]
    assert prompt.slots == ("critic",)
    before, after = (agent.decode(p) for p in prompt.pieces)
    assert before.endswith("before ") and after.startswith(" after")
    lat = torch.randn(5, 32)
    other = _prompts(agent, ["a longer row that forces left padding on the first one"])[0]
    emb = assemble(agent.model, [prompt, other], [{"critic": lat}, {}])
    start, end = emb.slot_spans[0]["critic"]
    assert end - start == 5
    table = agent.model.get_input_embeddings()
    n_before = len(prompt.pieces[0])
    assert torch.equal(emb.embeds[0, start:end], lat)
    assert torch.equal(emb.embeds[0, start - n_before:start], table(torch.tensor(prompt.pieces[0])))
    assert torch.equal(emb.embeds[0, end:], table(torch.tensor(prompt.pieces[1])))
    assert emb.mask[0, : start - n_before].sum() == 0 and emb.mask[0, start - n_before:].all()


def test_a_slot_without_latents_is_refused_by_name():
    agent = tiny_agent(32, seed=0)
    prompt = _prompts(agent, [f"x {slot_marker('planner')}"])[0]
    with pytest.raises(ValueError, match="'planner'"):
        assemble(agent.model, [prompt], [{}])


def test_greedy_decode_matches_hf_policy_greedy_generation():
    from coral.policy.base import GenerationRequest, SamplingParams

    agent = tiny_agent(32, seed=0)
    msgs = [{"role": "user", "content": "hello there"}]
    ref = agent.generate([GenerationRequest(msgs, SamplingParams(temperature=0.0, max_new_tokens=12))])[0]
    emb = assemble(agent.model, _prompts(agent, ["hello there"]), [{}])
    ours = greedy_decode(agent.model, emb, 12, agent.eos_ids)[0]
    assert ours == list(ref.completion_ids)


def test_answer_nll_is_the_mean_token_cross_entropy():
    agent = tiny_agent(32, seed=0)
    prompt = _prompts(agent, ["q"])[0]
    ids = [p for piece in prompt.pieces for p in piece]
    target = agent.encode("ans")
    with torch.no_grad():
        nll = answer_nll(agent.model, assemble(agent.model, [prompt], [{}]), [target])
        logits = agent.model(torch.tensor([ids + target])).logits[0, len(ids) - 1 : -1]
    expected = torch.nn.functional.cross_entropy(logits, torch.tensor(target))
    assert torch.allclose(nll, expected, atol=1e-5)
