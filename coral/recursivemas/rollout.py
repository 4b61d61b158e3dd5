"""Latent rollout on one frozen HF causal LM: prompts with latent slots, latent thoughts, decoding.

A prompt is chat text with slot markers (`slot_marker(name)`); `split_prompt` cuts the rendered chat
at the markers and tokenizes the pieces, `assemble` embeds the pieces and splices latent vectors
(already in this model's input-embedding space) exactly where each marker was, then left-pads a batch.
`latent_rollout` runs the prompt once and then m latent steps through the KV cache: the last hidden
state h goes through the agent's inner link, e = inner(h) is appended as the next input embedding,
one position per step (linear in m; re-running the whole sequence per step is quadratic, see
`latent_rollout_uncached`, kept as the reference the tests compare against). The m thoughts e_1..e_m
are returned. `greedy_decode` decodes text from an embedded prompt; `answer_nll` is the teacher-forced
cross-entropy of gold tokens after an embedded prompt.

This module does NOT know about roles, rounds or outer links (see system.py), and does NOT sample
(decoding is greedy: the latent system is evaluated deterministically).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache

_MARKER = "⟦latent:{}⟧"
_MARKER_RE = re.compile(r"⟦latent:([A-Za-z0-9_\-]+)⟧")


def slot_marker(name: str) -> str:
    """The text that marks where the latents of `name` go in a prompt."""
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
        raise ValueError(f"slot name must be letters, digits, '_' or '-', got {name!r}")
    return _MARKER.format(name)


@dataclass(frozen=True)
class SplitPrompt:
    """Token ids of the text around the slots: pieces[0], slots[0], pieces[1], ..., pieces[-1]."""

    pieces: tuple[tuple[int, ...], ...]
    slots: tuple[str, ...]


def split_prompt(text: str, encode: Callable[[str], list[int]]) -> SplitPrompt:
    """Cut rendered prompt `text` at its slot markers and tokenize each piece on its own (so a marker
    never merges with neighbouring text into one token)."""
    parts = _MARKER_RE.split(text)
    pieces = tuple(tuple(encode(p)) if p else () for p in parts[0::2])
    slots = tuple(parts[1::2])
    if len(set(slots)) != len(slots):
        raise ValueError(f"a prompt names the same latent slot twice: {list(slots)}")
    return SplitPrompt(pieces, slots)


@dataclass
class Embedded:
    """A left-padded batch of embedded prompts. `slot_spans[row][slot] = (start, end)`: the columns
    of `embeds` that hold that slot's latents."""

    embeds: Tensor  # (batch, length, d_model)
    # (batch, past + length), 1 for real positions, long; `past` > 0 only when the prompt continues a
    # KV cache that already holds `past` columns (LatentMAS hands one cache from agent to agent)
    mask: Tensor
    slot_spans: list[dict[str, tuple[int, int]]]

    @property
    def positions(self) -> Tensor:
        """Position ids of the `embeds` columns (padding does not advance the position)."""
        return (self.mask.cumsum(-1) - 1).clamp(min=0)[:, -self.embeds.shape[1]:]


def assemble(model: Any, prompts: Sequence[SplitPrompt], latents: Sequence[Mapping[str, Tensor]]) -> Embedded:
    """Embed each prompt's pieces with `model`'s input embeddings and put `latents[row][slot]`
    (shape (m, d_model)) at each slot; left-pad the rows to one length."""
    table = model.get_input_embeddings()
    device = table.weight.device
    rows: list[Tensor] = []
    spans: list[dict[str, tuple[int, int]]] = []
    for i, (prompt, given) in enumerate(zip(prompts, latents, strict=True)):
        missing = set(prompt.slots) - set(given)
        if missing:
            raise ValueError(f"prompt {i} has slot {sorted(missing)[0]!r} but no latents were given for it")
        parts: list[Tensor] = []
        row_spans: dict[str, tuple[int, int]] = {}
        length = 0
        for j, piece in enumerate(prompt.pieces):
            if piece:
                parts.append(table(torch.tensor(piece, device=device)))
                length += len(piece)
            if j < len(prompt.slots):
                lat = given[prompt.slots[j]].to(device=device, dtype=table.weight.dtype)
                row_spans[prompt.slots[j]] = (length, length + lat.shape[0])
                parts.append(lat)
                length += lat.shape[0]
        if length == 0:
            raise ValueError(f"prompt {i} is empty")
        rows.append(torch.cat(parts))
        spans.append(row_spans)
    width = max(r.shape[0] for r in rows)
    embeds = torch.zeros(len(rows), width, rows[0].shape[-1], device=device, dtype=rows[0].dtype)
    mask = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        pad = width - r.shape[0]
        embeds[i, pad:] = r
        mask[i, pad:] = 1
        spans[i] = {k: (a + pad, b + pad) for k, (a, b) in spans[i].items()}
    return Embedded(embeds, mask, spans)


def _base(model: Any) -> Any:
    """The transformer without its LM head (hidden states only: no vocabulary-sized logits)."""
    return model.base_model


