"""CoRe-Code's pieces before the loop: the policies of the chain's roles (planner and coder; retriever and
debugger when they are on), their agents for one step, the cold start (SFT of each role on its gold data,
train/corecode_data.py), the KL references and the learners.

This module does NOT run the RL loop or evaluate (coral/corecode/recipe.py, evaluate.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from coral.agents import PROMPT_STYLES, make_agent
from coral.benchmarks.procedural_nl import nl_tasks
from coral.benchmarks.splits import sft_tasks
from coral.corecode.config import CoReCodeConfig
from coral.corecode.data import cold_start_examples, retriever_template
from coral.corecode.fork import COLD_START_DIR
from coral.policy import load_policy, tiny_policy
from coral.policy.base import SamplingParams
from coral.policy.shared_lora import shared_lora
from coral.sandbox.protocol import SandboxProtocol
from coral.train.checkpoints import cloned_weights, load_weights
from coral.train.grpo import AgentLearner, frozen_copy
from coral.train.sft import SFTConfig
from coral.train.sft_parallel import train_sft_many
from coral.trajectory import Task

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy


def cold_start_data(cfg: CoReCodeConfig, tasks: Sequence[Task], sandbox: SandboxProtocol | None = None,
                    roles: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """SFT examples of each of `roles` (default: the chain's) from `tasks` (the debugger's judge mutants in
    `sandbox`, or in one opened for the call)."""
    return cold_start_examples(tasks, cfg.chain_roles if roles is None else roles, k=max(cfg.retrieved_examples, 1), seed=cfg.seed,
                               mutants_per_task=cfg.sft_debug_mutants, sandbox=sandbox, workers=cfg.sandbox_workers,
                               codes_per_task=cfg.sft_codes_per_task)


def build_policies(cfg: CoReCodeConfig, train: Sequence[Task],
                   sandbox: SandboxProtocol | None = None) -> dict[str, Any]:
    """One policy per chain role (cfg.chain_roles): separate models, or with cfg.lora_rank LoRA adapters
    on one shared base. A tiny model's tokenizer is trained on the cold-start text of cfg.tokenizer_roles
    (default: every chain role)."""
    roles = list(cfg.chain_roles)
    if cfg.model == "tiny":
        examples = [ex for exs in cold_start_data(cfg, train, sandbox, cfg.tokenizer_roles).values() for ex in exs]
        corpus = [m["content"] for ex in examples for m in ex.messages]
        corpus += [ex.completion for ex in examples]

    def make(i: int) -> Any:
        if cfg.model != "tiny":
            return load_policy(cfg.model, dtype=cfg.policy_dtype)
        policy = tiny_policy(seed=cfg.seed * 10 + i, corpus=corpus, d_model=cfg.d_model, n_layers=cfg.n_layers,
                             dtype=cfg.policy_dtype)
        # tiny models: bigger generation batches are faster (an RL step's 128 codes in one batch rather than
        # two of 64: rollouts 5-15% faster, bench/corecode_rollout_batch.py); seeded tokens do not change
        policy.batch_size = 128
        return policy

    if cfg.lora_rank:
        return dict(shared_lora(make(0), roles, r=cfg.lora_rank, alpha=2 * cfg.lora_rank))
    return {role: make(i) for i, role in enumerate(roles)}


def make_agents(cfg: CoReCodeConfig, policies: dict[str, HFPolicy], greedy: bool = False) -> dict[str, Any]:
    """The agent of every chain role in cfg.style's prompts; cfg.seed is a base seed: each request's stream is
    hashed from it and the step the workflow is given (coral.seeding)."""

    out = {}
    for role in cfg.chain_roles:
        retriever = role == "retriever"
        sampling = SamplingParams(max_new_tokens=cfg.retriever_max_new_tokens if retriever else cfg.max_new_tokens,
                                  temperature=0.0 if greedy else cfg.rl.temperature,
                                  seed=cfg.seed)
        template = retriever_template(cfg.retrieved_examples) if retriever else None
        if cfg.style == "chat":
            template = PROMPT_STYLES["chat"][role]
        out[role] = make_agent(role, policies[role], sampling=sampling, trainable=role in cfg.train_roles,
                               template=template)
    return out


def stated_tasks(cfg: CoReCodeConfig, tasks: Sequence[Task]) -> list[Task]:
    """`tasks` stated in cfg.task_style: as generated (short), or rewritten by coral/benchmarks/procedural_nl.py."""
    if cfg.task_style == "short":
        return list(tasks)
    return nl_tasks(tasks, cfg.task_style)


def sft_checkpoint_dir(cfg: CoReCodeConfig) -> Path:
    """Where SFT keeps each role's training state until the run's step-0 checkpoint exists."""
    return Path(cfg.out_dir) / "sft_ckpt"


def sft_corecode(cfg: CoReCodeConfig, policies: dict[str, HFPolicy], train: list[Task],
                 progress: bool = True, sandbox: SandboxProtocol | None = None) -> dict[str, list[float]]:
    """Cold start: every role SFT'd in place on its gold data from the cold start's tasks (in parallel
    processes unless cfg.sft_processes == 1); returns each role's loss curve. With debugger_init coder the
    debugger trains after the others, from a copy of the coder's SFT weights."""
    data = cold_start_data(cfg, sft_tasks(cfg.splits, train), sandbox)
    per_role = role_sft_configs(cfg, policies)
    checkpoints = {role: sft_checkpoint_dir(cfg) / f"{role}.pt" for role in policies}
    later = ["debugger"] if cfg.debugger_init == "coder" else []
    with tempfile.TemporaryDirectory(prefix="coral-sft-") as work:
        first = [role for role in policies if role not in later]
        curves = train_sft_many({role: (policies[role], data[role], per_role[role]) for role in first}, work,
                                progress=progress, processes=cfg.sft_processes, checkpoints=checkpoints)
        for role in later:
            copy_weights(policies["coder"], policies[role])
            curves |= train_sft_many({role: (policies[role], data[role], per_role[role])}, work, progress=progress,
                                     checkpoints=checkpoints)
    return curves


