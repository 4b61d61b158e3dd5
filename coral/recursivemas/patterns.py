"""Collaboration patterns of RecursiveMAS: who runs in which order, who reads whose thoughts.

A `Pattern` lists roles in the order they act within a round; the last role is the final agent (the
only one that decodes text, in the last round). `inputs[role]` are the roles whose thoughts of the
same round it reads; `feedback[role]` those whose thoughts of the previous round it reads (the
feedback edge that makes the system recursive). Each edge (source, target) gets one outer link,
shared by all rounds. `prompt(role, question, sources)` writes the role's chat with one slot per
source that has something to say (a slot marker for latents; the text itself for text MAS); the
question is in every prompt of every round.

Patterns: sequential (planner -> critic -> solver, solver -> planner), mixture (three specialists ->
summariser, summariser -> each specialist, as the paper's math, code and science experts; here a planning,
a step-by-step and a code expert), distillation (expert -> learner, learner -> expert), deliberation
(reflector -> tool caller, tool caller -> reflector). `gold[role]` names the record field that role's
inner link is trained on; `tiny_widths[role]` the width of a tiny agent in that role when the config gives
none (distillation's expert is wider than its learner, as the paper's 9B expert and 4B learner).

`tool` says where the pattern's tool runs (tools.py, toolcalls.py):
  - "python" (deliberation, the official flow): every non-final round is latent only; in the final
    generation the tool caller may write `<python>...</python>`, the code runs in coral's sandbox and its
    output comes back as `<result>...</result>` text, and decoding goes on (toolcalls.py);
  - "public_tests" (deliberation_public_tests, coral's variant): in every non-final round the tool caller
    decodes a whole attempt, the attempt runs on the task's public tests, and the report reaches the
    reflector's next prompt as text (besides the latent feedback).

This module does NOT run models or hold links.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from coral.policy.base import Message
from coral.recursivemas.rollout import slot_marker

RECORD_FIELDS = ("question", "plan", "refined_plan", "answer")
TOOLS = ("", "python", "public_tests")
TINY_WIDTH = 64  # a tiny agent's width in a role the pattern gives none


@dataclass(frozen=True)
class Pattern:
    name: str
    roles: tuple[str, ...]
    instructions: Mapping[str, str]
    inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    feedback: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    gold: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)  # how a source is introduced in a prompt
    tiny_widths: Mapping[str, int] = field(default_factory=dict)  # a tiny agent's width per role (default 64)
    tool: str = ""  # "", "python" or "public_tests" (see the module docstring)

    def __post_init__(self) -> None:
        if self.tool not in TOOLS:
            raise ValueError(f"pattern {self.name}: tool must be one of {TOOLS}, got {self.tool!r}")
        known = set(self.roles)
        for kind, edges in (("inputs", self.inputs), ("feedback", self.feedback)):
            for dst, srcs in edges.items():
                bad = [r for r in (dst, *srcs) if r not in known]
                if bad:
                    raise ValueError(f"pattern {self.name}: {kind} names unknown role {bad[0]!r}")
        for dst, srcs in self.inputs.items():
            late = [s for s in srcs if self.roles.index(s) >= self.roles.index(dst)]
            if late:
                raise ValueError(f"pattern {self.name}: {dst!r} reads {late[0]!r}, which acts later in a round")
        for role in self.roles:
            if role not in self.instructions or self.gold.get(role, "answer") not in RECORD_FIELDS:
                raise ValueError(f"pattern {self.name}: role {role!r} needs an instruction and a gold field "
                                 f"in {RECORD_FIELDS}")

    @property
    def final(self) -> str:
        return self.roles[-1]

    def tiny_width(self, role: str) -> int:
        return self.tiny_widths.get(role, TINY_WIDTH)

    def edges(self) -> list[tuple[str, str]]:
        """Every directed (source, target) pair with an outer link, in a fixed order."""
        out = [(s, d) for d in self.roles for s in self.inputs.get(d, ())]
        out += [(s, d) for d in self.roles for s in self.feedback.get(d, ()) if (s, d) not in out]
        return out

    def sources(self, role: str, round_index: int) -> list[tuple[str, bool]]:
        """(source, from the previous round?) pairs that `role` reads in round `round_index` (0-based)."""
        prev = [(s, True) for s in self.feedback.get(role, ())] if round_index > 0 else []
        return prev + [(s, False) for s in self.inputs.get(role, ())]

    def prompt(self, role: str, question: str, sources: Mapping[str, str | None]) -> list[Message]:
        """The chat of `role`: instruction, question, then each source's contribution. A value None
        puts that source's slot marker (latents go there); a string is put in as text."""
        parts = [f"Question:\n{question.strip()}"]
        for src, text in sources.items():
            label = self.labels.get(src, f"Thoughts of the {src}")
            parts.append(f"{label}:\n{slot_marker(src) if text is None else text.strip()}")
        return [{"role": "system", "content": self.instructions[role]},
                {"role": "user", "content": "\n\n".join(parts)}]


