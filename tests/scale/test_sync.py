"""Weight sync and sharding, without Ray: which tensors a push carries, how they load, how LoRA
layers merge for an engine without adapters, how batches are cut."""

from __future__ import annotations

import copy

import pytest
import torch

from coral.policy.tiny import tiny_policy
from coral.scale.actors import split
from coral.scale.rollout import changed_tensors, copy_into
from coral.scale.vllm_engine import merged_lora_weights


def small():
    return tiny_policy(seed=0, d_model=32, n_layers=1, n_heads=2, max_len=64)


def sgd_step(policy) -> None:
    params = [p for p in policy.parameters() if p.requires_grad]
    loss = sum((p.float() ** 2).sum() for p in params)
    loss.backward()
    torch.optim.SGD(params, lr=0.1).step()


def test_split_cuts_contiguous_shards_whose_sizes_differ_by_at_most_one():
    assert split([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]]
    assert split([1, 2, 3, 4, 5], 3) == [[1, 2], [3, 4], [5]]
    assert split([1], 4) == [[1]]
    with pytest.raises(ValueError, match="parts must be >= 1"):
        split([1], 0)


def test_after_a_full_update_every_trained_tensor_is_pushed_once():
    policy = small()
    tensors, synced = changed_tensors(policy.model, {}, full=True)
    assert set(tensors) == set(policy.model.state_dict())
    sgd_step(policy)
    tensors, synced = changed_tensors(policy.model, synced)
    trained = {n for n, p in policy.model.named_parameters()}
    assert trained <= set(tensors)  # tied embeddings appear under both names
    assert changed_tensors(policy.model, synced)[0] == {}


def test_after_a_lora_update_only_the_adapter_tensors_are_pushed():
    policy = small()
    policy.add_lora(r=2)
    _, synced = changed_tensors(policy.model, {}, full=True)
    sgd_step(policy)
    tensors, _ = changed_tensors(policy.model, synced)
    adapter = {n for n in policy.model.state_dict() if ".lora_" in n}
    assert set(tensors) == adapter and adapter


def test_pushed_tensors_load_into_a_replica_by_name():
    trainer, replica = small(), small()
    sgd_step(trainer)
    tensors, _ = changed_tensors(trainer.model, {n: -1 for n in trainer.model.state_dict()})
    assert copy_into(replica.model, tensors) == len(tensors)
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(replica.model.state_dict()[name], value)


def test_loading_an_unknown_or_misshapen_tensor_is_an_error_naming_it():
    replica = small()
    with pytest.raises(KeyError, match="'nope.weight'"):
        copy_into(replica.model, {"nope.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="model.norm.weight"):
        copy_into(replica.model, {"model.norm.weight": torch.zeros(3)})


def test_merged_lora_weights_equal_peft_merge_for_the_adapted_layers():
    policy = small()
    policy.add_lora(r=2, alpha=4)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p))
    changed = [n for n in policy.model.state_dict() if ".lora_" in n and "q_proj" in n]
    merged = merged_lora_weights(policy.model, changed)
    plain = copy.deepcopy(policy.model).merge_and_unload().state_dict()
    assert set(merged) == {n for n in plain if "q_proj" in n}
    for name, value in merged.items():
        torch.testing.assert_close(value, plain[name])
    base = policy.model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
    assert not torch.allclose(merged["model.layers.0.self_attn.q_proj.weight"], base)
    # a full push (every state entry changed): the merged weight wins over its layer's base weight
    everything = merged_lora_weights(policy.model, list(policy.model.state_dict()))
    assert set(everything) == set(plain)
    for name, value in plain.items():
        torch.testing.assert_close(everything[name], value)