def role_sft_configs(cfg: CoReCodeConfig, roles: Iterable[str]) -> dict[str, SFTConfig]:
    """Each role's SFT settings: cfg.sft seeded with cfg.seed, the coder's epochs from sft_coder_epochs when set."""
    sft = replace(cfg.sft, seed=cfg.seed)
    return {role: sft if role != "coder" or cfg.sft_coder_epochs is None
            else replace(sft, epochs=cfg.sft_coder_epochs) for role in roles}


def copy_weights(source: HFPolicy, target: HFPolicy) -> None:
    """`target` takes `source`'s weights; both tiny models of one shape and one tokenizer (else ValueError)."""
    if source.tokenizer.get_vocab() != target.tokenizer.get_vocab():
        raise ValueError("debugger_init coder: the coder's and the debugger's tokenizers differ")
    load_weights(target, cloned_weights(source))


def sft_references(cfg: CoReCodeConfig, policies: dict[str, HFPolicy], saved: bool) -> dict[str, Any]:
    """KL references of the trained roles (none when rl.loss.beta_kl is 0 and rl.log_kl is off): frozen
    copies of the policies after SFT; on resume (`saved`) the cold start the run kept
    (`corecode_fork.save_cold_start`, out_dir/sft/cold_start) is loaded into them, not the current weights."""
    if cfg.rl.loss.beta_kl == 0 and not cfg.rl.log_kl:
        return {}
    refs = {role: frozen_copy(policies[role]) for role in cfg.train_roles}
    for role, ref in refs.items() if saved else ():
        where = Path(cfg.out_dir) / COLD_START_DIR / f"{role}.pt"
        if not where.is_file():
            raise FileNotFoundError(f"a KL (rl.loss.beta_kl > 0 / rl.log_kl) needs the cold start of {role!r} at "
                                    f"{where}, written before RL; it is missing, so this run cannot resume with a KL")
        load_weights(ref, torch.load(where, weights_only=True))
    return refs


def make_learners(cfg: CoReCodeConfig, policies: dict[str, HFPolicy], references: dict[str, Any]) -> dict[str, Any]:
    """One AgentLearner per trained role, with its KL reference when there is one."""
    return {role: AgentLearner(role, policies[role], cfg.rl, reference=references.get(role))
            for role in cfg.train_roles}
