"""Link training: what an outer step touches, gradient through rounds, inner loss falls, the run loop
(same results as before it, resume in the phase and step where a run stopped)."""

from __future__ import annotations

import pytest
import torch

from coral.policy.tiny import build_tokenizer
from coral.recursivemas.agents import text_sources
from coral.recursivemas.config import InnerLoopConfig, OuterLoopConfig, RecursiveMASConfig
from coral.recursivemas.data import Record
from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.system import RecursiveMAS, edge_key
from coral.recursivemas.train import (
    inner_loss,
    load_links,
    new_state,
    outer_loss,
    outer_step,
    restore,
    train_links,
)
from coral.train.loop import Run
from coral.train.loop import new_state as new_trainer_state
from tests.recursivemas.conftest import tiny_agent

RECORDS = [Record(str(i), q, p, p + "!", a) for i, (q, p, a) in
           enumerate([("sum xs", "add", "s+"), ("max xs", "top", "m!"), ("len xs", "count", "n#"), ("rev s", "flip", "r-")])]


def _cfg(tmp_path, inner_steps=2, outer_steps=2, lr=1e-3, **kw) -> RecursiveMASConfig:
    base = dict(latent_steps=2, rounds=2, batch_size=2, out_dir=str(tmp_path), checkpoint_every_steps=100,
                inner=InnerLoopConfig(steps=inner_steps, lr=lr, warmup_steps=1),
                outer=OuterLoopConfig(steps=outer_steps, lr=lr, warmup_steps=1))
    return RecursiveMASConfig(**{**base, **kw})


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _train(cfg: RecursiveMASConfig, mas: RecursiveMAS, records=RECORDS) -> dict:
    return train_links(new_state(cfg, mas), records, Run(cfg.out_dir), new_trainer_state())


