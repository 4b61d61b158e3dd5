# ruff: noqa: E402, E701, E702  (the diagnosis scripts as they were run)
"""Step 3: link training from the step-1 agents: VARIANT LR INNER_STEPS OUTER_STEPS, e.g.
`PYTHONPATH=. python experiments/recursivemas_link_init/diag2.py aligned 0.01 40 80`. Variants: base
(random init; the run of 2026-12-05 predates link_init, where random was the only init), scale (random, then the
LayerNorm gains set by hand as links.init_links "scaled" does), aligned."""
import sys
import time

import torch

sys.path.insert(0, "tests/recursivemas")
from conftest import tiny_agent
from test_train import RECORDS

from coral.recursivemas.config import InnerLoopConfig, OuterLoopConfig, RecursiveMASConfig
from coral.recursivemas.evaluate import evaluate
from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.system import RecursiveMAS, edge_key
from coral.recursivemas.train import new_state, train_links
from coral.train.loop import Run
from coral.train.loop import new_state as new_trainer_state

variant, lr, inner, outer = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
pattern = PATTERNS["sequential"]
tok = tiny_agent(32, 0).tokenizer
agents = {"planner": tiny_agent(32, 1, tok), "critic": tiny_agent(48, 2, tok), "solver": tiny_agent(32, 3, tok)}
sd = torch.load("/tmp/lat/agents.pt")
for r,a in agents.items(): a.model.load_state_dict(sd[r])
torch.manual_seed(0)
mas = RecursiveMAS(pattern, agents, latent_steps=4, link_init=variant.split("-")[0] if variant.split("-")[0] in ("aligned","scaled","random") else "random")
def rms(a): return a.model.get_input_embeddings().weight.pow(2).mean().sqrt().item()
if "scale" in variant:
    with torch.no_grad():
        for r in pattern.roles: mas.inner[r].ln_post.weight.fill_(rms(agents[r]))
        for s,t in pattern.edges(): mas.outer[edge_key(s,t)].ln_tgt.weight.fill_(rms(agents[t]))
if "ridge" in variant:
    with torch.no_grad():
        for s,t in pattern.edges():
            Es = agents[s].model.get_input_embeddings().weight.double(); Et = agents[t].model.get_input_embeddings().weight.double()
            W = torch.linalg.solve(Es.T@Es + 1e-2*torch.eye(Es.shape[1],dtype=torch.double), Es.T@Et)
            o = mas.outer[edge_key(s,t)]; o.w3.weight.copy_(W.T.float()); o.w2.weight.zero_(); o.w2.bias.zero_()
cfg = RecursiveMASConfig(latent_steps=4, rounds=1, batch_size=4, inner=InnerLoopConfig(steps=inner, lr=1e-2, warmup_steps=5),
                         outer=OuterLoopConfig(steps=outer, lr=lr, warmup_steps=5), out_dir="/tmp/lat/run_"+variant,
                         checkpoint_every_steps=1000)
t0=time.time()
before = evaluate("recursive", mas, RECORDS, 1, sandbox=None, max_new_tokens=6)
mids = []
def after_inner(m, history):
    if m["step"] == inner: mids.append(evaluate("recursive", mas, RECORDS, 1, sandbox=None, max_new_tokens=6))
state = train_links(new_state(cfg, mas), RECORDS, Run(cfg.out_dir, start_over=True), new_trainer_state(), on_step=after_inner)
mid = mids[0]
after = evaluate("recursive", mas, RECORDS, 1, sandbox=None, max_new_tokens=6)
il = [m["inner/loss"] for m in state["metrics"] if "inner/loss" in m]
ol = [m["outer/loss"] for m in state["metrics"] if "outer/loss" in m]
gn = [m["outer/grad_norm"] for m in state["metrics"] if "outer/loss" in m]
print(variant, lr, "inner", il[:1], il[-1:], "outer", [round(x,3) for x in ol[:3]], [round(x,3) for x in ol[-3:]], "gn", [round(x,3) for x in gn[:3]])
print(" acc", before.accuracy, mid.accuracy, after.accuracy, after.answers, f"{time.time()-t0:.0f}s")
