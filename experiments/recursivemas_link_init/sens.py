# ruff: noqa: E402, E701, E702  (the diagnosis scripts as they were run)
"""Step 2: the solver's answer CE with zeros / random / its own gold embeddings in the slot (agents from
step 1). PYTHONPATH=. python experiments/recursivemas_link_init/sens.py"""
import sys

import torch

sys.path.insert(0, "tests/recursivemas")
from conftest import tiny_agent
from test_train import RECORDS

from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.rollout import answer_nll, assemble
from coral.recursivemas.system import RecursiveMAS

pattern = PATTERNS["sequential"]
tok = tiny_agent(32, 0).tokenizer
agents = {"planner": tiny_agent(32, 1, tok), "critic": tiny_agent(48, 2, tok), "solver": tiny_agent(32, 3, tok)}
sd = torch.load("/tmp/lat/agents.pt")
for r,a in agents.items(): a.model.load_state_dict(sd[r])
mas = RecursiveMAS(pattern, agents, latent_steps=4)
sol = agents["solver"]
p = mas.prompt("solver", RECORDS[0].question, 0)
print(p.slots, [len(x) for x in p.pieces])
print(repr(sol.render(pattern.prompt("solver", RECORDS[0].question, {"critic": None}))))
qs=[r.question for r in RECORDS]
prompts=[mas.prompt("solver", q, 0) for q in qs]
tg=[sol.encode(r.answer)+[sol.tokenizer.eos_token_id] for r in RECORDS]
E = sol.model.get_input_embeddings().weight
for name, lat in [("zeros", torch.zeros(4,32)), ("big", torch.randn(4,32)*5), ("small", torch.randn(4,32)*0.2)]:
    print(name, answer_nll(sol.model, assemble(sol.model, prompts, [{"critic": lat}]*4), tg).item())
for r in RECORDS:
    ids = sol.encode(r.refined_plan)
    print("oracle-embeds", r.refined_plan, len(ids))
rows=[{"critic": E[torch.tensor(sol.encode(r.refined_plan))]} for r in RECORDS]
print("oracle", answer_nll(sol.model, assemble(sol.model, prompts, rows), tg).item())
from coral.recursivemas.rollout import greedy_decode

ids = greedy_decode(sol.model, assemble(sol.model, prompts, rows), 6, sol.eos_ids)
print([sol.decode(i) for i in ids])
