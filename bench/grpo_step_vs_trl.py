"""Wall time and peak memory of one GRPO step in coral vs one step of TRL's GRPOTrainer, on the same model.

    .venv/bin/python bench/grpo_step_vs_trl.py [--model tiny|smollm2|SPEC] [--steps 3] [--prompts 8]
        [--generations 8] [--new-tokens 32] [--threads 1] [--lora RANK] [--prompt-set letters|humaneval]
        [--coral float32,bfloat16,bfloat16+tis] [--trl matched|defaults] [--micro-batch N]

The SmolLM2 step of a CoRe-Code coder at the GRPO shape, LoRA, coral in both precisions against TRL
at its defaults (docs/results/speed.md):
    .venv/bin/python bench/grpo_step_vs_trl.py --model smollm2 --lora 8 --prompt-set humaneval \
        --new-tokens 128 --coral bfloat16,float32 --trl defaults --micro-batch 8 --steps 2

One step = sample `generations` completions for each of `prompts` prompts -> reward -> group
advantages -> loss -> backward -> clip -> AdamW step. coral: `HFPolicy.generate` (batched) ->
reward -> `assign_advantages` -> `AgentLearner.update`. TRL: one optimizer step of `GRPOTrainer`
(inside `Trainer.train`). Each side runs one warm-up step, then `--steps` timed steps; the sides
alternate step by step (the coral sides' steps run from TRL's `on_step_end` callback, right after a
TRL step, in an order that alternates) so that background load drifts hit all alike. The script prints the median wall time per
step and its split, the ratio TRL/coral (> 1: coral is faster), the mean completion length and the
parameter change norm of each side (both must be > 0, else it exits non-zero). Peak memory of a step:
the process's VmHWM is reset at the step's start, and the step's figure is the peak minus the RSS at
its start (what the step adds on top of models and optimiser state; the largest over the timed steps).

Coral sides (`--coral`, comma separated): `float32`, `bfloat16` (rollouts on a bfloat16 copy, the
update under bfloat16 autocast with float32 master weights and AdamW state), `+tis` adds truncated
importance sampling (cap 2) against the sampler/trainer mismatch; each prints the mismatch it logged
(token mean |sampler - trainer logprob|) and the share of tokens TIS capped.
TRL (`--trl`): `matched` sets every option below to coral's; `defaults` leaves GRPOConfig at its
defaults except the batch geometry (num_generations, max_completion_length, and per-device batch 8
with gradient accumulation so that one optimiser step covers prompts x generations completions, one
generation batch), the learning rate (coral's), and bookkeeping (no saving, logging or progress bars):
so bfloat16 autocast, gradient checkpointing, its loss and scaling defaults stay on.

Equal on all sides (with --trl matched):
  - model: `tiny_policy(seed=0)` (Llama, d_model 128, 4 layers, byte-level tokenizer) or any
    load_policy spec given as --model (e.g. smollm2: SmolLM2-135M-Instruct), deep-copied once per
    side, every weight trained or (--lora R) rank-R LoRA adapters (alpha 2R) on every linear layer
    but the head; fp32 on CPU; no gradient checkpointing; no reference model (beta = 0);
  - prompts (--prompt-set letters: "Task i: write a sentence with many letters a."; humaneval: the
    first HumanEval prompts) and their token ids (checked equal before timing), batch geometry
    (prompts x generations completions, generated and trained as one batch of that size),
    max new tokens, sampling (temperature 1, top_p 1, no top-k), eos kept in the completion;
  - reward: fraction of completion characters that are ASCII a-z (denser than "fraction of 'a'",
    which gives about half the groups of the random model all-zero rewards, hence no gradient);
  - advantage: (r - group mean) / (unbiased group std + eps), groups = completions of one prompt;
  - loss: token-level PPO clip, eps 0.2, normalised by the number of completion tokens of the
    whole batch (coral LossConfig(kind="ppo_clip", norm="token") = TRL loss_type="dapo");
    zero-advantage completions are trained on by both (coral skip_zero_advantage=False);
  - optimiser: AdamW(lr, betas 0.9/0.999, eps 1e-8, weight decay 0), constant lr, grad clip 1.0.
Not equal:
  - generation: TRL calls `model.generate` (transformers' sampler, no logprobs); coral runs its own
    KV-cache decoding loop that also returns the sampled tokens' logprobs. Random streams differ,
    so completions (and their lengths: eos may end some early) differ; mean lengths are printed;
  - training log-probs: TRL asks the model for the completion positions only (`logits_to_keep`,
    log-probs computed inside the model); coral's `HFPolicy.forward` computes logits at every
    position (prompt included) and gathers the completion ones. Cheap for the tiny model (vocab
    260), not for SmolLM2 (vocab 49152);
  - the advantage eps (TRL 1e-4, coral 1e-6);
  - TRL's step also computes entropies and many logging metrics (gathered through accelerate)
    and runs Trainer bookkeeping; coral's returns a few floats. That overhead is part of what
    this measures. TRL's "rollout" column is `_generate_and_score_completions` (tokenise,
    generate, decode, reward, advantages, metrics); its "update" column is the rest of the step.

This script does NOT compare learning curves or sample quality, and does NOT measure GPU, vLLM or
multi-process runs; figures from a loaded machine are noisy (look at the spread, not one number).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from datasets import Dataset
from transformers import PrinterCallback, TrainerCallback
from trl import GRPOConfig as TRLConfig
from trl import GRPOTrainer

from coral.policy import GenerationRequest, HFPolicy, SamplingParams, load_policy, tiny_policy, user
from coral.procmem import proc_hwm_kb, proc_rss_kb, reset_peak
from coral.train.grpo import AgentLearner, GRPOConfig, assign_advantages
from coral.train.losses import LossConfig
from coral.trajectory import Credit, Turn

CLIP_EPS = 0.2
MAX_GRAD_NORM = 1.0
TIS_CAP = 2.0
TRL_DEFAULT_BATCH = 8  # TrainingArguments' per_device_train_batch_size


def lowercase_fraction(text: str) -> float:
    """The reward: fraction of characters of `text` that are ASCII a-z (0 for an empty text)."""
    return sum("a" <= ch <= "z" for ch in text) / len(text) if text else 0.0


def trl_reward(completions: list[Any], **_: Any) -> list[float]:
    """`lowercase_fraction` as a TRL reward function (conversational completions are message lists)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [lowercase_fraction(t) for t in texts]


