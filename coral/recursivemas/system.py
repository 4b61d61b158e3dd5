"""RecursiveMAS: frozen HF agents that pass latent thoughts through RecursiveLinks for R rounds.

One round runs the pattern's roles in order. A role's prompt (question + one slot per source) is
rebuilt every round; each slot receives outer[source->role](thoughts of source), where a source's
thoughts are its m latent steps e_t = inner_source(h) (rollout.py). Sources of the same round come
from `pattern.inputs`, sources of the previous round from `pattern.feedback` (round 1 has no
feedback slot). In the last round the final agent does not think in latents: its embedded prompt is
returned, to be decoded (`answer`) or scored against gold tokens (`unroll` + rollout.answer_nll).

The language models are frozen (requires_grad False, eval mode): gradients flow *through* them into
the links, never into their weights. The links live in this `nn.Module` (`inner`, `outer`), so its
`state_dict()` is exactly what training saves. This module does NOT train (train.py) and does NOT
compute accuracy (evaluation.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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

# deliberation: (decoded attempts of the tool caller, questions) -> one feedback text per row (tools.py)
Tool = Callable[[Sequence[str], Sequence[str]], list[str]]


def edge_key(src: str, dst: str) -> str:
    return f"{src}__to__{dst}"  # nn.ModuleDict keys may not contain "."


def d_model(policy: Any) -> int:
    return int(policy.model.get_input_embeddings().weight.shape[-1])


class RecursiveMAS(nn.Module):
    def __init__(self, pattern: Pattern, agents: Mapping[str, Any], latent_steps: int = 16,
                 tool: Tool | None = None, tool_max_new_tokens: int = 128,
                 gradient_checkpointing: bool = False, link_init: str = "aligned") -> None:
        super().__init__()
        missing = [r for r in pattern.roles if r not in agents]
        if missing:
            raise ValueError(f"pattern {pattern.name} needs an agent for role {missing[0]!r}")
        if latent_steps < 1:
            raise ValueError(f"latent_steps must be >= 1, got {latent_steps}")
        self.pattern, self.latent_steps = pattern, latent_steps
        self.tool, self.tool_max_new_tokens = tool, tool_max_new_tokens
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
        outer = {edge_key(s, t): (self.outer[edge_key(s, t)], s, t) for s, t in self.pattern.edges()}
        rows = {}
        for s, t in self.pattern.edges() if how == "aligned" else ():
            vocab_s, vocab_t = self.agents[s].tokenizer.get_vocab(), self.agents[t].tokenizer.get_vocab()
            if vocab_s != vocab_t or tables[s].shape[0] != tables[t].shape[0]:
                try:
                    rows[edge_key(s, t)] = shared_token_rows(vocab_s, vocab_t, tables[s].shape[0], tables[t].shape[0])
                except ValueError as error:
                    raise ValueError(f"agents {s!r} and {t!r}: {error}") from error
        init_links(how, dict(self.inner.items()), outer, tables, rows=rows)

    def describe(self) -> str:
        return describe_links(dict(self.inner.items()), dict(self.outer.items()))

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
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        with self.precision():
            return self._unroll(questions, rounds)

    def _unroll(self, questions: Sequence[str], rounds: int) -> list[Embedded]:
        previous: dict[str, Tensor] = {}
        notes: list[str] | None = None
        finals: list[Embedded] = []
        for r in range(rounds):
            current: dict[str, Tensor] = {}
            for role in self.pattern.roles:
                embedded = self._embed(role, questions, r, current, previous, notes)
                if role == self.pattern.final:
                    finals.append(embedded)
                    if r == rounds - 1:
                        break
                    if self.tool is not None:
                        notes = self._run_tool(embedded, questions)
                current[role] = self._think(role, embedded)
            previous = current
        return finals

    def _think(self, role: str, embedded: Embedded) -> Tensor:
        """`role`'s m latent thoughts. With gradient checkpointing (under grad) the LM's activations of
        this rollout are dropped after the forward pass and recomputed in backward: memory per unrolled
        (round, role) falls to its inputs and thoughts, for one extra forward pass each."""
        model, inner = self.agents[role].model, self.inner[role]
        if self.gradient_checkpointing and torch.is_grad_enabled():
            return checkpoint(latent_rollout, model, inner, embedded, self.latent_steps, use_reentrant=False)
        return latent_rollout(model, inner, embedded, self.latent_steps)

    def _embed(self, role: str, questions: Sequence[str], r: int, current: Mapping[str, Tensor],
               previous: Mapping[str, Tensor], notes: Sequence[str] | None) -> Embedded:
        srcs = self.pattern.sources(role, r)
        incoming = {s: self.outer[edge_key(s, role)]((previous if prev else current)[s]) for s, prev in srcs}
        with_notes = notes is not None and role in self.pattern.feedback
        prompts = [self.prompt(role, q, r, notes[i] if with_notes else None) for i, q in enumerate(questions)]
        rows = [{s: lat[i] for s, lat in incoming.items()} for i in range(len(questions))]
        return assemble(self.agents[role].model, prompts, rows)

    def _run_tool(self, embedded: Embedded, questions: Sequence[str]) -> list[str]:
        """The tool caller decodes an attempt (text: a tool needs code) and the tool reports on it."""
        assert self.tool is not None
        with torch.no_grad():
            ids = self.decode(embedded, self.tool_max_new_tokens)
        final = self.agents[self.pattern.final]
        return self.tool([final.decode(i) for i in ids], questions)

    def decode(self, embedded: Embedded, max_new_tokens: int) -> list[list[int]]:
        final = self.agents[self.pattern.final]
        with self.precision():
            return greedy_decode(final.model, embedded, max_new_tokens, final.eos_ids)

    @torch.no_grad()
    def answer(self, questions: Sequence[str], rounds: int, max_new_tokens: int) -> list[list[int]]:
        """Greedy token ids the final agent decodes after `rounds` rounds (eos kept when reached)."""
        return self.decode(self.unroll(questions, rounds)[-1], max_new_tokens)
