"""Deliberation as the official code runs it (rounds before the last latent only, tool calls inside the final
generation), coral's public-tests variant beside it, and decoded tokens counted in every workflow."""

from __future__ import annotations

import pytest
import torch

import coral.recursivemas.evaluate as evaluate_module
import coral.recursivemas.system as system_module
import coral.recursivemas.toolcalls as toolcalls
from coral.recursivemas.data import Record
from coral.recursivemas.evaluate import evaluate
from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.rollout import greedy_decode, split_prompt
from coral.recursivemas.system import RecursiveMAS
from coral.recursivemas.toolcalls import decode_with_tools
from coral.recursivemas.tools import PythonTool, code_of
from coral.sandbox import Sandbox

RECORDS = [Record(str(i), q, "p", "rp", "a") for i, q in enumerate(["q zero", "a longer question one"])]


def _pair(two_width_agents):
    return {"reflector": two_width_agents["critic"], "tool_caller": two_width_agents["solver"]}


def _recording_decode(monkeypatch, module):
    """Wrap `module.greedy_decode`; returns the list of per-row token counts of every call."""
    calls: list[list[int]] = []

    def wrapped(*args, **kwargs):
        ids = greedy_decode(*args, **kwargs)
        calls.append([len(row) for row in ids])
        return ids

    monkeypatch.setattr(module, "greedy_decode", wrapped)
    return calls


def test_deliberation_keeps_the_rounds_before_the_last_latent_only(two_width_agents, monkeypatch):
    tool_calls = []
    mas = RecursiveMAS(PATTERNS["deliberation"], _pair(two_width_agents), latent_steps=2,
                       tool=lambda *args: tool_calls.append(args) or ["REPORT"] * len(args[0]))
    decodes = _recording_decode(monkeypatch, system_module)
    seen = []
    original = mas.prompt
    mas.prompt = lambda role, q, r, notes=None: seen.append((role, r, notes)) or original(role, q, r, notes)
    with torch.no_grad():
        finals = mas.unroll(["q0", "q1"], rounds=3)
    assert len(finals) == 3
    assert decodes == [] and tool_calls == []  # no attempt decoded, no tool run before the final generation
    assert all(notes is None for _, _, notes in seen)  # nothing reaches a prompt as text
    assert [(role, r) for role, r, _ in seen] == [(role, r) for r in range(3) for role in ("reflector", "tool_caller")
                                                  for _question in range(2)]


def test_recursive_counts_the_public_tests_attempts_of_earlier_rounds(two_width_agents, monkeypatch):
    mas = RecursiveMAS(PATTERNS["deliberation_public_tests"], _pair(two_width_agents), latent_steps=2,
                       tool=lambda attempts, questions: ["REPORT"] * len(attempts), tool_max_new_tokens=4)
    decodes = _recording_decode(monkeypatch, system_module)
    res = evaluate("recursive", mas, RECORDS, rounds=3, sandbox=None, max_new_tokens=5)
    assert len(decodes) == 3  # an attempt in rounds 1 and 2, the answer in round 3
    assert res.tokens == [sum(call[i] for call in decodes) for i in range(len(RECORDS))]
    assert all(t > 5 for t in res.tokens)  # more than the final answer's budget: the attempts count


class Scripted:
    """Stands in for greedy_decode: each call decodes the next scripted text per row, stopping as the
    real decoder would (stop() after each token), and records the prompts' last columns."""

    def __init__(self, policy, script: list[list[str]]) -> None:
        self.policy, self.script, self.prompts = policy, script, []

    def __call__(self, model, prompt, max_new_tokens, eos_ids, cache=None, stop=None):
        self.prompts.append(prompt.embeds)
        out = []
        for j, text in enumerate(self.script.pop(0)):
            ids: list[int] = []
            for t in self.policy.encode(text)[:max_new_tokens]:
                ids.append(t)
                if stop is not None and stop(j, ids):
                    break
            out.append(ids)
        return out


