"""A real OpenAI-compatible server: llama-cpp-python serving the SmolLM2 GGUF, started and stopped here, with
`coral eval --model openai:URL#smollm2` judged by coral's sandbox.

Marked slow: llama-cpp-python is an sdist that compiles llama.cpp (`make llamacpp`; see
docs/results/smollm2.md for the measured build time on the 2-core machine), too long for `make test`'s
install, and the server takes a while to start. The failure modes (timeouts, 5xx, retries) are tested
against the fake server in test_openai_policy.py.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from coral.cli import main
from tests.policy.smollm2_support import ADD_TESTS, smollm2_file_or_skip

pytestmark = pytest.mark.slow
SERVER_START_TIMEOUT_S = 180.0

ADD_RECORD = {
    "task_id": "local/add",
    "prompt": 'def add(a, b):\n    """Return the sum of a and b."""\n',
    "entry_point": "add",
    "canonical_solution": "    return a + b\n",
    "test": "def check(candidate):\n" + "".join(
        "    " + t.replace("add(", "candidate(") + "\n" for t in ADD_TESTS),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_serving(url: str, server: subprocess.Popen, log_path: str) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            with open(log_path) as fh:
                pytest.fail(f"llama.cpp server exited with {server.returncode}:\n{fh.read()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"llama.cpp server not serving {url} after {SERVER_START_TIMEOUT_S:.0f} s")


@pytest.fixture(scope="module")
def llamacpp_url(tmp_path_factory) -> Iterator[str]:
    gguf_file = smollm2_file_or_skip()
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed: run `make llamacpp` (compiles llama.cpp)")
    port = _free_port()
    log_path = str(tmp_path_factory.mktemp("llamacpp") / "server.log")
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_file), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "2048", "--model_alias", "smollm2"],
            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_serving(url, server, log_path)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_coral_eval_against_llamacpp_passes_add_in_the_sandbox(llamacpp_url, tmp_path):
    bench = tmp_path / "add.jsonl"
    bench.write_text(json.dumps(ADD_RECORD) + "\n")
    out = tmp_path / "eval"
    code = main(["eval", "--bench", f"humaneval:{bench}", "--workflow", "single", "--model",
                 f"openai:{llamacpp_url}#smollm2", "--max-new-tokens", "128", "--out-dir", str(out),
                 "--no-progress"])
    assert code == 0
    record = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert record["code"] and "def add" in record["code"], record["turns"][0]["text"]
    # the verdict is the sandbox's, per test: every assert ran and passed
    verdicts = [t["verdict"] for t in record["private"]["tests"]]
    assert verdicts and set(verdicts) == {"pass"}, record["private"]
    assert record["passed"] and summary["pass@1"] == 1.0
    assert summary["completion_tokens"] > 0  # counted from the server's usage
