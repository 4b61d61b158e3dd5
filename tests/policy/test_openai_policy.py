"""OpenAIPolicy against a real local HTTP server (see conftest.FakeServer)."""

import asyncio
import socket
import time

import pytest

from coral.config import UserInputError
from coral.policy import GenerationRequest, OpenAIPolicy, SamplingParams, user
from coral.policy.openai import render_chatml


def reqs(n=1, **sampling):
    return [GenerationRequest(user(f"hello world {i}"), SamplingParams(**sampling)) for i in range(n)]


def policy_for(server, **kw):
    return OpenAIPolicy(server.url, model="m", backoff_s=0.01, **kw)


def test_chat_completion_returns_the_server_text_in_order(server):
    outs = policy_for(server).generate(reqs(3))
    assert [o.text for o in outs] == [f"echo hello world {i}" for i in range(3)]


def test_usage_is_counted_per_completion_and_in_total(server):
    policy = policy_for(server)
    outs = policy.generate(reqs(2))
    assert outs[0].usage == {"prompt_tokens": 3, "completion_tokens": 4}
    assert policy.usage | {} == {"prompt_tokens": 6, "completion_tokens": 8, "requests": 2, "retries": 0}


def test_sampling_params_reach_the_server(server):
    policy_for(server).generate(reqs(1, max_new_tokens=7, temperature=0.5, top_p=0.9, seed=3, stop=("x",)))
    body = server.bodies[0]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"], body["stop"]) == (
        7,
        0.5,
        0.9,
        3,
        ["x"],
    )


def test_length_finish_reason_is_reported(server):
    assert policy_for(server).generate(reqs(1, max_new_tokens=2))[0].finish_reason == "length"


def test_chat_logprobs_are_returned_when_asked(server):
    out = policy_for(server, logprobs=True).generate(reqs(1))[0]
    assert out.logprobs == pytest.approx([-0.1, -0.2, -0.3, -0.4])


def test_completions_endpoint_sends_the_rendered_chat(server):
    out = policy_for(server, endpoint="completions", logprobs=True).generate(reqs(1))[0]
    assert server.bodies[0]["prompt"] == render_chatml(user("hello world 0"))
    assert (
        out.text.startswith("echo <|im_start|>user") and len(out.logprobs) == out.usage["completion_tokens"]
    )


def test_model_name_is_asked_from_the_server_when_missing(server):
    policy = OpenAIPolicy(server.url)
    policy.generate(reqs(1))
    assert policy.model == "fake-model" and server.bodies[0]["model"] == "fake-model"


def test_concurrency_limit_caps_simultaneous_requests(server):
    server.delay_s = 0.1
    policy_for(server, max_concurrency=3).generate(reqs(9))
    assert server.max_active == 3


@pytest.mark.parametrize("status", [500, 429])
def test_transient_failures_are_retried(server, status):
    server.fail_first, server.fail_status = 2, status
    policy = policy_for(server, max_retries=3)
    assert policy.generate(reqs(1))[0].text == "echo hello world 0"
    assert (server.requests, policy.usage["retries"]) == (3, 2)


def test_retries_back_off_exponentially(server):
    server.fail_first = 2
    start = time.perf_counter()
    OpenAIPolicy(server.url, model="m", backoff_s=0.1, max_retries=2).generate(reqs(1))
    assert time.perf_counter() - start >= 0.1 + 0.2


def test_exhausted_retries_raise_naming_the_url_and_status(server):
    server.fail_first = 10
    with pytest.raises(ConnectionError, match=rf"{server.url} answered HTTP 500 \(after 3 attempts\)"):
        policy_for(server, max_retries=2).generate(reqs(1))


def test_client_errors_are_not_retried(server):
    server.fail_first, server.fail_status = 10, 400
    with pytest.raises(UserInputError, match="rejected the request with HTTP 400"):
        policy_for(server, max_retries=3).generate(reqs(1))
    assert server.requests == 1


def test_slow_server_raises_timeout_naming_the_url(server):
    server.delay_s = 1.0
    with pytest.raises(TimeoutError, match=rf"{server.url} did not answer within timeout_s=0.2"):
        policy_for(server, timeout_s=0.2, max_retries=0).generate(reqs(1))


def test_unreachable_server_raises_naming_the_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ConnectionError, match=f"cannot reach the OpenAI-compatible server at {url}"):
        OpenAIPolicy(url, model="m", max_retries=1, backoff_s=0.01).generate(reqs(1))


def test_sync_generate_works_inside_a_running_event_loop(server):
    async def main():
        return policy_for(server).generate(reqs(1))

    assert asyncio.run(main())[0].text == "echo hello world 0"


def test_agenerate_can_be_awaited_repeatedly_in_one_loop(server):
    policy = policy_for(server)

    async def main():
        return [(await policy.agenerate(reqs(1)))[0].text for _ in range(2)]

    assert asyncio.run(main()) == ["echo hello world 0"] * 2