def test_an_outer_step_changes_the_outer_links_and_nothing_else(tmp_path, two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
    state = new_state(_cfg(tmp_path), mas)
    lms = {r: _snapshot(a.model) for r, a in two_width_agents.items()}
    inner, outer = _snapshot(mas.inner), _snapshot(mas.outer)
    outer_step(state, RECORDS[:2])
    assert all(not torch.equal(v, mas.outer.state_dict()[k]) for k, v in outer.items() if k.endswith("weight"))
    assert all(torch.equal(v, mas.inner.state_dict()[k]) for k, v in inner.items())
    for role, agent in two_width_agents.items():
        assert all(torch.equal(v, agent.model.state_dict()[k]) for k, v in lms[role].items()), role
        assert all(p.grad is None for p in agent.model.parameters())


def test_earlier_rounds_can_be_weighted_into_the_loss(two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
    with torch.no_grad():
        loss, ces = outer_loss(mas, RECORDS[:2], rounds=3, earlier_round_weight=0.5)
    assert len(ces) == 3
    assert loss.item() == pytest.approx(ces[-1] + 0.5 * (ces[0] + ces[1]) / 2, rel=1e-5)


def _hidden_states(agent, ids: list[int]) -> torch.Tensor:
    """Last hidden states (after the final norm) of one unpadded sequence, as the official code takes them."""
    return agent.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]


def test_the_inner_loss_pairs_each_hidden_state_with_the_next_tokens_embedding(two_width_agents):
    """Eq. 5 by hand: for gold token x_{t+1}, 1 - cos(inner(h_t), Emb(x_{t+1})), h_t the state at x_t."""
    agents = {"expert": two_width_agents["critic"], "learner": two_width_agents["solver"]}
    mas = RecursiveMAS(PATTERNS["distillation"], agents, latent_steps=2)
    batch = RECORDS[:2]
    got = inner_loss(mas, batch)
    for role, agent in agents.items():
        right, shifted = [], []
        for rec in batch:
            prompt = agent.encode(agent.render(mas.pattern.prompt(role, rec.question, text_sources(mas.pattern, role, rec))))
            gold = agent.encode(rec.field(mas.pattern.gold[role]))
            ids = prompt + gold
            with torch.no_grad():
                h, emb = _hidden_states(agent, ids), agent.model.get_input_embeddings()(torch.tensor(ids))
                for t in range(len(prompt), len(ids)):  # position t holds gold token x_t
                    right.append(1 - torch.cosine_similarity(mas.inner[role](h[t - 1]), emb[t], dim=0))
                    shifted.append(1 - torch.cosine_similarity(mas.inner[role](h[t]), emb[t], dim=0))
        expected, off_by_one = torch.stack(right).mean(), torch.stack(shifted).mean()
        assert got[role].item() == pytest.approx(expected.item(), abs=1e-5), role
        assert abs(expected.item() - off_by_one.item()) > 1e-2, role  # the pairing is what the test sees


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_the_outer_loss_reaches_every_outer_link_in_every_round_from_two_rounds_on(two_width_agents, pattern):
    """Eq. 6: CE of the final agent's answer in the last round only, yet every outer link gets gradient
    through each of its uses, round 1's included (through the feedback edge and the later rounds)."""
    pool = list(two_width_agents.values())
    agents = {role: pool[i % len(pool)] for i, role in enumerate(PATTERNS[pattern].roles)}
    feedback = {edge_key(s, d) for d, srcs in PATTERNS[pattern].feedback.items() for s in srcs}
    for rounds in (1, 2, 3) if pattern == "sequential" else (1, 2):  # R=3 for one pattern: seconds each
        mas = RecursiveMAS(PATTERNS[pattern], agents, latent_steps=2, tool_max_new_tokens=2,
                           tool=lambda attempts, questions: ["report"] * len(attempts))
        mas.inner.requires_grad_(False)
        uses: dict[str, list[torch.Tensor]] = {key: [] for key in mas.outer}
        for key, link in mas.outer.items():
            link.register_forward_hook(lambda m, i, out, key=key, uses=uses: out.retain_grad() or uses[key].append(out))
        loss, _ = outer_loss(mas, RECORDS[:1], rounds=rounds)
        loss.backward()
        for key, outs in uses.items():  # a feedback edge acts from round 2 on, every other edge every round
            assert len(outs) == rounds - (key in feedback), (pattern, rounds, key)
            assert all(out.grad is not None and out.grad.abs().sum() > 0 for out in outs), (pattern, rounds, key)
            assert not outs or all(p.grad.abs().sum() > 0 for p in mas.outer[key].parameters()), (pattern, key)


def test_the_inner_loss_falls(tmp_path):
    agent = tiny_agent(32, seed=0)
    agents = {"expert": agent, "learner": tiny_agent(32, seed=1, tokenizer=agent.tokenizer)}
    mas = RecursiveMAS(PATTERNS["distillation"], agents, latent_steps=2)
    trainer = _train(_cfg(tmp_path, inner_steps=12, outer_steps=0, lr=2e-2, batch_size=4), mas)
    losses = [m["inner/loss"] for m in trainer["metrics"]]
    assert len(losses) == 12
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3


# Measured with the recipe's own loop (`run_steps`, commit 6ad5c10) before it moved onto the shared run loop:
# the same seed must give the same batches, losses, gradient norms and links
BEFORE_RUN_LOOP = [
    {"inner/loss": 1.0298750400543213, "inner/grad_norm": 8.655468940734863},
    {"inner/loss": 0.8678216934204102, "inner/grad_norm": 6.836308479309082},
    {"inner/loss": 0.683210531870524, "inner/grad_norm": 3.511911392211914},
    {"outer/loss": 5.534535884857178, "outer/grad_norm": 0.2446407675743103},
    {"outer/loss": 5.504871845245361, "outer/grad_norm": 0.02027006819844246},
    {"outer/loss": 5.541693210601807, "outer/grad_norm": 0.021925868466496468},
]
BEFORE_LINK_SUMS = {"inner.critic.w1.weight": 336.160017503, "outer.critic__to__solver.w3.weight": 81.053829786,
                    "outer.solver__to__planner.w2.weight": 25.372216665}


def test_the_shared_run_loop_gives_the_results_of_the_recipes_own_loop(tmp_path):
    tok = build_tokenizer()
    agents = {"planner": tiny_agent(32, 1, tok), "critic": tiny_agent(48, 2, tok), "solver": tiny_agent(32, 3, tok)}
    torch.manual_seed(0)
    mas = RecursiveMAS(PATTERNS["sequential"], agents, latent_steps=2)
    trainer = _train(_cfg(tmp_path, inner_steps=3, outer_steps=3, lr=1e-2), mas)
    assert [m["step"] for m in trainer["metrics"]] == [1, 2, 3, 4, 5, 6]
    for got, want in zip(trainer["metrics"], BEFORE_RUN_LOOP, strict=True):
        assert {k: got[k] for k in want} == pytest.approx(want, rel=1e-5)
    sums = {k: float(v.double().abs().sum()) for k, v in mas.state_dict().items() if k in BEFORE_LINK_SUMS}
    assert sums == pytest.approx(BEFORE_LINK_SUMS, rel=1e-6)


class Killed(RuntimeError):
    pass


def test_a_run_stopped_in_the_outer_phase_resumes_there_with_links_optimisers_and_schedules(tmp_path,
                                                                                            two_width_agents):
    def fresh(out):
        torch.manual_seed(0)
        mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
        return new_state(_cfg(out, rounds=1, outer_steps=2, checkpoint_every_steps=1), mas)

    whole = fresh(tmp_path / "a")
    train_links(whole, RECORDS, Run(tmp_path / "a"), new_trainer_state())

    def stop_after_step_four(metrics, history):  # step 4 is logged but not checkpointed: like a kill -9 there
        if metrics["step"] == 4:
            raise Killed

    with pytest.raises(Killed):
        train_links(fresh(tmp_path / "b"), RECORDS, Run(tmp_path / "b"), new_trainer_state(), on_step=stop_after_step_four)
    resumed = fresh(tmp_path / "b")
    trainer = restore(resumed, Run(tmp_path / "b"))
    assert trainer["step"] == 3 and resumed.phase(trainer["step"] + 1) == "outer"
    assert resumed.outer.sched.last_epoch == 1 and resumed.inner.sched.last_epoch == 2
    trainer = train_links(resumed, RECORDS, Run(tmp_path / "b"), trainer)
    assert [m["step"] for m in trainer["metrics"]] == [1, 2, 3, 4]
    for k, v in whole.system.state_dict().items():
        assert torch.equal(v, resumed.system.state_dict()[k]), k
    assert resumed.outer.opt.state_dict()["state"].keys() == whole.outer.opt.state_dict()["state"].keys()
    loaded = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
    assert load_links(loaded, tmp_path / "b")
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in whole.system.state_dict().items())
