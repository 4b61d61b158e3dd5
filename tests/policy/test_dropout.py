"""Dropout is off in coral's policies, in train mode too (as TRL's disable_dropout): the trainer's
logprobs must be the sampler's, or the PPO ratio of an on-policy batch is not 1.

Two tiny configs with dropout 0.5: Llama (attention dropout is a float attribute of the attention
module, not an nn.Dropout) and GPT-2 (nn.Dropout modules on embeddings, attention and residuals)."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from coral.policy import GenerationRequest, HFPolicy, SamplingParams, user
from coral.policy.tiny import build_tokenizer


def _model(kind: str, tokenizer):
    special = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
               "eos_token_id": tokenizer.eos_token_id}
    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                            max_position_embeddings=128, attention_dropout=0.5, **special))
    return GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=128,
                                      resid_pdrop=0.5, embd_pdrop=0.5, attn_pdrop=0.5, **special))


@pytest.fixture(params=["llama", "gpt2"])
def policy(request):
    tokenizer = build_tokenizer()
    return HFPolicy(_model(request.param, tokenizer), tokenizer, name=request.param)


def test_two_forwards_in_train_mode_give_identical_logprobs(policy):
    policy.train()
    first, _ = policy.forward([[5, 6, 7], [5, 9]], [[8, 9, 10], [11, 12]])
    second, _ = policy.forward([[5, 6, 7], [5, 9]], [[8, 9, 10], [11, 12]])
    assert torch.equal(first, second)


def test_train_mode_forward_matches_the_sampled_logprobs(policy):
    request = GenerationRequest(user("hello"), SamplingParams(max_new_tokens=6, seed=1))
    out = policy.generate([request])[0]
    policy.train()
    logprobs, mask = policy.forward([out.prompt_ids], [out.completion_ids])
    torch.testing.assert_close(logprobs[mask], torch.tensor(out.logprobs), atol=1e-4, rtol=0)


def test_generation_in_train_mode_is_deterministic_given_a_seed(policy):
    policy.train()
    requests = [GenerationRequest(user("hello"), SamplingParams(max_new_tokens=8, seed=4))] * 2
    first, second = policy.generate(requests[:1]), policy.generate(requests)
    assert first[0].completion_ids == second[0].completion_ids == second[1].completion_ids
    assert first[0].logprobs == pytest.approx(second[1].logprobs, abs=1e-5)
