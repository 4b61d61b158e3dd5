"""Tool calls inside the final generation: deliberation's official flow.

The tool caller decodes greedily after its embedded prompt (latents in their slots). A row pauses as soon
as its text closes a tool call, `<python> code </python>`; the text after the call's end is dropped, the
code runs (`run(codes) -> outputs`, tools.PythonTool in coral's sandbox), ` <result> output </result>` is
appended, and the row decodes again after its prompt + its text so far (re-encoded, the prompt run again,
as the official code does). A row ends at eos, with no call to run, when its `max_new_tokens` budget (all
segments together) is spent, or at its call number `max_calls + 1`, which is not run: a result saying the
limit was reached ends the row. Tool output is text the model reads, not text it decodes: it is not
counted in a reply's decoded tokens. `<search>` calls of the official code are not offered (no network).
This module does NOT run code (tools.py) or know about rounds and links (system.py).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from coral.recursivemas.rollout import SplitPrompt, assemble, greedy_decode

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy

CALL = re.compile(r"<python>(.*?)</python>", re.DOTALL | re.IGNORECASE)
CLOSE = "</python>"
TAIL_TOKENS = 16  # a closing tag is looked for in the text of a row's last tokens (16 hold the 9 characters of the tag)

# the code of one tool call per row -> what it printed, one text per call
RunCode = Callable[[Sequence[str]], list[str]]


@dataclass(frozen=True)
class Reply:
    """A row's answer text (tool calls and results included) and every token decoded for it."""

    text: str
    decoded_tokens: int


def with_text(prompt: SplitPrompt, ids: Sequence[int]) -> SplitPrompt:
    """`prompt` followed by token ids `ids` (the assistant's text so far)."""
    return SplitPrompt((*prompt.pieces[:-1], (*prompt.pieces[-1], *ids)), prompt.slots)


@dataclass
class _Row:
    text: str = ""
    decoded: int = 0
    calls: int = 0
    cursor: int = 0  # where the next tool call may start in `text`
    done: bool = False


def decode_with_tools(policy: HFPolicy, prompts: Sequence[SplitPrompt], latents: Sequence[Mapping[str, Tensor]],
                      max_new_tokens: int, run: RunCode, max_calls: int = 5) -> list[Reply]:
    """Greedy generation with tool calls for each prompt (see the module docstring), in the policy's
    precision (an HFPolicy's autocast)."""
    autocast = getattr(policy, "autocast", None)
    with autocast() if autocast is not None else contextlib.nullcontext():
        return _decode_with_tools(policy, prompts, latents, max_new_tokens, run, max_calls)


def _decode_with_tools(policy: HFPolicy, prompts: Sequence[SplitPrompt], latents: Sequence[Mapping[str, Tensor]],
                       max_new_tokens: int, run: RunCode, max_calls: int) -> list[Reply]:
    rows = [_Row() for _ in prompts]
    while active := [i for i, row in enumerate(rows) if not row.done]:
        budget = [max_new_tokens - rows[i].decoded for i in active]

        def stop(j: int, ids: list[int], budget: list[int] = budget) -> bool:
            return len(ids) >= budget[j] or CLOSE in policy.decode(ids[-TAIL_TOKENS:]).lower()

        embedded = assemble(policy.model, [with_text(prompts[i], policy.encode(rows[i].text)) for i in active],
                            [latents[i] for i in active])
        segments = greedy_decode(policy.model, embedded, max(budget), policy.eos_ids, stop=stop)
        calls: list[tuple[_Row, str]] = []
        for i, ids in zip(active, segments, strict=True):
            row = rows[i]
            row.text += policy.decode(ids)
            row.decoded += len(ids)
            call = CALL.search(row.text, row.cursor)
            if call is None:
                row.done = True
                continue
            row.text, row.calls = row.text[: call.end()], row.calls + 1
            if row.calls > max_calls:
                row.text += f" <result> tool call limit ({max_calls}) reached </result>"
                row.done = True
            else:
                calls.append((row, call.group(1).strip()))
        for (row, _), output in zip(calls, run([code for _, code in calls]) if calls else [], strict=True):
            row.text += f" <result> {output} </result>"
            row.cursor = len(row.text)
            row.done = row.decoded >= max_new_tokens
    return [Reply(row.text, row.decoded) for row in rows]
