"""CoRe-Code's `dtype`: the precision its policies are built with (a real model gets it as named, tiny
models read auto as float32)."""

import pytest
import torch

from coral.corecode import setup
from coral.corecode.config import CoReCodeConfig
from coral.train.sft import SFTConfig

SMALL = dict(n_train_tasks=20, n_test_tasks=2, n_fresh_tasks=0, d_model=32, n_layers=1,
             sft=SFTConfig(epochs=0.3, batch_size=8), sandbox_workers=1)


def test_a_dtype_outside_the_choices_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="field 'dtype'.*'float16'"):
        CoReCodeConfig(dtype="float16")


@pytest.mark.parametrize("dtype,expected", [("auto", torch.float32), ("bfloat16", torch.bfloat16),
                                            ("float32", torch.float32)])
def test_tiny_models_read_auto_as_float32_even_where_auto_means_bfloat16(monkeypatch, dtype, expected):
    monkeypatch.setenv("CORAL_AUTO_DTYPE", "bfloat16")  # a CPU with bf16 units
    cfg = CoReCodeConfig(**SMALL, dtype=dtype)
    from coral.benchmarks.splits import build_tasks

    policies = setup.build_policies(cfg, build_tasks(cfg.splits)[0])
    assert {role: p.dtype for role, p in policies.items()} == {"planner": expected, "coder": expected}


@pytest.mark.parametrize("dtype", ["auto", "bfloat16", "float32"])
def test_a_real_model_is_loaded_with_the_dtype_as_named(monkeypatch, dtype):
    calls = []

    def fake_load(spec, dtype=None):
        calls.append((spec, dtype))
        return object()

    monkeypatch.setattr(setup, "load_policy", fake_load)
    policies = setup.build_policies(CoReCodeConfig(model="smollm2", dtype=dtype), [])
    assert calls == [("smollm2", dtype), ("smollm2", dtype)] and set(policies) == {"planner", "coder"}
