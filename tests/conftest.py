"""Fixtures shared by the bench and experiment smoke tests: a bench script loaded as a module, an
experiment module of the `experiments` package, and a directory holding an untrained tiny planner/ and
coder/ (what the scripts that read a trained pair take); and, for every test, dtype "auto" meaning
float32, so that results do not depend on the CPU (the tests of the bfloat16 path ask for it by name,
tests/policy/test_precision.py for what auto picks)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def auto_dtype_is_float32(monkeypatch):
    monkeypatch.setenv("CORAL_AUTO_DTYPE", "float32")


def _script_loader(folder: str):
    """load(name) -> ROOT/folder/name.py as a module, registered in sys.modules while the test runs
    (dataclasses look their module up there)."""
    loaded = []

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        loaded.append(name)
        return module

    return load, loaded


def _scripts(folder: str):
    """Yields the loader of `folder`'s scripts, then forgets the modules it loaded."""
    load, loaded = _script_loader(folder)
    yield load
    for name in loaded:
        sys.modules.pop(name, None)


@pytest.fixture
def load_bench():
    yield from _scripts("bench")


@pytest.fixture
def load_experiment():
    """load(name) -> the module experiments.<name> (a package: its modules import each other by name)."""
    return lambda name: importlib.import_module(f"experiments.{name}")


@pytest.fixture
def untrained_pair(tmp_path):
    from coral.policy import tiny_policy

    for i, role in enumerate(("planner", "coder")):
        tiny_policy(seed=i, d_model=32, n_layers=1).save(tmp_path / role)
    return tmp_path
