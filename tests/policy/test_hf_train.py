"""HFPolicy training surface: forward, LoRA, save/load."""

import copy

import pytest
import torch

from coral.policy import GenerationRequest, HFPolicy, SamplingParams, TrainablePolicy, user


def sample(policy, n=2):
    reqs = [GenerationRequest(user(f"task {i}"), SamplingParams(max_new_tokens=6, seed=i)) for i in range(n)]
    return policy.generate(reqs)


def test_hf_policy_is_a_trainable_policy(tiny):
    assert isinstance(tiny, TrainablePolicy)


def test_forward_is_right_padded_with_a_mask_of_completion_lengths(tiny):
    logprobs, mask = tiny.forward([[5, 6, 7], [5]], [[8, 9], [10, 11, 12]])
    assert logprobs.shape == (2, 3) and mask.tolist() == [[True, True, False], [True, True, True]]
    assert logprobs[0, 2].item() == 0.0 and logprobs.dtype == torch.float32


def test_forward_logprobs_carry_gradient(tiny):
    logprobs, mask = tiny.forward([[5, 6]], [[7, 8]])
    logprobs[mask].sum().backward()
    assert tiny.model.model.embed_tokens.weight.grad.abs().sum() > 0


def test_a_few_steps_raise_the_logprob_of_a_completion(tiny):
    optimizer = torch.optim.Adam(tiny.parameters(), lr=1e-2)
    before = tiny.forward([[5, 6]], [[7, 8, 9]])[0].sum().item()
    for _ in range(3):
        loss = -tiny.forward([[5, 6]], [[7, 8, 9]])[0].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert tiny.forward([[5, 6]], [[7, 8, 9]])[0].sum().item() > before + 0.5


def _logprobs_and_grads(policy, prompts, completions):
    policy.model.zero_grad(set_to_none=True)
    logprobs, mask = policy.forward(prompts, completions)
    (logprobs * mask).sum().backward()
    return logprobs.detach(), mask, {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("lora", [False, True])
def test_a_shared_prompt_prefix_computed_once_gives_the_same_logprobs_and_gradients(tiny, lora):
    if lora:
        tiny.add_lora(r=4, alpha=8)
        for name, param in tiny.model.named_parameters():  # B starts at 0: give the adapters an effect
            if "lora_B" in name:
                torch.nn.init.normal_(param, std=0.1)
    prefix = list(range(20, 40))  # 20 shared tokens, then rows of different lengths
    prompts = [prefix + [50, 51], prefix + [52], prefix + [53, 54, 55, 56]]
    completions = [[60, 61, 62], [63], [64, 65]]
    assert tiny._shared_prefix(prompts) == 20
    shared = _logprobs_and_grads(tiny, prompts, completions)
    tiny.share_prompt_prefix = False
    assert tiny._shared_prefix(prompts) == 0
    plain = _logprobs_and_grads(tiny, prompts, completions)
    assert torch.equal(shared[1], plain[1])
    torch.testing.assert_close(shared[0], plain[0], atol=1e-5, rtol=1e-5)
    assert shared[2].keys() == plain[2].keys() and shared[2]
    for name, grad in plain[2].items():
        torch.testing.assert_close(shared[2][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_float32_logprobs_and_gradients_agree_with_a_float64_copy(tiny):
    # the RL update's inputs on this machine's float32 kernels (no reduced-precision path): a float64 copy of
    # the same weights is the reference (on the demo's seed-0 cold start, 2-core EPYC: relative error about 2e-6)
    prefix = list(range(20, 40))
    prompts, completions = [prefix + [50, 51], prefix + [52, 53]], [[60, 61, 62], [63, 64]]
    wide = copy.deepcopy(tiny)
    wide.model.double()
    wide.dtype = torch.float64
    narrow, exact = _logprobs_and_grads(tiny, prompts, completions), _logprobs_and_grads(wide, prompts, completions)
    torch.testing.assert_close(narrow[0].double(), exact[0].double(), atol=1e-5, rtol=0)
    error = sum((narrow[2][k].double() - g).norm() ** 2 for k, g in exact[2].items()) ** 0.5
    assert error / sum(g.norm() ** 2 for g in exact[2].values()) ** 0.5 < 1e-4


def test_the_shared_prefix_leaves_every_row_a_prompt_token_and_skips_short_ones(tiny):
    long = list(range(20, 40))
    assert tiny._shared_prefix([long, long + [7]]) == 19  # row 0's last prompt token predicts its completion
    assert tiny._shared_prefix([long[:5] + [1], long[:5] + [2]]) == 0  # 5 < SHARED_PREFIX_MIN
    assert tiny._shared_prefix([long + [1]]) == 0  # one row: nothing to share


def test_forward_rejects_an_empty_prompt(tiny):
    with pytest.raises(ValueError, match=r"prompt_ids\[0\] is empty"):
        tiny.forward([[]], [[1]])


def test_after_add_lora_only_lora_parameters_require_grad(tiny):
    tiny.add_lora(r=4, alpha=8)
    names = [n for n, p in tiny.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert len(list(tiny.parameters())) == len(names)


def test_lora_steps_change_every_lora_parameter_and_no_base_parameter(tiny):
    # peft starts B at zero, so A's gradient is exactly zero on the first step: two steps reach every one.
    tiny.add_lora(r=4, alpha=8)
    before = {n: p.detach().clone() for n, p in tiny.model.named_parameters()}
    optimizer = torch.optim.Adam(tiny.parameters(), lr=1e-2)
    for _ in range(2):
        loss = -tiny.forward([[5, 6, 7]], [[8, 9]])[0].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    changed = {n for n, p in tiny.model.named_parameters() if not torch.equal(p, before[n])}
    lora = {n for n in before if "lora_" in n}
    assert changed == lora


def test_adding_lora_twice_is_an_error(tiny):
    tiny.add_lora()
    with pytest.raises(ValueError, match="already has LoRA"):
        tiny.add_lora()


def test_save_and_load_reproduce_the_same_logprobs(tiny, tmp_path):
    outs = sample(tiny)
    tiny.save(tmp_path / "p")
    loaded = HFPolicy.load(tmp_path / "p")
    again = loaded.forward([o.prompt_ids for o in outs], [o.completion_ids for o in outs])[0]
    torch.testing.assert_close(
        again, tiny.forward([o.prompt_ids for o in outs], [o.completion_ids for o in outs])[0]
    )
    assert loaded.name == "tiny"


def test_save_and_load_keep_trained_lora_adapters(tiny, tmp_path):
    tiny.add_lora(r=4, alpha=8)
    with torch.no_grad():
        for name, p in tiny.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.1)
    tiny.save(tmp_path / "p")
    loaded = HFPolicy.load(tmp_path / "p")
    args = ([[5, 6, 7]], [[8, 9, 10]])
    torch.testing.assert_close(loaded.forward(*args)[0], tiny.forward(*args)[0])
    assert all("lora_" in n for n, p in loaded.model.named_parameters() if p.requires_grad)


def test_local_save_and_load_print_no_progress_bars_and_leave_the_setting_alone(tiny, tmp_path, capfd):
    from transformers.utils import logging as hf_logging

    from coral.policy.hf import HFPolicy

    assert hf_logging.is_progress_bar_enabled()
    tiny.save(tmp_path / "p")
    HFPolicy.load(tmp_path / "p")
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "Writing model shards" not in err
    assert hf_logging.is_progress_bar_enabled()
