from coral.hiras.report import write_html


def call(agent, task, children=(), status="success"):
    return {"agent": agent, "task": task, "report": {"status": status, "summary": "s", "steps": 2},
            "usage": {"prompt_tokens": 10, "completion_tokens": 3}, "total_usage": {"prompt_tokens": 20,
            "completion_tokens": 6}, "wall_s": 0.5, "actions": [{"tool": "read_file", "args": {"path": "a"}}],
            "children": list(children)}


def test_html_nests_calls_and_escapes_model_text(tmp_path):
    root = call("manager", "go", [call("coding_agent", "<script>alert(1)</script>", status="error")])
    page = write_html([root], tmp_path / "r.html").read_text()
    assert page.count("<summary><b>") == 2 and page.index("manager") < page.index("coding_agent")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "10+3 tokens (subtree 20+6)" in page and "[error]" in page


def test_a_reply_rejected_as_an_invalid_action_is_shown_with_the_reason(tmp_path):
    from html import escape

    from coral.hiras.agents import parse_actions
    from coral.hiras.hiras import _action_log

    reply = "I will now write the <b>model</b> file."  # prose, no JSON action
    reason = parse_actions(reply)
    root = call("manager", "go")
    root["actions"] = [_action_log(reason, reason, 1, reply), {"tool": "list_files", "args": {}, "observation": "a.py"}]
    page = write_html([root], tmp_path / "r.html").read_text()
    assert "1 replies rejected" in page
    assert f"<b>reply rejected</b>: {escape(reason)}" in page and reason.startswith("no action")
    assert "I will now write the &lt;b&gt;model&lt;/b&gt; file." in page
    assert "<summary>observation</summary><pre>a.py</pre>" in page  # what a valid action saw