def make_prompts(count: int, prompt_set: str = "letters") -> list[str]:
    if prompt_set == "humaneval":
        from coral.benchmarks import load_benchmark

        return [task.prompt for task in load_benchmark("humaneval", limit=count)]
    return [f"Task {i}: write a sentence with many letters a." for i in range(count)]


def start_peak() -> int:
    """Reset this process's VmHWM; returns the RSS (kB) the peak is measured from."""
    reset_peak(os.getpid())
    return proc_rss_kb(os.getpid()) or 0


def peak_mb_since(rss_kb: int) -> float:
    """MB the process's peak RSS rose above `rss_kb` since the last `start_peak`."""
    return max(0, (proc_hwm_kb(os.getpid()) or 0) - rss_kb) / 1024


def param_snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The trainable parameters (all, or LoRA's), copied."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def change_norm(before: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    """L2 norm of (current parameters - `before`) over the parameters in `before`."""
    current = dict(model.named_parameters())
    squares = [(current[name].detach() - value).pow(2).sum() for name, value in before.items()]
    return float(torch.stack(squares).sum().sqrt())


class CoralStepper:
    """One coral GRPO step per call; records per-phase wall times, mean completion length and the
    learner's mismatch metrics."""

    def __init__(self, policy: HFPolicy, prompts: list[str], generations: int, new_tokens: int, lr: float,
                 tis: bool = False, micro_batch: int | None = None):
        self.policy = policy
        sampling = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, top_p=1.0)
        self.requests = [GenerationRequest(user(p), sampling) for p in prompts for _ in range(generations)]
        self.prompt_index = [i for i in range(len(prompts)) for _ in range(generations)]
        batch = len(self.requests)
        policy.batch_size = batch  # one generation batch, like TRL's single model.generate call
        loss = LossConfig(kind="ppo_clip", eps_low=CLIP_EPS, eps_high=CLIP_EPS, norm="token",
                          tis_cap=TIS_CAP if tis else None)
        cfg = GRPOConfig(lr=lr, micro_batch_size=micro_batch or batch, max_grad_norm=MAX_GRAD_NORM,
                         advantage="grpo", loss=loss, skip_zero_advantage=False, temperature=1.0)
        self.learner = AgentLearner(name="policy", policy=policy, cfg=cfg)
        self.times: dict[str, list[float]] = defaultdict(list)
        self.mean_tokens: list[float] = []
        self.peaks_mb: list[float] = []
        self.metrics: dict[str, list[float]] = defaultdict(list)

    def step(self) -> None:
        rss_kb = start_peak()
        start = time.perf_counter()
        completions = self.policy.generate(self.requests)
        generated = time.perf_counter()
        turns = [
            Turn(agent="policy", role="policy", call_index=0, prompt="", text=c.text,
                 prompt_ids=c.prompt_ids, completion_ids=c.completion_ids, logprobs=c.logprobs,
                 reward=lowercase_fraction(c.text), credit=Credit(str(i)))
            for c, i in zip(completions, self.prompt_index, strict=True)
        ]
        assign_advantages(turns, key=lambda t: t.credit.task_id, estimator="grpo")
        scored = time.perf_counter()
        for key, value in self.learner.update(turns).items():
            self.metrics[key].append(value)
        end = time.perf_counter()
        self.times["step"].append(end - start)
        self.times["generate"].append(generated - start)
        self.times["rollout"].append(scored - start)
        self.times["update"].append(end - scored)
        self.peaks_mb.append(peak_mb_since(rss_kb))
        self.mean_tokens.append(statistics.mean(len(c.completion_ids) for c in completions))


