"""ScriptedPolicy: deterministic replies for tests and demos of agent loops.

Replies come from a list (consumed in order, cycling by default) or from a function of the chat.
Token ids are the UTF-8 bytes of the prompt (last message) and of the reply, and every logprob is
0.0 (a scripted reply is certain), so code that expects ids and logprobs can run on it.
Stop strings cut the reply (text and ids) before the first stop string, as a model's would.

This module does NOT model anything: max_new_tokens and temperature are ignored, and no reply is
ever cut for length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coral.policy.base import Completion, GenerationRequest, Message

Reply = Callable[[Sequence[Message]], str]


class ScriptedPolicy:
    """`replies`: a list of strings (cycled when `cycle`, else consumed once) or a callable(messages) -> str.
    Every chat it was asked is recorded in `calls`."""

    def __init__(self, replies: Sequence[str] | Reply, cycle: bool = True, name: str = "scripted") -> None:
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
