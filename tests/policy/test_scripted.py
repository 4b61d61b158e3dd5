import pytest

from coral.policy import GenerationRequest, SamplingParams, ScriptedPolicy, user


def ask(policy, text="q", **sampling):
    return policy.generate([GenerationRequest(user(text), SamplingParams(**sampling))])[0]


def test_list_replies_come_in_order_and_cycle():
    policy = ScriptedPolicy(["a", "b"])
    assert [ask(policy).text for _ in range(3)] == ["a", "b", "a"]


def test_exhausted_list_without_cycle_raises_a_clear_error():
    policy = ScriptedPolicy(["a"], cycle=False)
    ask(policy)
    with pytest.raises(IndexError, match="ran out of replies after 1"):
        ask(policy)


def test_callable_replies_see_the_chat():
    policy = ScriptedPolicy(lambda messages: messages[-1]["content"].upper())
    assert ask(policy, "hello").text == "HELLO"


def test_stop_string_cuts_the_reply():
    assert ask(ScriptedPolicy(["code\n```\nmore"]), stop=("```",)).text == "code\n"


def test_ids_are_utf8_bytes_with_zero_logprobs():
    out = ask(ScriptedPolicy(["hé"]))
    assert out.completion_ids == list("hé".encode()) and out.logprobs == [0.0, 0.0, 0.0]


def test_calls_are_recorded():
    policy = ScriptedPolicy(["a"])
    ask(policy, "first")
    assert policy.calls == [user("first")]


def test_replies_by_text_answer_each_prompt_with_the_reply_of_the_longest_key_it_contains():
    policy = ScriptedPolicy({"def add(": "add's reply", "def add(a, b, c)": "add3's reply"})
    assert ask(policy, "Complete:\ndef add(a, b):").text == "add's reply"
    assert ask(policy, "Complete:\ndef add(a, b, c):").text == "add3's reply"
    with pytest.raises(LookupError, match="no scripted reply for a prompt starting 'def sub"):
        ask(policy, "def sub(a, b):")


def test_a_scripted_file_holding_an_object_replies_by_text(tmp_path):
    import json

    from coral.policy import load_policy

    (tmp_path / "r.json").write_text(json.dumps({"task one": "1", "task two": "2"}))
    policy = load_policy(f"scripted:{tmp_path / 'r.json'}")
    assert [ask(policy, f"please solve {t}").text for t in ("task two", "task one")] == ["2", "1"]