def test_a_python_call_in_the_final_generation_runs_and_decoding_goes_on_after_its_result(two_width_agents,
                                                                                          monkeypatch):
    policy = two_width_agents["solver"]
    first = "let me check <python>print(6 * 7)</python> dropped after the call"
    second = "```python\ndef f():\n    return 42\n```"
    scripted = Scripted(policy, [[first, "no tools here"], [second]])
    monkeypatch.setattr(toolcalls, "greedy_decode", scripted)
    ran: list[list[str]] = []
    prompts = [split_prompt(policy.render([{"role": "user", "content": q}]), policy.encode) for q in ("a", "b")]
    replies = decode_with_tools(policy, prompts, [{}, {}], max_new_tokens=200,
                                run=lambda codes: ran.append(list(codes)) or ["42"])
    assert ran == [["print(6 * 7)"]]
    so_far = "let me check <python>print(6 * 7)</python> <result> 42 </result>"
    assert replies[0].text == so_far + second
    assert replies[1].text == "no tools here"
    n_first = next(n for n in range(1, 100) if "</python>" in policy.decode(policy.encode(first)[:n]))
    # decoded: the first segment up to the closing tag, and the second; the tool's output is not counted
    assert replies[0].decoded_tokens == n_first + len(policy.encode(second))
    assert replies[1].decoded_tokens == len(policy.encode("no tools here"))
    # the second segment was decoded after the prompt and the text so far, result included
    table = policy.model.get_input_embeddings()
    tail = table(torch.tensor(policy.encode(so_far)))
    assert torch.equal(scripted.prompts[1][0, -tail.shape[0]:], tail)
    assert code_of(replies[0].text) == "def f():\n    return 42"


def test_tool_calls_stop_at_the_call_limit_and_the_token_budget_spans_all_segments(two_width_agents, monkeypatch):
    policy = two_width_agents["solver"]
    call = "<python>print(1)</python>"
    prompts = [split_prompt(policy.render([{"role": "user", "content": "q"}]), policy.encode)]
    ran = []
    monkeypatch.setattr(toolcalls, "greedy_decode", Scripted(policy, [[call]] * 3))
    limited = decode_with_tools(policy, prompts, [{}], max_new_tokens=1000, max_calls=2,
                                run=lambda codes: ran.append(codes) or ["1"] * len(codes))
    assert len(ran) == 2 and limited[0].text.endswith("<result> tool call limit (2) reached </result>")
    assert limited[0].text.count("<python>") == 3
    per_call = len(policy.encode(call))
    monkeypatch.setattr(toolcalls, "greedy_decode", Scripted(policy, [[call]] * 2))
    budget = decode_with_tools(policy, prompts, [{}], max_new_tokens=per_call + 3, max_calls=5,
                               run=lambda codes: ["1"] * len(codes))
    assert budget[0].decoded_tokens == per_call + 3  # the second segment gets only what the first left


def test_the_python_tool_returns_what_the_code_printed_or_why_it_failed():
    with Sandbox(workers=1) as sandbox:
        out = PythonTool(sandbox)(["print(6 * 7)", "raise ValueError('bad')", "def (:"])
        cut = PythonTool(sandbox, max_chars=40)(["print('x' * 100)"])
    assert out[0] == "42"
    assert "ValueError: bad" in out[1]
    assert out[2].startswith("[error]")
    assert cut == ["x" * 40 + " [cut]"]


def test_the_deliberation_answer_is_judged_without_its_tool_calls():
    text = "<python>def f():\n    return 0\n</python> <result> 0 </result>```python\ndef f():\n    return 1\n```"
    assert code_of(text) == "def f():\n    return 1"
    assert code_of("<python>def f():\n    return 0\n</python>") is None


@pytest.mark.parametrize("pattern", ["deliberation", "deliberation_public_tests"])
def test_a_deliberation_pattern_without_its_tool_is_refused(two_width_agents, pattern):
    mas = RecursiveMAS(PATTERNS[pattern], _pair(two_width_agents), latent_steps=2)
    with pytest.raises(ValueError, match="calls a tool"):
        mas.answer(["q"], rounds=2, max_new_tokens=2)


def test_text_mas_and_recursive_both_finish_deliberation_with_the_tool_caller_calling_tools(two_width_agents,
                                                                                             monkeypatch):
    mas = RecursiveMAS(PATTERNS["deliberation"], _pair(two_width_agents), latent_steps=2,
                       tool=lambda codes: ["out"] * len(codes))
    used = []
    real = toolcalls.decode_with_tools
    for module in (system_module, evaluate_module):
        monkeypatch.setattr(module, "decode_with_tools", lambda *a, **kw: used.append(len(a[1])) or real(*a, **kw))
    for workflow in ("recursive", "text-mas"):
        res = evaluate(workflow, mas, RECORDS, rounds=2, sandbox=None, max_new_tokens=4)
        assert len(res.answers) == 2 and all(t >= 1 for t in res.tokens), workflow
    assert used == [2, 2]  # one generation with tools per workflow: the last round's tool caller, both rows
