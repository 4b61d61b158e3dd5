"""Modules the fork server imports once for every candidate carry no state a program could use
to predict what a test draws; `random` in particular stays out of the server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sandbox_helpers import asserts

SERVER_DIR = Path(__file__).resolve().parents[2] / "coral" / "sandbox"


def test_preloaded_modules_do_not_import_random():
    script = ("import sys\nsys.path.insert(0, sys.argv[1])\nimport importlib, _server\n"
              "for name in _server.PRELOAD:\n    importlib.import_module(name)\n"
              "print(sorted(m for m in ('random', '_random', 'secrets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-c", script, str(SERVER_DIR)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_program_cannot_predict_the_judges_random_draws(sandbox):
    code = "import random\ndef f():\n    return [random.random() for _ in range(3)]\n"
    test = "import random\nassert candidate() == [random.random() for _ in range(3)]"
    assert sandbox.run(code, asserts(test), entry_point="f").tests[0].verdict == "fail"


def test_preloaded_typing_is_usable_by_programs(sandbox):
    code = "from typing import List\ndef f(xs: List[int]) -> List[int]:\n    return sorted(xs)\n"
    assert sandbox.run(code, asserts("assert candidate([3, 1]) == [1, 3]"), entry_point="f").passed