class TimedGRPOTrainer(GRPOTrainer):
    """GRPOTrainer that records the wall time of generation and of the whole rollout phase."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bench_times: dict[str, list[float]] = defaultdict(list)
        self.bench_mean_tokens: list[float] = []

    def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = super()._generate_single_turn(*args, **kwargs)
        self.bench_times["generate"].append(time.perf_counter() - start)
        return out

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        start = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        self.bench_times["rollout"].append(time.perf_counter() - start)
        self.bench_mean_tokens.append(float(out["completion_mask"].sum(dim=1).float().mean()))
        return out


class AlternatingClock(TrainerCallback):
    """Times each TRL optimizer step, then runs one step of each coral side (in an order that
    alternates from step to step) so that the sides alternate."""

    def __init__(self, trainer_times: dict[str, list[float]], coral: list[CoralStepper]) -> None:
        self.trainer_times = trainer_times
        self.coral = coral
        self.start = 0.0
        self.rss_kb = 0
        self.peaks_mb: list[float] = []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.rss_kb = start_peak()
        self.start = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer_times["step"].append(time.perf_counter() - self.start)
        self.peaks_mb.append(peak_mb_since(self.rss_kb))
        for stepper in self.coral if len(self.trainer_times["step"]) % 2 else self.coral[::-1]:
            stepper.step()


def build_trainer(model: torch.nn.Module, tokenizer: Any, prompts: list[str], generations: int,
                  new_tokens: int, max_steps: int, lr: float, out_dir: str, mode: str = "matched",
                  lora: int = 0) -> TimedGRPOTrainer:
    """A GRPOTrainer configured like `CoralStepper` (mode "matched") or at TRL's defaults (see the
    module docstring)."""
    batch = len(prompts) * generations
    bookkeeping = dict(output_dir=out_dir, use_cpu=True, report_to=[], seed=0, max_steps=max_steps,
                       logging_steps=10_000, save_strategy="no", eval_strategy="no", disable_tqdm=True,
                       log_completions=False, dataloader_num_workers=0, learning_rate=lr,
                       num_generations=generations, max_completion_length=new_tokens)
    if mode == "defaults":
        if batch % TRL_DEFAULT_BATCH:
            raise ValueError(f"--trl defaults needs prompts x generations divisible by {TRL_DEFAULT_BATCH}, got {batch}")
        config = TRLConfig(**bookkeeping, gradient_accumulation_steps=batch // TRL_DEFAULT_BATCH)
    else:
        config = TRLConfig(
            **bookkeeping, bf16=False, fp16=False, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
            temperature=1.0, top_p=1.0, top_k=0, beta=0.0, num_iterations=1, epsilon=CLIP_EPS,
            loss_type="dapo", scale_rewards="group", lr_scheduler_type="constant",
            warmup_steps=0, optim="adamw_torch", weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
            adam_epsilon=1e-8, max_grad_norm=MAX_GRAD_NORM, activation_checkpointing=False,
        )
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts]})
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=lora, lora_alpha=2 * lora, target_modules="all-linear", lora_dropout=0.0,
                                 task_type="CAUSAL_LM")
    trainer = TimedGRPOTrainer(model=model, reward_funcs=trl_reward, args=config, train_dataset=dataset,
                               processing_class=tokenizer, peft_config=peft_config)
    if mode == "matched" and trainer.model.is_activation_checkpointing:
        raise SystemExit("TRL enabled activation checkpointing; the sides would not do the same work")
    trainer.remove_callback(PrinterCallback)  # keep Trainer's end-of-run log dict out of the table
    return trainer


def check_same_prompt_ids(policy: HFPolicy, tokenizer: Any, prompts: list[str]) -> None:
    """Both sides must feed the model identical prompt tokens."""
    for text in prompts:
        ours = policy.encode(policy.render(user(text)))
        theirs = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                               tokenize=True, return_dict=True)["input_ids"]
        if list(theirs) != ours:
            raise SystemExit(f"prompt {text!r}: coral and TRL tokenise it differently ({ours} vs {list(theirs)})")


@dataclass(frozen=True)
class SideResult:
    """Timed steps of one side (warm-up dropped), in seconds, and what those steps did."""

    step_s: list[float]
    generate_s: list[float]
    rollout_s: list[float]  # generate + decode + reward + advantages
    update_s: list[float]  # the rest of the step: forward, loss, backward, clip, optimiser
    mean_completion_tokens: float
    param_change_norm: float  # over all steps, warm-up included
    peak_mb: float  # the largest step peak above the RSS at the step's start (timed steps)
    metrics: dict[str, float] = field(default_factory=dict)  # coral: the learner's, mean over timed steps


@dataclass(frozen=True)
class BenchResult:
    sides: dict[str, SideResult]  # the coral sides, by name
    trl: SideResult

    @property
    def coral(self) -> SideResult:
        """The first coral side."""
        return next(iter(self.sides.values()))

    def ratio(self, name: str | None = None) -> float:
        """Median TRL step wall time / median step wall time of coral side `name` (default: the first)."""
        side = self.sides[name] if name else self.coral
        return statistics.median(self.trl.step_s) / statistics.median(side.step_s)

    def peak_ratio(self, name: str | None = None) -> float:
        """TRL's step peak memory / the coral side's; nan when the side's is under 1 MB (allocator noise)."""
        side = self.sides[name] if name else self.coral
        return self.trl.peak_mb / side.peak_mb if side.peak_mb >= 1.0 else float("nan")


