"""An HTML page of a HiRAS run: the tree of agent calls with each call's task, report, steps and tokens,
and every action with what it observed; a reply rejected as an invalid action is shown with the reason.

Self-contained (inline CSS, no script): nested <details> elements, one per call, the root open.
Every model-written string is HTML-escaped.

This module does NOT plot anything and does NOT read logs: it renders calls.json's attempts.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

_CSS = """body{font:14px system-ui,sans-serif;margin:2em;max-width:70em}details{margin:.3em 0 .3em 1.2em;
border-left:2px solid #ccc;padding-left:.6em}summary{cursor:pointer}.ok{color:#186a3b}.bad{color:#a93226}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.4em;margin:.2em 0}.tok{color:#666;font-size:12px}
.rejected{color:#a93226}"""


def _action_html(action: dict) -> str:
    observed = f"<details><summary>observation</summary><pre>{escape(action.get('observation', ''))}</pre></details>"
    if action["tool"] == "invalid":
        return (f"<li class=rejected><b>reply rejected</b>: {escape(action.get('observation', ''))}"
                f"<pre>{escape(action.get('reply', '(the reply was not recorded by this coral version)'))}</pre></li>")
    return f"<li><b>{escape(action['tool'])}</b> {escape(str(action['args']))[:300]}{observed}</li>"


def _call_html(call: dict, open_: bool = False) -> str:
    report = call.get("report") or {}
    status = report.get("status", "none")
    usage, total = call["usage"], call["total_usage"]
    cls = "ok" if status == "success" else "bad"
    actions = "".join(_action_html(a) for a in call["actions"])
    rejected = sum(a["tool"] == "invalid" for a in call["actions"])
    children = "".join(_call_html(child) for child in call["children"])
    # a call with a rejected reply starts open, so the rejection is seen without a click
    return (f"<details{' open' if open_ or rejected else ''}><summary><b>{escape(call['agent'])}</b> "
            f"<span class={cls}>[{escape(status)}]</span> <span class=tok>{report.get('steps', 0)} steps, "
            f"{usage['prompt_tokens']}+{usage['completion_tokens']} tokens (subtree {total['prompt_tokens']}+"
            f"{total['completion_tokens']}), {call['wall_s']:.2f} s</span>{f' <span class=rejected>{rejected} replies rejected</span>' if rejected else ''}</summary>"
            f"<div>Task:<pre>{escape(call['task'])}</pre>Report:<pre>{escape(report.get('summary', ''))}</pre>"
            f"<ol>{actions}</ol></div>{children}</details>")


def write_html(attempts: list[dict], path: str | Path, title: str = "HiRAS run") -> Path:
    """Write the page for a list of root calls (one per attempt) to `path`."""
    body = "".join(f"<h2>Attempt {i + 1}</h2>" + _call_html(root, open_=True) for i, root in enumerate(attempts))
    page = (f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title)}</title><style>{_CSS}</style>"
            f"</head><body><h1>{escape(title)}</h1>{body}</body></html>")
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path
