"""Agent = id + role + policy + prompt template + output parser.

An agent turns a batch of contexts (dicts of strings) into Turns. It does NOT run code, compute
rewards or decide who talks next: workflows do that.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from coral.agents.parsers import PARSERS, Parsed
from coral.policy.base import GenerationRequest, Policy, SamplingParams
from coral.seeding import sampling_seed
from coral.trajectory import Turn


@dataclass(frozen=True)
class PromptTemplate:
    """`user` (and `system`) are str.format templates over the context's fields."""

    user: str
    system: str = ""

    @property
    def fields(self) -> set[str]:
        names = set()
        for text in (self.system, self.user):
            names |= {name for _, name, _, _ in string.Formatter().parse(text) if name}
        return names

    def render(self, context: Mapping[str, str]) -> tuple[dict[str, str], ...]:
        missing = self.fields - set(context)
        if missing:
            raise KeyError(f"prompt template needs fields {sorted(missing)}; context has {sorted(context)}")
        msgs = []
        if self.system:
            msgs.append({"role": "system", "content": self.system.format(**context)})
        msgs.append({"role": "user", "content": self.user.format(**context)})
        return tuple(msgs)


# Short prompts on purpose: the embedded tiny models learn them from scratch.
TEMPLATES: dict[str, PromptTemplate] = {
    "planner": PromptTemplate(
        system="You are a planner. Write a short numbered plan. Do not write code.",
        user="{problem}\nPlan:",
    ),
    "coder": PromptTemplate(
        system="You are a coder. Write the Python function in a ```python block.",
        user="{problem}\n{plan}\nCode:",
    ),
    "debugger": PromptTemplate(
        system="You are a debugger. Fix the code using the test feedback. Reply with the full fixed function.",
        user="{problem}\nCode:\n```python\n{code}\n```\nFeedback:\n{feedback}\nFixed code:",
    ),
    "retriever": PromptTemplate(
        system="You are a retriever. List the Python functions and idioms useful for this problem.",
        user="{problem}\nUseful:",
    ),
    "refiner": PromptTemplate(
        system="Improve the code so that it passes the tests. Reply with the full function.",
        user="{problem}\nCode:\n```python\n{code}\n```\nFeedback:\n{feedback}\nImproved code:",
    ),
    "solver": PromptTemplate(
        system="Write the Python function in a ```python block.",
        user="{problem}\nCode:",
    ),
}
ROLE_PARSERS = {"planner": "plan", "retriever": "text", "coder": "code", "debugger": "code",
                "refiner": "code", "solver": "code"}

# The prompt styles of `coral eval` for real models (the short TEMPLATES above are for the tiny ones):
# "chat", an instruct prompt in the form instruct models' published HumanEval/MBPP numbers use
# (EvalPlus's: an instruction, the problem in a fence, the answer expected in a python block; our own
# wording), and "completion", the benchmark's own prompt sent as it is for a base model to continue.
INSTRUCT = "Write a self-contained Python solution (with the imports it needs) to the problem below, in one " \
           "```python code block.\n```\n{problem}\n```"
# The chat planner (CoRe-Code with an instruct model): a plan in words, which the chat coder is then asked to follow
PLAN_INSTRUCT = "Write a short numbered plan, in words and without code, for solving the problem below in " \
                "Python.\n```\n{problem}\n```"
PROMPT_STYLES: dict[str, dict[str, PromptTemplate]] = {
    "chat": {"solver": PromptTemplate(user=INSTRUCT),
             "coder": PromptTemplate(user=INSTRUCT + "\nFollow this plan:\n{plan}"),
             "planner": PromptTemplate(user=PLAN_INSTRUCT)},
    "completion": {"solver": PromptTemplate(user="{problem}")},
}


@dataclass
class Agent:
    """`sampling.seed` is the agent's base seed, not a request's: each request draws from its own
    stream (see `act`); None leaves sampling unseeded."""

    id: str
    role: str
    policy: Policy
    template: PromptTemplate
    parser: Callable[..., Parsed]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    trainable: bool = True

    def act(self, contexts: Sequence[Mapping[str, str]], call_index: int = 0,
            entry_points: Sequence[str] | None = None, *, step: int = 0,
            keys: Sequence[str] | None = None) -> list[Turn]:
        """One turn per context, generated as one batch.

        With a seeded `sampling`, request i samples from `sampling_seed(sampling.seed, step, self.id,
        keys[i])` (coral/seeding.py): `keys` name the requests and must be unique within (step, agent)
        across the whole run, which only the caller can know, so a seeded agent refuses to act without them.
        """
        if not contexts:
            return []
        seeds = self._seeds(len(contexts), step, keys)
        requests = []
        for ctx, seed in zip(contexts, seeds, strict=True):
            sampling = self.sampling if seed is None else replace(self.sampling, seed=seed)
            requests.append(GenerationRequest(messages=self.template.render(ctx), sampling=sampling))
        completions = self.policy.generate(requests)
        if len(completions) != len(requests):
            raise RuntimeError(f"policy {self.policy.name!r} returned {len(completions)} completions "
                               f"for {len(requests)} requests")
        turns = []
        for i, (req, comp) in enumerate(zip(requests, completions, strict=True)):
            parsed = self.parser(comp.text, entry_points[i] if entry_points else "")
            turns.append(Turn(
                agent=self.id, role=self.role, call_index=call_index,
                prompt=req.messages[-1]["content"], text=comp.text,
                prompt_ids=list(comp.prompt_ids), completion_ids=list(comp.completion_ids),
                logprobs=list(comp.logprobs), parsed=parsed.value, parse_error=parsed.error,
                finish_reason=comp.finish_reason, usage=dict(comp.usage) if comp.usage else None,
                seed=req.sampling.seed,
            ))
        return turns

    def _seeds(self, n: int, step: int, keys: Sequence[str] | None) -> list[int | None]:
        if self.sampling.seed is None:
            return [None] * n
        if keys is None:
            raise ValueError(f"agent {self.id!r} has a sampling seed but act() got no request keys: pass keys= "
                             "(unique within a step for this agent) so that no two requests share a random stream")
        if len(keys) != n:
            raise ValueError(f"agent {self.id!r}: {len(keys)} request keys for {n} contexts")
        if len(set(keys)) != n:
            dup = next(k for k in keys if list(keys).count(k) > 1)
            raise ValueError(f"agent {self.id!r}: request key {dup!r} appears twice in one batch")
        return [sampling_seed(self.sampling.seed, step, self.id, key) for key in keys]


def make_agent(role: str, policy: Policy, *, agent_id: str | None = None,
               sampling: SamplingParams | None = None, template: PromptTemplate | None = None,
               trainable: bool = True, parser: str | None = None) -> Agent:
    """An agent with the default template and parser of its role (`parser` names another in PARSERS)."""
    if role not in TEMPLATES and template is None:
        raise ValueError(f"unknown agent role {role!r}; known roles: {sorted(TEMPLATES)}")
    return Agent(
        id=agent_id or role, role=role, policy=policy,
        template=template or TEMPLATES[role], parser=PARSERS[parser or ROLE_PARSERS.get(role, "text")],
        sampling=sampling or SamplingParams(), trainable=trainable,
    )
