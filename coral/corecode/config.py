"""CoRe-Code's run config: tasks, models, the cold start (`sft: SFTConfig`), RL (`rl: GRPOConfig` with its
`loss: LossConfig`), the run loop and evaluation. Every loss and GRPO knob is a nested field
(`rl.loss.eps_low`, `--rl.loss.eps-low 0.1`). Each field's comment is its `--help` line.

This module does NOT train or evaluate (coral/corecode/recipe.py does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from coral.agents import PROMPT_STYLES
from coral.benchmarks.procedural_nl import NL_STYLES
from coral.benchmarks.splits import ProceduralSplits
from coral.policy.base import check_dtype
from coral.train.grpo import GRPOConfig, check_recipe_owned
from coral.train.sft import SFTConfig
from coral.workflows.chain import ChainConfig

ROLES = ("planner", "coder")  # the chain's roles by default, and the default train_roles
ALL_ROLES = ("retriever", "planner", "coder", "debugger")  # retriever with retrieved_examples > 0, debugger with debug_rounds > 0
# fields a resumed run may change (more RL steps, worker counts, evaluation-only settings, which the resume
# checks against the figures after SFT); any other change is refused
RESUMABLE_CHANGES = ("out_dir", "resume", "rl_steps", "checkpoint_every_steps", "sandbox_workers", "ray_address",
                     "sft_processes", "eval_batch_samples", "eval_samples_per_task", "n_fresh_tasks")


def _default_sft() -> SFTConfig:
    # 3 epochs with 3 gold codes per task for the coder (sft_codes_per_task), chosen on validation for RL to have
    # something to compare (docs/results/efficacy.md, "The demo's cold start"); 6 epochs of one code per task
    # start and end higher, with a smaller RL gain
    return SFTConfig(epochs=3.0, lr=3e-3, batch_size=32)


def _default_rl() -> GRPOConfig:
    # lr: a tiny model is fragile, 2e-4 and 3e-4 lowered even the training pass rate. dr_grpo: no division by
    # the group std, which would blow the 0.1-weighted efficiency bonus up to full-size advantages in groups
    # whose codes all pass (see test_corecode)
    return GRPOConfig(lr=1e-4, advantage="dr_grpo")


@dataclass(frozen=True)
class CoReCodeConfig:
    seed: int = 0  # base seed of tasks, models, data order and sampling
    out_dir: str = "runs/demo"  # run directory: config, metrics, checkpoints, evaluations, final models
    n_train_tasks: int = 4000  # train-split tasks (cold start and RL)
    n_test_tasks: int = 200  # held-out test-split tasks (new skeletons)
    # the held-out split those tasks come from: test (the figures reported) or validation (to choose settings on)
    held_out_split: Literal["test", "validation"] = "test"
    # held-out tasks of the training skeletons, which neither SFT nor RL sees (0: off). The train split's
    # compositions after the first n_train_tasks: new parameters, known kinds of steps
    n_fresh_tasks: int = 250
    # where those come from: train (as above) or rl (with rl_max_depth: the RL pool's stream after its
    # n_train_tasks tasks, RL's own distribution never trained on; with cold_start none SFT's list is not excluded)
    fresh_source: Literal["train", "rl"] = "train"
    min_depth: int = 1  # shortest composition of primitives in a task
    max_depth: int = 2  # longest composition of primitives in a task
    # how each task is stated: short (the procedural family's own prompt) or, for a pretrained model, a style of
    # coral/benchmarks/procedural_nl.py (docstring, doc-noex, instruction)
    task_style: str = "short"
    rl_max_depth: int | None = None  # RL on train-split tasks up to this depth (None: max_depth, SFT's tasks)
    # share of the train split's skeletons kept out of SFT, on which RL alone trains (0: RL on SFT's tasks)
    rl_skeleton_fraction: float = 0.0
    # a run directory whose cold start (SFT weights and the evaluation after SFT, kept in its sft/cold_start)
    # this run starts from instead of training its own; its config may differ from this one in RL settings
    # only (train_roles, rl.*, rl_steps, ...: corecode_fork.may_differ). For ablations from one cold start
    cold_start_from: str | None = None
    model: str = "tiny"  # "tiny": two fresh tiny models with a tokenizer trained on the data; else a model path
    # precision of the policies, auto | float32 | bfloat16: a real model gets it as named; tiny models read auto as
    # float32 (the precision the tiny demo's settings were chosen in) and take bfloat16 only when it is named
    dtype: str = "auto"
    # the agents' prompts: short (the tiny models' own), chat (an instruct model's, planner and coder only:
    # coral.agents.PROMPT_STYLES); auto: short for model tiny, chat for the others
    prompt_style: Literal["auto", "short", "chat"] = "auto"
    # sft: every role is first SFT'd on its gold data; none: RL starts from the model as loaded (a pretrained
    # model), and the evaluations before RL (eval_sft*) hold that model
    cold_start: Literal["sft", "none"] = "sft"
    # tiny models: the roles whose cold-start text trains the tokenizer (None: the chain's roles). Give every
    # arm of a roles ablation all its roles, so that the arms' planners and coders are the same models
    tokenizer_roles: tuple[str, ...] | None = None
    # LoRA rank of planner and coder as adapters on one shared frozen base (0: two separate models, every
    # weight trained). Alpha is twice the rank
    lora_rank: int = 0
    d_model: int = 128  # tiny models' hidden size
    n_layers: int = 4  # tiny models' transformer layers
    sft: SFTConfig = field(default_factory=_default_sft)  # the cold start of each role (sft.seed comes from seed)
    sft_coder_epochs: float | None = None  # the coder's own SFT epochs (None: sft.epochs)
    # distinct gold codes per task in the coder's SFT data (> 1: the task's idioms, so the coder samples among
    # several correct programs instead of one)
    sft_codes_per_task: int = 3
    sft_processes: int | None = None  # planner and coder SFT in parallel processes (None: one each, <= CPUs)
    rl: GRPOConfig = field(default_factory=_default_rl)  # the RL update of each trained role; rl.temperature samples
    # RL steps. 150 keeps `make demo` within 15 minutes with the 3-code cold start on the README's machine (12.8 min;
    # 17.2 on a slower 2-core EPYC, where no cheaper setting gained on validation: docs/results/efficacy.md); with the
    # 1-code cold start, 200 steps raised held-out sampled pass@1 in 6 of 6 runs over 3 seeds, 60 and 100 stayed within noise
    rl_steps: int = 150
    tasks_per_step: int = 16  # training tasks in each RL step's batch
    plans_per_task: int = 4  # plans the planner samples per task (its GRPO group)
    codes_per_plan: int = 2  # codes the coder samples per plan
    max_new_tokens: int = 96  # longest plan or code, in tokens
    coder_group: Literal["plan", "task"] = "plan"  # the coder's GRPO group: the codes of one plan, or of one task
    planner_reward: Literal["mean", "max"] = "mean"  # a plan's reward from its codes' rewards
    correctness: Literal["fraction", "all"] = "all"  # coder reward: fraction of tests passed, or 1 only if all pass
    efficiency_weight: float = 0.1  # weight of the time/memory bonus that only fully passing code earns
    # what the bonus compares with the reference: "steps" (counted line events and allocation peak in the sandbox:
    # a seed ends in the same weights on a quiet and on a loaded machine; assert tests only) or "time" (measured
    # wall time and peak RSS, which move with load: coral's default before counting existed)
    efficiency_measure: Literal["steps", "time"] = "steps"
    train_roles: tuple[str, ...] = ROLES  # roles RL updates (any of chain_roles); the others act but stay frozen
    # MapCoder-style retriever before the planner: it writes this many related solved problems (description
    # and code) that planner and coder then see (0: no retriever). Reward: its downstream codes' mean reward
    retrieved_examples: int = 0
    retrievals_per_task: int = 2  # retrievals sampled per task (the retriever's GRPO group); plans_per_task per retrieval
    retriever_max_new_tokens: int = 192  # longest retrieval, in tokens
    # debugger rounds after the coder (0: no debugger); each round rewrites the codes it is due to see
    debug_rounds: int = 0
    rewrites_per_code: int = 2  # debugger rewrites of one code per round; the best on public tests goes on
    debug_when: Literal["public_fails", "always"] = "public_fails"  # codes the debugger sees: failing public tests, or all
    # a rewrite's reward, from all tests of a training task: "pass": its own reward (a code that already passed
    # earns the full reward again for being kept); "improvement": its reward minus the given code's (keeping a
    # passing code earns 0, breaking it is negative). Within one code's rewrites (debugger_group "code") both
    # give the same GRPO advantages: the given code's reward is the same for the whole group
    debugger_reward: Literal["pass", "improvement"] = "improvement"
    debugger_group: Literal["code", "task"] = "code"  # the debugger's GRPO group: rewrites of one code, or of one task (per round)
    sft_debug_mutants: int = 1  # failing mutants of each cold-start task's gold code in the debugger's SFT data
    # the debugger's weights before its SFT: scratch (a fresh tiny model, like every other role) or coder (a copy of
    # the coder after its SFT, then SFT on the debugger's data: a debugger that can already solve tasks, as a
    # pretrained base gives every role in the paper; tiny models without LoRA only)
    debugger_init: Literal["scratch", "coder"] = "scratch"
    checkpoint_every_steps: int = 5  # RL steps between checkpoints (a kill -9 loses at most these)
    resume: bool = True  # continue from out_dir's latest checkpoint (false: start over)
    sandbox_workers: int = 2  # sandbox worker processes that run the tests
    # "local", "auto" or a Ray address: RL rollouts and tests on Ray actors (coral.scale); None: no Ray
    ray_address: str | None = None
    eval_batch_samples: int = 50  # samples generated per evaluation batch
    # held-out pass@1 is also estimated from this many samples per task at rl.temperature (the distribution
    # RL optimises), after SFT and after RL (0: greedy pass@1 only)
    eval_samples_per_task: int = 4

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        _check_counts(self)
        _check_styles(self)
        _check_roles(self)
        if self.rl_max_depth is not None and self.rl_max_depth < self.min_depth:
            raise ValueError(f"field 'rl_max_depth' must be >= min_depth={self.min_depth}, got {self.rl_max_depth}")
        if self.sft_coder_epochs is not None and self.sft_coder_epochs <= 0:
            raise ValueError(f"field 'sft_coder_epochs' must be > 0 or None, got {self.sft_coder_epochs}")
        if not 0 <= self.rl_skeleton_fraction < 1:
            raise ValueError(f"field 'rl_skeleton_fraction' must be in [0, 1), got {self.rl_skeleton_fraction}")
        if self.fresh_source not in ("train", "rl"):
            raise ValueError(f"field 'fresh_source' must be 'train' or 'rl', got {self.fresh_source!r}")
        if self.fresh_source == "rl" and self.rl_max_depth is None:
            raise ValueError("field 'fresh_source' 'rl' continues the RL stream of 'rl_max_depth': set rl_max_depth")
        if self.rl_skeleton_fraction > 0 and self.rl_max_depth is not None:
            raise ValueError("fields 'rl_skeleton_fraction' and 'rl_max_depth' both choose the RL tasks: set one")
        if not 0 <= self.efficiency_weight <= 1:
            raise ValueError(f"field 'efficiency_weight' must be in [0, 1], got {self.efficiency_weight}")
        _check_debugger_init(self)
        check_recipe_owned(self.sft, self.rl)

    @property
    def style(self) -> str:
        """The agents' prompt style, auto resolved: short for model tiny, chat for the others."""
        if self.prompt_style != "auto":
            return self.prompt_style
        return "short" if self.model == "tiny" else "chat"

    @property
    def policy_dtype(self) -> str:
        """The dtype the policies are built with: `dtype`, except that the tiny models read auto as float32."""
        return "float32" if self.model == "tiny" and self.dtype == "auto" else self.dtype

    @property
    def chain_roles(self) -> tuple[str, ...]:
        """The roles in the chain: planner and coder, then the retriever and the debugger when they are on."""
        return ROLES + ("retriever",) * (self.retrieved_examples > 0) + ("debugger",) * (self.debug_rounds > 0)

    def chain_config(self) -> ChainConfig:
        return ChainConfig(plans_per_task=self.plans_per_task, codes_per_plan=self.codes_per_plan,
                           debug_rounds=self.debug_rounds, retrievals_per_task=self.retrievals_per_task,
                           rewrites_per_code=self.rewrites_per_code, debug_when=self.debug_when,
                           count_steps=self.counts_steps)

    @property
    def counts_steps(self) -> bool:
        """Whether the sandbox counts steps: the efficiency bonus is on and measured in steps."""
        return self.efficiency_weight > 0 and self.efficiency_measure == "steps"

    @property
    def splits(self) -> ProceduralSplits:
        return ProceduralSplits(seed=self.seed, n_train_tasks=self.n_train_tasks, n_test_tasks=self.n_test_tasks,
                                n_fresh_tasks=self.n_fresh_tasks, min_depth=self.min_depth, max_depth=self.max_depth,
                                rl_max_depth=self.rl_max_depth, rl_skeleton_fraction=self.rl_skeleton_fraction,
                                held_out_split=self.held_out_split, fresh_source=self.fresh_source)


