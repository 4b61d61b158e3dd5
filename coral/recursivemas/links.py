"""RecursiveLinks: the small trainable maps that carry latent thoughts within and between agents.

- `InnerLink` (one per agent, d -> d): `y = LN_post(x + W2 GELU(W1 LN_pre(x)))`. Its input is the agent's
  last-layer hidden state, its output lives in that agent's input-embedding space, so it can be appended
  as the next input embedding (a latent thought).
- `OuterLink` (one per directed pair of agents, d_src -> d_tgt): `y = LN_tgt(W2 GELU(W1 LN_src(x)) + W3 x)`
  with W1: d_src -> 2 d_tgt, W2: 2 d_tgt -> d_tgt, W3: d_src -> d_tgt. It carries a source agent's latent
  thoughts (already through the source's inner link) into the target agent's embedding space.

Both are plain `torch.nn.Module`s over the last dimension of any tensor.

Initialisation (`init_links`, applied by system.py). A frozen agent reads its slot well only when the
latents look like its token embeddings (measured: the solver's own embeddings of the gold text in the
slot give CE 0.004; zeros, or random vectors of norm 0.2x to 5x an embedding, all give CE 1.44 - the
loss is flat there, so the outer gradient is too weak to find the embeddings). So:
  - "scaled": every final LayerNorm's gain starts at the RMS entry of its target agent's input
    embeddings, so a latent has the norm of a token embedding (PyTorch's gain 1 gives norm sqrt(d),
    ~5x too large for the tiny agents; the cosine inner loss never corrects it: cos ignores scale);
  - "aligned": "scaled", and each outer link starts as the ridge map from the source's input embeddings
    to the target's (W3 = (E_s^T E_s + lambda I)^-1 E_s^T E_t, the MLP branch's W2 scaled by 0.01), so a
    source thought near the source's embedding of token x lands near the target's embedding of x: the
    untrained system is a soft text MAS. Rows are paired by token: with one vocabulary every row; with two
    vocabularies the rows of the token strings both contain (`shared_token_rows`: for two byte-level BPEs a
    string is the same byte sequence, so the pair means the same text). Pairs of vocabularies that share
    less than MIN_SHARED_FRACTION of the smaller one are refused (another token convention, e.g.
    SentencePiece vs byte-level, shares only single characters): the caller is told to use "scaled";
  - "random": PyTorch's defaults.
This module does NOT run language models, decide where latents go, or train anything (see rollout.py,
system.py, train.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

LINK_INITS = ("aligned", "scaled", "random")
MIN_SHARED_FRACTION = 0.5  # "aligned" across two vocabularies: shared token strings / the smaller vocabulary


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



def ridge_realignment(w_out: Tensor, w_in: Tensor, ridge_lambda: float) -> Tensor:
    """W (d_out x d_in) minimising ||W_out W - W_in||^2 + lambda ||W||^2 (rows: one per token), in float64."""
    if ridge_lambda < 0:
        raise ValueError(f"ridge_lambda must be >= 0, got {ridge_lambda}")
    w_out, w_in = w_out.double(), w_in.double()
    gram = w_out.T @ w_out + ridge_lambda * torch.eye(w_out.shape[1], dtype=torch.float64, device=w_out.device)
    return torch.linalg.solve(gram, w_out.T @ w_in)


def embedding_rms(table: Tensor) -> float:
    """The RMS entry of an input-embedding table: LayerNorm gain that gives outputs its rows' norm."""
    return float(table.detach().double().pow(2).mean().sqrt())


def shared_token_rows(vocab_src: Mapping[str, int], vocab_dst: Mapping[str, int], rows_src: int,
                      rows_dst: int) -> tuple[Tensor, Tensor]:
    """(source ids, target ids) of the token strings both vocabularies hold (ids inside the embedding
    tables, `rows_*` rows each), ordered by source id. Raises ValueError when they share less than
    MIN_SHARED_FRACTION of the smaller vocabulary."""
    pairs = sorted((i, vocab_dst[t]) for t, i in vocab_src.items()
                   if t in vocab_dst and i < rows_src and vocab_dst[t] < rows_dst)
    smaller = min(len(vocab_src), len(vocab_dst))
    if len(pairs) < MIN_SHARED_FRACTION * smaller:
        raise ValueError(f"link_init 'aligned': the two vocabularies share {len(pairs)} token strings, under "
                         f"{MIN_SHARED_FRACTION:.0%} of the smaller one ({smaller}): no token-by-token map between "
                         f"their embeddings; use link_init 'scaled'")
    src, dst = zip(*pairs, strict=True)
    return torch.tensor(src), torch.tensor(dst)


@torch.no_grad()
def init_links(how: str, inner: dict[str, InnerLink], outer: dict[str, tuple[OuterLink, str, str]],
               tables: dict[str, Tensor], ridge_lambda: float = 1e-3,
               rows: Mapping[str, tuple[Tensor, Tensor]] | None = None) -> None:
    """Initialise links in place (see the module docstring). `outer[key] = (link, source, target)`;
    `tables[agent]` is that agent's input-embedding weight (vocab x d). "aligned" pairs the tables' rows
    by `rows[key] = (source ids, target ids)`, or row by row when `rows` has no entry for the link (one
    vocabulary: the tables must then have one size)."""
    if how not in LINK_INITS:
        raise ValueError(f"link_init must be one of {LINK_INITS}, got {how!r}")
    if how == "random":
        return
    for role, inner_link in inner.items():
        inner_link.ln_post.weight.fill_(embedding_rms(tables[role]))
    for key, (link, src, dst) in outer.items():
        link.ln_tgt.weight.fill_(embedding_rms(tables[dst]))
        if how == "aligned":
            e_src, e_dst = tables[src].detach(), tables[dst].detach()
            if rows is not None and key in rows:
                e_src, e_dst = e_src[rows[key][0]], e_dst[rows[key][1]]
            if e_src.shape[0] != e_dst.shape[0]:
                raise ValueError(f"link_init 'aligned' needs agents of one vocabulary; {src} has "
                                 f"{e_src.shape[0]} tokens, {dst} {e_dst.shape[0]} (use link_init 'scaled')")
            # lambda relative to the Gram matrix's mean diagonal, so it means the same at any scale
            lam = ridge_lambda * float(e_src.double().pow(2).sum(0).mean())
            link.w3.weight.copy_(ridge_realignment(e_src, e_dst, lam).T.to(link.w3.weight.dtype))
            link.w2.weight.mul_(1e-2)  # near zero, not zero: W1 gets gradient from the first step on
            link.w2.bias.zero_()
