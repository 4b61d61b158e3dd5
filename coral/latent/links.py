"""RecursiveLinks: the small trainable maps that carry latent thoughts within and between agents.

- `InnerLink` (one per agent, d -> d): `y = LN_post(x + W2 GELU(W1 LN_pre(x)))`. Its input is the agent's
  last-layer hidden state, its output lives in that agent's input-embedding space, so it can be appended
  as the next input embedding (a latent thought).
- `OuterLink` (one per directed pair of agents, d_src -> d_tgt): `y = LN_tgt(W2 GELU(W1 LN_src(x)) + W3 x)`
  with W1: d_src -> 2 d_tgt, W2: 2 d_tgt -> d_tgt, W3: d_src -> d_tgt. It carries a source agent's latent
  thoughts (already through the source's inner link) into the target agent's embedding space.

Both are plain `torch.nn.Module`s over the last dimension of any tensor. This module does NOT run
language models, decide where latents go, or train anything (see rollout.py, system.py, train.py).
"""

from __future__ import annotations

from torch import Tensor, nn


class InnerLink(nn.Module):
    """Residual MLP d -> d between two LayerNorms (hidden state -> the same agent's input embedding)."""

    def __init__(self, d_model: int, hidden_mult: int = 2) -> None:
        super().__init__()
        if d_model < 1 or hidden_mult < 1:
            raise ValueError(f"InnerLink needs d_model >= 1 and hidden_mult >= 1, got {d_model}, {hidden_mult}")
        self.ln_pre = nn.LayerNorm(d_model)
        self.w1 = nn.Linear(d_model, hidden_mult * d_model)
        self.w2 = nn.Linear(hidden_mult * d_model, d_model)
        self.ln_post = nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.ln_post(x + self.w2(nn.functional.gelu(self.w1(self.ln_pre(x)))))


class OuterLink(nn.Module):
    """MLP d_src -> d_tgt with a linear skip, normalised in the target space."""

    def __init__(self, d_src: int, d_tgt: int) -> None:
        super().__init__()
        if d_src < 1 or d_tgt < 1:
            raise ValueError(f"OuterLink needs d_src >= 1 and d_tgt >= 1, got {d_src}, {d_tgt}")
        self.ln_src = nn.LayerNorm(d_src)
        self.w1 = nn.Linear(d_src, 2 * d_tgt)
        self.w2 = nn.Linear(2 * d_tgt, d_tgt)
        self.w3 = nn.Linear(d_src, d_tgt, bias=False)  # the skip: the bias of w2 already shifts the sum
        self.ln_tgt = nn.LayerNorm(d_tgt)

    def forward(self, x: Tensor) -> Tensor:
        return self.ln_tgt(self.w2(nn.functional.gelu(self.w1(self.ln_src(x)))) + self.w3(x))


def num_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def describe_links(inner: dict[str, InnerLink], outer: dict[str, OuterLink]) -> str:
    """One line per link with its parameter count, then the total (printed by the driver)."""
    lines = [f"inner[{name}]: {num_parameters(m):,} parameters" for name, m in inner.items()]
    lines += [f"outer[{name}]: {num_parameters(m):,} parameters" for name, m in outer.items()]
    total = sum(num_parameters(m) for m in [*inner.values(), *outer.values()])
    return "\n".join([*lines, f"links total: {total:,} parameters"])

