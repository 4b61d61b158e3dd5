"""RecursiveMAS: frozen HF agents that pass latent thoughts through RecursiveLinks for R rounds.

One round runs the pattern's roles in order. A role's prompt (question + one slot per source) is
rebuilt every round; each slot receives outer[source->role](thoughts of source), where a source's
thoughts are its m latent steps e_t = inner_source(h) (rollout.py). Sources of the same round come
from `pattern.inputs`, sources of the previous round from `pattern.feedback` (round 1 has no
feedback slot). In the last round the final agent does not think in latents: its embedded prompt is
returned, to be decoded (`answer`) or scored against gold tokens (`unroll` + rollout.answer_nll).

Tools (patterns.py says which pattern uses which): with `tool: python` (deliberation) every non-final
round is latent only and the final generation may call the tool (toolcalls.py); with `tool:
public_tests` (deliberation_public_tests) the tool caller decodes an attempt in every non-final round,
whose report reaches the reflector as text. `answer` counts every token decoded for a row: those
attempts, every segment of a generation with tool calls, and the final answer.

The language models are frozen (requires_grad False, eval mode): gradients flow *through* them into
the links, never into their weights. The links live in this `nn.Module` (`inner`, `outer`), so its
`state_dict()` is exactly what training saves. This module does NOT train (train.py) and does NOT
compute accuracy (evaluation.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from coral.recursivemas.links import InnerLink, OuterLink, describe_links, init_links, shared_token_rows
from coral.recursivemas.patterns import Pattern
from coral.recursivemas.rollout import (
    Embedded,
    SplitPrompt,
    assemble,
    greedy_decode,
    latent_rollout,
    split_prompt,
)
from coral.recursivemas.toolcalls import Reply, RunCode, decode_with_tools

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy

# deliberation_public_tests: (decoded attempts of the tool caller, questions) -> one report per row (tools.py)
Tool = Callable[[Sequence[str], Sequence[str]], list[str]]


@dataclass
class Unrolled:
    """What `rounds` rounds leave: the final agent's embedded prompt of every round, its last-round
    prompts and the latents for their slots (a generation with tool calls rebuilds the prompt around its
    text so far), and the tokens decoded on the way per row (deliberation_public_tests' attempts)."""

    finals: list[Embedded]
    prompts: list[SplitPrompt]
    latents: list[dict[str, Tensor]]
    decoded_tokens: list[int]


def edge_key(src: str, dst: str) -> str:
    return f"{src}__to__{dst}"  # nn.ModuleDict keys may not contain "."


def d_model(policy: HFPolicy) -> int:
    return int(policy.model.get_input_embeddings().weight.shape[-1])


class RecursiveMAS(nn.Module):
    def __init__(self, pattern: Pattern, agents: Mapping[str, Any], latent_steps: int = 16,
                 tool: Tool | RunCode | None = None, tool_max_new_tokens: int = 128,
                 gradient_checkpointing: bool = False, link_init: str = "aligned", max_tool_calls: int = 5) -> None:
        """`tool`: the pattern's tool (a `Tool` for public_tests, a `RunCode` for python; needed to decode
        or unroll such a pattern); `tool_max_new_tokens`: each public-tests attempt's budget;
        `max_tool_calls`: calls per row in a generation with tool calls (the official default, 5)."""
        super().__init__()
        missing = [r for r in pattern.roles if r not in agents]
        if missing:
            raise ValueError(f"pattern {pattern.name} needs an agent for role {missing[0]!r}")
        if latent_steps < 1:
            raise ValueError(f"latent_steps must be >= 1, got {latent_steps}")
        self.pattern, self.latent_steps = pattern, latent_steps
        self.tool, self.tool_max_new_tokens, self.max_tool_calls = tool, tool_max_new_tokens, max_tool_calls
        self.gradient_checkpointing = gradient_checkpointing
        self.agents = dict(agents)  # not submodules: LM weights are not part of the links' state
        for policy in self.agents.values():
            policy.model.eval()
            for p in policy.model.parameters():
                p.requires_grad_(False)
        self.inner = nn.ModuleDict({r: InnerLink(d_model(self.agents[r])) for r in pattern.roles})
        self.outer = nn.ModuleDict({edge_key(s, t): OuterLink(d_model(self.agents[s]), d_model(self.agents[t]))
                                    for s, t in pattern.edges()})
        self._init_links(link_init)
        device = self.agents[pattern.final].device
        self.to(device)

    def _init_links(self, how: str) -> None:
        """links.init_links; "aligned" pairs embedding rows by token: all rows when the two agents share a
        vocabulary, else the token strings both hold (links.shared_token_rows, which refuses vocabularies
        too unlike for it)."""
        tables = {r: self.agents[r].model.get_input_embeddings().weight for r in self.pattern.roles}
        links = self.outer_links()
        outer = {edge_key(s, t): (links[edge_key(s, t)], s, t) for s, t in self.pattern.edges()}
        rows = {}
        for s, t in self.pattern.edges() if how == "aligned" else ():
            vocab_s, vocab_t = self.agents[s].tokenizer.get_vocab(), self.agents[t].tokenizer.get_vocab()
            if vocab_s != vocab_t or tables[s].shape[0] != tables[t].shape[0]:
                try:
                    rows[edge_key(s, t)] = shared_token_rows(vocab_s, vocab_t, tables[s].shape[0], tables[t].shape[0])
                except ValueError as error:
                    raise ValueError(f"agents {s!r} and {t!r}: {error}") from error
        init_links(how, self.inner_links(), outer, tables, rows=rows)

    # the ModuleDicts hold only the links built in __init__; torch types their values as any Module
    def inner_links(self) -> dict[str, InnerLink]:
        return {role: cast(InnerLink, link) for role, link in self.inner.items()}

    def outer_links(self) -> dict[str, OuterLink]:
        return {key: cast(OuterLink, link) for key, link in self.outer.items()}

    def describe(self) -> str:
        return describe_links(self.inner_links(), self.outer_links())

    # ------------------------------------------------------------------ prompts
    def prompt(self, role: str, question: str, round_index: int, notes: str | None = None) -> SplitPrompt:
        """`role`'s prompt in round `round_index` with a slot marker per source (tool notes as text)."""
        sources: dict[str, str | None] = {s: None for s, _ in self.pattern.sources(role, round_index)}
        if notes is not None:
            sources["tool"] = notes
        policy = self.agents[role]
        return split_prompt(policy.render(self.pattern.prompt(role, question, sources)), policy.encode)

    # ------------------------------------------------------------------ rollout
    def precision(self) -> contextlib.AbstractContextManager:
        """bfloat16 autocast around the agents' direct model calls when an agent computes in bfloat16
        (its dtype), else nothing. The links and the agents' weights stay float32 parameters."""
        low = [a for a in self.agents.values() if getattr(a, "dtype", torch.float32) != torch.float32]
        return low[0].autocast() if low else contextlib.nullcontext()

    def unroll(self, questions: Sequence[str], rounds: int) -> list[Embedded]:
        """All `rounds` rounds; returns the final agent's embedded prompt of every round (the last one
        is what it decodes from). Gradients flow to the links when called under grad."""
        return self._rounds(questions, rounds).finals

    def _rounds(self, questions: Sequence[str], rounds: int) -> Unrolled:
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        with self.precision():
            return self._unroll(questions, rounds)

    def _unroll(self, questions: Sequence[str], rounds: int) -> Unrolled:
        previous: dict[str, Tensor] = {}
        notes: list[str] | None = None
        out = Unrolled([], [], [], [0] * len(questions))
        for r in range(rounds):
            current: dict[str, Tensor] = {}
            for role in self.pattern.roles:
                prompts, latents = self._inputs(role, questions, r, current, previous, notes)
                embedded = assemble(self.agents[role].model, prompts, latents)
                if role == self.pattern.final:
                    out.finals.append(embedded)
                    if r == rounds - 1:
                        out.prompts, out.latents = prompts, latents
                        break
                    if self.pattern.tool == "public_tests":
                        notes, decoded = self._run_tool(embedded, questions)
                        out.decoded_tokens = [a + b for a, b in zip(out.decoded_tokens, decoded, strict=True)]
                current[role] = self._think(role, embedded)
            previous = current
        return out

    def _think(self, role: str, embedded: Embedded) -> Tensor:
        """`role`'s m latent thoughts. With gradient checkpointing (under grad) the LM's activations of
        this rollout are dropped after the forward pass and recomputed in backward: memory per unrolled
        (round, role) falls to its inputs and thoughts, for one extra forward pass each."""
        model, inner = self.agents[role].model, self.inner[role]
        if self.gradient_checkpointing and torch.is_grad_enabled():
            return checkpoint(latent_rollout, model, inner, embedded, self.latent_steps, use_reentrant=False)
        return latent_rollout(model, inner, embedded, self.latent_steps)

    def _inputs(self, role: str, questions: Sequence[str], r: int, current: Mapping[str, Tensor],
                previous: Mapping[str, Tensor], notes: Sequence[str] | None) -> tuple[list[SplitPrompt],
                                                                                      list[dict[str, Tensor]]]:
        """`role`'s prompts in round `r` and, per row, outer[source->role](source's thoughts) per slot."""
        srcs = self.pattern.sources(role, r)
        incoming = {s: self.outer[edge_key(s, role)]((previous if prev else current)[s]) for s, prev in srcs}
        with_notes = notes is not None and role in self.pattern.feedback
        prompts = [self.prompt(role, q, r, notes[i] if notes is not None and with_notes else None)
                   for i, q in enumerate(questions)]
        return prompts, [{s: lat[i] for s, lat in incoming.items()} for i in range(len(questions))]

    def _needed_tool(self) -> Any:
        if self.tool is None:
            raise ValueError(f"pattern {self.pattern.name!r} calls a tool ({self.pattern.tool}): give "
                             f"RecursiveMAS(tool=...) (tools.PythonTool or tools.SandboxTool)")
        return self.tool

    def _run_tool(self, embedded: Embedded, questions: Sequence[str]) -> tuple[list[str], list[int]]:
        """The tool caller decodes an attempt (text: a tool needs code) and the tool reports on it;
        returns the reports and the tokens decoded per row."""
        tool = self._needed_tool()
        with torch.no_grad():
            ids = self.decode(embedded, self.tool_max_new_tokens)
        final = self.agents[self.pattern.final]
        return tool([final.decode(i) for i in ids], questions), [len(i) for i in ids]

    def decode(self, embedded: Embedded, max_new_tokens: int) -> list[list[int]]:
        final = self.agents[self.pattern.final]
        with self.precision():
            return greedy_decode(final.model, embedded, max_new_tokens, final.eos_ids)

    @torch.no_grad()
    def answer(self, questions: Sequence[str], rounds: int, max_new_tokens: int) -> list[Reply]:
        """The final agent's greedy answer after `rounds` rounds (with tool calls for `tool: python`),
        with every token decoded for the row on the way (eos counted when reached)."""
        unrolled = self._rounds(questions, rounds)
        final = self.agents[self.pattern.final]
        if self.pattern.tool == "python":
            replies = decode_with_tools(final, unrolled.prompts, unrolled.latents, max_new_tokens,
                                        self._needed_tool(), self.max_tool_calls)
        else:
            replies = [Reply(final.decode(i), len(i)) for i in self.decode(unrolled.finals[-1], max_new_tokens)]
        return [Reply(r.text, r.decoded_tokens + n) for r, n in zip(replies, unrolled.decoded_tokens, strict=True)]
