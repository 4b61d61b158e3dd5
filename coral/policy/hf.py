"""HFPolicy: a transformers causal LM as a coral Policy (sampling) and TrainablePolicy (training).

Generation is coral's own decoding loop over the model's KV cache (not `model.generate`), so that
every request in a batch keeps its own SamplingParams and seed, and so that the log-probability of
each sampled token is the one of the distribution it was actually drawn from:
  - temperature T > 0: softmax(logits / T); with top_p < 1 the distribution is restricted to the
    nucleus (smallest set of most likely tokens with mass >= top_p) and renormalised, and the
    logprob is the renormalised one. `forward(..., temperature=T)` reproduces these logprobs exactly
    only when top_p == 1 (GRPO should sample with top_p=1, or correct for the mismatch).
  - temperature 0 (greedy): the argmax token; its logprob is under the unscaled model distribution
    (the sampler's own distribution is a point mass and would report 0.0 for every token).
A request with `seed` set draws from its own torch.Generator, so it reproduces whatever else is in
the batch (up to the float noise that different padding can cause). The KV cache is written into
buffers preallocated for prompt + budget (kv_cache.py), not grown by concatenation; the sampling
of each step is sampling.py's. Requests with identical prompt ids (the samples of a GRPO group) are
prefilled once and share that prompt's cache in place (decoding.py, group_prefill.py); within a
batch, the samples of one prompt are placed side by side.
Completions: `completion_ids` and `logprobs` are aligned 1:1 and end with the eos token (kept, so
training learns to stop), with the token that completed a stop string, or at max_new_tokens.
`text` excludes special tokens and is cut before the first stop string; when the stop string ends
inside a token, the ids keep that whole token, so decode(completion_ids) may extend past `text`.
Length: a prompt of max_len tokens or more (max_len = config.max_position_embeddings) raises a
ValueError unless `truncate_prompt_left=True`, which keeps its last max_len - max_new_tokens tokens
(at least one); a prompt that fits gets at most max_len - len(prompt) new tokens ("length").
A tokenizer without a pad token pads with its eos token (padding is always masked).
Dropout is set to 0 when the policy is built (and after add_lora), so train mode changes nothing in
forward.
Precision (`dtype`, see precision.py): the model's weights are float32 master weights. With bfloat16,
generation runs on a bfloat16 copy of them and `forward` (the trainer's logprobs) under bfloat16
autocast, so the two differ by rounding: the sampler's logprobs are not exactly the trainer's (the GRPO
learner logs the gap and TIS corrects it). With float32 they agree up to float noise.

This module does NOT build models or tokenizers (see tiny.py), does NOT shard across devices, and
does NOT implement speculative, beam or constrained decoding.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from coral.policy import group_prefill
from coral.policy.base import Completion, GenerationRequest, Message, SamplingParams
from coral.policy.decoding import PaddedRows, SharedPrompts
from coral.policy.hf_model import (
    base_model,
    disable_dropout,
    eos_ids,
    eval_mode,
    is_peft,
    no_hf_progress_bars,
)
from coral.policy.kv_cache import buffered_cache, cache_of
from coral.policy.precision import dtype_name, forget_copies, low_precision_weights, resolve_dtype
from coral.policy.sampling import GrowingCompletion, TokenSampler

# ChatML; used for tokenizers that bring no chat template of their own.
DEFAULT_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)
META_FILE = "coral_policy.json"
SHARED_PREFIX_MIN = 8  # forward(): a shared prompt prefix shorter than this is not worth a separate pass
ADAPTER_DIR = "adapter"
# peft (0.21) still reads `model.is_gradient_checkpointing`, which transformers 5 deprecates: one
# FutureWarning per LoRA wrap or load, about library internals the user cannot act on.
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)


class HFPolicy:
    """A transformers causal LM + tokenizer. See the module docstring for sampling semantics."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        name: str = "hf",
        device: str | None = None,
        batch_size: int = 16,
        truncate_prompt_left: bool = False,
        dtype: str | torch.dtype = "float32",
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"HFPolicy batch_size must be > 0, got {batch_size}")
        self.model = model.to(device) if device is not None else model
        # float32 master weights whatever the rollout precision: the optimiser steps on these
        if any(p.is_floating_point() and p.dtype != torch.float32 for p in self.model.parameters()):
            self.model.float()
        # off in train mode too (TRL's disable_dropout): forward must reproduce the sampler's logprobs,
        # or the PPO ratio of an on-policy batch is not 1 and two forwards of one batch disagree
        disable_dropout(self.model)
        self.tokenizer = tokenizer
        self.name = name
        self.batch_size = batch_size
        self.truncate_prompt_left = truncate_prompt_left
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.dtype_spec = dtype if isinstance(dtype, str) else dtype_name(dtype)
        self.dtype: torch.dtype = resolve_dtype(dtype, self.device)  # rollouts; autocast of forward
        self.max_len: int | None = getattr(model.config, "max_position_embeddings", None)
        self.eos_ids = eos_ids(tokenizer, model)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id: int = pad if pad is not None else 0
        forward_params = inspect.signature(base_model(model).forward).parameters
        self._cache_kw = "cache" if "cache" in forward_params else "past_key_values"
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in forward_params else None
        # forward() computes a prompt prefix shared by the whole batch once (same log-probs and gradients
        # up to float rounding; SFT of the tiny coder: about 1/6 fewer tokens)
        self.share_prompt_prefix = True
        # generate() prefills each distinct prompt of a batch once and its samples share that cache
        # (decoding.py); False prefills every request on its own (same tokens up to float rounding)
        self.share_prompt_cache = True
        # generate() in bfloat16 on a CPU runs the linear layers on prepacked weights (packed_linear.py:
        # the same outputs, 1.4x faster linears, one more copy of the weights in memory); False: F.linear
        self.pack_linears = True

    # ------------------------------------------------------------------ text
    def render(self, messages: Sequence[Message]) -> str:
        """The chat rendered for generation (tokenizer's template, else DEFAULT_CHAT_TEMPLATE)."""
        template = None if getattr(self.tokenizer, "chat_template", None) else DEFAULT_CHAT_TEMPLATE
        return self.tokenizer.apply_chat_template(
            list(messages), chat_template=template, tokenize=False, add_generation_prompt=True
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without adding bos/eos (chat templates write their own)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens removed."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # ------------------------------------------------------------------ sampling
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One completion per request, in order; batches of `batch_size` prompts of similar length."""
        prompts = [self._prompt_ids(i, r) for i, r in enumerate(requests)]
        # by length, and the samples of one prompt side by side (a group split across batches is
        # prefilled once in each)
        first: dict[tuple[int, ...], int] = {}
        order = sorted(range(len(requests)), key=lambda i: (len(prompts[i]), first.setdefault(tuple(prompts[i]), i)))
        results: list[Completion | None] = [None] * len(requests)
        with torch.no_grad(), eval_mode(self.model), low_precision_weights(self.model, self.dtype, self.pack_linears):
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                outs = self._generate_batch(
                    [requests[i].sampling for i in chunk], [prompts[i] for i in chunk]
                )
                for i, completion in zip(chunk, outs, strict=True):
                    results[i] = completion
        return [c for c in results if c is not None]

    def _prompt_ids(self, index: int, request: GenerationRequest) -> list[int]:
        ids = self.encode(self.render(request.messages))
        if not ids:
            raise ValueError(f"request {index}: the rendered prompt is empty")
        if self.max_len is None or len(ids) < self.max_len:
            return ids
        if not self.truncate_prompt_left:
            raise ValueError(
                f"request {index}: prompt is {len(ids)} tokens, the model's max length is {self.max_len} "
                f"(pass truncate_prompt_left=True to keep the end of long prompts)"
            )
        return ids[-max(1, self.max_len - request.sampling.max_new_tokens) :]

    def _generate_batch(self, params: list[SamplingParams], prompts: list[list[int]]) -> list[Completion]:
        budgets = [
            p.max_new_tokens if self.max_len is None else min(p.max_new_tokens, self.max_len - len(ids))
            for p, ids in zip(params, prompts, strict=True)
        ]
        rows = [GrowingCompletion(stop=p.stop, budget=b) for p, b in zip(params, budgets, strict=True)]
        sampler = TokenSampler(params, budgets, self.device)
        batch = self._running_batch(prompts, max(budgets))
        logits = batch.prefill()
        live = list(range(len(rows)))  # the request of each line of the running batch
        for _ in range(max(budgets)):
            tokens, logprobs = sampler.sample(logits)
            finished = 0
            for i, token, logprob in zip(live, tokens.tolist(), logprobs.tolist(), strict=True):
                if rows[i].done:  # finished earlier, still in the batch until the next compaction
                    finished += 1
                    continue
                rows[i].push(token, logprob, token in self.eos_ids, self.decode)
                finished += rows[i].done
            if finished == len(live):
                break
            # finished requests leave the batch (and its KV cache) once they are a quarter of it:
            # each compaction copies the rows' cache, each finished row kept costs one row of compute
            if 4 * finished >= len(live):
                keep = [j for j, i in enumerate(live) if not rows[i].done]
                index = torch.tensor(keep, device=self.device)
                batch.keep(index)
                live, sampler, tokens = [live[j] for j in keep], sampler.select(keep), tokens[index]
            logits = batch.step(tokens)
        return [row.completion(ids, self.decode) for row, ids in zip(rows, prompts, strict=True)]

    def _running_batch(self, prompts: list[list[int]], budget: int) -> PaddedRows | SharedPrompts:
        """Samples of one prompt share its prefill: in place where the model allows it (SharedPrompts),
        else as copies (PaddedRows with dedupe); `share_prompt_cache = False` prefills every row."""
        repeats = len({tuple(ids) for ids in prompts}) < len(prompts)
        if self.share_prompt_cache and repeats and self._in_place_sharing():
            return SharedPrompts(self.model, self._step, prompts, budget, self.pad_id, self.device)
        return PaddedRows(self.model, self._step, prompts, budget, self.pad_id, self.device,
                          dedupe=self.share_prompt_cache)

    def _in_place_sharing(self) -> bool:
        return group_prefill.supports(self.model) and buffered_cache(self.model, 1) is not None

    def _step(self, input_ids: Tensor, mask: Tensor | None, positions: Tensor, cache: Any,
              **extra: Any) -> tuple[Tensor, Any]:
        """One forward pass over new tokens; returns fp32 logits of the last position and the cache."""
        kwargs: dict[str, Any] = {} if cache is None else {self._cache_kw: cache}
        if self._keep_kw is not None:
            kwargs[self._keep_kw] = 1
        out = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, **kwargs, **extra
        )
        return out.logits[:, -1, :].float(), cache_of(out)

    # ------------------------------------------------------------------ training
    def forward(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float = 1.0,
    ) -> tuple[Tensor, Tensor]:
        """Log-probs of each completion token given its prompt, in one forward pass (grad enabled; a
        prompt prefix that the whole batch shares is computed once first, see `_shared_prefix`).
        Returns (logprobs [B, T] float32, mask [B, T] bool), right padded, T = longest completion."""
        if len(prompt_ids) != len(completion_ids):
            raise ValueError(f"forward got {len(prompt_ids)} prompts but {len(completion_ids)} completions")
        if temperature <= 0:
            raise ValueError(f"forward temperature must be > 0, got {temperature}")
        for i, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
            if not p:
                raise ValueError(f"forward: prompt_ids[{i}] is empty (the first token needs a context)")
            if self.max_len is not None and len(p) + len(c) > self.max_len:
                raise ValueError(
                    f"forward: sequence {i} has {len(p) + len(c)} tokens > max length {self.max_len}"
                )
        shared = self._shared_prefix(prompt_ids)
        seqs = [list(p[shared:]) + list(c) for p, c in zip(prompt_ids, completion_ids, strict=True)]
        width, steps = max(len(s) for s in seqs), max(len(c) for c in completion_ids)
        dev = self.device
        input_ids = torch.tensor([s + [self.pad_id] * (width - len(s)) for s in seqs], device=dev)
        attn = torch.tensor([[1] * (shared + len(s)) + [0] * (width - len(s)) for s in seqs], device=dev)
        targets = torch.tensor([list(c) + [0] * (steps - len(c)) for c in completion_ids], device=dev)
        mask = torch.tensor([[t < len(c) for t in range(steps)] for c in completion_ids], device=dev)
        mask = mask.reshape(len(seqs), steps)
        # logits at position j predict token j + 1: completion token t of row b is predicted at P_b - 1 + t
        starts = torch.tensor([len(p) - shared - 1 for p in prompt_ids], device=dev)
        where = (starts[:, None] + torch.arange(steps, device=dev)[None, :]).clamp(max=width - 1)
        with self.autocast():
            if shared:
                kwargs = {self._cache_kw: self._prefix_cache(prompt_ids[0][:shared], len(seqs)), "use_cache": True,
                          "position_ids": torch.arange(shared, shared + width, device=dev)[None, :].expand(len(seqs), -1)}
            else:
                kwargs = {"use_cache": False}
            # logits only from the first position that predicts a completion token on (the output head
            # over the vocabulary at every prompt position is most of the memory of a long prompt)
            first = int(starts.min())
            if self._keep_kw is not None:
                kwargs[self._keep_kw] = width - first
                where = where - first
            logits = self.model(input_ids=input_ids, attention_mask=attn, **kwargs).logits
        picked = logits.gather(1, where[:, :, None].expand(-1, -1, logits.shape[-1])).float()
        logprobs = torch.log_softmax(picked / temperature, dim=-1).gather(-1, targets[:, :, None]).squeeze(-1)
        return logprobs.masked_fill(~mask, 0.0), mask

    def autocast(self) -> contextlib.AbstractContextManager:
        """bfloat16 autocast when the policy's dtype is bfloat16, else nothing: `forward` runs in it, and
        so should code that calls `self.model` directly (the weights stay float32 masters: gradients
        and optimiser state are float32)."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def _shared_prefix(self, prompt_ids: Sequence[Sequence[int]]) -> int:
        """Length of the prompt prefix that every row shares (a chat template's system turn), when it is
        worth computing once: at least SHARED_PREFIX_MIN tokens, in a batch of two or more rows, and
        always leaving each row at least one prompt token of its own; else 0."""
        if not self.share_prompt_prefix or len(prompt_ids) < 2:
            return 0
        limit = min(len(p) for p in prompt_ids) - 1
        first = prompt_ids[0]
        n = 0
        while n < limit and all(p[n] == first[n] for p in prompt_ids):
            n += 1
        return n if n >= SHARED_PREFIX_MIN else 0

    def _prefix_cache(self, prefix: Sequence[int], rows: int) -> Any:
        """KV cache of `prefix` computed once (with grad) and repeated for `rows` rows."""
        kwargs: dict[str, Any] = {} if self._keep_kw is None else {self._keep_kw: 1}
        ids = torch.tensor([list(prefix)], device=self.device)
        out = self.model(input_ids=ids, use_cache=True, **kwargs)
        cache = cache_of(out)
        cache.batch_repeat_interleave(rows)
        return cache

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The trainable parameters (requires_grad): all of them, or only LoRA's after add_lora."""
        return (p for p in self.model.parameters() if p.requires_grad)

    def train(self) -> HFPolicy:
        self.model.train()
        return self

    def eval(self) -> HFPolicy:
        self.model.eval()
        forget_copies(self.model)  # after an update: the rollout copy is made again from the new weights
        return self

    def add_lora(self, r: int = 8, alpha: int = 16, target_modules: Sequence[str] | None = None) -> None:
        """Wrap the model with peft LoRA adapters (default: every linear layer except the output head);
        afterwards only the adapter weights require grad. B starts at zero (the model is unchanged)."""
        # lazy: peft (about a second) only for LoRA policies
        from peft import LoraConfig, PeftModel, get_peft_model

        if isinstance(self.model, PeftModel):
            raise ValueError(f"policy {self.name!r} already has LoRA adapters")
        targets = list(target_modules) if target_modules is not None else "all-linear"
        config = LoraConfig(
            r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, task_type="CAUSAL_LM"
        )
        self.model = get_peft_model(self.model, config)
        disable_dropout(self.model)

    def adopt(self, trained: HFPolicy) -> None:
        """Take the weights of `trained`, a copy of this policy (read back from its `save`) trained since."""
        self.model.load_state_dict(trained.model.state_dict())

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Model + tokenizer as a plain HF directory; LoRA adapters (if any) go to `path/adapter`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with no_hf_progress_bars():
            self._save(path)

    def _save(self, path: Path) -> None:
        if is_peft(self.model):
            self._save_base(path)
            self.model.save_pretrained(path / ADAPTER_DIR)
        else:
            self.model.save_pretrained(path)
        self._save_tokenizer_and_meta(path)

    def _save_base(self, path: Path) -> None:
        """A peft model's base weights, without adapters, as a plain HF model directory."""
        base = self.model.get_base_model()
        state = {k.replace(".base_layer.", "."): v for k, v in base.state_dict().items() if ".lora_" not in k}
        base.save_pretrained(path, state_dict=state)

    def _save_tokenizer_and_meta(self, path: Path) -> None:
        self.tokenizer.save_pretrained(path)
        meta = {"name": self.name, "batch_size": self.batch_size, "dtype": self.dtype_spec}
        (path / META_FILE).write_text(json.dumps(meta))

    @classmethod
    def load(cls, path: str | Path, device: str | None = None, **kwargs: Any) -> HFPolicy:
        """A policy from a local directory written by `save` or `save_pretrained`, or a hub name.
        Extra kwargs go to HFPolicy (name, batch_size, truncate_prompt_left, dtype); the weights load as
        float32 master weights whatever the checkpoint's precision."""
        # lazy: transformers (seconds) only when a model is loaded from disk
        from transformers import AutoModelForCausalLM, AutoTokenizer

        local = Path(path)
        # a local checkpoint loads in a blink: its per-shard bars only clutter training logs; a hub
        # download keeps them
        with no_hf_progress_bars() if local.is_dir() else contextlib.nullcontext():
            model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        if (local / ADAPTER_DIR).is_dir():
            # lazy: peft (about a second) only for LoRA policies
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(local / ADAPTER_DIR), is_trainable=True)
        meta = json.loads((local / META_FILE).read_text()) if (local / META_FILE).is_file() else {}
        kwargs = {
            "name": meta.get("name", local.name or "hf"),
            "batch_size": meta.get("batch_size", 16),
            "dtype": meta.get("dtype", "float32"),
        } | kwargs
        return cls(model.eval(), tokenizer, device=device, **kwargs)


