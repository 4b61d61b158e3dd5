"""One chat call of a research agent: generate with a policy, count tokens per agent, log to JSONL.

Per-agent logs go to `<log_dir>/<agent>.jsonl`, one line per call with the messages, the reply and
the token usage the policy reported. Totals per agent (calls, tokens, model wall time) are in
`Ledger.usage`; `priced` turns totals into US dollars at prices the user gives (coral keeps no price
list: prices change, and a local model's cost is its wall time, which is always recorded).

This module does NOT retry failed calls (policies do).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from coral.jsonl import append_jsonl
from coral.policy.base import GenerationRequest, Message, Policy, SamplingParams
from coral.seeding import sampling_seed


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0  # time spent waiting for the model (generation), not tools or the sandbox

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.wall_s += other.wall_s


@dataclass(frozen=True)
class Prices:
    """US dollars per million tokens, as the model's provider bills them."""
    usd_per_mtok_prompt: float
    usd_per_mtok_completion: float

    def __post_init__(self) -> None:
        for name in ("usd_per_mtok_prompt", "usd_per_mtok_completion"):
            if getattr(self, name) < 0:
                raise ValueError(f"Prices.{name} must be >= 0, got {getattr(self, name)}")

    def usd(self, usage: dict) -> float:
        return (usage["prompt_tokens"] * self.usd_per_mtok_prompt
                + usage["completion_tokens"] * self.usd_per_mtok_completion) / 1e6


def priced(totals: dict[str, dict], prices: Prices | None) -> dict[str, dict]:
    """`Ledger.totals()` with a "usd" entry in every row (None when no prices were given)."""
    return {agent: {**row, "usd": None if prices is None else round(prices.usd(row), 6)}
            for agent, row in totals.items()}


class Ledger:
    """Counts tokens per agent name and appends each call to that agent's log file. Call k of an agent
    samples (at temperature > 0) from its own stream, sampling_seed(seed, 0, agent, k)."""

    def __init__(self, log_dir: str | Path | None = None, max_new_tokens: int = 2048, temperature: float = 0.0,
                 seed: int = 0) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)
        self.seed = seed
        self.usage: dict[str, Usage] = {}

    def chat(self, policy: Policy, agent: str, messages: Sequence[Message]) -> tuple[str, Usage]:
        """The reply of `policy` to `messages`, with the usage of this one call."""
        start = time.perf_counter()
        call = self.usage[agent].calls if agent in self.usage else 0
        sampling = replace(self.sampling, seed=sampling_seed(self.seed, 0, agent, call))
        completion = policy.generate([GenerationRequest(tuple(messages), sampling)])[0]
        used = Usage(1, completion.usage.get("prompt_tokens", len(completion.prompt_ids)),
                     completion.usage.get("completion_tokens", len(completion.completion_ids)),
                     round(time.perf_counter() - start, 4))
        self.usage.setdefault(agent, Usage()).add(used)
        if self.log_dir is not None:
            record = {"agent": agent, "messages": list(messages), "reply": completion.text,
                      "usage": asdict(used), "wall_s": used.wall_s}
            append_jsonl(self.log_dir / f"{agent}.jsonl", record)  # a whole line or none
        return completion.text, used

    def totals(self) -> dict[str, dict]:
        """{agent: usage} plus a "total" row."""
        total = Usage()
        for usage in self.usage.values():
            total.add(usage)
        rows = {**{agent: asdict(u) for agent, u in sorted(self.usage.items())}, "total": asdict(total)}
        for row in rows.values():
            row["wall_s"] = round(row["wall_s"], 4)
        return rows
