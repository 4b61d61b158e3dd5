"""Shared fixtures of the bench smoke tests: a bench script loaded as a module, and a directory holding
an untrained tiny planner/ and coder/ (what the benches that read a trained pair take)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def load_bench():
    """load_bench("name") -> bench/name.py as a module (registered in sys.modules while the test runs)."""
    loaded = []

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
        loaded.append(name)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


@pytest.fixture
def untrained_pair(tmp_path):
    from coral.policy import tiny_policy

    for i, role in enumerate(("planner", "coder")):
        tiny_policy(seed=i, d_model=32, n_layers=1).save(tmp_path / role)
    return tmp_path
