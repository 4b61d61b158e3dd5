"""RecursiveMAS wiring: two widths, outer latents at the slot, feedback from round 2, frozen LMs."""

from __future__ import annotations

import torch

from coral.recursivemas.patterns import PATTERNS
from coral.recursivemas.system import RecursiveMAS, edge_key


def test_sequential_agents_of_two_widths_decode_after_three_rounds(two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=3)
    link = mas.outer[edge_key("planner", "critic")]
    assert (link.w1.in_features, link.w2.out_features) == (32, 48)
    assert mas.outer[edge_key("critic", "solver")].w3.weight.shape == (32, 48)
    assert mas.inner["critic"].w1.in_features == 48
    replies = mas.answer(["keep the even numbers", "reverse the string s"], rounds=3, max_new_tokens=5)
    assert len(replies) == 2 and all(1 <= r.decoded_tokens <= 5 for r in replies)
    assert "links total" in mas.describe()


def test_the_final_prompt_holds_the_outer_links_output_at_its_slot(two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=3)
    seen: list[torch.Tensor] = []
    mas.outer[edge_key("critic", "solver")].register_forward_hook(lambda m, i, o: seen.append(o.detach()))
    with torch.no_grad():
        finals = mas.unroll(["q one", "a longer question two"], rounds=2)
    assert len(finals) == 2 and len(seen) == 2  # one critic -> solver hand-over per round
    for row in range(2):
        start, end = finals[-1].slot_spans[row]["critic"]
        assert torch.equal(finals[-1].embeds[row, start:end], seen[-1][row])


def test_feedback_slot_appears_from_the_second_round_and_the_question_is_always_there(two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
    first, later = mas.prompt("planner", "QUESTION-X", 0), mas.prompt("planner", "QUESTION-X", 1)
    assert first.slots == () and later.slots == ("solver",)
    planner = two_width_agents["planner"]
    for prompt in (first, later):
        assert "QUESTION-X" in "".join(planner.decode(p) for p in prompt.pieces)


def test_language_models_are_frozen_and_not_part_of_the_links_state(two_width_agents):
    mas = RecursiveMAS(PATTERNS["sequential"], two_width_agents, latent_steps=2)
    assert not any(p.requires_grad for a in two_width_agents.values() for p in a.model.parameters())
    assert all(k.startswith(("inner.", "outer.")) for k in mas.state_dict())


def test_every_pattern_runs_two_rounds(two_width_agents):
    pool = list(two_width_agents.values())
    for pattern in PATTERNS.values():
        agents = {role: pool[i % len(pool)] for i, role in enumerate(pattern.roles)}
        mas = RecursiveMAS(pattern, agents, latent_steps=2, tool=lambda attempts, questions: ["ok"] * len(attempts),
                           tool_max_new_tokens=2)
        with torch.no_grad():
            finals = mas.unroll(["q"], rounds=2)
        assert len(finals) == 2, pattern.name
