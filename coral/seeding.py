"""Sampling seeds: one hashed random stream per request, `sampling_seed(base, step, role, request)`.

Every sampled request gets the seed of its key, so no two requests of a run share a stream (plan i
and the code written from it draw different numbers, a new batch draws new numbers, and a resumed
run redraws exactly what it drew). The key:

- `base`: the run's seed (`--seed`; an agent's `SamplingParams.seed`).
- `step`: the training step that samples (0 in a standalone `coral eval` / `coral search`;
  `EVAL_STEP` for evaluations inside a training run, so they never reuse an RL step's streams).
  Two evaluations of one run (before and after training) draw the same streams on purpose: common
  random numbers pair their samples and lower the variance of their difference.
- `role`: the agent's id (planner, coder, agent0, ...), unique among the agents of a workflow.
- `request`: unique within (step, role). The workflows build it from the task key (the task id; a
  task repeated within one batch gets "#1", "#2", ... on its later copies, see
  `coral.workflows.common.task_keys`), the sample index and the call:
  chain "<task>/notes", "<task>/plan<p>", "<task>/plan<p>/code<c>", "<task>/plan<p>/code<c>/debug<r>";
  tree "<task>/node<n>" (n = the index the new node takes in its tree).
  The key names the task, not its position in a batch, so a task's samples do not depend on the
  batch size or on which tasks share its batch.

seed = the first 8 bytes of blake2b(JSON of [base, step, role, request]), shifted to 63 bits: a
non-negative int64 that torch.Generator, vLLM and OpenAI-compatible servers accept. The JSON
encoding keeps keys unambiguous ("a/b" + "c" never equals "a" + "b/c"; 1 never equals "1").

This module does NOT seed global generators (torch, random, numpy) and does NOT draw anything itself.
"""

from __future__ import annotations

import hashlib
import json

EVAL_STEP = -1  # the step of evaluation requests inside a training run: never a training step


def sampling_seed(base: int, step: int, role: str, request: int | str) -> int:
    """The 63-bit seed of one request's random stream (see the module docstring for the key)."""
    for name, value in (("base", base), ("step", step)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"sampling_seed: {name} must be an int, got {value!r}")
    if not isinstance(role, str) or not role:
        raise ValueError(f"sampling_seed: role must be a non-empty str, got {role!r}")
    if isinstance(request, bool) or not isinstance(request, int | str):
        raise TypeError(f"sampling_seed: request must be an int or str, got {request!r}")
    key = json.dumps([base, step, role, request], separators=(",", ":"))
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1