def _check_roles(cfg: CoReCodeConfig) -> None:
    unknown = set(cfg.train_roles) - set(ALL_ROLES)
    if unknown:
        raise ValueError(f"field 'train_roles': unknown role {sorted(unknown)[0]!r} ({', '.join(ALL_ROLES)})")
    switch = {"retriever": "retrieved_examples > 0", "debugger": "debug_rounds > 0"}
    for role in cfg.train_roles:
        if role not in cfg.chain_roles:
            raise ValueError(f"field 'train_roles': {role!r} is not in the chain; set {switch[role]}")
    _check_tokenizer_roles(cfg)
    # a group of one sample has advantage 0: the role would be "trained" without ever moving
    if "retriever" in cfg.train_roles and cfg.retrievals_per_task < 2:
        raise ValueError(f"field 'retrievals_per_task' must be >= 2 to train the retriever, got {cfg.retrievals_per_task}")
    if "debugger" in cfg.train_roles and cfg.debugger_group == "code" and cfg.rewrites_per_code < 2:
        raise ValueError("field 'rewrites_per_code' must be >= 2 to train the debugger with debugger_group 'code', "
                         f"got {cfg.rewrites_per_code}")


def _check_debugger_init(cfg: CoReCodeConfig) -> None:
    if cfg.debugger_init not in ("scratch", "coder"):
        raise ValueError(f"field 'debugger_init' must be 'scratch' or 'coder', got {cfg.debugger_init!r}")
    if cfg.debugger_init == "coder" and (cfg.debug_rounds < 1 or cfg.model != "tiny" or cfg.lora_rank
                                         or cfg.cold_start != "sft"):
        raise ValueError("field 'debugger_init' 'coder' copies the coder's SFT weights into a separate tiny debugger: "
                         "it needs debug_rounds > 0, model tiny, lora_rank 0 and cold_start sft")


