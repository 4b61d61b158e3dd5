// coral tree viewer: colour toggle, node selection, side panel. Data comes from #coral-tree-data.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("coral-tree-data").textContent);
  var nodes = document.querySelectorAll("g.node");

  function text(id, value) { document.getElementById(id).textContent = value; }

  function colour(mode) {
    nodes.forEach(function (g) {
      g.querySelector("circle").setAttribute("fill", g.getAttribute("data-colour-" + mode));
    });
    document.getElementById("legend-verdict").hidden = mode !== "verdict";
    document.getElementById("legend-agent").hidden = mode !== "agent";
    document.getElementById("colour-by").value = mode;
  }

  function select(t, i) {
    var tree = data[t];
    var node = tree && tree.nodes[i];
    if (!node) return;
    nodes.forEach(function (g) {
      g.classList.toggle("selected", +g.getAttribute("data-tree") === t && +g.getAttribute("data-node") === i);
    });
    text("panel-title", tree.task_id + " / node " + node.index + " (depth " + node.depth + ")");
    text("panel-agent", node.agent);
    text("panel-score", node.parent === null ? "-" : String(node.score));
    text("panel-private", node.parent === null ? "-" : node.verdict + ": " + node.private);
    text("panel-value", node.visits + " / " + node.value);
    text("panel-feedback", node.public);
    text("panel-code", node.code);
    text("panel-prompt", node.prompt);
  }

  nodes.forEach(function (g) {
    function pick() { select(+g.getAttribute("data-tree"), +g.getAttribute("data-node")); }
    g.addEventListener("click", pick);
    g.addEventListener("keydown", function (e) { if (e.key === "Enter") pick(); });
  });
  document.getElementById("colour-by").addEventListener("change", function (e) { colour(e.target.value); });

  // URL fragment: #select=<tree>/<node> (or <node> in the first tree) & colour=verdict|agent|depth.
  // Selection clicks the node's element, so opening a link exercises the same handler as a user.
  location.hash.replace(/^#/, "").split("&").forEach(function (part) {
    var kv = part.split("=");
    if (kv[0] === "select" && kv[1]) {
      var ids = kv[1].split("/").map(Number);
      if (ids.length === 1) ids.unshift(0);
      var g = document.querySelector('g.node[data-tree="' + ids[0] + '"][data-node="' + ids[1] + '"]');
      if (g) g.dispatchEvent(new MouseEvent("click", {bubbles: true}));
      else text("panel-title", "No node " + ids[0] + "/" + ids[1]);
    } else if (kv[0] === "colour" && ["verdict", "agent", "depth"].indexOf(kv[1]) >= 0) {
      colour(kv[1]);
    }
  });
})();
