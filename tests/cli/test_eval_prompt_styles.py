"""`coral eval --prompt-style`: the tiny models' short prompts, an instruct prompt, or a base model's completion."""

from __future__ import annotations

import json

import pytest

from coral.cli import main
from coral.config import UserInputError
from coral.evaluation import EvalConfig, build_agents, run_eval, send_raw
from coral.policy import GenerationRequest, ScriptedPolicy, user


def _samples(out):
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("model, style", [("tiny", "short"), ("scripted:r.json", "short"), ("smollm2", "chat"),
                                          ("openai:http://127.0.0.1:8000/v1", "chat"), ("org/model", "chat")])
def test_auto_style_keeps_the_short_prompts_for_the_tiny_models_only(model, style):
    assert EvalConfig(model=model).style == style


def test_chat_style_asks_for_a_self_contained_solution_with_the_problem_fenced(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(["```python\ndef add(a, b):\n    return a + b\n```"]))
    cfg = EvalConfig(workflow="single", model=f"scripted:{tmp_path / 'r.json'}", prompt_style="chat")
    coder = build_agents(cfg)["coder"]
    chat = coder.template.render({"problem": "def add(a, b):\n    \"\"\"Add.\"\"\""})
    assert len(chat) == 1 and chat[0]["role"] == "user"
    assert "self-contained" in chat[0]["content"] and "```\ndef add(a, b):" in chat[0]["content"]


def test_completion_style_continues_the_raw_prompt_and_runs_prompt_plus_completion(tmp_path):
    from coral.benchmarks import load_benchmark

    task = load_benchmark("humaneval", limit=1)[0]
    body = task.reference[len(task.prompt):]
    (tmp_path / "r.json").write_text(json.dumps({task.prompt.strip(): "\n" + body + "\nif __name__ == 1:\n  x"}))
    rc = main(["eval", "--bench", "humaneval", "--limit", "1", "--workflow", "single", "--prompt-style",
               "completion", "--model", f"scripted:{tmp_path / 'r.json'}", "--out-dir", str(tmp_path / "o"),
               "--no-progress"])
    sample = _samples(tmp_path / "o")[0]
    assert rc == 0 and sample["passed"] and sample["code"] == "\n" + body  # cut at the stop "\nif"
    assert sample["turns"][0]["parse_error"] is None


def test_a_transformers_policy_sends_the_raw_text_without_its_chat_template(tiny_policy_small):
    raw = send_raw(tiny_policy_small)
    assert raw.render(user("def f():")) == "def f():"
    out = raw.generate([GenerationRequest(user("def f():"))])[0]
    assert out.prompt_ids == raw.encode("def f():")


def test_completion_style_is_refused_for_a_chain_and_for_a_benchmark_without_base_prompts(tmp_path):
    with pytest.raises(ValueError, match="needs workflow single"):
        EvalConfig(workflow="chain", prompt_style="completion")
    cfg = EvalConfig(bench="procedural-test", limit=1, workflow="single", prompt_style="completion",
                     model="scripted:x", out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="has no base-model prompt; use --prompt-style chat"):
        run_eval(cfg, agents={"coder": None}, progress=False)


def test_a_policy_that_always_applies_its_chat_template_is_refused_for_completion():
    class Templated:
        name = "vllm:x"

    with pytest.raises(UserInputError, match="use openai:URL"):
        send_raw(Templated())
    assert send_raw(policy := ScriptedPolicy(["x"])) is policy


@pytest.fixture
def tiny_policy_small():
    from coral.policy.tiny import tiny_policy

    return tiny_policy(seed=0, d_model=32, n_layers=1, n_heads=2, max_len=128)


def test_program_context_answer_runs_the_reply_alone_as_evalplus_runs_a_chat_reply(tmp_path):
    from coral.benchmarks import load_benchmark

    task = load_benchmark("humaneval", limit=1)[0]  # has_close_elements(numbers: List[float], ...)
    function = task.prompt[task.prompt.index("def "):] + task.reference[len(task.prompt):]
    (tmp_path / "r.json").write_text(json.dumps({task.prompt.strip(): f"```python\n{function}```"}))
    passed = {}
    for context in ("harness", "answer"):
        cfg = EvalConfig(bench="humaneval", limit=1, workflow="single", model=f"scripted:{tmp_path / 'r.json'}",
                         prompt_style="chat", program_context=context, out_dir=str(tmp_path / context))
        passed[context] = run_eval(cfg, progress=False)["pass@1"]
    assert passed == {"harness": 1.0, "answer": 0.0}  # `List` comes from the prompt's import only
