"""Hosted OpenAI-compatible endpoints: the API key comes from $OPENAI_API_KEY or the variable --api-key-env
names (never a config or the command line), a rejected key or an unnamed model among many is one line,
and a rate limit's Retry-After is honoured."""

from __future__ import annotations

import time

import pytest

from coral.cli import main
from coral.config import UserInputError
from coral.policy import GenerationRequest, OpenAIPolicy, SamplingParams, load_policy, user


def _one(policy):
    return policy.generate([GenerationRequest(user("hello"), SamplingParams(max_new_tokens=4))])[0]


def test_openai_api_key_from_the_environment_is_sent(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    server.key = "sk-env"
    assert _one(load_policy(f"openai:{server.url}#m")).text == "echo hello"
    assert server.auth == ["Bearer sk-env"]


def test_without_a_key_a_local_server_gets_the_placeholder(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _one(load_policy(f"openai:{server.url}#m"))
    assert server.auth == ["Bearer EMPTY"]


def test_coral_eval_takes_the_key_from_the_variable_api_key_env_names_and_records_it_nowhere(
        server, monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("MY_HOSTED_KEY", "sk-hosted-secret")
    server.key = "sk-hosted-secret"
    out = tmp_path / "e"
    assert main(["eval", "--workflow", "single", "--limit", "2", "--model", f"openai:{server.url}#m",
                 "--api-key-env", "MY_HOSTED_KEY", "--out-dir", str(out), "--no-progress"]) == 0
    assert set(server.auth) == {"Bearer sk-hosted-secret"} and len(server.auth) == 2
    assert not any("sk-hosted-secret" in p.read_text() for p in out.iterdir())


def test_an_unset_key_variable_and_a_rejected_key_are_one_line(server, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    args = ["eval", "--workflow", "single", "--limit", "1", "--model", f"openai:{server.url}#m",
            "--out-dir", str(tmp_path), "--no-progress"]
    assert main([*args, "--api-key-env", "NOT_SET_ANYWHERE"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "coral eval: error: --api-key-env NOT_SET_ANYWHERE: the environment variable NOT_SET_ANYWHERE is not set"
    server.key = "sk-right"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "HTTP 401" in err and "OPENAI_API_KEY" in err, err


def test_a_server_listing_many_models_asks_for_one_by_name(server):
    server.models = ["gpt-a", "gpt-b", "gpt-c"]
    with pytest.raises(UserInputError, match=r"lists 3 models \(gpt-a, gpt-b, gpt-c\); name one: openai:.*#MODEL"):
        _one(OpenAIPolicy(server.url))


def test_a_rate_limit_waits_as_long_as_retry_after_asks(server):
    server.fail_first, server.fail_status, server.retry_after = 1, 429, "0.5"
    start = time.perf_counter()
    policy = OpenAIPolicy(server.url, model="m", backoff_s=0.01, max_retries=2)
    assert _one(policy).text == "echo hello"
    assert time.perf_counter() - start >= 0.5 and policy.usage["retries"] == 1

