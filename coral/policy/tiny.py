"""The embedded default policy: a tiny causal LM built from a config, with a locally built tokenizer.

`tiny_policy()` needs no download: the model is a small Llama built from `LlamaConfig` with
seeded random weights, and the tokenizer is built with the `tokenizers` library, either
  - byte-level (no corpus): 256 byte tokens + 4 special tokens, so any text round-trips, or
  - a byte-level BPE trained on `corpus` (much shorter sequences; still covers any text).
Both are wrapped as a transformers `PreTrainedTokenizerFast` with pad/bos/eos tokens and a ChatML
chat template (`DEFAULT_CHAT_TEMPLATE`), so the result saves and loads with
`save_pretrained` / `from_pretrained` like any hub model.

This module does NOT train the model (see coral.train) and does NOT download anything. A fresh tiny
model writes random text: it is for plumbing, tests and CPU-scale learning experiments.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from coral.policy.hf import DEFAULT_CHAT_TEMPLATE, HFPolicy

PAD, BOS, EOS, IM_START = "<|pad|>", "<|bos|>", "<|im_end|>", "<|im_start|>"
SPECIAL_TOKENS = (PAD, BOS, EOS, IM_START)  # ids 0..3 in every tiny tokenizer
# The chat template is ChatML; its end-of-turn marker <|im_end|> is the eos token, so a model trained
# on rendered chats learns to stop.


def build_tokenizer(corpus: Iterable[str] | None = None, vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (corpus None) or a byte-level BPE with `vocab_size` entries trained on
    `corpus`. Special tokens take ids 0..3 (pad, bos, eos=<|im_end|>, <|im_start|>)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    min_size = len(alphabet) + len(SPECIAL_TOKENS)
    if corpus is not None and vocab_size < min_size:
        raise ValueError(
            f"tiny tokenizer vocab_size must be >= {min_size} (bytes + specials), got {vocab_size}"
        )
    if corpus is None:
        vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + tuple(alphabet))}
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    else:
        tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if corpus is not None:
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=alphabet,
            show_progress=False,
        )
        tok.train_from_iterator(corpus, trainer)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        chat_template=DEFAULT_CHAT_TEMPLATE,
    )


def build_model(
    tokenizer: PreTrainedTokenizerFast,
    seed: int = 0,
    d_model: int = 128,
    n_layers: int = 4,
    n_heads: int = 4,
    max_len: int = 1024,
) -> LlamaForCausalLM:
    """A small Llama with seeded random weights sized to `tokenizer`. The global torch RNG is left
    untouched (the seed applies inside a forked RNG state)."""
    if d_model % n_heads:
        raise ValueError(f"tiny model d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=d_model,
        intermediate_size=4 * d_model,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        max_position_embeddings=max_len,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model.eval()


def tiny_policy(
    seed: int = 0,
    corpus: Iterable[str] | None = None,
    vocab_size: int = 512,
    d_model: int = 128,
    n_layers: int = 4,
    n_heads: int = 4,
    max_len: int = 1024,
    dtype: str = "float32",
) -> HFPolicy:
    """A fresh tiny policy, identical for identical arguments. `vocab_size` is the BPE size when a
    `corpus` is given; the byte-level tokenizer always has 260 entries. `dtype` is HFPolicy's."""
    tokenizer = build_tokenizer(corpus, vocab_size)
    model = build_model(
        tokenizer, seed=seed, d_model=d_model, n_layers=n_layers, n_heads=n_heads, max_len=max_len
    )
    return HFPolicy(model, tokenizer, name="tiny", dtype=dtype)
