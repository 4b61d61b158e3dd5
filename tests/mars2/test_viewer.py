"""The search-tree viewer: static structure (always) and its script in headless Chromium (if installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from coral.mars2.tree import Tree
from coral.mars2.viewer import AGENT_COLOURS, VERDICT_COLOURS, _layout, write_tree_html
from coral.trajectory import ExecutionResult, Task, Turn, Verdicts
from coral.trajectory import TestCase as Case
from coral.trajectory import TestResult as Result


def result(*verdicts: str) -> ExecutionResult:
    return ExecutionResult(tests=tuple(Result(v, "boom" if v != "pass" else "") for v in verdicts))


def make_tree(task_id: str, tricky_code: str = "def f(x):\n    return 0") -> Tree:
    """root -> 1 (a, half right) -> 3 (b, fixed); root -> 2 (b, wrong, with a nasty code string)."""
    tree = Tree.new(task_id)
    turn = Turn(agent="a", role="solver", call_index=0, prompt=f"Solve {task_id}", text="...")
    tree.add(0, "a", "def f(x):\n    return 2", turn, Verdicts(result("pass", "fail"), result("fail")), 0.5)
    tree.add(0, "b", tricky_code, None, Verdicts(result("fail", "fail"), result("fail")), 0.0)
    tree.add(1, "b", "def f(x):\n    return x + 1", None, Verdicts(result("pass", "pass"), result("pass")), 1.0)
    return tree


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[dict[str, str | None]] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.data_json = ""
        self._in_data = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "g" and "node" in (a.get("class") or "").split():
            self.nodes.append(a)
        self._in_data = tag == "script" and a.get("id") == "coral-tree-data"

    def handle_endtag(self, tag):
        self._in_data = False

    def handle_data(self, data):
        if self._in_data:
            self.data_json += data


NASTY = 'def f(x):\n    return "</script><b>&amp;"'


@pytest.fixture
def page(tmp_path):
    trees = [make_tree("t0"), make_tree("t1", tricky_code=NASTY)]
    return write_tree_html(trees, tmp_path / "out" / "trees.html"), trees


def parse(path) -> Collect:
    p = Collect()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_every_node_of_every_tree_is_drawn_once(page):
    path, trees = page
    drawn = [(n["data-tree"], n["data-node"]) for n in parse(path).nodes]
    assert drawn == [(str(t), str(n.index)) for t, tree in enumerate(trees) for n in tree.nodes]


def test_nodes_start_coloured_by_verdict_and_carry_agent_and_depth_colours(page):
    path, _ = page
    g = {n["data-node"]: n for n in parse(path).nodes if n["data-tree"] == "0"}
    assert g["0"]["data-colour-verdict"] == VERDICT_COLOURS["root"]
    assert g["1"]["data-colour-verdict"] == VERDICT_COLOURS["partial"]
    assert g["2"]["data-colour-verdict"] == VERDICT_COLOURS["fail"]
    assert g["3"]["data-colour-verdict"] == VERDICT_COLOURS["pass"] and "best" in g["3"]["class"]
    assert g["1"]["data-colour-agent"] == AGENT_COLOURS[0] and g["2"]["data-colour-agent"] == AGENT_COLOURS[1]
    assert g["1"]["data-colour-depth"] != g["3"]["data-colour-depth"]


def test_the_page_is_self_contained(page):
    path, _ = page
    tags = parse(path).tags
    assert not [a for _, a in tags if a.get("src") or a.get("href")]
    assert not [t for t, _ in tags if t in ("link", "iframe", "img")]
    assert "http://" not in path.read_text() and "https://" not in path.read_text()


def test_node_details_survive_code_that_looks_like_html(page):
    path, trees = page
    p = parse(path)
    assert sum(t == "script" for t, _ in p.tags) == 2  # the data block did not close early
    data = json.loads(p.data_json)
    assert data[1]["nodes"][2]["code"] == NASTY
    assert data[0]["nodes"][1]["public"].startswith("1/2 tests passed.")
    assert data[0]["nodes"][1]["prompt"] == "Solve t0"


def test_feedback_quotes_failing_public_tests_when_tasks_are_given(tmp_path):
    task = Task("t0", "p", "f", public_tests=(Case("assert", "assert candidate(1) == 2"),
                                              Case("assert", "assert candidate(2) == 3")),
                private_tests=(Case("assert", "assert candidate(9) == 10"),))
    p = parse(write_tree_html([make_tree("t0")], tmp_path / "t.html", tasks=[task]))
    assert "assert candidate(2) == 3" in json.loads(p.data_json)[0]["nodes"][1]["public"]


def test_layout_puts_children_below_parents_without_overlap():
    tree = make_tree("t")
    tree.add(3, "a", "x", None, Verdicts(result("pass"), result("pass")), 1.0)
    pos = _layout(tree)
    assert len(set(pos.values())) == len(tree.nodes)
    for n in tree.nodes[1:]:
        assert pos[n.index][1] > pos[n.parent][1]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def dump_dom(url: str, tmp_path) -> str:
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=True).stdout


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_in_chromium_the_fragment_selects_a_node_and_fills_the_panel(page, tmp_path):
    path, trees = page
    dom = dump_dom(f"{path.as_uri()}#select=0/3&colour=agent", tmp_path)
    p = Collect()
    p.feed(dom)
    assert len(p.nodes) == sum(len(t.nodes) for t in trees)
    selected = [n for n in p.nodes if "selected" in n["class"].split()]
    assert [(n["data-tree"], n["data-node"]) for n in selected] == [("0", "3")]
    assert '<pre id="panel-code">def f(x):\n    return x + 1</pre>' in dom
    assert '<dd id="panel-agent">b</dd>' in dom
    assert '<dd id="panel-private">pass: 1/1 tests passed.</dd>' in dom
    assert f'fill="{AGENT_COLOURS[1]}"' in dom  # the colour toggle repainted the nodes by agent


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_in_chromium_an_unknown_node_is_reported_in_the_panel(page, tmp_path):
    path, _ = page
    assert '<h2 id="panel-title">No node 0/99</h2>' in dump_dom(f"{path.as_uri()}#select=99", tmp_path)
