"""The agents and data of a RecursiveMAS run: records split train/test, frozen HF agents per role.

`build_records` gives procedural records (train and test splits are disjoint skeletons, see
coral.benchmarks.procedural) or JSONL records (cut by position). `build_agents` builds one tiny causal
LM per role with widths from the config (agents of different hidden sizes) sharing one BPE tokenizer
trained on the records, and optionally cold-starts each by SFT on its role's gold text in the text-MAS
prompt format (the collaborators' gold text in its slots), before the run freezes them.
This module does NOT freeze, link or train links (system.py, train.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coral.latent.data import Record, load_records, procedural_records
from coral.latent.patterns import Pattern, get_pattern


def build_records(cfg: Any) -> tuple[list[Record], list[Record]]:
    """(train, test) records of `cfg.data`: "procedural" or a JSONL path (last n_test_tasks are test)."""
    if cfg.data == "procedural":
        from coral.benchmarks.procedural import make_tasks

        kw = {"min_depth": 1, "max_depth": cfg.max_depth, "seed": cfg.seed}
        return (procedural_records(make_tasks(cfg.n_train_tasks, "train", **kw)),
                procedural_records(make_tasks(cfg.n_test_tasks, "test", **kw)))
    records = load_records(cfg.data)
    if len(records) <= cfg.n_test_tasks:
        raise ValueError(f"{cfg.data}: {len(records)} records, need more than n_test_tasks={cfg.n_test_tasks}")
    return records[: -cfg.n_test_tasks][: cfg.n_train_tasks], records[-cfg.n_test_tasks:]


def text_sources(pattern: Pattern, role: str, record: Record) -> dict[str, str]:
    """The first-round sources of `role`, filled with their gold text (cold start, inner loop)."""
    return {s: record.field(pattern.gold[s]) for s, _ in pattern.sources(role, 0)}


def role_examples(pattern: Pattern, role: str, records: Sequence[Record]) -> list[Any]:
    from coral.train.sft import SFTExample

    return [SFTExample(tuple(pattern.prompt(role, r.question, text_sources(pattern, role, r))),
                       r.field(pattern.gold[role])) for r in records]


def build_agents(cfg: Any, train: Sequence[Record], progress: bool = False) -> dict[str, Any]:
    """One tiny HF agent per role of `cfg.pattern`; widths cycle through `cfg.agent_widths`."""
    from coral.policy.hf import HFPolicy
    from coral.policy.tiny import build_model, build_tokenizer
    from coral.train.sft import SFTConfig, train_sft

    pattern = get_pattern(cfg.pattern)
    corpus = [m["content"] for role in pattern.roles for ex in role_examples(pattern, role, train)
              for m in ex.messages] + [r.field(f) for r in train for f in ("plan", "refined_plan", "answer")]
    tokenizer = build_tokenizer(corpus, vocab_size=cfg.vocab_size)
    agents = {}
    for i, role in enumerate(pattern.roles):
        width = cfg.agent_widths[i % len(cfg.agent_widths)]
        model = build_model(tokenizer, seed=cfg.seed + i, d_model=width, n_layers=cfg.n_layers,
                            n_heads=4, max_len=cfg.max_len_tokens)
        agents[role] = HFPolicy(model, tokenizer, name=f"{role}-d{width}")
        if cfg.sft.epochs > 0:
            sft = SFTConfig(epochs=cfg.sft.epochs, batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, seed=cfg.seed)
            train_sft(agents[role], role_examples(pattern, role, train), sft, progress=progress)
    return agents
