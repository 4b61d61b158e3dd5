"""The agents and data of a RecursiveMAS run: records split train/test, frozen HF agents per role.

`build_records` gives procedural records (train and test splits are disjoint skeletons, see
coral.benchmarks.procedural) or JSONL records (cut by position). `build_agents` gives one agent per role
from `agent_models`: a "tiny" causal LM (widths from `agent_widths` or the pattern: agents of different hidden sizes)
sharing one BPE tokenizer trained on the records, optionally cold-started by SFT on its role's gold text
in the text-MAS prompt format (the collaborators' gold text in its slots), or a pretrained model loaded
through coral.policy.load_policy (its own tokenizer and chat template; no cold start). `save_agents` /
`load_saved_agents` keep them in a run's agents/ folder: tiny weights, pretrained specs only.
This module does NOT freeze, link or train links (system.py, train.py).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coral.benchmarks.procedural import make_tasks
from coral.config import UserInputError
from coral.policy.hf import HFPolicy
from coral.policy.loading import load_policy
from coral.policy.tiny import build_model, build_tokenizer
from coral.recursivemas.data import Record, load_records, procedural_records
from coral.recursivemas.patterns import Pattern, get_pattern
from coral.train.sft import SFTConfig, SFTExample, train_sft


def build_records(cfg: Any) -> tuple[list[Record], list[Record]]:
    """(train, test) records of `cfg.data`: "procedural" or a JSONL path (last n_test_tasks are test)."""
    if cfg.data == "procedural":
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
    return [SFTExample(tuple(pattern.prompt(role, r.question, text_sources(pattern, role, r))),
                       r.field(pattern.gold[role])) for r in records]


TINY = "tiny"
AGENT_FILE = "coral_agent.json"  # in agents/ROLE: the role's model spec (and nothing else for a pretrained one)


def load_pretrained(spec: str, dtype: str = "auto") -> Any:
    """The HF policy named by `spec` (coral.policy.load_policy), as loaded; one-line UserInputError naming
    the field when it cannot be loaded or is not a local HF model (a latent agent needs its weights)."""

    try:
        policy = load_policy(spec, dtype=dtype)
    except (OSError, ValueError, ImportError) as error:  # FileNotFoundError, UserInputError, a missing package
        reason = " ".join(str(error).split())[:300]
        raise UserInputError(f"field 'agent_models': cannot load {spec!r}: {reason}") from error
    if not isinstance(policy, HFPolicy):
        raise UserInputError(f"field 'agent_models': {spec!r} is a {type(policy).__name__}, not a local HF model "
                             "(a latent agent needs its weights and embeddings)")
    return policy


def build_agents(cfg: Any, train: Sequence[Record], progress: bool = False) -> dict[str, Any]:
    """One agent per role of `cfg.pattern`, its spec from `cfg.agent_model(i)`: tiny agents (width
    `cfg.agent_width(i)`, one BPE tokenizer trained on the records, optional SFT cold start) or
    pretrained ones, loaded as they are (no cold start: they are frozen as loaded)."""

    pattern = get_pattern(cfg.pattern)
    specs = [cfg.agent_model(i) for i in range(len(pattern.roles))]
    tokenizer = None
    if TINY in specs:
        corpus = [m["content"] for role in pattern.roles for ex in role_examples(pattern, role, train)
                  for m in ex.messages] + [r.field(f) for r in train for f in ("plan", "refined_plan", "answer")]
        tokenizer = build_tokenizer(corpus, vocab_size=cfg.vocab_size)
    loaded: dict[str, Any] = {}  # one load per spec: a frozen model may serve several roles
    agents = {}
    for i, (role, spec) in enumerate(zip(pattern.roles, specs, strict=True)):
        if spec != TINY:
            agents[role] = loaded[spec] = loaded.get(spec) or load_pretrained(spec, cfg.dtype)
            continue
        width = cfg.agent_width(i)
        assert tokenizer is not None, "built above: a tiny agent is among the specs"
        model = build_model(tokenizer, seed=cfg.seed + i, d_model=width, n_layers=cfg.n_layers,
                            n_heads=4, max_len=cfg.max_len_tokens)
        agents[role] = HFPolicy(model, tokenizer, name=f"{role}-d{width}", dtype=cfg.dtype)
        if cfg.sft.epochs > 0:
            sft = SFTConfig(epochs=cfg.sft.epochs, batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, seed=cfg.seed)
            train_sft(agents[role], role_examples(pattern, role, train), sft, progress=progress)
    return agents


def save_agents(cfg: Any, agents: Mapping[str, Any], root: str | Path) -> None:
    """agents/ROLE per role: a tiny agent's weights and tokenizer, a pretrained agent's spec only (its
    weights are where the spec points: a run directory does not copy a 500 MB model). Each folder is
    written aside and renamed, so a half-written agent is never taken for a saved one."""
    root = Path(root)
    for i, role in enumerate(get_pattern(cfg.pattern).roles):
        spec = cfg.agent_model(i)
        tmp = root / f".{role}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if spec == TINY:
            agents[role].save(tmp)
        (tmp / AGENT_FILE).write_text(json.dumps({"spec": spec}))
        shutil.rmtree(root / role, ignore_errors=True)
        os.replace(tmp, root / role)


def saved_agents_present(cfg: Any, root: str | Path) -> bool:
    return all((Path(root) / r).is_dir() for r in get_pattern(cfg.pattern).roles)


def load_saved_agents(cfg: Any, root: str | Path) -> dict[str, Any]:
    """The agents `save_agents` wrote under `root`; refuses ones saved for another model spec."""
    root = Path(root)
    agents: dict[str, Any] = {}
    loaded: dict[str, Any] = {}
    for i, role in enumerate(get_pattern(cfg.pattern).roles):
        folder, spec = root / role, cfg.agent_model(i)
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no saved agent (run `coral train` first)")
        # a folder without the spec file is a tiny agent of a run from before agent_models
        saved = json.loads((folder / AGENT_FILE).read_text())["spec"] if (folder / AGENT_FILE).is_file() else TINY
        if saved != spec:
            raise UserInputError(f"{folder}: agent saved for model {saved!r}, but field 'agent_models' gives "
                                 f"{spec!r} for role {role!r}; use another out_dir or resume: false")
        agents[role] = (HFPolicy.load(folder, dtype=cfg.dtype) if spec == TINY
                        else loaded.get(spec) or load_pretrained(spec, cfg.dtype))
        loaded.setdefault(spec, agents[role])
    return agents
