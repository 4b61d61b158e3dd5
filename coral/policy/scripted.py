"""ScriptedPolicy: deterministic replies for tests and demos of agent loops.

Replies come from a list (consumed in order, cycling by default), from a mapping of text to reply (the
reply of the longest key found in the chat's last message: scripted by task, keyed by each task's
prompt) or from a function of the chat.
Token ids are the UTF-8 bytes of the prompt (last message) and of the reply, and every logprob is
0.0 (a scripted reply is certain), so code that expects ids and logprobs can run on it.
Stop strings cut the reply (text and ids) before the first stop string, as a model's would.

This module does NOT model anything: max_new_tokens and temperature are ignored, and no reply is
ever cut for length.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from coral.config import UserInputError
from coral.policy.base import Completion, GenerationRequest, Message

Reply = Callable[[Sequence[Message]], str]


class ReplyByText:
    """The reply to a chat is the value of the longest key that occurs in its last message."""

    def __init__(self, replies: Mapping[str, str]) -> None:
        if not replies or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in replies.items()):
            raise TypeError("scripted replies by text need a non-empty mapping of non-empty strings to strings")
        self.keys = sorted(replies, key=len, reverse=True)
        self.replies = dict(replies)

    def __call__(self, messages: Sequence[Message]) -> str:
        last = messages[-1]["content"] if messages else ""
        key = next((k for k in self.keys if k in last), None)
        if key is None:
            raise LookupError(f"no scripted reply for a prompt starting {last[:80]!r}: none of the "
                           f"{len(self.keys)} keys occurs in it")
        return self.replies[key]


class ScriptedPolicy:
    """`replies`: a list of strings (cycled when `cycle`, else consumed once), a mapping of text to reply
    (see ReplyByText) or a callable(messages) -> str. Every chat it was asked is recorded in `calls`."""

    def __init__(self, replies: Sequence[str] | Mapping[str, str] | Reply, cycle: bool = True,
                 name: str = "scripted") -> None:
        if isinstance(replies, Mapping):
            replies = ReplyByText(replies)
        if not callable(replies):
            replies = list(replies)
            if not replies:
                raise ValueError("ScriptedPolicy needs at least one reply")
            if not all(isinstance(r, str) for r in replies):
                raise TypeError("ScriptedPolicy replies must all be strings")
        self.replies = replies
        self.cycle = cycle
        self.name = name
        self.calls: list[tuple[Message, ...]] = []

    def _next_reply(self, messages: tuple[Message, ...]) -> str:
        if callable(self.replies):
            reply = self.replies(messages)
            if not isinstance(reply, str):
                raise TypeError(f"ScriptedPolicy reply function returned {type(reply).__name__}, not str")
            return reply
        index = len(self.calls)
        if index >= len(self.replies) and not self.cycle:
            raise IndexError(
                f"ScriptedPolicy {self.name!r} ran out of replies after {len(self.replies)} calls"
            )
        return self.replies[index % len(self.replies)]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = []
        for request in requests:
            reply = self._next_reply(request.messages)
            self.calls.append(request.messages)
            cuts = [i for i in (reply.find(s) for s in request.sampling.stop) if i >= 0]
            text = reply[: min(cuts)] if cuts else reply
            prompt_ids = list(request.messages[-1]["content"].encode()) if request.messages else []
            completion_ids = list(text.encode())
            out.append(
                Completion(
                    text=text,
                    prompt_ids=prompt_ids,
                    completion_ids=completion_ids,
                    logprobs=[0.0] * len(completion_ids),
                    finish_reason="stop",
                    usage={"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion_ids)},
                )
            )
        return out


def scripted_from_file(file: str, **kwargs: Any) -> ScriptedPolicy:
    """`scripted:FILE`: a JSON list of replies (in order, cycled) or an object of text -> reply."""
    path = Path(file).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"scripted replies file does not exist: {file}")
    try:
        replies = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise UserInputError(f"scripted replies file {file} is not valid JSON: {error}") from error
    if isinstance(replies, list) and replies and all(isinstance(r, str) for r in replies):
        return ScriptedPolicy(replies, **kwargs)
    if isinstance(replies, dict) and replies and all(k and isinstance(v, str) for k, v in replies.items()):
        return ScriptedPolicy(replies, **kwargs)
    raise UserInputError(f"scripted replies file {file} must hold a JSON list of strings or an object of "
                         "prompt text -> reply")