def _check_styles(cfg: CoReCodeConfig) -> None:
    if cfg.task_style not in ("short", *NL_STYLES):
        raise ValueError(f"field 'task_style' must be one of {['short', *NL_STYLES]}, got {cfg.task_style!r}")
    if cfg.prompt_style not in ("auto", "short", "chat"):
        raise ValueError(f"field 'prompt_style' must be one of ['auto', 'short', 'chat'], got {cfg.prompt_style!r}")
    if cfg.cold_start not in ("sft", "none"):
        raise ValueError(f"field 'cold_start' must be 'sft' or 'none', got {cfg.cold_start!r}")
    if cfg.held_out_split not in ("test", "validation"):
        raise ValueError(f"field 'held_out_split' must be 'test' or 'validation', got {cfg.held_out_split!r}")
    no_chat = [role for role in cfg.chain_roles if role not in PROMPT_STYLES["chat"]]
    if cfg.style == "chat" and no_chat:
        raise ValueError(f"field 'prompt_style': chat has prompts for planner and coder only, not {no_chat[0]!r}; "
                         "use prompt_style short")
    if cfg.cold_start == "none" and cfg.cold_start_from:
        raise ValueError("fields 'cold_start' none and 'cold_start_from' both decide where RL starts: set one")


def _check_tokenizer_roles(cfg: CoReCodeConfig) -> None:
    if cfg.tokenizer_roles is None:
        return
    if cfg.model != "tiny":
        raise ValueError(f"field 'tokenizer_roles' applies to model 'tiny' only (model {cfg.model!r} has its own tokenizer)")
    unknown = set(cfg.tokenizer_roles) - set(ALL_ROLES)
    if unknown:
        raise ValueError(f"field 'tokenizer_roles': unknown role {sorted(unknown)[0]!r} ({', '.join(ALL_ROLES)})")
    missing = [role for role in cfg.chain_roles if role not in cfg.tokenizer_roles]
    if missing:
        raise ValueError(f"field 'tokenizer_roles' must hold every role of the chain; {missing[0]!r} is missing")


