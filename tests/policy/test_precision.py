"""HFPolicy precision: what `auto` picks, rollouts on a bfloat16 copy of float32 master weights, the
trainer's forward under autocast. Each path is forced here, so these tests do not depend on the CPU."""

import pytest
import torch

from coral.policy import GenerationRequest, SamplingParams, precision, user
from coral.policy.hf import HFPolicy
from coral.policy.precision import low_precision_weights, resolve_dtype
from coral.policy.tiny import tiny_policy


def small(dtype="float32"):
    return tiny_policy(seed=0, d_model=64, n_layers=2, n_heads=4, max_len=256, dtype=dtype)


def requests(n=3, **sampling):
    sampling = {"max_new_tokens": 8, "seed": 1, **sampling}
    return [GenerationRequest(user("ab" * (i + 1)), SamplingParams(**sampling)) for i in range(n)]


def weight_dtypes_seen(policy, run):
    """The dtype of one linear layer's weight each time the model ran during `run()`."""
    seen = []
    layer = policy.model.model.layers[0].mlp.down_proj
    handle = layer.register_forward_pre_hook(lambda module, args: seen.append(module.weight.dtype))
    try:
        run()
    finally:
        handle.remove()
    return set(seen)


def test_named_dtypes_resolve_to_themselves():
    assert resolve_dtype("float32") is torch.float32
    assert resolve_dtype("bfloat16") is torch.bfloat16
    assert resolve_dtype(torch.bfloat16) is torch.bfloat16


def test_an_unknown_dtype_is_an_error_naming_it():
    with pytest.raises(ValueError, match="'float16'"):
        resolve_dtype("float16")


def test_auto_is_bfloat16_on_a_cpu_with_bf16_units_and_float32_without(monkeypatch):
    monkeypatch.delenv("CORAL_AUTO_DTYPE")  # the suite's own setting (tests/conftest.py)
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    assert resolve_dtype("auto", "cpu") is torch.bfloat16
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    assert resolve_dtype("auto", "cpu") is torch.float32
    assert small("auto").dtype is torch.float32


def test_the_environment_can_decide_what_auto_means(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    monkeypatch.setenv("CORAL_AUTO_DTYPE", "bfloat16")
    assert resolve_dtype("auto") is torch.bfloat16
    monkeypatch.setenv("CORAL_AUTO_DTYPE", "fp8")
    with pytest.raises(ValueError, match="CORAL_AUTO_DTYPE.*'fp8'"):
        resolve_dtype("auto")


def test_without_torchs_query_the_cpu_flags_decide(monkeypatch, tmp_path):
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(precision, "CPU_INFO", info)
    for flags, expected in (("fpu avx2 avx512f", False), ("fpu avx512f avx512_bf16", True), ("sse amx_bf16", True)):
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        precision.cpu_has_bf16.cache_clear()
        assert precision.cpu_has_bf16() is expected
    precision.cpu_has_bf16.cache_clear()


def test_bfloat16_rollouts_run_on_bfloat16_weights_and_leave_float32_masters():
    policy = small("bfloat16")
    assert weight_dtypes_seen(policy, lambda: policy.generate(requests())) == {torch.bfloat16}
    assert {p.dtype for p in policy.model.parameters()} == {torch.float32}


def test_float32_rollouts_run_on_float32_weights():
    policy = small("float32")
    assert weight_dtypes_seen(policy, lambda: policy.generate(requests())) == {torch.float32}


def test_bfloat16_rollouts_are_close_to_float32_ones():
    ours, full = small("bfloat16"), small("float32")
    greedy = requests(3, temperature=0.0)
    for low, high in zip(ours.generate(greedy), full.generate(greedy), strict=True):
        # a random tiny model's distribution is flat: its argmax may flip under rounding, its logprobs not by much
        same = [a == b for a, b in zip(low.completion_ids, high.completion_ids, strict=True)]
        first_diff = same.index(False) if False in same else len(same)
        torch.testing.assert_close(torch.tensor(low.logprobs[:first_diff]), torch.tensor(high.logprobs[:first_diff]),
                                   atol=0.05, rtol=0)


def test_the_trainers_forward_runs_under_bfloat16_autocast_with_float32_gradients():
    policy = small("bfloat16")
    outputs = []
    layer = policy.model.model.layers[0].mlp.down_proj
    handle = layer.register_forward_hook(lambda module, args, out: outputs.append(out.dtype))
    logprobs, mask = policy.forward([[5, 6, 7]], [[8, 9]])
    handle.remove()
    assert outputs == [torch.bfloat16] and logprobs.dtype is torch.float32
    (-logprobs[mask].sum()).backward()
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert grads and {g.dtype for g in grads} == {torch.float32}


def test_the_rollout_copy_follows_an_optimiser_step():
    policy = small("bfloat16")
    greedy = requests(2, temperature=0.0, max_new_tokens=6)
    before = policy.generate(greedy)
    opt = torch.optim.SGD(policy.model.parameters(), lr=0.5)
    logprobs, mask = policy.forward([o.prompt_ids for o in before], [o.completion_ids for o in before])
    (-logprobs[mask].sum()).backward()  # ascend: the same greedy tokens, much more likely
    opt.step()
    after = policy.generate(greedy)
    fresh = HFPolicy(policy.model, policy.tokenizer, dtype="bfloat16")  # no copy made yet
    precision._COPIES.clear()
    assert [o.logprobs for o in after] == [o.logprobs for o in fresh.generate(greedy)]
    assert [o.logprobs for o in after] != [o.logprobs for o in before]


def test_a_write_the_version_counter_misses_is_seen_after_eval():
    policy = small("bfloat16")
    greedy = requests(1, temperature=0.0, max_new_tokens=4)
    before = policy.generate(greedy)[0].logprobs
    with torch.no_grad():
        for p in policy.model.parameters():
            p.data.mul_(0.5)  # through .data: the parameter's version does not move
    policy.eval()
    assert policy.generate(greedy)[0].logprobs != before


def test_low_precision_weights_put_the_masters_back_even_after_an_error():
    policy = small("bfloat16")
    masters = [p.data_ptr() for p in policy.model.parameters()]
    with pytest.raises(RuntimeError), low_precision_weights(policy.model, torch.bfloat16):
        raise RuntimeError("boom")
    assert [p.data_ptr() for p in policy.model.parameters()] == masters


def test_a_bfloat16_model_gets_float32_master_weights():
    model = small().model.to(torch.bfloat16)
    policy = HFPolicy(model, small().tokenizer, dtype="bfloat16")
    assert {p.dtype for p in policy.model.parameters()} == {torch.float32}


def test_save_and_load_keep_the_dtype(tmp_path):
    small("bfloat16").save(tmp_path / "p")
    assert HFPolicy.load(tmp_path / "p").dtype is torch.bfloat16
    assert HFPolicy.load(tmp_path / "p", dtype="float32").dtype is torch.float32
