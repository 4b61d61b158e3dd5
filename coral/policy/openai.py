"""OpenAIPolicy: any OpenAI-compatible server (vLLM, SGLang, llama.cpp, OpenAI) as a coral Policy.

Requests go out concurrently through the `openai` async client, at most `max_concurrency` at a time
per event loop. A request that fails with a connection error, a timeout (`timeout_s` per attempt),
HTTP 429 or HTTP 5xx is retried up to `max_retries` times, waiting backoff_s * 2**attempt between
attempts, or as long as the server's Retry-After asks (up to RETRY_AFTER_MAX_S); other HTTP errors fail
at once. Failures raise one-line errors that name the server URL: a rejected request (a wrong key or model
name) is a UserInputError, an unreachable or failing server a ConnectionError or TimeoutError.
The API key is `api_key`, else $OPENAI_API_KEY, else "EMPTY" (local servers ask for none).
(The openai SDK's own retries would honour Retry-After too, but count no retries and raise its own
multi-line errors: the loop here is kept.)
`usage` accumulates prompt/completion tokens, requests and retries over the policy's life.

Endpoints: "chat" (/chat/completions, the server applies its chat template) or "completions"
(/completions, the chat is rendered here by `render`: ChatML by default, or `render_raw`, the last
message's text as it is, for base-model prompts).
With `logprobs=True` the server's per-token logprobs are returned when it provides them.

This module does NOT return token ids (the API has none: `prompt_ids` and `completion_ids` are
empty), does NOT stream, and does NOT start or manage servers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import openai

from coral.config import UserInputError
from coral.policy.base import Completion, GenerationRequest, Message

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

RETRYABLE = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)
RETRY_AFTER_MAX_S = 60.0  # a server asking for a longer wait is treated as failing
KEY_HINT = "the API key comes from $OPENAI_API_KEY, or from the variable that --api-key-env names"


def render_chatml(messages: Sequence[Message]) -> str:
    """The chat as ChatML text ending with the assistant header (same as hf.DEFAULT_CHAT_TEMPLATE)."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


def render_raw(messages: Sequence[Message]) -> str:
    """The last message's text as it is, no chat template (a base model's prompt)."""
    return messages[-1]["content"] if messages else ""


