"""The procedural task family: small functions composed from primitives, with gold plans and code.

A task is a composition of primitives (primitives.py): steps applied in order to `xs: list[int]` or
`s: str`, then a terminal that returns something. Its description, gold plan, gold code and tests are
all derived from the composition, e.g.

    Given a list of integers xs, keep the even numbers, then multiply each by 3, then return the sum.
    def f(xs: list[int]) -> int:
        xs = [x for x in xs if x % 2 == 0]
        xs = [x * 3 for x in xs]
        return sum(xs)

Difficulty (depth) = number of primitives, not counting a bare `return xs` / `return s`.

Splits: decided on the *skeleton* of a composition, i.e. its family and the sequence of primitive
kinds without parameters (("list", "keep_even", "mul", "sum")). sha256 of the skeleton, as a number u in
[0, 1), puts it in the test split when u < test_fraction, in the validation split when u < test_fraction
+ validation_fraction, else in the train split. So the three splits are disjoint, deterministic,
independent of seeds, and a test or validation task is never a re-parameterised train task: solving it
needs a new combination of known operations. Validation is for choosing settings; the test split is
reported, not tuned on.

Seeds' test sets: within the test split, a composition belongs to one seed slot (sha256 of its id, one of
`test_seed_slots`), and `make_tasks(n, "test", seed=s)` draws only from slot s mod test_seed_slots. So
the test sets of seeds 0 .. test_seed_slots - 1 are pairwise disjoint (seed s + test_seed_slots shares
seed s's compositions), and runs over several seeds average over independent test sets. The train and
validation splits are drawn whole by every seed (their sets overlap across seeds).

Gold codes: a composition has one canonical gold code (`gold_code`, the task's reference) and, through the
other idioms of its primitives (primitives.IDIOMS), several equivalent ones (benchmarks/gold_codes.py).

Tests: expected values come from running the composition here (trusted code from our own table).
Private tests always include the edge cases (empty input, one element, all negative / odd characters)
and are chosen greedily from a seeded pool so that they kill the first-order mutants (mutants.py) of the
gold code that the pool can tell apart from it. Public tests are other inputs from the same pool. A test
is `assert (got := candidate(x)) == y, repr(got)` (`report_output`), so a failure reports what came back.

This module does NOT execute model code, tokenize, or write files.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coral.benchmarks.mutants import mutate_source
from coral.benchmarks.primitives import (
    ARG_TYPE,
    PRIMITIVES,
    STEPS,
    TERMINALS,
    VAR,
    Primitive,
    compile_expr,
    kinds,
)
from coral.trajectory import Task, TestCase

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class ProceduralConfig:
    min_depth: int = 1
    max_depth: int = 3
    num_public: int = 3
    num_private: int = 8
    # shares of skeletons held out for the test and validation splits; train keeps the rest (the same
    # skeletons as when test alone held out 0.25)
    test_fraction: float = 0.15
    validation_fraction: float = 0.10
    test_seed_slots: int = 8  # seeds s and s' have disjoint test sets unless s = s' mod test_seed_slots
    str_fraction: float = 0.3  # share of string tasks (the rest take a list of integers)
    return_collection_fraction: float = 0.3  # share of tasks that return the list / string itself
    pool_size: int = 32  # candidate test inputs per task (edge cases come on top)
    max_len: int = 8  # longest generated list / string
    # a failing test's message is the value the function returned, so feedback (and a refinement prompt)
    # carries the failing input, the expected and the actual output; false: the assert alone
    report_output: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.min_depth <= self.max_depth:
            raise ValueError(f"ProceduralConfig.min_depth/max_depth must satisfy 1 <= min <= max, "
                             f"got {self.min_depth}, {self.max_depth}")
        for name in ("num_public", "num_private", "pool_size", "max_len", "test_seed_slots"):
            if getattr(self, name) < 1:
                raise ValueError(f"ProceduralConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("test_fraction", "validation_fraction", "str_fraction", "return_collection_fraction"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ValueError(f"ProceduralConfig.{name} must be in (0, 1), got {getattr(self, name)}")
        if self.test_fraction + self.validation_fraction >= 1.0:
            raise ValueError(f"ProceduralConfig.test_fraction + validation_fraction must be < 1 (train needs "
                             f"skeletons), got {self.test_fraction} + {self.validation_fraction}")


Composition = tuple[Primitive, ...]  # steps..., terminal


def depth(comp: Composition) -> int:
    return sum(not p.trivial for p in comp)


def skeleton(comp: Composition) -> tuple[str, ...]:
    return (comp[0].family, *(p.kind for p in comp))


def skeleton_unit(comp: Composition, salt: str = "") -> float:
    """A number in [0, 1) from sha256 of (salt and) the skeleton: a deterministic, seed-free way to
    put whole skeletons on one side of a split. Different salts give independent splits."""
    digest = hashlib.sha256((salt + "/".join(skeleton(comp))).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(comp: Composition, test_fraction: float = ProceduralConfig.test_fraction,
             validation_fraction: float = ProceduralConfig.validation_fraction) -> str:
    """"test", "validation" or "train", from a hash of the skeleton (kinds without parameters)."""
    u = skeleton_unit(comp)
    if u < test_fraction:
        return "test"
    return "validation" if u < test_fraction + validation_fraction else "train"


def seed_slot_of(comp: Composition, slots: int = ProceduralConfig.test_seed_slots) -> int:
    """The seed slot of a (test) composition: `make_tasks(..., "test", seed=s)` draws only from slot
    s mod `slots`. A hash of the whole composition (parameters included), independent of the skeleton split."""
    digest = hashlib.sha256(("coral-test-seed/" + composition_id(comp)).encode()).digest()
    return int.from_bytes(digest[:8], "big") % slots


# --------------------------------------------------------------------------- text and code
def describe(comp: Composition) -> str:
    head = "Given a list of integers xs" if comp[0].family == "list" else "Given a string s"
    return head + ", " + ", then ".join(p.phrase for p in comp) + "."


def signature(comp: Composition) -> str:
    fam = comp[0].family
    return f"def f({VAR[fam]}: {ARG_TYPE[fam]}) -> {comp[-1].returns}:"


def gold_code(comp: Composition) -> str:
    return "\n".join([signature(comp), *(p.line() for p in comp)]) + "\n"


def gold_plan(comp: Composition) -> str:
    return "\n".join(f"{i}. {p.plan_step()}" for i, p in enumerate(comp, start=1))


def parse_composition(family: str, names: list[str]) -> Composition:
    """The inverse of `task.metadata["composition"]`. Raises ValueError on an unknown name."""
    try:
        return tuple(PRIMITIVES[(family, n)] for n in names)
    except KeyError as e:
        raise ValueError(f"unknown {family} primitive {e.args[0][1]!r} in composition {names}") from None


# --------------------------------------------------------------------------- sampling
_KINDS = {family: kinds(prims) for family, prims in STEPS.items()}

def _allowed(prev: Primitive | None, nxt: Primitive) -> bool:
    """Rules that keep compositions meaningful (each step can change the answer)."""
    if prev is None:
        return True
    if prev.kind == nxt.kind or (prev.group and prev.group == nxt.group):
        return False
    if prev.order_only and (nxt.order_only or nxt.order_blind):
        return False
    if prev.keeps_size and nxt.size_only:
        return False
    return True


def sample_composition(rng: random.Random, family: str, target_depth: int, cfg: ProceduralConfig) -> Composition:
    terminals = TERMINALS[family]
    if rng.random() < cfg.return_collection_fraction:
        terminal = terminals[0]  # ret_list / ret_str
    else:
        terminal = rng.choice(terminals[1:])
    num_steps = target_depth - (0 if terminal.trivial else 1)
    by_kind = _KINDS[family]
    kind_names = list(by_kind)
    steps: list[Primitive] = []
    for _ in range(num_steps):
        for _attempt in range(20):
            cand = rng.choice(by_kind[rng.choice(kind_names)])
            if _allowed(steps[-1] if steps else None, cand):
                break
        steps.append(cand)
    return (*steps, terminal)


def _well_formed(comp: Composition) -> bool:
    return all(_allowed(a, b) for a, b in zip(comp, comp[1:], strict=False))


# --------------------------------------------------------------------------- test inputs
_CHARS = "abcdeiouxyz" * 3 + "AEBX  12!"
_INTS = range(-9, 13)


def _random_input(rng: random.Random, family: str, max_len: int) -> Any:
    n = rng.randint(2, max_len)
    if family == "list":
        return rng.choices(_INTS, k=n)
    return "".join(rng.choices(_CHARS, k=n))


def _edge_inputs(rng: random.Random, family: str) -> list[Any]:
    if family == "list":
        negatives = [rng.randint(-9, -1) for _ in range(rng.randint(3, 5))]
        return [[], [rng.randint(-9, 12)], negatives, [0, 3, 3, -2, 0, 7]]
    return ["", rng.choice("abcxyz"), "Hello World 42", "aab  ee!"]


def _run(fns: list[Callable[[Any], Any]], value: Any) -> Any:
    for fn in fns:
        value = fn(value)
    return value


def _outcome(fns: list[Callable[[Any], Any]], value: Any) -> Any:
    try:
        return ("ok", _run(fns, value))
    except Exception as e:  # a mutant may crash: that is an observable difference
        return ("raise", type(e).__name__)


@functools.cache
def _mutant_fns(family: str, expr: str) -> tuple[Callable[[Any], Any], ...]:
    return tuple(compile_expr(family, m) for m in mutate_source(expr))


def _mutant_chains(comp: Composition) -> list[list[Callable[[Any], Any]]]:
    """Function chains of every first-order mutant of the gold code (one mutated line each)."""
    base = [p.fn for p in comp]
    return [base[:i] + [m] + base[i + 1:] for i, p in enumerate(comp) for m in _mutant_fns(p.family, p.expr)]


def _diverse_first(inputs: list[Any], expected: dict[str, Any], taken: list[Any]) -> list[Any]:
    """`inputs` reordered so that those with an answer not yet among `taken` come first."""
    answers = {repr(expected[repr(x)]) for x in taken}
    fresh: list[Any] = []
    for x in inputs:
        if repr(expected[repr(x)]) not in answers:
            answers.add(repr(expected[repr(x)]))
            fresh.append(x)
    fresh_ids = {id(x) for x in fresh}
    return fresh + [x for x in inputs if id(x) not in fresh_ids]


def _select_tests(comp: Composition, rng: random.Random, cfg: ProceduralConfig) -> tuple[list, list] | None:
    """(public inputs, private inputs) with expected outputs, or None if the task is degenerate
    (fewer than 3 distinct answers over the pool)."""
    fam = comp[0].family
    ref = [p.fn for p in comp]
    edges = _edge_inputs(rng, fam)
    pool = [_random_input(rng, fam, cfg.max_len) for _ in range(cfg.pool_size)]
    expected = {repr(x): _run(ref, x) for x in edges + pool}
    if len({repr(v) for v in expected.values()}) < 3:
        return None
    private = edges[: min(3, cfg.num_private)]
    alive = _mutant_chains(comp)
    alive = [m for m in alive if not any(_outcome(m, x) != ("ok", expected[repr(x)]) for x in private)]
    for x in edges[3:] + pool:
        if not alive or len(private) >= cfg.num_private:
            break
        killed = [m for m in alive if _outcome(m, x) != ("ok", expected[repr(x)])]
        if killed and repr(x) not in {repr(p) for p in private}:
            private.append(x)
            alive = [m for m in alive if m not in killed]
    seen = {repr(x) for x in private}
    rest = [x for x in pool if repr(x) not in seen and not seen.add(repr(x))]  # type: ignore[func-returns-value]
    private += _diverse_first(rest, expected, private)[: cfg.num_private - len(private)]
    used = {repr(x) for x in private}
    rest = [x for x in rest if repr(x) not in used]
    public = _diverse_first(rest, expected, [])[: cfg.num_public]
    return [(x, expected[repr(x)]) for x in public], [(x, expected[repr(x)]) for x in private]


def _assert_case(x: Any, y: Any, report_output: bool = True) -> TestCase:
    """`assert candidate(x) == y`; with `report_output` a failure's message is the value returned (its repr),
    so feedback shows the input, the expected and the actual output."""
    if not report_output:
        return TestCase(kind="assert", code=f"assert candidate({x!r}) == {y!r}")
    return TestCase(kind="assert", code=f"assert (got := candidate({x!r})) == {y!r}, repr(got)")


# --------------------------------------------------------------------------- tasks
def composition_id(comp: Composition) -> str:
    key = comp[0].family + ":" + ",".join(p.name for p in comp)
    return "procedural/" + hashlib.sha256(key.encode()).hexdigest()[:12]


def build_task(comp: Composition, seed: int = 0, cfg: ProceduralConfig | None = None) -> Task | None:
    """The task of one composition (None if it is degenerate). Tests depend only on (comp, seed)."""
    cfg = cfg or ProceduralConfig()
    tid = composition_id(comp)
    tests = _select_tests(comp, random.Random(f"{seed}:{tid}"), cfg)
    if tests is None:
        return None
    public, private = tests
    desc, sig = describe(comp), signature(comp)
    return Task(
        id=tid,
        prompt=f"{desc}\n{sig}\n",
        entry_point="f",
        public_tests=tuple(_assert_case(x, y, cfg.report_output) for x, y in public),
        private_tests=tuple(_assert_case(x, y, cfg.report_output) for x, y in private),
        reference=gold_code(comp),
        metadata={
            "source": "procedural",
            "difficulty": depth(comp),
            "gold_plan": gold_plan(comp),
            "composition": [p.name for p in comp],
            "family": comp[0].family,
            "split": split_of(comp, cfg.test_fraction, cfg.validation_fraction),
            "description": desc,
            "signature": sig,
        },
    )


# this many draws in a row without a new composition: the depth range is exhausted, stop looking
EXHAUSTED_AFTER_DRAWS = 20_000


def make_tasks(n: int, split: str = "train", *, min_depth: int = 1, max_depth: int = 3, seed: int = 0,
               config: ProceduralConfig | None = None) -> list[Task]:
    """`n` distinct tasks of one split ("train", "validation" or "test"), depths uniform in [min_depth,
    max_depth], reproducible from `seed` (a longer list extends a shorter one). The test split draws only
    seed's slot of compositions (see the module docstring). `config` overrides everything but the depths.
    Raises ValueError when the split (test: the seed's slot) has fewer than `n` distinct tasks in that
    depth range."""
    if split not in SPLITS:
        raise ValueError(f"procedural split must be one of {SPLITS}, got {split!r}")
    if n < 0:
        raise ValueError(f"make_tasks: n must be >= 0, got {n}")
    base = config or ProceduralConfig()
    cfg = ProceduralConfig(**{**base.__dict__, "min_depth": min_depth, "max_depth": max_depth})
    rng = random.Random(f"procedural:{split}:{seed}")
    tasks: list[Task] = []
    seen: set[str] = set()  # compositions decided (taken or rejected): a repeat draw costs no hashing
    slot = seed % cfg.test_seed_slots if split == "test" else None
    # a test seed keeps one draw in test_seed_slots: draw that many times more before giving up
    max_attempts = (200 * n + 2000) * (cfg.test_seed_slots if slot is not None else 1)
    stale = draws = 0  # stale: draws since the last composition not seen before
    while len(tasks) < n and draws < max_attempts and stale < EXHAUSTED_AFTER_DRAWS:
        draws += 1
        family = "str" if rng.random() < cfg.str_fraction else "list"
        comp = sample_composition(rng, family, rng.randint(cfg.min_depth, cfg.max_depth), cfg)
        tid = composition_id(comp)
        if tid in seen:
            stale += 1
            continue
        seen.add(tid)
        stale = 0
        if not _well_formed(comp) or split_of(comp, cfg.test_fraction, cfg.validation_fraction) != split:
            continue
        if slot is not None and seed_slot_of(comp, cfg.test_seed_slots) != slot:
            continue
        task = build_task(comp, seed, cfg)
        if task is not None:
            tasks.append(task)
    if len(tasks) < n:
        where = f"{split!r} tasks" + (f" of seed slot {slot}" if slot is not None else "")
        raise ValueError(f"make_tasks: found only {len(tasks)} distinct {where} with depth in "
                         f"[{min_depth}, {max_depth}] after {draws} draws; asked for {n}")
    return tasks