CORAL_SIDES = ("float32", "bfloat16", "float32+tis", "bfloat16+tis")


def coral_side(base: HFPolicy, name: str, prompts: list[str], generations: int, new_tokens: int, lr: float,
               lora: int, micro_batch: int | None) -> tuple[CoralStepper, dict[str, torch.Tensor]]:
    """A coral side named like "bfloat16+tis" on a copy of `base`, and its trainable parameters at start."""
    if name not in CORAL_SIDES:
        raise ValueError(f"coral side {name!r} is not one of {CORAL_SIDES}")
    dtype, _, tis = name.partition("+")
    policy = HFPolicy(copy.deepcopy(base.model), base.tokenizer, name=name, dtype=dtype)
    if lora:
        policy.add_lora(r=lora, alpha=2 * lora)
    stepper = CoralStepper(policy, prompts, generations, new_tokens, lr, tis=bool(tis), micro_batch=micro_batch)
    return stepper, param_snapshot(policy.model)


def side_result(stepper: CoralStepper, before: dict[str, torch.Tensor]) -> SideResult:
    kept = ("logp_mismatch", "tis_capped_fraction", "clip_fraction", "ratio_mean")
    return SideResult(
        step_s=stepper.times["step"][1:],
        generate_s=stepper.times["generate"][1:],
        rollout_s=stepper.times["rollout"][1:],
        update_s=stepper.times["update"][1:],
        mean_completion_tokens=statistics.mean(stepper.mean_tokens[1:]),
        param_change_norm=change_norm(before, stepper.policy.model),
        peak_mb=max(stepper.peaks_mb[1:]),
        metrics={k: statistics.mean(v[1:]) for k, v in stepper.metrics.items() if k in kept},
    )


