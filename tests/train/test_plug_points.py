"""The typed plug points: a policy with only TrainablePolicy's methods trains, and a sandbox with only
SandboxProtocol's methods judges code."""

from __future__ import annotations

import torch

from coral.policy.base import TrainablePolicy
from coral.sandbox.protocol import SandboxProtocol
from coral.trajectory import ExecutionResult, TestResult, Turn


class BigramPolicy:
    """The smallest trainable policy: next-token logits from the previous token; nothing else."""

    name = "bigram"

    def __init__(self, vocab: int = 5):
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(vocab, vocab)

    def generate(self, requests):
        raise NotImplementedError("a trainer never samples")

    def forward(self, prompt_ids, completion_ids, temperature=1.0):
        width = max(len(c) for c in completion_ids)
        logprobs = torch.zeros(len(completion_ids), width)
        mask = torch.zeros(len(completion_ids), width, dtype=torch.bool)
        for i, (prompt, completion) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
            previous = torch.tensor([prompt[-1], *completion[:-1]])
            logits = self.table(previous) / temperature
            logprobs[i, :len(completion)] = torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
            mask[i, :len(completion)] = True
        return logprobs, mask

    def parameters(self):
        return self.table.parameters()

    def train(self):
        self.table.train()
        return self

    def eval(self):
        self.table.eval()
        return self


def test_a_policy_with_only_the_protocol_methods_is_trained_by_the_grpo_learner():
    from coral.train.grpo import AgentLearner, GRPOConfig

    policy = BigramPolicy()
    assert isinstance(policy, TrainablePolicy)
    before = policy.table.weight.detach().clone()
    with torch.no_grad():
        old = policy.forward([[1], [1]], [[2, 3], [4]])[0]
    turns = [Turn("a", "coder", 0, "", "", prompt_ids=[1], completion_ids=c, logprobs=old[i, :len(c)].tolist(),
                  advantage=adv) for i, (c, adv) in enumerate((([2, 3], 1.0), ([4], -1.0)))]
    metrics = AgentLearner("a", policy, GRPOConfig(lr=0.1)).update(turns)
    assert metrics["trained_turns"] == 2.0
    after = policy.table.weight.detach()
    assert not torch.equal(before, after)
    # the rewarded tokens became likelier, the penalised one less likely
    with torch.no_grad():
        new = policy.forward([[1], [1]], [[2, 3], [4]])[0]
    assert new[0, 0] > old[0, 0] and new[1, 0] < old[1, 0]


def test_the_hf_policy_and_the_sandbox_fit_their_protocols():
    from coral.policy import tiny_policy
    from coral.sandbox import Sandbox

    assert isinstance(tiny_policy(seed=0, d_model=32, n_layers=1), TrainablePolicy)
    assert issubclass(Sandbox, SandboxProtocol)


class PassEverything:
    """A sandbox double: every test of every job passes."""

    def __init__(self):
        self.jobs = 0

    def run_many(self, jobs, progress=False):
        self.jobs += len(jobs)
        return [ExecutionResult(tuple(TestResult("pass") for _ in job.tests)) for job in jobs]

    def close(self):
        pass


def test_a_sandbox_with_only_the_protocol_methods_judges_code():
    from coral.benchmarks.procedural import make_tasks
    from coral.workflows.common import judge

    sandbox = PassEverything()
    assert isinstance(sandbox, SandboxProtocol)
    tasks = make_tasks(2, "train", seed=0)
    results = judge(sandbox, tasks, ["def f(): pass", None])
    assert results[0].public.passed and results[0].private.passed  # public and private of the judged code
    assert not results[1].public.passed and sandbox.jobs == 1  # no code: no job, a failing result
