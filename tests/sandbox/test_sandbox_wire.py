"""The strict encoder: exact builtin types only, faithful round trips, malformed input refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "coral" / "sandbox"))
import _wire  # noqa: E402  (the server-side modules are top-level inside the sandbox)


@pytest.mark.parametrize("value", [None, True, 0, -(10**40), 1.5, float("inf"), "é", b"\x00", [1, [2]], (1, (2,)),
                                   {1: "a", (2, 3): [4]}, {1, 2}, frozenset({3}), 2 + 3j, range(1, 9, 2)])
def test_builtin_values_round_trip_with_their_exact_type(value):
    back = _wire.decode(_wire.loads(_wire.dumps(_wire.encode(value))))
    assert back == value and type(back) is type(value)


def test_nan_survives_the_round_trip():
    back = _wire.decode(_wire.loads(_wire.dumps(_wire.encode(float("nan")))))
    assert back != back


@pytest.mark.parametrize("value", [type("I", (int,), {})(1), type("S", (str,), {})("a"), type("L", (list,), {})(),
                                   object(), print, [type("F", (float,), {})(1.0)]])
def test_subclasses_and_arbitrary_objects_are_refused(value):
    with pytest.raises(_wire.WireError):
        _wire.encode(value)


def test_generators_become_iterators_of_their_items():
    back = _wire.decode(_wire.encode(x * x for x in range(3)))
    assert list(back) == [0, 1, 4]


@pytest.mark.parametrize("data", [{"x": 1}, {"t": 1}, {"f": 3}, {"i": "1", "t": []}, 1.5, {"d": [[1]]}])
def test_malformed_encodings_are_refused(data):
    with pytest.raises(_wire.WireError):
        _wire.decode(data)


def test_too_deep_values_are_refused():
    deep: list = []
    for _ in range(_wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(_wire.WireError):
        _wire.encode(deep)


def test_loaded_mark_matches_the_host_constant():
    import _roles

    from coral.sandbox.outcome import LOADED_MARK

    assert _roles.LOADED_MARK == LOADED_MARK


@pytest.mark.parametrize("digits", [4301, 20000])
def test_ints_beyond_the_int_to_str_digit_limit_round_trip(digits):
    for value in (10 ** (digits - 1), -(7 ** digits)):
        back = _wire.decode(_wire.loads(_wire.dumps(_wire.encode(value))))
        assert back == value and type(back) is int