def run_bench(prompt_count: int = 8, generations: int = 8, new_tokens: int = 32, steps: int = 3,
              lr: float = 1e-4, model: str = "tiny", coral: tuple[str, ...] = ("float32",), trl: str = "matched",
              lora: int = 0, prompt_set: str = "letters", micro_batch: int | None = None) -> BenchResult:
    """Warm-up + `steps` alternating GRPO steps per side on copies of `tiny_policy(seed=0)` or of the
    policy `load_policy(model)`."""
    if steps < 1 or prompt_count < 1 or generations < 2 or new_tokens < 1:
        raise ValueError(f"need steps >= 1, prompts >= 1, generations >= 2, new_tokens >= 1; got "
                         f"{steps}, {prompt_count}, {generations}, {new_tokens}")
    if trl not in ("matched", "defaults"):
        raise ValueError(f"trl must be matched or defaults, got {trl!r}")
    base = tiny_policy(seed=0) if model == "tiny" else load_policy(model)
    prompts = make_prompts(prompt_count, prompt_set)
    sides = {name: coral_side(base, name, prompts, generations, new_tokens, lr, lora, micro_batch) for name in coral}
    trl_model, trl_tokenizer = copy.deepcopy(base.model), copy.deepcopy(base.tokenizer)
    check_same_prompt_ids(base, trl_tokenizer, prompts)
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = build_trainer(trl_model, trl_tokenizer, prompts, generations, new_tokens, steps + 1, lr, out_dir,
                                mode=trl, lora=lora)
        trl_before = param_snapshot(trainer.model)
        clock = AlternatingClock(defaultdict(list), [stepper for stepper, _ in sides.values()])
        trainer.add_callback(clock)
        trainer.train()
    trl_step_s, trl_rollout_s = clock.trainer_times["step"][1:], trainer.bench_times["rollout"][1:]
    trl_side = SideResult(
        step_s=trl_step_s,
        generate_s=trainer.bench_times["generate"][1:],
        rollout_s=trl_rollout_s,
        update_s=[s - r for s, r in zip(trl_step_s, trl_rollout_s, strict=True)],
        mean_completion_tokens=statistics.mean(trainer.bench_mean_tokens[1:]),
        param_change_norm=change_norm(trl_before, trainer.model),
        peak_mb=max(clock.peaks_mb[1:]),
    )
    return BenchResult(sides={name: side_result(*pair) for name, pair in sides.items()}, trl=trl_side)


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:9.0f}"


def print_table(result: BenchResult) -> None:
    print(f"{'side':<13} {'step ms':>9} {'generate':>9} {'rollout':>9} {'update':>9} "
          f"{'min..max step ms':>18} {'tokens/compl':>12} {'|dparam|':>9} {'peak MB':>8}  learner")
    for name, side in (*result.sides.items(), ("TRL", result.trl)):
        spread = f"{min(side.step_s) * 1e3:.0f}..{max(side.step_s) * 1e3:.0f}"
        learner = " ".join(f"{k} {v:.4f}" for k, v in side.metrics.items())
        print(f"{name:<13} {_ms(side.step_s)} {_ms(side.generate_s)} {_ms(side.rollout_s)} "
              f"{_ms(side.update_s)} {spread:>18} {side.mean_completion_tokens:12.1f} "
              f"{side.param_change_norm:9.4f} {side.peak_mb:8.1f}  {learner}")
    for name in result.sides:
        print(f"ratio TRL / coral {name} (median step wall time) = {result.ratio(name):.2f}; "
              f"(step peak memory) = {result.peak_ratio(name):.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="a load_policy spec, e.g. smollm2 (default: tiny)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (after 1 warm-up)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (group size)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--coral", default="float32", help=f"coral sides, comma separated, of {CORAL_SIDES}")
    parser.add_argument("--trl", default="matched", choices=("matched", "defaults"))
    parser.add_argument("--lora", type=int, default=0, help="LoRA rank on every side (0: every weight trained)")
    parser.add_argument("--prompt-set", default="letters", choices=("letters", "humaneval"))
    parser.add_argument("--micro-batch", type=int, default=None, help="coral turns per forward/backward (default: all)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    load = os.getloadavg()
    try:
        result = run_bench(args.prompts, args.generations, args.new_tokens, args.steps, args.lr, args.model,
                           tuple(args.coral.split(",")), args.trl, args.lora, args.prompt_set, args.micro_batch)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    print(f"model: {args.model}{f' + LoRA rank {args.lora}' if args.lora else ''}; batch: {args.prompts} "
          f"{args.prompt_set} prompts x {args.generations} generations = {args.prompts * args.generations} "
          f"completions, <= {args.new_tokens} new tokens, {torch.get_num_threads()} torch threads, "
          f"{args.steps} timed steps per side after 1 warm-up; TRL {args.trl}")
    print_table(result)
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; after: "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    norms = {name: side.param_change_norm for name, side in (*result.sides.items(), ("TRL", result.trl))}
    if min(norms.values()) <= 0:
        raise SystemExit(f"a side did not change its parameters (every group had equal rewards?): {norms}")


if __name__ == "__main__":
    main()