def _check_counts(cfg: CoReCodeConfig) -> None:
    for name in ("n_train_tasks", "n_test_tasks", "tasks_per_step", "plans_per_task", "codes_per_plan",
                 "checkpoint_every_steps", "max_new_tokens", "eval_batch_samples"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"field {name!r} must be >= 1, got {getattr(cfg, name)}")
    for name in ("retrievals_per_task", "retriever_max_new_tokens", "rewrites_per_code", "sft_debug_mutants",
                 "min_depth", "d_model", "n_layers", "sandbox_workers", "sft_codes_per_task"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"field {name!r} must be >= 1, got {getattr(cfg, name)}")
    for name in ("n_fresh_tasks", "eval_samples_per_task", "rl_steps", "lora_rank", "retrieved_examples", "debug_rounds",
                 "seed"):
        if getattr(cfg, name) < 0:
            raise ValueError(f"field {name!r} must be >= 0, got {getattr(cfg, name)}")
    if cfg.max_depth < cfg.min_depth:
        raise ValueError(f"field 'max_depth' must be >= min_depth={cfg.min_depth}, got {cfg.max_depth}")
    if cfg.sft_processes is not None and cfg.sft_processes < 1:
        raise ValueError(f"field 'sft_processes' must be >= 1 or None, got {cfg.sft_processes}")