class OpenAIPolicy:
    """Client of an OpenAI-compatible server at `base_url` (e.g. "http://127.0.0.1:8000/v1").
    `model` None asks the server (/models) and uses the first model it lists."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        endpoint: str = "chat",
        max_concurrency: int = 8,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        logprobs: bool = False,
        render: Callable[[Sequence[Message]], str] = render_chatml,
        name: str | None = None,
    ) -> None:
        if endpoint not in ("chat", "completions"):
            raise ValueError(f"OpenAIPolicy endpoint must be 'chat' or 'completions', got {endpoint!r}")
        if max_concurrency <= 0 or timeout_s <= 0 or max_retries < 0 or backoff_s < 0:
            raise ValueError(
                f"OpenAIPolicy needs max_concurrency > 0, timeout_s > 0, max_retries >= 0, backoff_s >= 0; got "
                f"{max_concurrency}, {timeout_s}, {max_retries}, {backoff_s}"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.endpoint = endpoint
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.logprobs = logprobs
        self.render = render
        self.name = name or f"openai:{model or self.base_url}"
        self.usage: dict[str, int] = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0}
        # the async client and semaphore are bound to one event loop each
        self._per_loop: weakref.WeakKeyDictionary[Any, tuple[openai.AsyncOpenAI, asyncio.Semaphore]] = (
            weakref.WeakKeyDictionary()
        )

    # ------------------------------------------------------------------ public
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Blocking wrapper of `agenerate` (runs in a helper thread when called inside an event loop)."""

        async def run() -> list[Completion]:
            try:
                return await self.agenerate(requests)
            finally:
                await self._close_loop_client()

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(run())
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, run()).result()

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One completion per request, in order, sent concurrently."""
        client, semaphore = self._loop_client()
        if self.model is None:
            self.model = await self._with_retries(lambda: self._first_model(client))
        return list(await asyncio.gather(*(self._complete(client, semaphore, r) for r in requests)))

    # ------------------------------------------------------------------ internals
    def _loop_client(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if loop not in self._per_loop:
            client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s, max_retries=0
            )
            self._per_loop[loop] = (client, asyncio.Semaphore(self.max_concurrency))
        return self._per_loop[loop]

    async def _close_loop_client(self) -> None:
        state = self._per_loop.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state[0].close()

    async def _first_model(self, client: openai.AsyncOpenAI) -> str:
        models = await client.models.list()
        if len(models.data) != 1:  # a hosted endpoint lists many: which one is not ours to guess
            names = ", ".join(m.id for m in models.data[:5]) + (", ..." if len(models.data) > 5 else "")
            raise UserInputError(f"the server at {self.base_url} lists {len(models.data)} models ({names}); "
                                 f"name one: openai:{self.base_url}#MODEL")
        return models.data[0].id

    async def _complete(
        self, client: openai.AsyncOpenAI, semaphore: asyncio.Semaphore, request: GenerationRequest
    ) -> Completion:
        async with semaphore:
            if self.endpoint == "chat":
                completion = await self._with_retries(lambda: self._chat(client, request))
            else:
                completion = await self._with_retries(lambda: self._text(client, request))
        self.usage["requests"] += 1
        self.usage["prompt_tokens"] += completion.usage.get("prompt_tokens", 0)
        self.usage["completion_tokens"] += completion.usage.get("completion_tokens", 0)
        return completion

    def _sampling_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        sp = request.sampling
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": sp.max_new_tokens,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
        }
        if sp.stop:
            kwargs["stop"] = list(sp.stop)
        if sp.seed is not None:
            kwargs["seed"] = sp.seed
        return kwargs

    async def _chat(self, client: openai.AsyncOpenAI, request: GenerationRequest) -> Completion:
        kwargs = self._sampling_kwargs(request)
        if self.logprobs:
            kwargs["logprobs"] = True
        # a Message is the {"role", "content"} dict openai's TypedDicts describe, typed as plain dict[str, str]
        messages = cast("list[ChatCompletionMessageParam]", list(request.messages))
        response = await client.chat.completions.create(messages=messages, **kwargs)
        choice = response.choices[0]
        content = choice.logprobs.content if choice.logprobs is not None else None
        logprobs = [float(t.logprob) for t in content] if content else []
        return _completion(choice.message.content or "", logprobs, choice.finish_reason, response.usage)

    async def _text(self, client: openai.AsyncOpenAI, request: GenerationRequest) -> Completion:
        kwargs = self._sampling_kwargs(request)
        if self.logprobs:
            kwargs["logprobs"] = 1
        response = await client.completions.create(prompt=self.render(request.messages), **kwargs)
        choice = response.choices[0]
        token_logprobs = choice.logprobs.token_logprobs if choice.logprobs is not None else None
        logprobs = [float(x) for x in token_logprobs if x is not None] if token_logprobs else []
        return _completion(choice.text or "", logprobs, choice.finish_reason, response.usage)

    async def _with_retries(self, call: Callable[[], Any]) -> Any:
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                return await call()
            except RETRYABLE as error:
                wait_s = max(self.backoff_s * 2**attempt, _retry_after_s(error))
                if attempt + 1 == attempts or wait_s > RETRY_AFTER_MAX_S:
                    raise self._final_error(error, attempt + 1) from error
                self.usage["retries"] += 1
                await asyncio.sleep(wait_s)
            except openai.APIStatusError as error:
                hint = f" ({KEY_HINT})" if error.status_code in (401, 403) else ""
                raise UserInputError(
                    f"the server at {self.base_url} rejected the request with HTTP {error.status_code}: "
                    f"{_one_line(error.message)}{hint}"
                ) from error
        raise AssertionError("unreachable")

    def _final_error(self, error: Exception, attempts: int) -> Exception:
        tries = f"after {attempts} attempt{'s' if attempts > 1 else ''}"
        if isinstance(error, openai.APITimeoutError):
            return TimeoutError(
                f"the server at {self.base_url} did not answer within timeout_s={self.timeout_s} ({tries})"
            )
        if isinstance(error, openai.APIConnectionError):
            return ConnectionError(f"cannot reach the OpenAI-compatible server at {self.base_url} ({tries})")
        status = getattr(error, "status_code", "?")
        message = _one_line(getattr(error, "message", str(error)))
        return ConnectionError(f"the server at {self.base_url} answered HTTP {status} ({tries}): {message}")


def _retry_after_s(error: Exception) -> float:
    """The wait a 429 or 503 asks for in its Retry-After header (seconds), else 0."""
    response = getattr(error, "response", None)
    try:
        return float(response.headers.get("retry-after", 0)) if response is not None else 0.0
    except ValueError:  # an HTTP date: rare from these servers, the usual backoff applies
        return 0.0


def _completion(text: str, logprobs: list[float], finish_reason: str | None, usage: Any) -> Completion:
    counts = {
        "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
    }
    return Completion(
        text=text,
        logprobs=logprobs,
        finish_reason="length" if finish_reason == "length" else "stop",
        usage=counts,
    )


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:300]
