# ruff: noqa: E402, E701, E702, I001  (the diagnosis scripts as they were run)
"""Step 1 of the link-init diagnosis (docs/recursivemas.md): cold-start the three agents of
tests/recursivemas/test_learning.py, save them to /tmp/lat/agents.pt, and decode the solver alone with the gold /
no / wrong text in its slot, and print the agents' mean embedding norms. Run from the repo root:
PYTHONPATH=. python experiments/recursivemas_link_init/diag.py"""
import sys
import time

import torch

sys.path.insert(0, "tests/recursivemas")
from conftest import tiny_agent
from test_train import RECORDS

from coral.recursivemas.agents import role_examples, text_sources
from coral.recursivemas.evaluate import _generate
from coral.recursivemas.patterns import PATTERNS
from coral.train.sft import SFTConfig, train_sft

t0=time.time()
pattern = PATTERNS["sequential"]
tok = tiny_agent(32, 0).tokenizer
agents = {"planner": tiny_agent(32, 1, tok), "critic": tiny_agent(48, 2, tok), "solver": tiny_agent(32, 3, tok)}
for role in pattern.roles:
    train_sft(agents[role], role_examples(pattern, role, RECORDS), SFTConfig(epochs=150, batch_size=4, lr=1e-2, warmup_steps=2), progress=False)
print("sft", time.time()-t0)
import os; os.makedirs("/tmp/lat", exist_ok=True)
torch.save({r: a.model.state_dict() for r,a in agents.items()}, "/tmp/lat/agents.pt")
sol = agents["solver"]
for name, srcs in [("gold", lambda r: text_sources(pattern, "solver", r)), ("none", lambda r: {}), ("wrong", lambda r: {"critic": "xx"})]:
    chats = [pattern.prompt("solver", r.question, srcs(r)) for r in RECORDS]
    texts, _ = _generate(sol, chats, 6)
    print(name, texts, [r.answer for r in RECORDS])
for role, a in agents.items():
    E = a.model.get_input_embeddings().weight
    print(role, "emb norm mean", E.norm(dim=-1).mean().item())
