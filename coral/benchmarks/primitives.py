"""The primitives of the procedural task family: one English phrase and one line of Python each.

A primitive is a list step (`xs -> xs`), a string step (`s -> s`) or a terminal (what the function
returns). Every phrase has a parameter where it makes sense ("multiply each by {k}" for k in 2..9), so
compositions of three primitives already number in the tens of thousands.

Most operations also have other idioms (IDIOMS: a comprehension, filter/map with a lambda, swapped
operands) that compute the same value; tests check that every idiom agrees with `expr` on many inputs.

This module does NOT compose primitives, generate tests or decide splits (see procedural.py); it only
tabulates them and compiles each line once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Family = str  # "list" (def f(xs: list[int])) or "str" (def f(s: str))
VAR = {"list": "xs", "str": "s"}
ARG_TYPE = {"list": "list[int]", "str": "str"}


@dataclass(frozen=True)
class Primitive:
    """One operation. `expr` computes the new value of the variable (step) or the returned value
    (terminal) from the variable `xs` / `s`."""

    name: str  # unique, with its parameter: "mul_3", "keep_gt_-2", "replace_a_x"
    kind: str  # without parameter: "mul"; train/test splits are decided on kinds
    family: Family
    terminal: bool
    phrase: str  # "multiply each by 3"
    expr: str  # "[x * 3 for x in xs]"
    returns: str = ""  # return annotation of a terminal: "int", "list[int]", "str"
    order_only: bool = False  # only reorders (sort, reverse): pointless before an order-blind fold
    order_blind: bool = False  # a terminal whose value ignores order (sum, max, len)
    group: str = ""  # steps of one group never follow each other (upper then lower is pointless)
    keeps_size: bool = False  # a step that never changes the length (maps, sorts)
    size_only: bool = False  # a terminal that only looks at the length: pointless after keeps_size
    alts: tuple[str, ...] = ()  # other expressions that compute the same value (other idioms), see IDIOMS

    @property
    def trivial(self) -> bool:
        """`return xs` / `return s`: does not count towards the composition depth."""
        return self.terminal and self.expr == VAR[self.family]

    @property
    def variants(self) -> tuple[str, ...]:
        """Every expression of this operation: the canonical `expr` first, then its other idioms."""
        return (self.expr, *self.alts)

    def line(self, expr: str | None = None) -> str:
        """The code line of this operation, written with `expr` (one of `variants`; default `expr`)."""
        var, expr = VAR[self.family], self.expr if expr is None else expr
        return f"    return {expr}" if self.terminal else f"    {var} = {expr}"

    def plan_step(self) -> str:
        return self.phrase[0].upper() + self.phrase[1:] + "."

    @property
    def fn(self) -> Callable[[Any], Any]:
        return compile_expr(self.family, self.expr)


@functools.cache
def compile_expr(family: Family, expr: str) -> Callable[[Any], Any]:
    """`lambda xs: <expr>`, compiled once per distinct expression (trusted, generator-side code)."""
    return eval(f"lambda {VAR[family]}: {expr}", {})  # noqa: S307 - our own table, not user input


# (kind, phrase, expr, parameter values, flags). `{k}` / `{c}` / `{a}` / `{b}` are parameters.
_R = range
_LIST_STEPS: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("keep_even", "keep the even numbers", "[x for x in xs if x % 2 == 0]", None, {"group": "parity"}),
    ("keep_odd", "keep the odd numbers", "[x for x in xs if x % 2 == 1]", None, {"group": "parity"}),
    ("keep_gt", "keep the numbers greater than {k}", "[x for x in xs if x > {k}]", _R(-3, 10), {"group": "bound"}),
    ("keep_lt", "keep the numbers less than {k}", "[x for x in xs if x < {k}]", _R(-3, 10), {"group": "bound"}),
    ("drop_eq", "remove every {k}", "[x for x in xs if x != {k}]", _R(0, 10), {}),
    ("keep_mult", "keep the multiples of {k}", "[x for x in xs if x % {k} == 0]", _R(3, 6), {"group": "parity"}),
    ("mul", "multiply each by {k}", "[x * {k} for x in xs]", _R(2, 10), {"group": "scale"}),
    ("add", "add {k} to each", "[x + {k} for x in xs]", _R(1, 10), {"group": "shift"}),
    ("sub", "subtract {k} from each", "[x - {k} for x in xs]", _R(1, 10), {"group": "shift"}),
    ("mod", "replace each by its remainder modulo {k}", "[x % {k} for x in xs]", _R(2, 10), {"group": "scale"}),
    ("floordiv", "divide each by {k}, rounding down", "[x // {k} for x in xs]", _R(2, 6), {"group": "scale"}),
    ("square", "square each", "[x * x for x in xs]", None, {"group": "sign"}),
    ("negate", "negate each", "[-x for x in xs]", None, {"group": "sign"}),
    ("abs", "take the absolute value of each", "[abs(x) for x in xs]", None, {"group": "sign"}),
    ("cap", "cap each at {k}", "[min(x, {k}) for x in xs]", _R(0, 10), {"group": "bound"}),
    ("reverse", "reverse the list", "xs[::-1]", None, {"order_only": True}),
    ("sort", "sort the list in ascending order", "sorted(xs)", None, {"order_only": True}),
    ("sort_desc", "sort the list in descending order", "sorted(xs, reverse=True)", None, {"order_only": True}),
    ("take", "keep the first {k} numbers", "xs[:{k}]", _R(1, 6), {"group": "slice"}),
    ("drop", "remove the first {k} numbers", "xs[{k}:]", _R(1, 6), {"group": "slice"}),
    ("dedupe", "remove duplicates, keeping first occurrences", "list(dict.fromkeys(xs))", None, {}),
    ("prefix_sums", "replace each number by the sum of the numbers up to it",
     "[sum(xs[:i + 1]) for i in range(len(xs))]", None, {}),
]
_LIST_TERMINALS: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("ret_list", "return the list", "xs", None, {"returns": "list[int]"}),
    ("sum", "return the sum", "sum(xs)", None, {"order_blind": True}),
    ("max", "return the largest number, or 0 if there is none", "max(xs, default=0)", None, {"order_blind": True}),
    ("min", "return the smallest number, or 0 if there is none", "min(xs, default=0)", None, {"order_blind": True}),
    ("count", "return how many numbers there are", "len(xs)", None, {"order_blind": True}),
    ("first", "return the first number, or 0 if there is none", "xs[0] if xs else 0", None, {}),
    ("last", "return the last number, or 0 if there is none", "xs[-1] if xs else 0", None, {}),
]
_VOWELS = '"aeiouAEIOU"'
_STR_STEPS: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("upper", "convert it to uppercase", "s.upper()", None, {"group": "case"}),
    ("lower", "convert it to lowercase", "s.lower()", None, {"group": "case"}),
    ("swapcase", "swap the case of each letter", "s.swapcase()", None, {"group": "case"}),
    ("reverse_s", "reverse it", "s[::-1]", None, {"order_only": True}),
    ("sort_s", "sort its characters", '"".join(sorted(s))', None, {"order_only": True}),
    ("no_vowels", "remove the vowels", f'"".join(c for c in s if c not in {_VOWELS})', None, {"group": "keep"}),
    ("no_spaces", "remove the spaces", 's.replace(" ", "")', None, {"group": "keep"}),
    ("letters", "keep only the letters", '"".join(c for c in s if c.isalpha())', None, {"group": "keep"}),
    ("digits", "keep only the digits", '"".join(c for c in s if c.isdigit())', None, {"group": "keep"}),
    ("take_s", "keep the first {k} characters", "s[:{k}]", _R(1, 6), {"group": "slice"}),
    ("drop_s", "remove the first {k} characters", "s[{k}:]", _R(1, 6), {"group": "slice"}),
    ("last_s", "keep the last {k} characters", "s[-{k}:]", _R(1, 6), {"group": "slice"}),
    ("repeat", "repeat it {k} times", "s * {k}", _R(2, 4), {"group": "grow"}),
    ("double", "double each character", '"".join(c * 2 for c in s)', None, {"group": "grow"}),
    ("append", "add '{c}' at the end", 's + "{c}"', "xyz!#", {"group": "grow"}),
    ("prepend", "add '{c}' at the start", '"{c}" + s', "xyz!#", {"group": "grow"}),
    ("replace", "replace every '{a}' with '{b}'", 's.replace("{a}", "{b}")',
     [(a, b) for a in "aeiou" for b in "xyz*"], {}),
    ("dedupe_s", "remove repeated characters, keeping first occurrences", '"".join(dict.fromkeys(s))', None, {}),
    ("rotate", "move the first {k} characters to the end", "s[{k}:] + s[:{k}]", _R(1, 4), {}),
]
_STR_TERMINALS: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("ret_str", "return the string", "s", None, {"returns": "str"}),
    ("length", "return its length", "len(s)", None, {"order_blind": True}),
    ("count_vowels", "return the number of vowels", f"sum(c in {_VOWELS} for c in s)", None, {"order_blind": True}),
    ("count_char", "return how many times '{c}' occurs", 's.count("{c}")', "abex", {"order_blind": True}),
]


# Other idioms of an operation (same parameters as its expr): comprehension, filter/map with a lambda,
# swapped operands, an explicit test. A task's gold codes are every combination of its lines' idioms, so the
# cold start can learn that a task has several correct programs (procedural.gold_codes).
_VOWEL_LOOP = '"".join(c for c in s if c.lower() not in "aeiou")'
IDIOMS: dict[str, tuple[str, ...]] = {
    "keep_even": ("[x for x in xs if not x % 2]", "list(filter(lambda x: x % 2 == 0, xs))"),
    "keep_odd": ("[x for x in xs if x % 2]", "list(filter(lambda x: x % 2 == 1, xs))"),
    "keep_gt": ("[x for x in xs if {k} < x]", "list(filter(lambda x: x > {k}, xs))"),
    "keep_lt": ("[x for x in xs if {k} > x]", "list(filter(lambda x: x < {k}, xs))"),
    "drop_eq": ("[x for x in xs if not x == {k}]", "list(filter(lambda x: x != {k}, xs))"),
    "keep_mult": ("[x for x in xs if not x % {k}]", "list(filter(lambda x: x % {k} == 0, xs))"),
    "mul": ("[{k} * x for x in xs]", "list(map(lambda x: x * {k}, xs))"),
    "add": ("[{k} + x for x in xs]", "list(map(lambda x: x + {k}, xs))"),
    "sub": ("[-{k} + x for x in xs]", "list(map(lambda x: x - {k}, xs))"),
    "mod": ("list(map(lambda x: x % {k}, xs))",),
    "floordiv": ("list(map(lambda x: x // {k}, xs))",),
    "square": ("[x ** 2 for x in xs]", "list(map(lambda x: x * x, xs))"),
    "negate": ("[0 - x for x in xs]", "list(map(lambda x: -x, xs))"),
    "abs": ("list(map(abs, xs))",),
    "cap": ("[min({k}, x) for x in xs]", "list(map(lambda x: min(x, {k}), xs))"),
    "reverse": ("list(reversed(xs))",),
    "sort_desc": ("sorted(xs)[::-1]",),
    "take": ("xs[0:{k}]",),
    "dedupe": ("[x for i, x in enumerate(xs) if x not in xs[:i]]",),
    "max": ("max(xs) if xs else 0",),
    "min": ("min(xs) if xs else 0",),
    "first": ("xs[0] if len(xs) > 0 else 0",),
    "last": ("xs[len(xs) - 1] if xs else 0",),
    "swapcase": ('"".join(c.lower() if c.isupper() else c.upper() for c in s)',),
    "reverse_s": ('"".join(reversed(s))',),
    "no_vowels": (_VOWEL_LOOP, f'"".join([c for c in s if c not in {_VOWELS}])'),
    "no_spaces": ('"".join(s.split(" "))', '"".join(c for c in s if c != " ")'),
    "letters": ('"".join(filter(str.isalpha, s))',),
    "digits": ('"".join(filter(str.isdigit, s))',),
    "take_s": ("s[0:{k}]",),
    "repeat": ("{k} * s",),
    "double": ('"".join(c + c for c in s)',),
    "replace": ('"".join("{b}" if c == "{a}" else c for c in s)',),
    "dedupe_s": ('"".join(c for i, c in enumerate(s) if c not in s[:i])',),
    "count_vowels": (f"len([c for c in s if c in {_VOWELS}])", f"sum(1 for c in s if c in {_VOWELS})"),
    "count_char": ('sum(ch == "{c}" for ch in s)',),
}

_KEEPS_SIZE = {"mul", "add", "sub", "mod", "floordiv", "square", "negate", "abs", "cap", "prefix_sums",
               "upper", "lower", "swapcase", "replace", "rotate"}
_SIZE_ONLY = {"count", "length"}


def _expand(table: list, family: Family, terminal: bool) -> list[Primitive]:
    out: list[Primitive] = []
    for kind, phrase, expr, params, flags in table:
        flags = {"returns": "int", **flags} if terminal else dict(flags)
        flags.update(keeps_size=kind in _KEEPS_SIZE, size_only=kind in _SIZE_ONLY)
        for p in [None] if params is None else params:
            if p is None:
                fields, suffix = {}, ""
            elif isinstance(p, tuple):
                fields, suffix = {"a": p[0], "b": p[1]}, f"_{p[0]}_{p[1]}"
            else:
                fields, suffix = ({"c": p} if isinstance(p, str) else {"k": p}), f"_{p}"
            out.append(Primitive(name=kind + suffix, kind=kind, family=family, terminal=terminal,
                                 phrase=phrase.format(**fields), expr=expr.format(**fields),
                                 alts=tuple(a.format(**fields) for a in IDIOMS.get(kind, ())), **flags))
    return out


STEPS: dict[Family, list[Primitive]] = {
    "list": _expand(_LIST_STEPS, "list", False),
    "str": _expand(_STR_STEPS, "str", False),
}
TERMINALS: dict[Family, list[Primitive]] = {
    "list": _expand(_LIST_TERMINALS, "list", True),
    "str": _expand(_STR_TERMINALS, "str", True),
}
PRIMITIVES: dict[tuple[Family, str], Primitive] = {
    (p.family, p.name): p for table in (STEPS, TERMINALS) for ps in table.values() for p in ps
}


def kinds(prims: list[Primitive]) -> dict[str, list[Primitive]]:
    """Primitives grouped by kind, in table order (sampling picks a kind, then a parameter)."""
    out: dict[str, list[Primitive]] = {}
    for p in prims:
        out.setdefault(p.kind, []).append(p)
    return out
