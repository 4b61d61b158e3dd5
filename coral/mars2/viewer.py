"""Search-tree viewer: one self-contained HTML file that draws MARS2 trees.

Each tree is an SVG drawn here in Python (so the page shows the trees even without JavaScript);
nodes are coloured by verdict, with a toggle to colour by agent or by depth. Clicking a node (or
opening the file with `#select=<tree>/<node>`, or `#select=<node>` for the first tree) fills a side
panel with the node's agent, score, public feedback, private verdict, code and prompt. The script and
the stylesheet (viewer.js / viewer.css beside this module) are inlined: no CDN, no network.

Verdict colours: private pass (green); all public tests pass but private fail (orange, overfit to the
public tests); some public tests pass (yellow); none pass (red); root (grey).

This module does NOT run searches or compute anything beyond `tree_metrics`; it only draws.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from coral.mars2.tree import Tree, tree_metrics
from coral.trajectory import ExecutionResult, Node, Task

X_STEP_PX, Y_STEP_PX, RADIUS_PX, MARGIN_PX = 44, 64, 14, 24
MAX_PROMPT_CHARS = 6000
VERDICT_COLOURS = {"root": "#9e9e9e", "pass": "#2e9d4f", "overfit": "#f08c00", "partial": "#f2c94c",
                   "fail": "#d64545"}
AGENT_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#e15759", "#76b7b2", "#edc948",
                 "#ff9da7", "#9c755f", "#bab0ac")


def verdict_class(node: Node) -> str:
    if node.parent is None:
        return "root"
    if node.private is not None and node.private.passed:
        return "pass"
    if node.public is not None and node.public.passed:
        return "overfit"
    return "partial" if node.score > 0 else "fail"


def _depth_colour(depth: int, max_depth: int) -> str:
    lightness = 82 - 52 * (depth / max(max_depth, 1))
    return f"hsl(210, 70%, {lightness:.0f}%)"


def _summary(result: ExecutionResult | None, tests: Sequence[Any] | None) -> str:
    if result is None:
        return "not run"
    if tests is not None:
        return result.feedback(tests)
    if result.error:
        return f"The program could not run: {result.error}"
    lines = [f"{result.num_passed}/{len(result.tests)} tests passed."]
    lines += [f"- test {i}: {t.verdict} {t.message}".rstrip() for i, t in enumerate(result.tests) if not t.passed]
    return "\n".join(lines)


def _layout(tree: Tree) -> dict[int, tuple[float, float]]:
    """(x, y) in px: leaves take consecutive columns in depth-first order, parents sit over the
    middle of their children. Iterative, so deep trees do not hit the recursion limit."""
    x: dict[int, float] = {}
    column = 0
    stack: list[tuple[int, bool]] = [(0, False)]
    while stack:
        i, done = stack.pop()
        kids = tree.nodes[i].children
        if not kids:
            x[i] = column
            column += 1
        elif done:
            x[i] = (x[kids[0]] + x[kids[-1]]) / 2
        else:
            stack.append((i, True))
            stack.extend((c, False) for c in reversed(kids))
    return {i: (MARGIN_PX + X_STEP_PX * x[i], MARGIN_PX + Y_STEP_PX * n.depth) for i, n in enumerate(tree.nodes)}


def _node_data(node: Node, tests: Task | None) -> dict[str, Any]:
    prompt = node.turn.prompt if node.turn is not None else ""
    return {
        "index": node.index, "parent": node.parent, "depth": node.depth, "agent": node.agent or "(root)",
        "score": round(node.score, 4), "verdict": verdict_class(node), "code": node.code or "",
        "public": _summary(node.public, tests.public_tests if tests else None) if node.parent is not None else "",
        "private": _summary(node.private, tests.private_tests if tests else None) if node.parent is not None else "",
        "prompt": prompt[:MAX_PROMPT_CHARS], "visits": node.visits, "value": round(node.value, 4),
    }


def _tree_svg(t: int, tree: Tree, agent_colour: Mapping[str, str], max_depth: int) -> str:
    pos = _layout(tree)
    width = max(x for x, _ in pos.values()) + MARGIN_PX + RADIUS_PX
    height = max(y for _, y in pos.values()) + MARGIN_PX + RADIUS_PX
    best = tree.best()
    parts = [f'<svg class="tree" width="{width:.0f}" height="{height:.0f}" data-tree="{t}">']
    for node in tree.nodes[1:]:
        assert node.parent is not None, "every node but the root has a parent"
        (x1, y1), (x2, y2) = pos[node.parent], pos[node.index]
        parts.append(f'<line class="edge" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"/>')
    for node in tree.nodes:
        x, y = pos[node.index]
        verdict = verdict_class(node)
        agent = node.agent or ""
        colours = {"verdict": VERDICT_COLOURS[verdict],
                   "agent": agent_colour.get(agent, VERDICT_COLOURS["root"]),
                   "depth": _depth_colour(node.depth, max_depth)}
        best_cls = " best" if best is not None and node.index == best.index else ""
        title = f"node {node.index} ({agent or 'root'}) score {node.score:.2f} {verdict}"
        parts.append(
            f'<g class="node v-{verdict}{best_cls}" data-tree="{t}" data-node="{node.index}" tabindex="0" '
            + " ".join(f'data-colour-{k}="{v}"' for k, v in colours.items())
            + f'><circle cx="{x:.1f}" cy="{y:.1f}" r="{RADIUS_PX}" fill="{colours["verdict"]}"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}">{node.index}</text><title>{html.escape(title)}</title></g>')
    parts.append("</svg>")
    return "".join(parts)


def _json_for_script(data: Any) -> str:
    """JSON that cannot close its <script> element early."""
    return json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    return resources.files("coral.mars2").joinpath(name).read_text(encoding="utf-8")


def render_tree_html(trees: Sequence[Tree], tasks: Sequence[Task] | None = None, title: str = "coral search trees") -> str:
    by_id = {t.id: t for t in tasks} if tasks is not None else {}
    agents = sorted({n.agent for t in trees for n in t.nodes if n.agent is not None})
    agent_colour = {a: AGENT_COLOURS[i % len(AGENT_COLOURS)] for i, a in enumerate(agents)}
    max_depth = max((n.depth for t in trees for n in t.nodes), default=0)
    data = [{"task_id": t.task_id, "nodes": [_node_data(n, by_id.get(t.task_id)) for n in t.nodes]} for t in trees]
    metrics = tree_metrics(trees) if trees else {}
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.3f}</td></tr>" for k, v in metrics.items())
    legend = "".join(f'<span class="swatch" style="background:{c}"></span>{html.escape(v)} '
                     for v, c in VERDICT_COLOURS.items())
    agent_legend = "".join(f'<span class="swatch" style="background:{c}"></span>{html.escape(a)} '
                           for a, c in agent_colour.items())
    sections = []
    for t, tree in enumerate(trees):
        marks = f"pass@1 {'yes' if tree.pass_at_1() else 'no'}, pass@N {'yes' if tree.pass_at_n() else 'no'}"
        sections.append(f'<section class="tree-box"><h2>{html.escape(tree.task_id)} '
                        f'<small>{tree.size} nodes, {marks}</small></h2>'
                        f'{_tree_svg(t, tree, agent_colour, max_depth)}</section>')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_asset("viewer.css")}</style></head>
<body><main id="trees"><h1>{html.escape(title)}</h1>
<div class="controls"><label>Colour by <select id="colour-by"><option value="verdict">verdict</option>
<option value="agent">agent</option><option value="depth">depth</option></select></label>
<div class="legend" id="legend-verdict">{legend}</div>
<div class="legend" id="legend-agent" hidden>{agent_legend}</div></div>
<table class="metrics">{rows}</table>
{"".join(sections)}</main>
<aside id="panel"><h2 id="panel-title">Click a node</h2><dl>
<dt>agent</dt><dd id="panel-agent"></dd><dt>public score</dt><dd id="panel-score"></dd>
<dt>private verdict</dt><dd id="panel-private"></dd><dt>visits / value</dt><dd id="panel-value"></dd></dl>
<h3>Public feedback</h3><pre id="panel-feedback"></pre><h3>Code</h3><pre id="panel-code"></pre>
<details><summary>Prompt</summary><pre id="panel-prompt"></pre></details></aside>
<script type="application/json" id="coral-tree-data">{_json_for_script(data)}</script>
<script>{_asset("viewer.js")}</script></body></html>
"""


def write_tree_html(trees: Sequence[Tree], path: str | Path, tasks: Sequence[Task] | None = None) -> Path:
    """Write the viewer to `path` (parents created). With `tasks`, public feedback quotes the failing
    tests; without, it lists failing test numbers and verdicts."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_tree_html(trees, tasks), encoding="utf-8")
    return out
