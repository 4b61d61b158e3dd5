"""Token sampling for HFPolicy's decoding loop: per-row temperature, top-p and seed, and the growing
completion of each request (ids, logprobs, stop strings).

Each sampled token's logprob is the one of the distribution it was drawn from: softmax(logits / T),
restricted to the top-p nucleus and renormalised when top_p < 1; greedy rows (T = 0) take the argmax and
report its logprob under the unscaled model distribution. This module does NOT run the model or hold
a KV cache (see hf.py and kv_cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from coral.policy.base import Completion, SamplingParams


class TokenSampler:
    """Draws one token per row from per-row (temperature, top_p, seed).

    Each sampling row gets its uniforms for the whole completion up front, `budget` of them from its
    own generator (a seeded row therefore samples the same whatever else is in the batch), and a
    step draws every row's token at once by inverting the cumulative distribution: the token is
    the first whose cumulative probability exceeds u * total, so a token of probability 0 is never
    drawn and each token's chance is its probability."""

    def __init__(self, params: list[SamplingParams], budgets: list[int], device: torch.device) -> None:
        greedy = [p.temperature == 0 for p in params]
        self.greedy = torch.tensor(greedy, device=device)
        self.any_sampled, self.any_greedy = not all(greedy), any(greedy)
        temps = [p.temperature or 1.0 for p in params]
        # over a vocabulary of 50k, each pass over the logits is a visible part of a decoding step
        self.temps = torch.tensor(temps, device=device)[:, None] if any(t != 1.0 for t in temps) else None
        top_ps = [1.0 if g else p.top_p for p, g in zip(params, greedy, strict=True)]
        self.top_ps = torch.tensor(top_ps, device=device)[:, None] if min(top_ps) < 1 else None
        uniforms = torch.full((len(params), max(budgets)), 0.5)
        unseeded = [i for i, p in enumerate(params) if p.seed is None and not greedy[i]]
        if unseeded:
            uniforms[unseeded] = torch.rand(len(unseeded), uniforms.shape[1])
        for i, (p, budget) in enumerate(zip(params, budgets, strict=True)):
            if p.seed is not None and not greedy[i]:
                uniforms[i, :budget] = torch.rand(budget, generator=torch.Generator().manual_seed(p.seed))
        self.uniforms = uniforms.to(device)
        self.step = 0

    def select(self, keep: list[int]) -> TokenSampler:
        """The sampler of the rows `keep` (each keeps its own uniforms)."""
        out = object.__new__(TokenSampler)
        out.greedy, out.any_sampled, out.any_greedy = self.greedy[keep], self.any_sampled, self.any_greedy
        out.temps = None if self.temps is None else self.temps[keep]
        out.top_ps = None if self.top_ps is None else self.top_ps[keep]
        out.uniforms, out.step = self.uniforms[keep], self.step
        return out

    def sample(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        logp = torch.log_softmax(logits if self.temps is None else logits / self.temps, dim=-1)
        if self.top_ps is not None:
            logp = nucleus(logp, self.top_ps)
        tokens = logp.argmax(dim=-1) if self.any_greedy else None
        if self.any_sampled:
            drawn = inverse_cdf(logp.exp(), self.uniforms[:, self.step : self.step + 1])
            tokens = drawn if tokens is None else torch.where(self.greedy, tokens, drawn)
        self.step += 1
        assert tokens is not None  # every row is greedy or sampled
        return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def inverse_cdf(probs: Tensor, uniforms: Tensor) -> Tensor:
    """Per row, the first token whose cumulative probability exceeds u * total ([B, V], [B, 1] -> [B])."""
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    # u * total < total always (u < 1, but the product may round up to total)
    target = torch.minimum(uniforms * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).squeeze(1)


def nucleus(logp: Tensor, top_p: Tensor) -> Tensor:
    """Renormalised log-probs restricted to each row's nucleus; rows with top_p == 1 are unchanged."""
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    sorted_p = sorted_logp.exp()
    mass_before = sorted_p.cumsum(dim=-1) - sorted_p
    drop_sorted = (mass_before >= top_p) & (top_p < 1)
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return torch.log_softmax(logp.masked_fill(drop, float("-inf")), dim=-1)


@dataclass
class GrowingCompletion:
    """The growing completion of one request."""

    stop: tuple[str, ...]
    budget: int
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    done: bool = False
    finish_reason: str = "length"
    cut: int | None = None  # character index of the first stop string in the decoded text

    def push(self, token: int, logprob: float, is_eos: bool, decode: Any) -> None:
        self.ids.append(token)
        self.logprobs.append(logprob)
        if is_eos:
            self.done, self.finish_reason = True, "stop"
        elif self.stop:
            text = decode(self.ids)
            hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
            if hits:
                self.done, self.finish_reason, self.cut = True, "stop", min(hits)
        if len(self.ids) >= self.budget:
            self.done = True

    def completion(self, prompt_ids: list[int], decode: Any) -> Completion:
        text = decode(self.ids)
        return Completion(
            text=text[: self.cut] if self.cut is not None else text,
            prompt_ids=list(prompt_ids),
            completion_ids=list(self.ids),
            logprobs=list(self.logprobs),
            finish_reason=self.finish_reason,
            usage={"prompt_tokens": len(prompt_ids), "completion_tokens": len(self.ids)},
        )

