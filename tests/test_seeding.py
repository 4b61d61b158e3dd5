"""sampling_seed: a pinned hash of (base, step, role, request) that separates every component."""

from __future__ import annotations

import hashlib

import pytest

from coral.seeding import sampling_seed


def test_the_seed_is_blake2b_of_the_json_key_shifted_to_63_bits():
    # pinned: a change to the key's encoding changes every stream of every run, so it must be deliberate
    digest = hashlib.blake2b(b'[0,0,"coder","t/plan0/code0"]', digest_size=8).digest()
    assert sampling_seed(0, 0, "coder", "t/plan0/code0") == int.from_bytes(digest, "big") >> 1
    assert sampling_seed(0, 0, "coder", "t/plan0/code0") == 4147609351606045604
    assert sampling_seed(3, -1, "agent0", "add1/node2") == 5871589402221081618


def test_each_component_of_the_key_changes_the_seed():
    ref = sampling_seed(1, 2, "coder", "t/plan0")
    others = [sampling_seed(2, 2, "coder", "t/plan0"), sampling_seed(1, 3, "coder", "t/plan0"),
              sampling_seed(1, 2, "planner", "t/plan0"), sampling_seed(1, 2, "coder", "t/plan1")]
    assert len({ref, *others}) == 5


def test_keys_that_concatenate_alike_or_differ_only_in_type_get_different_seeds():
    assert sampling_seed(0, 0, "a/b", "c") != sampling_seed(0, 0, "a", "b/c")
    assert sampling_seed(0, 0, "coder", 1) != sampling_seed(0, 0, "coder", "1")
    assert sampling_seed(0, 1, "coder", 0) != sampling_seed(1, 0, "coder", 0)  # old sums collided here


def test_seeds_are_non_negative_63_bit_and_distinct_over_many_requests():
    seeds = [sampling_seed(0, step, role, f"task{i}/plan{p}") for step in range(3) for role in ("planner", "coder")
             for i in range(200) for p in range(4)]
    assert all(0 <= s < 2**63 for s in seeds)
    assert len(set(seeds)) == len(seeds)


def test_bad_key_components_are_rejected_naming_the_value():
    with pytest.raises(TypeError, match="base"):
        sampling_seed(1.5, 0, "coder", 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="step"):
        sampling_seed(0, None, "coder", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="role"):
        sampling_seed(0, 0, "", 0)
    with pytest.raises(TypeError, match="request"):
        sampling_seed(0, 0, "coder", (1, 2))  # type: ignore[arg-type]