_SOLVE = "Write the Python function that solves the question. Answer with the code only."
_PLAN = "Write a short numbered plan for the question. Do not write code."
_STEPS = "Write each step of the solution with its line of code."
_RUN_PYTHON = ("Write the Python function that solves the question. To run Python first, put it between "
               "<python> and </python>; what it prints comes back between <result> and </result>. End with "
               "the function in a ```python block.")

PATTERNS: dict[str, Pattern] = {
    "sequential": Pattern(
        "sequential", ("planner", "critic", "solver"),
        instructions={"planner": _PLAN,
                      "critic": "Check the plan against the question and write the corrected plan, "
                                "each step with its line of code.",
                      "solver": _SOLVE},
        inputs={"critic": ("planner",), "solver": ("critic",)},
        feedback={"planner": ("solver",)},
        gold={"planner": "plan", "critic": "refined_plan", "solver": "answer"},
        labels={"planner": "Plan", "critic": "Checked plan", "solver": "Previous answer"},
        tiny_widths={"planner": 64, "critic": 96, "solver": 64},
    ),
    "mixture": Pattern(
        "mixture", ("expert_a", "expert_b", "expert_c", "summariser"),
        instructions={"expert_a": _PLAN, "expert_b": _STEPS, "expert_c": _SOLVE,
                      "summariser": "Combine the experts' thoughts. " + _SOLVE},
        inputs={"summariser": ("expert_a", "expert_b", "expert_c")},
        feedback={"expert_a": ("summariser",), "expert_b": ("summariser",), "expert_c": ("summariser",)},
        gold={"expert_a": "plan", "expert_b": "refined_plan", "expert_c": "answer", "summariser": "answer"},
        labels={"expert_a": "Planning expert", "expert_b": "Step-by-step expert", "expert_c": "Code expert",
                "summariser": "Previous answer"},
        tiny_widths={"expert_a": 64, "expert_b": 96, "expert_c": 64, "summariser": 64},
    ),
    "distillation": Pattern(
        "distillation", ("expert", "learner"),
        instructions={"expert": "Explain step by step, with code, how to solve the question.",
                      "learner": _SOLVE},
        inputs={"learner": ("expert",)},
        feedback={"expert": ("learner",)},
        gold={"expert": "refined_plan", "learner": "answer"},
        labels={"expert": "Expert", "learner": "Learner's previous answer"},
        tiny_widths={"expert": 96, "learner": 64},
    ),
    "deliberation": Pattern(
        "deliberation", ("reflector", "tool_caller"),
        instructions={"reflector": "Reflect on the question and the tool caller's thoughts; write what to do next.",
                      "tool_caller": _RUN_PYTHON},
        inputs={"tool_caller": ("reflector",)},
        feedback={"reflector": ("tool_caller",)},
        gold={"reflector": "refined_plan", "tool_caller": "answer"},
        labels={"reflector": "Reflection", "tool_caller": "Tool caller's thoughts"},
        tiny_widths={"reflector": 64, "tool_caller": 64},
        tool="python",
    ),
    "deliberation_public_tests": Pattern(
        "deliberation_public_tests", ("reflector", "tool_caller"),
        instructions={"reflector": "Reflect on the question and the last attempt and its test results; "
                                   "write what to do next.",
                      "tool_caller": _SOLVE + " The code is run on the public tests."},
        inputs={"tool_caller": ("reflector",)},
        feedback={"reflector": ("tool_caller",)},
        gold={"reflector": "refined_plan", "tool_caller": "answer"},
        labels={"reflector": "Reflection", "tool_caller": "Previous attempt",
                "tool": "Python tool: the previous attempt on the public tests"},
        tiny_widths={"reflector": 64, "tool_caller": 96},
        tool="public_tests",
    ),
}


def get_pattern(name: str) -> Pattern:
    if name not in PATTERNS:
        raise ValueError(f"unknown RecursiveMAS pattern {name!r}; choose one of {sorted(PATTERNS)}")
    return PATTERNS[name]
