"""Shared by the real-model tests: the SmolLM2 GGUF file or a skip/fail that names the install step.

A user who did not run `make smollm2` gets a skip with that reason; under CI (`CI` set, where `make
test` installs it) a missing model is a failure, so the real-model tests can never vanish silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ADD_PROMPT = "Write a Python function add(a, b) that returns the sum of a and b."
ADD_TESTS = ("assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(10, 32) == 42")


def smollm2_file_or_skip() -> Path:
    from coral.policy.gguf import smollm2_gguf

    try:
        path = smollm2_gguf()
        import gguf  # noqa: F401  (the converter needs it too)
    except (FileNotFoundError, ModuleNotFoundError) as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real-model tests: {error}")
        pytest.skip(f"SmolLM2 is not installed ({error})")
    return path
