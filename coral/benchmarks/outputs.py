"""What the competitive-programming harnesses put before a program and how they compare its output.

`Task.output_match` names one of OUTPUT_MATCHES, `match(got, expected) -> bool` on a stdio test's whole
stdout and expected output:
- "lines" (the sandbox's own rule): equal after stripping trailing whitespace per line and at the end;
- "livecodebench" (its runner's grade_stdio): the outputs stripped, split into lines, each line stripped;
  the same number of lines, each equal or, token by token, equal as Decimals;
- "apps" (its testing_util's cascade for standard input): the stripped texts equal (also with each line
  stripped); or the non-empty stripped lines equal; or every line a float, all close (numpy defaults);
  or, as sets of lines that are sets of whitespace-separated tokens, equal (also with tokens rounded to
  3 decimals as floats);
- "codecontests" (its tester's OutputsMatch): whitespace-separated tokens, lowercased, equal; or as
  many tokens, each pair equal as 32-bit integers, within 1e-5 when either is a float, else as text.
Each rule accepts whatever "lines" accepts, so the sandbox's pass stands and only its "fail" is re-judged.

LIVECODEBENCH_HEADER and APPS_HEADER are the imports those runners put before every program (the names
are theirs; the lines are written out here). CodeContests runs the program as it is.

This module does NOT run anything; it compares text and builds source text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

_LCB_STAR = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
             "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing")
LIVECODEBENCH_HEADER = "".join(f"from {m} import *\n" for m in _LCB_STAR) + "".join(
    f"import {m}\n" for m in _LCB_STAR if m not in ("builtins", "typing")) + "sys.setrecursionlimit(50000)\n"
APPS_HEADER = "\n".join([
    "import sys", "import time", "import itertools",
    "from itertools import accumulate, product, permutations, combinations", "import collections",
    "from collections import Counter, OrderedDict, deque, defaultdict, ChainMap", "from functools import lru_cache",
    "import math", "from math import sqrt, sin, cos, tan, ceil, fabs, floor, gcd, exp, log, log2", "import fractions",
    "from typing import List, Tuple", "import numpy as np", "import random", "import heapq", "from heapq import *",
]) + "\n"


def lines_match(got: str, expected: str) -> bool:
    def norm(text: str) -> list[str]:
        return [line.rstrip() for line in text.replace("\r\n", "\n").rstrip().split("\n")]

    return norm(got) == norm(expected)


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except InvalidOperation:
        return None


def livecodebench_match(got: str, expected: str) -> bool:
    mine = [line.strip() for line in got.strip().split("\n")]
    theirs = [line.strip() for line in expected.strip().split("\n")]
    if len(mine) != len(theirs):
        return False
    for a, b in zip(mine, theirs, strict=True):
        if a != b and (_decimals(a) is None or _decimals(a) != _decimals(b)):
            return False
    return True


def _floats(items: list[str]) -> list[float] | None:
    try:
        return [float(x) for x in items]
    except ValueError:
        return None


def _token_sets(lines: list[str], rounded: bool) -> set[frozenset] | None:
    try:
        return {frozenset(round(float(t), 3) if rounded else t for t in line.split()) for line in lines}
    except ValueError:
        return None


def apps_match(got: str, expected: str) -> bool:
    out = got.splitlines()  # its capture keeps the printed lines
    if "\n".join(out).strip() == expected.strip() or "\n".join(x.strip() for x in out).strip() == expected.strip():
        return True
    want = [x.strip() for x in expected.split("\n") if x]  # split, empty lines dropped, then stripped
    if out in ([expected], want):
        return True
    out = [x for x in out if x]
    if out == want:
        return True
    mine, theirs = _floats(out), _floats(want)
    if mine is not None and theirs is not None and len(mine) == len(theirs) and all(
            abs(a - b) <= 1e-8 + 1e-5 * abs(b) for a, b in zip(mine, theirs, strict=True)):  # numpy's allclose
        return True
    for rounded in (False, True):
        a, b = _token_sets([x for x in out if x.split()], rounded), _token_sets(want, rounded)
        if a is not None and a == b:
            return True
    return False


_INT32 = re.compile(r"[+-]?\d+")


def _cc_value(token: str) -> int | float | str:
    if _INT32.fullmatch(token) and -2**31 <= int(token) < 2**31:
        return int(token)
    try:
        return float(token)
    except ValueError:
        return token


def _cc_tokens_match(a: str, b: str) -> bool:
    x, y = _cc_value(a), _cc_value(b)
    if isinstance(x, str) or isinstance(y, str):
        return a == b
    if isinstance(x, float) or isinstance(y, float):
        return abs(x - y) < 1e-5
    return x == y


def codecontests_match(got: str, expected: str) -> bool:
    mine, theirs = got.lower().split(), expected.lower().split()
    return mine == theirs or (len(mine) == len(theirs) and all(map(_cc_tokens_match, mine, theirs)))


OUTPUT_MATCHES: dict[str, Callable[[str, str], bool]] = {
    "lines": lines_match, "livecodebench": livecodebench_match, "apps": apps_match,
    "codecontests": codecontests_match,
}
