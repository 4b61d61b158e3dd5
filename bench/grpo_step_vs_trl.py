"""Wall time and peak memory of one GRPO step in coral vs one step of TRL's GRPOTrainer, on the same model.

    .venv/bin/python bench/grpo_step_vs_trl.py [--model tiny|smollm2|SPEC] [--steps 3] [--prompts 8]
                                                [--generations 8] [--new-tokens 32] [--threads 1]

One step = sample `generations` completions for each of `prompts` prompts -> reward -> group
advantages -> loss -> backward -> clip -> AdamW step. coral: `HFPolicy.generate` (batched) ->
reward -> `assign_advantages` -> `AgentLearner.update`. TRL: one optimizer step of `GRPOTrainer`
(inside `Trainer.train`). Each side runs one warm-up step, then `--steps` timed steps; the sides
alternate step by step (each coral step runs from TRL's `on_step_end` callback, right after a TRL
step) so that background load drifts hit both alike. The script prints the median wall time per
step and its split, the ratio TRL/coral (> 1: coral is faster), the mean completion length and the
parameter change norm of each side (both must be > 0, else it exits non-zero). Peak memory of a step:
the process's VmHWM is reset at the step's start, and the step's figure is the peak minus the RSS at
its start (what the step adds on top of models and optimiser state; the largest over the timed steps).

Equal on both sides:
  - model: `tiny_policy(seed=0)` (Llama, d_model 128, 4 layers, byte-level tokenizer) or any
    load_policy spec given as --model (e.g. smollm2: SmolLM2-135M-Instruct, every weight trained),
    deep-copied once per side; fp32 on CPU; no gradient checkpointing; no reference model (beta = 0);
  - prompts and their token ids (ChatML template; checked equal before timing), batch geometry
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
from dataclasses import dataclass
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
from coral.trajectory import Turn

CLIP_EPS = 0.2
MAX_GRAD_NORM = 1.0


def lowercase_fraction(text: str) -> float:
    """The reward: fraction of characters of `text` that are ASCII a-z (0 for an empty text)."""
    return sum("a" <= ch <= "z" for ch in text) / len(text) if text else 0.0


def trl_reward(completions: list[Any], **_: Any) -> list[float]:
    """`lowercase_fraction` as a TRL reward function (conversational completions are message lists)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [lowercase_fraction(t) for t in texts]


def make_prompts(count: int) -> list[str]:
    return [f"Task {i}: write a sentence with many letters a." for i in range(count)]


def start_peak() -> int:
    """Reset this process's VmHWM; returns the RSS (kB) the peak is measured from."""
    reset_peak(os.getpid())
    return proc_rss_kb(os.getpid()) or 0


def peak_mb_since(rss_kb: int) -> float:
    """MB the process's peak RSS rose above `rss_kb` since the last `start_peak`."""
    return max(0, (proc_hwm_kb(os.getpid()) or 0) - rss_kb) / 1024


def param_snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def change_norm(before: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    """L2 norm of (current parameters - `before`) over all parameters."""
    squares = [(p.detach() - before[name]).pow(2).sum() for name, p in model.named_parameters()]
    return float(torch.stack(squares).sum().sqrt())


class CoralStepper:
    """One coral GRPO step per call; records per-phase wall times and mean completion length."""

    def __init__(self, policy: HFPolicy, prompts: list[str], generations: int, new_tokens: int, lr: float):
        self.policy = policy
        sampling = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, top_p=1.0)
        self.requests = [GenerationRequest(user(p), sampling) for p in prompts for _ in range(generations)]
        self.prompt_index = [i for i in range(len(prompts)) for _ in range(generations)]
        batch = len(self.requests)
        policy.batch_size = batch  # one generation batch, like TRL's single model.generate call
        loss = LossConfig(kind="ppo_clip", eps_low=CLIP_EPS, eps_high=CLIP_EPS, norm="token")
        cfg = GRPOConfig(lr=lr, micro_batch_size=batch, max_grad_norm=MAX_GRAD_NORM, advantage="grpo",
                         loss=loss, skip_zero_advantage=False, temperature=1.0)
        self.learner = AgentLearner(name="policy", policy=policy, cfg=cfg)
        self.times: dict[str, list[float]] = defaultdict(list)
        self.mean_tokens: list[float] = []
        self.peaks_mb: list[float] = []

    def step(self) -> None:
        rss_kb = start_peak()
        start = time.perf_counter()
        completions = self.policy.generate(self.requests)
        generated = time.perf_counter()
        turns = [
            Turn(agent="policy", role="policy", call_index=0, prompt="", text=c.text,
                 prompt_ids=c.prompt_ids, completion_ids=c.completion_ids, logprobs=c.logprobs,
                 reward=lowercase_fraction(c.text), metadata={"task_id": i})
            for c, i in zip(completions, self.prompt_index, strict=True)
        ]
        assign_advantages(turns, key=lambda t: t.metadata["task_id"], estimator="grpo")
        scored = time.perf_counter()
        self.learner.update(turns)
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
    """Times each TRL optimizer step, then runs one coral step so that the two sides alternate."""

    def __init__(self, trainer_times: dict[str, list[float]], coral: CoralStepper) -> None:
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
        self.coral.step()


