"""LatentMAS: the training-free latent baseline for agents that are one model.

No links are learned. A latent thought is the last hidden state realigned to the input-embedding space
by ridge regression from the output head to the input embeddings,
    W_a = (W_out^T W_out + lambda I)^-1 W_out^T W_in        (d x d; W_out, W_in: vocab x d)
    e = h W_a, rescaled to the mean norm of the input embeddings,
and all agents share one KV cache: each role's text prompt is appended to the cache, then its m
thoughts (each fed back, so the next role attends to all of them), round after round; the final role
of the last round decodes from the cache. Rows of a batch are left-padded segment by segment (padding
inside the sequence is masked and does not advance positions).
This module does NOT train, and does NOT handle agents of different models (RecursiveMAS does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from coral.recursivemas.links import ridge_realignment
from coral.recursivemas.patterns import Pattern
from coral.recursivemas.rollout import (
    Embedded,
    assemble,
    forward_hidden,
    greedy_decode,
    new_cache,
    split_prompt,
)

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy


class LatentMAS:
    def __init__(self, pattern: Pattern, policy: HFPolicy, latent_steps: int = 16, ridge_lambda: float = 1e-4) -> None:
        if latent_steps < 1:
            raise ValueError(f"latent_steps must be >= 1, got {latent_steps}")
        self.pattern, self.policy, self.latent_steps = pattern, policy, latent_steps
        model = policy.model
        w_in = model.get_input_embeddings().weight.detach()
        w_out = model.get_output_embeddings().weight.detach()
        self.w_a = ridge_realignment(w_out, w_in, ridge_lambda).to(w_in.dtype)
        self.target_norm = float(w_in.norm(dim=-1).mean())

    def realign(self, h: Tensor) -> Tensor:
        e = h @ self.w_a
        return e * (self.target_norm / e.norm(dim=-1, keepdim=True).clamp(min=1e-12))

    def _segment(self, role: str, questions: Sequence[str], history: Tensor) -> Embedded:
        """`role`'s text prompts (no slots) as a new left-padded segment after `history` columns."""
        prompts = [split_prompt(self.policy.render(self.pattern.prompt(role, q, {})), self.policy.encode)
                   for q in questions]
        seg = assemble(self.policy.model, prompts, [{}] * len(questions))
        return Embedded(seg.embeds, torch.cat([history, seg.mask], dim=1), [])

    @torch.no_grad()
    def answer(self, questions: Sequence[str], rounds: int, max_new_tokens: int) -> list[list[int]]:
        autocast = getattr(self.policy, "autocast", None)  # an HFPolicy's precision (bfloat16: autocast)
        with autocast() if autocast is not None else contextlib.nullcontext():
            return self._answer(questions, rounds, max_new_tokens)

    def _answer(self, questions: Sequence[str], rounds: int, max_new_tokens: int) -> list[list[int]]:
        model = self.policy.model
        cache = new_cache(model)
        mask = torch.zeros(len(questions), 0, dtype=torch.long, device=self.policy.device)
        for r in range(rounds):
            for role in self.pattern.roles:
                seg = self._segment(role, questions, mask)
                if r == rounds - 1 and role == self.pattern.final:
                    return greedy_decode(model, seg, max_new_tokens, self.policy.eos_ids, cache)
                h, cache = forward_hidden(model, seg.embeds, seg.mask, seg.positions, cache)
                mask = seg.mask
                for _ in range(self.latent_steps):
                    mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                    h, cache = forward_hidden(model, self.realign(h[:, -1])[:, None], mask,
                                              mask.sum(-1, keepdim=True) - 1, cache)
        raise AssertionError("unreachable: the last round always ends with the final role")

    def run(self, questions: Sequence[str], rounds: int, max_new_tokens: int,
            batch_size: int) -> tuple[list[str], list[int]]:
        texts, tokens = [], []
        for i in range(0, len(questions), batch_size):
            ids = self.answer(questions[i : i + batch_size], rounds, max_new_tokens)
            tokens += [len(x) for x in ids]
            texts += [self.policy.decode(x) for x in ids]
        return texts, tokens