@functools.cache
def _cache_keyword(forward: Any) -> str:
    """transformers 5.x renames `past_key_values` to `cache`; use whichever this model takes."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def forward_hidden(model: Any, embeds: Tensor, mask: Tensor, positions: Tensor, cache: Any = None) -> tuple[Tensor, Any]:
    base = _base(model)
    kw = {_cache_keyword(type(base).forward): cache} if cache is not None else {}
    out = base(inputs_embeds=embeds, attention_mask=mask, position_ids=positions, use_cache=cache is not None, **kw)
    returned = getattr(out, "cache", None)
    return out.last_hidden_state, returned if returned is not None else getattr(out, "past_key_values", None)


def new_cache(model: Any) -> Any:
    return DynamicCache(config=model.config)


def latent_rollout(model: Any, inner: Callable[[Tensor], Tensor], prompt: Embedded, steps: int) -> Tensor:
    """m = `steps` latent thoughts (batch, m, d_model): e_1 = inner(h of the prompt's last position),
    e_t = inner(h after appending e_{t-1}). The prompt runs once; each step adds one position to the
    KV cache."""
    if steps < 1:
        raise ValueError(f"latent_rollout: steps must be >= 1, got {steps}")
    h, cache = forward_hidden(model, prompt.embeds, prompt.mask, prompt.positions, new_cache(model))
    thoughts = [inner(h[:, -1])]
    mask, next_pos = prompt.mask, prompt.mask.sum(-1, keepdim=True)
    for _ in range(steps - 1):  # the m-th thought needs no forward pass of its own
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        h, cache = forward_hidden(model, thoughts[-1][:, None], mask, next_pos, cache)
        next_pos = next_pos + 1
        thoughts.append(inner(h[:, -1]))
    return torch.stack(thoughts, dim=1)


def latent_rollout_uncached(model: Any, inner: Callable[[Tensor], Tensor], prompt: Embedded, steps: int) -> Tensor:
    """The same thoughts as `latent_rollout`, re-running the whole sequence at every step (quadratic;
    the public reference code does this). For tests and the cost comparison only."""
    embeds, mask = prompt.embeds, prompt.mask
    thoughts: list[Tensor] = []
    for _ in range(steps):
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        h, _ = forward_hidden(model, embeds, mask, positions)
        thoughts.append(inner(h[:, -1]))
        embeds = torch.cat([embeds, thoughts[-1][:, None]], dim=1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return torch.stack(thoughts, dim=1)


@torch.no_grad()
def greedy_decode(model: Any, prompt: Embedded, max_new_tokens: int, eos_ids: set[int],
                  cache: Any = None, stop: Callable[[int, list[int]], bool] | None = None) -> list[list[int]]:
    """Greedy tokens after each embedded prompt, through the KV cache; a row ends with its first eos
    token (kept), after `max_new_tokens`, or when `stop(row, its tokens so far)` says so (toolcalls.py
    stops a row at a finished tool call)."""
    head = model.get_output_embeddings()
    table = model.get_input_embeddings()
    cache = cache if cache is not None else new_cache(model)
    h, cache = forward_hidden(model, prompt.embeds, prompt.mask, prompt.positions, cache)
    mask, next_pos = prompt.mask, prompt.mask.sum(-1, keepdim=True)
    out: list[list[int]] = [[] for _ in range(prompt.embeds.shape[0])]
    done = [False] * len(out)
    eos = torch.tensor(sorted(eos_ids), device=mask.device)
    for _ in range(max_new_tokens):
        token = head(h[:, -1]).argmax(-1)
        for i, t in enumerate(token.tolist()):
            if not done[i]:
                out[i].append(t)
                done[i] = t in eos_ids or (stop is not None and stop(i, out[i]))
        if all(done):
            break
        # finished rows keep feeding eos; their outputs are ignored
        token = torch.where(torch.isin(token, eos) | torch.tensor(done, device=mask.device), eos[0], token)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        h, cache = forward_hidden(model, table(token)[:, None], mask, next_pos, cache)
        next_pos = next_pos + 1
    return out


def teacher_forced(model: Any, prompt: Embedded, targets: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor, Tensor]:
    """Run each embedded prompt followed by its `targets` token ids (right-padded, so the prompt's
    columns do not move). Returns (h, ids, mask): h[:, j] is the last hidden state at the position
    that predicts target token ids[:, j]; mask marks real target tokens."""
    if any(len(t) == 0 for t in targets):
        raise ValueError("teacher_forced: a target is empty")
    device = prompt.embeds.device
    width = max(len(t) for t in targets)
    ids = torch.zeros(len(targets), width, dtype=torch.long, device=device)
    tmask = torch.zeros_like(ids)
    for i, t in enumerate(targets):
        ids[i, : len(t)] = torch.tensor(list(t), device=device)
        tmask[i, : len(t)] = 1
    embeds = torch.cat([prompt.embeds, model.get_input_embeddings()(ids)], dim=1)
    mask = torch.cat([prompt.mask, tmask], dim=1)
    h, _ = forward_hidden(model, embeds, mask, (mask.cumsum(-1) - 1).clamp(min=0))
    start = prompt.embeds.shape[1] - 1  # the prompt's last position predicts the first target token
    return h[:, start : start + width], ids, tmask


def answer_nll(model: Any, prompt: Embedded, targets: Sequence[Sequence[int]]) -> Tensor:
    """Mean cross-entropy of the `targets` token ids (one list per row) teacher-forced after each
    embedded prompt."""
    h, ids, mask = teacher_forced(model, prompt, targets)
    logits = model.get_output_embeddings()(h).float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids, reduction="none")
    return (nll * mask).sum() / mask.sum()
