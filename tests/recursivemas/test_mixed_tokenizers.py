"""Agents of different tokenizers in one system: each prompt in its agent's own tokenizer, latents at the
slot, KV cache equal to the uncached rollout, and `link_init: aligned` on the token strings both
vocabularies share (hand-computed), refused for vocabularies of another convention."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from coral.policy.tiny import SPECIAL_TOKENS, build_tokenizer
from coral.recursivemas.links import OuterLink, init_links, ridge_realignment, shared_token_rows
from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.rollout import assemble, latent_rollout, latent_rollout_uncached, split_prompt
from coral.recursivemas.system import RecursiveMAS, edge_key
from coral.recursivemas.train import outer_loss
from tests.recursivemas.conftest import tiny_agent

CORPUS = ["def keep_even(xs): return [x for x in xs if x % 2 == 0]", "reverse the string s"] * 4


@pytest.fixture
def mixed_agents():
    """planner and solver 32 wide with the byte-level tokenizer (260 tokens), critic 48 wide with a BPE
    (300 tokens) trained on CORPUS: two vocabularies, two widths."""
    byte_level, bpe = build_tokenizer(), build_tokenizer(CORPUS, vocab_size=300)
    return {"planner": tiny_agent(32, 1, byte_level), "critic": tiny_agent(48, 2, bpe),
            "solver": tiny_agent(32, 3, byte_level)}


def test_shared_token_rows_pair_ids_by_string_within_the_tables():
    src = {"a": 0, "b": 1, "c": 2, "d": 3}
    dst = {"c": 0, "a": 5, "b": 1, "x": 2}
    ids_src, ids_dst = shared_token_rows(src, dst, rows_src=4, rows_dst=6)
    assert ids_src.tolist() == [0, 1, 2] and ids_dst.tolist() == [5, 1, 0]
    ids_src, ids_dst = shared_token_rows(src, dst, rows_src=4, rows_dst=5)  # id 5 is outside the target table
    assert ids_src.tolist() == [1, 2] and ids_dst.tolist() == [1, 0]


def test_shared_token_rows_refuse_vocabularies_that_share_under_half_of_the_smaller():
    with pytest.raises(ValueError, match=r"share 1 token strings, under 50% of the smaller one \(4\).*'scaled'"):
        shared_token_rows({"a": 0, "b": 1, "c": 2, "d": 3}, {"a": 0, "y": 1, "z": 2, "w": 3, "v": 4}, 4, 5)


def test_aligned_init_fits_the_ridge_map_on_the_shared_rows_only():
    # rows 0..2 are shared and E_dst = E_src diag(2, 3) there; row 3 of each table is a token only that
    # agent has, with values that would bend the map if it were used
    e_src = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [9.0, -9.0]])
    e_dst = torch.tensor([[-7.0, 7.0], [2.0, 0.0], [0.0, 3.0], [2.0, 3.0]])
    rows = {"a__to__b": (torch.tensor([0, 1, 2]), torch.tensor([1, 2, 3]))}
    outer = OuterLink(2, 2)
    init_links("aligned", {}, {"a__to__b": (outer, "a", "b")}, {"a": e_src, "b": e_dst}, ridge_lambda=0.0, rows=rows)
    torch.testing.assert_close(outer.w3.weight, torch.tensor([[2.0, 0.0], [0.0, 3.0]]))


def test_aligned_system_of_two_tokenizers_maps_shared_tokens_between_the_agents(mixed_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], mixed_agents, latent_steps=2, link_init="aligned")
    planner, critic = mixed_agents["planner"], mixed_agents["critic"]
    ids_p, ids_c = shared_token_rows(planner.tokenizer.get_vocab(), critic.tokenizer.get_vocab(), 260, 300)
    assert len(ids_p) == 260  # every byte-level token is in the BPE, which keeps the byte alphabet
    e_p = planner.model.get_input_embeddings().weight[ids_p]
    e_c = critic.model.get_input_embeddings().weight[ids_c]
    lam = 1e-3 * float(e_p.double().pow(2).sum(0).mean())
    expected = ridge_realignment(e_p, e_c, lam).T.float()
    torch.testing.assert_close(mas.outer[edge_key("planner", "critic")].w3.weight, expected)


def test_aligned_refuses_a_vocabulary_of_another_convention(mixed_agents):
    words = {t: i for i, t in enumerate(SPECIAL_TOKENS)} | {f"▁word{i}": 4 + i for i in range(296)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token=SPECIAL_TOKENS[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    word_level = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=SPECIAL_TOKENS[0],
                                         bos_token=SPECIAL_TOKENS[1], eos_token=SPECIAL_TOKENS[2])
    agents = {**mixed_agents, "critic": tiny_agent(48, 2, word_level)}
    with pytest.raises(ValueError, match=r"agents 'planner' and 'critic': link_init 'aligned': the two "
                                         r"vocabularies share 4 token strings.*use link_init 'scaled'"):
        RecursiveMAS(PATTERNS["sequential"], agents, latent_steps=2, link_init="aligned")
    RecursiveMAS(PATTERNS["sequential"], agents, latent_steps=2, link_init="scaled")


def test_each_agents_prompt_is_built_with_its_own_tokenizer(mixed_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], mixed_agents, latent_steps=2)
    for role in ("planner", "critic"):
        agent = mixed_agents[role]
        prompt = mas.prompt(role, "keep the even numbers of xs", 1)
        text = agent.render(mas.pattern.prompt(role, "keep the even numbers of xs", {s: None for s, _ in
                                                                                     mas.pattern.sources(role, 1)}))
        assert prompt == split_prompt(text, agent.encode)
    # the BPE cuts the same question into fewer tokens than the byte-level tokenizer
    q = "def keep_even(xs): return [x for x in xs if x % 2 == 0]"
    assert len(mixed_agents["critic"].encode(q)) < len(mixed_agents["planner"].encode(q))


def test_latents_land_at_the_slot_of_the_other_tokenizers_prompt(mixed_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], mixed_agents, latent_steps=3)
    seen: list[torch.Tensor] = []
    mas.outer[edge_key("planner", "critic")].register_forward_hook(lambda m, i, o: seen.append(o.detach()))
    captured = {}
    original = mas._think

    def spy(role, embedded):  # the embedded prompt a role thinks from
        captured[role] = embedded
        return original(role, embedded)

    mas._think = spy
    with torch.no_grad():
        mas.unroll(["q one", "a longer question two"], rounds=1)
    critic_prompt = captured["critic"]
    assert critic_prompt.embeds.shape[-1] == 48
    for row in range(2):
        start, end = critic_prompt.slot_spans[row]["planner"]
        assert end - start == 3
        assert torch.equal(critic_prompt.embeds[row, start:end], seen[-1][row])


def test_kv_cached_rollout_equals_the_uncached_one_on_the_bpe_agents_prompt(mixed_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], mixed_agents, latent_steps=4)
    critic = mixed_agents["critic"]
    prompts = [mas.prompt("critic", q, 0) for q in ("keep the even numbers", "reverse the string s " * 3)]
    gen = torch.Generator().manual_seed(0)
    embedded = assemble(critic.model, prompts, [{"planner": torch.randn(4, 48, generator=gen)} for _ in prompts])
    with torch.no_grad():
        cached = latent_rollout(critic.model, mas.inner["critic"], embedded, steps=4)
        uncached = latent_rollout_uncached(critic.model, mas.inner["critic"], embedded, steps=4)
    assert cached.shape == (2, 4, 48)
    torch.testing.assert_close(cached, uncached, atol=1e-5, rtol=0)


def test_the_outer_loss_reaches_round_ones_links_across_tokenizers_and_answers_decode(mixed_agents):
    from coral.recursivemas.data import Record

    mas = RecursiveMAS(PATTERNS["sequential"], mixed_agents, latent_steps=2)
    batch = [Record(f"r{i}", f"question {i}", "plan", "refined", f"answer {i}") for i in range(2)]
    loss, ces = outer_loss(mas, batch, rounds=2)
    loss.backward()
    assert torch.isfinite(loss) and len(ces) == 1
    assert mas.outer[edge_key("planner", "critic")].w1.weight.grad.abs().sum() > 0
    assert mas.outer[edge_key("solver", "planner")].w1.weight.grad.abs().sum() > 0  # the feedback edge
    replies = mas.answer(["question 0"], rounds=2, max_new_tokens=3)
    assert 1 <= replies[0].decoded_tokens <= 3
