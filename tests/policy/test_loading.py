"""load_policy: spec strings to policies, and clear errors for bad specs."""

import importlib.util
import json

import huggingface_hub.constants
import pytest

from coral.policy import HFPolicy, OpenAIPolicy, ScriptedPolicy, load_policy
from coral.policy.loading import _load_hub


def test_tiny_builds_a_fresh_policy_with_kwargs():
    policy = load_policy("tiny", d_model=64, n_layers=2)
    assert isinstance(policy, HFPolicy) and policy.model.config.hidden_size == 64


def test_tiny_dir_and_plain_dir_load_a_saved_policy(tiny, tmp_path):
    tiny.save(tmp_path)
    assert isinstance(load_policy(f"tiny:{tmp_path}"), HFPolicy)
    assert isinstance(load_policy(str(tmp_path), batch_size=4), HFPolicy)


def test_hub_names_load_through_from_pretrained(tiny, tmp_path):
    tiny.model.save_pretrained(tmp_path)  # a plain HF directory, as a hub snapshot would be
    tiny.tokenizer.save_pretrained(tmp_path)
    assert _load_hub(str(tmp_path)).encode("abc") == tiny.encode("abc")


def test_unknown_hub_name_offline_raises_a_clear_error(monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="model 'no-such-org/no-such-model': not a local directory, not in the"):
        load_policy("no-such-org/no-such-model")


def test_an_unknown_model_name_fails_within_seconds_in_one_line_without_hub_retries(caplog):
    """Offline, transformers retried each file for about a minute, printing 45 warnings; with a hub it
    answers that there is no such model."""
    import time

    from coral.config import UserInputError

    start = time.monotonic()
    with pytest.raises(UserInputError, match="model 'smolm2'.*did you mean 'smollm2'") as caught:
        load_policy("smolm2")
    assert time.monotonic() - start < 15 and len(str(caught.value).splitlines()) == 1
    assert [r for r in caplog.records if r.name.startswith("huggingface_hub")] == []


def test_an_unknown_kind_of_model_is_refused_with_a_suggestion():
    with pytest.raises(ValueError, match="unknown kind 'openia:' \\(did you mean 'openai:'\\?\\)"):
        load_policy("openia:http://127.0.0.1:8000/v1")


def test_missing_model_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        load_policy(f"tiny:{tmp_path / 'does-not-exist'}")


def test_directory_without_config_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_policy(str(tmp_path))


def test_openai_spec_carries_url_and_model():
    policy = load_policy("openai:http://127.0.0.1:8000/v1#qwen", max_concurrency=2)
    assert isinstance(policy, OpenAIPolicy) and (policy.base_url, policy.model) == (
        "http://127.0.0.1:8000/v1",
        "qwen",
    )


def test_openai_spec_without_scheme_is_rejected():
    with pytest.raises(ValueError, match="openai:127.0.0.1:8000"):
        load_policy("openai:127.0.0.1:8000")


def test_scripted_spec_reads_a_json_list(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(["a", "b"]))
    policy = load_policy(f"scripted:{tmp_path / 'r.json'}")
    assert isinstance(policy, ScriptedPolicy) and policy.replies == ["a", "b"]


def test_scripted_spec_with_a_non_list_is_named(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(ValueError, match="r.json must hold a JSON list of strings or an object"):
        load_policy(f"scripted:{tmp_path / 'r.json'}")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_without_the_package_says_how_to_install():
    with pytest.raises(ImportError, match=r"pip install 'coral-rl\[vllm\]'"):
        load_policy("vllm:some/model")


def test_dtype_reaches_every_in_process_hf_policy(tiny, tmp_path):
    import torch

    tiny.save(tmp_path)
    for spec in ("tiny", f"tiny:{tmp_path}", str(tmp_path)):
        assert load_policy(spec, dtype="bfloat16").dtype is torch.bfloat16
        assert load_policy(spec, dtype="float32").dtype is torch.float32


def test_servers_and_scripts_ignore_the_dtype(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(["a"]))
    assert isinstance(load_policy(f"scripted:{tmp_path / 'r.json'}", dtype="bfloat16"), ScriptedPolicy)
    assert isinstance(load_policy("openai:http://127.0.0.1:8000/v1", dtype="bfloat16"), OpenAIPolicy)


def test_an_unknown_dtype_is_named():
    with pytest.raises(ValueError, match="'half'"):
        load_policy("tiny", dtype="half")
