"""Prepacked bfloat16 linears (coral/policy/packed_linear.py): the same bits as F.linear, used by a bfloat16
HFPolicy's generate, repacked when a weight changes, inference only, and a no-op where oneDNN cannot pack."""

import pytest
import torch
import torch.nn.functional as F

from coral.policy import GenerationRequest, SamplingParams, packed_linear, user
from coral.policy.packed_linear import packed_linears, packing_available
from coral.policy.precision import cpu_flags, low_precision_weights
from coral.policy.tiny import tiny_policy

needs_onednn = pytest.mark.skipif(not packing_available(), reason="this torch build or CPU cannot prepack bfloat16 (no oneDNN, or no AVX-512 / AVX-NE-CONVERT)")


def small():
    return tiny_policy(seed=0, d_model=64, n_layers=2, n_heads=4, max_len=256, dtype="bfloat16")


def requests(n=4, **sampling):
    sampling = {"max_new_tokens": 10, "seed": 3, **sampling}
    return [GenerationRequest(user("ab" * (i + 1)), SamplingParams(**sampling)) for i in range(n)]


def outputs(policy, reqs):
    return [(o.completion_ids, o.logprobs) for o in policy.generate(reqs)]


@needs_onednn
@pytest.mark.parametrize("shape", [(1, 96), (64, 96), (3, 7, 96), (2, 300, 96)])
@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_linear_gives_the_same_bits_as_f_linear(shape, bias):
    layer = torch.nn.Linear(96, 160, bias=bias).to(torch.bfloat16)
    x = torch.randn(*shape).to(torch.bfloat16)
    with torch.no_grad():
        expected = F.linear(x, layer.weight, layer.bias)
        with packed_linears(layer, {id(layer.weight): layer.weight.detach()}) as patched:
            got = layer(x)
    assert patched == 1
    assert torch.equal(got, expected)


@needs_onednn
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("lora", [False, True])
def test_generate_on_packed_weights_gives_the_tokens_and_logprobs_of_f_linear(temperature, lora):
    policy = small()
    if lora:
        policy.add_lora(r=4)
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_()  # a zero B would leave the adapter out of the outputs
    reqs = requests(temperature=temperature)
    packed = outputs(policy, reqs)
    policy.pack_linears = False
    assert outputs(policy, reqs) == packed


@needs_onednn
def test_generate_runs_every_linear_of_the_model_on_a_packed_weight(monkeypatch):
    policy = small()
    calls = []
    real = packed_linear._packed_forward
    monkeypatch.setattr(packed_linear, "_packed_forward", lambda *a: calls.append(1) or real(*a))
    policy.generate(requests(1, max_new_tokens=1))
    linears = sum(isinstance(m, torch.nn.Linear) for m in policy.model.modules())
    assert linears > 0 and len(calls) == linears  # one prefill, one call per layer
    assert not any("forward" in vars(m) for m in policy.model.modules())  # the class's forward is back


@needs_onednn
def test_a_changed_master_weight_is_packed_again():
    policy = small()
    reqs = requests(temperature=0.0)
    before = outputs(policy, reqs)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.mul_(0.7)  # in place, as an optimiser step writes
    after = outputs(policy, reqs)
    policy.pack_linears = False
    assert after == outputs(policy, reqs)
    assert after != before


@needs_onednn
def test_a_packed_layer_refuses_to_run_under_grad():
    policy = small()
    with low_precision_weights(policy.model, torch.bfloat16, pack=True):
        with pytest.raises(RuntimeError, match="inference"):
            policy.model(input_ids=torch.tensor([[1, 2, 3]]))


def test_packing_is_available_exactly_where_the_cpu_runs_onednns_bfloat16_path():
    """The probe is neither too strict (which would skip the tests above on a CPU that packs) nor too loose (an
    AVX2-only CPU raised in rollouts): oneDNN's bfloat16 path needs AVX512-BW/VL/DQ or AVX-NE-CONVERT."""
    flags = cpu_flags()
    if not flags or not torch.backends.mkldnn.is_available():
        pytest.skip("no /proc/cpuinfo or no oneDNN to compare with")
    runs_bf16 = {"avx512bw", "avx512vl", "avx512dq"} <= flags or "avx_ne_convert" in flags
    assert packing_available() == runs_bf16


def test_without_onednn_nothing_is_packed(monkeypatch):
    monkeypatch.setattr(packed_linear, "packing_available", lambda: False)
    policy = small()
    with torch.no_grad(), low_precision_weights(policy.model, torch.bfloat16, pack=True):
        assert not any("forward" in vars(m) for m in policy.model.modules())
    with torch.no_grad(), packed_linears(policy.model, {id(p): p for p in policy.model.parameters()}) as patched:
        assert patched == 0


def test_a_subclass_of_linear_keeps_its_own_forward():
    class Scaled(torch.nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    layer = Scaled(8, 8).to(torch.bfloat16)
    with torch.no_grad(), packed_linears(layer, {id(layer.weight): layer.weight.detach()}) as patched:
        assert patched == 0


def test_float32_weights_are_never_packed():
    layer = torch.nn.Linear(8, 8)
    with torch.no_grad(), packed_linears(layer, {id(layer.weight): layer.weight.detach()}) as patched:
        assert patched == 0