def build_trainer(model: torch.nn.Module, tokenizer: Any, prompts: list[str], generations: int,
                  new_tokens: int, max_steps: int, lr: float, out_dir: str) -> TimedGRPOTrainer:
    """A GRPOTrainer configured like `CoralStepper` (see the module docstring)."""
    batch = len(prompts) * generations
    config = TRLConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, report_to=[], seed=0,
        max_steps=max_steps, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=generations, max_completion_length=new_tokens,
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, num_iterations=1, epsilon=CLIP_EPS,
        loss_type="dapo", scale_rewards="group", learning_rate=lr, lr_scheduler_type="constant",
        warmup_steps=0, optim="adamw_torch", weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, max_grad_norm=MAX_GRAD_NORM, activation_checkpointing=False,
        logging_steps=10_000, save_strategy="no", eval_strategy="no", disable_tqdm=True,
        log_completions=False, dataloader_num_workers=0,
    )
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts]})
    trainer = TimedGRPOTrainer(model=model, reward_funcs=trl_reward, args=config, train_dataset=dataset,
                               processing_class=tokenizer)
    if trainer.model.is_activation_checkpointing:
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


@dataclass(frozen=True)
class BenchResult:
    coral: SideResult
    trl: SideResult

    @property
    def ratio(self) -> float:
        """Median TRL step wall time / median coral step wall time."""
        return statistics.median(self.trl.step_s) / statistics.median(self.coral.step_s)

    @property
    def peak_ratio(self) -> float:
        """TRL's step peak memory / coral's; nan when coral's is under 1 MB (allocator noise, no ratio)."""
        return self.trl.peak_mb / self.coral.peak_mb if self.coral.peak_mb >= 1.0 else float("nan")


def run_bench(prompt_count: int = 8, generations: int = 8, new_tokens: int = 32, steps: int = 3,
              lr: float = 1e-4, model: str = "tiny") -> BenchResult:
    """Warm-up + `steps` alternating GRPO steps per side on copies of `tiny_policy(seed=0)` or of the
    policy `load_policy(model)`."""
    if steps < 1 or prompt_count < 1 or generations < 2 or new_tokens < 1:
        raise ValueError(f"need steps >= 1, prompts >= 1, generations >= 2, new_tokens >= 1; got "
                         f"{steps}, {prompt_count}, {generations}, {new_tokens}")
    base = tiny_policy(seed=0) if model == "tiny" else load_policy(model)
    prompts = make_prompts(prompt_count)
    coral_policy = HFPolicy(copy.deepcopy(base.model), base.tokenizer, name="coral")
    trl_model, trl_tokenizer = copy.deepcopy(base.model), copy.deepcopy(base.tokenizer)
    check_same_prompt_ids(coral_policy, trl_tokenizer, prompts)
    before = param_snapshot(base.model)

    coral = CoralStepper(coral_policy, prompts, generations, new_tokens, lr)
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = build_trainer(trl_model, trl_tokenizer, prompts, generations, new_tokens, steps + 1, lr, out_dir)
        clock = AlternatingClock(defaultdict(list), coral)
        trainer.add_callback(clock)
        trainer.train()
    trl_step_s, trl_rollout_s = clock.trainer_times["step"][1:], trainer.bench_times["rollout"][1:]
    trl = SideResult(
        step_s=trl_step_s,
        generate_s=trainer.bench_times["generate"][1:],
        rollout_s=trl_rollout_s,
        update_s=[s - r for s, r in zip(trl_step_s, trl_rollout_s, strict=True)],
        mean_completion_tokens=statistics.mean(trainer.bench_mean_tokens[1:]),
        param_change_norm=change_norm(before, trainer.model),
        peak_mb=max(clock.peaks_mb[1:]),
    )
    ours = SideResult(
        step_s=coral.times["step"][1:],
        generate_s=coral.times["generate"][1:],
        rollout_s=coral.times["rollout"][1:],
        update_s=coral.times["update"][1:],
        mean_completion_tokens=statistics.mean(coral.mean_tokens[1:]),
        param_change_norm=change_norm(before, coral_policy.model),
        peak_mb=max(coral.peaks_mb[1:]),
    )
    return BenchResult(coral=ours, trl=trl)


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:9.0f}"


def print_table(result: BenchResult) -> None:
    print(f"{'side':<6} {'step ms':>9} {'generate':>9} {'rollout':>9} {'update':>9} "
          f"{'min..max step ms':>18} {'tokens/compl':>12} {'|dparam|':>9} {'peak MB':>8}")
    for name, side in (("coral", result.coral), ("TRL", result.trl)):
        spread = f"{min(side.step_s) * 1e3:.0f}..{max(side.step_s) * 1e3:.0f}"
        print(f"{name:<6} {_ms(side.step_s)} {_ms(side.generate_s)} {_ms(side.rollout_s)} "
              f"{_ms(side.update_s)} {spread:>18} {side.mean_completion_tokens:12.1f} "
              f"{side.param_change_norm:9.4f} {side.peak_mb:8.1f}")
    print(f"ratio TRL / coral (median step wall time) = {result.ratio:.2f}")
    print(f"ratio TRL / coral (step peak memory) = {result.peak_ratio:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="a load_policy spec, e.g. smollm2 (default: tiny)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (after 1 warm-up)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (group size)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        result = run_bench(args.prompts, args.generations, args.new_tokens, args.steps, args.lr, args.model)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    print(f"model: {args.model}; batch: {args.prompts} prompts x {args.generations} generations = "
          f"{args.prompts * args.generations} completions, <= {args.new_tokens} new tokens, "
          f"{torch.get_num_threads()} torch threads, {args.steps} timed steps per side after 1 warm-up")
    print_table(result)
    norms = {"coral": result.coral.param_change_norm, "TRL": result.trl.param_change_norm}
    if min(norms.values()) <= 0:
        raise SystemExit(f"a side did not change its parameters (every group had equal rewards?): {norms}")


if __name__ == "__main__":
    main()
