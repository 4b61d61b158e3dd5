"""The candidate's side of one test (untrusted); the judge's side is `_judge`.

The candidate runs the submitted program after confinement. For assert tests it then serves calls
from the judge over a pipe, for every assert test of one job in turn: `["call", name, args,
kwargs, token]` -> `["ok", value, token]` or `["raise", type, message, token]`, `["get", name,
token]` -> `["callable", token]` or `["ok", value, token]`; `["getattr", handle, name, token]` and
`["callattr", handle, name, args, kwargs, token]` do the same on an object the candidate returned
earlier. The token is 16 random bytes per call, so a reply cannot be written before its request was
read: frames a program queues up in one test are refused in the next. Values cross through the strict
encoder in `_wire`, so only exact builtin types leave the candidate. The one exception is the object
the entry point constructs when a test calls it without arguments (LeetCode's `candidate()`): it stays
in the candidate, the judge gets `["object", handle, why]` (see _RemoteObject), and `["release",
token]` drops it at the end of the test. Stdio programs run as `__main__` on the inherited stdin and
stdout; the host compares the captured output.

This module does NOT judge anything (see `_judge`), confine processes (see `_confine`) nor map outcomes
to verdicts (host side).
Stdlib-only: it runs inside the sandbox.
"""

from __future__ import annotations

import builtins
import os
import sys
import traceback
import tracemalloc
import types

from _wire import WireError, decode, encode, read_frame, write_frame

RPC_IN, RPC_OUT = 3, 4  # candidate: calls in, replies out; judge: replies in, calls out
LOADED_MARK = b"L\n"  # written to the verdict memfd once the program has loaded


def _describe(exc: BaseException) -> tuple[str, str]:
    try:
        return type(exc).__name__[:100], str(exc)[:500]
    except BaseException:  # a hostile __str__ must not break the reply
        return "Exception", "<unprintable exception>"


def run_candidate_assert(code: types.CodeType) -> None:
    """Load the solution as module `solution`, then answer the judge's calls until it hangs up."""
    module = types.ModuleType("solution")
    sys.modules["solution"] = module  # dataclasses, pickle and typing look a class's module up here
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    try:
        exec(code, namespace)
    except BaseException as exc:  # includes SystemExit: exiting while loading is a load error
        write_frame(RPC_OUT, ["load_error", *_describe(exc)])
        os._exit(1)
    write_frame(RPC_OUT, ["ready"])
    objects: list = []  # values that cannot cross as values, by handle (see _RemoteObject)
    while True:
        try:
            request = read_frame(RPC_IN)
        except EOFError:
            os._exit(0)
        write_frame(RPC_OUT, _answer(namespace, objects, request) + [request[-1]])


def _answer(namespace: dict, objects: list, request: list) -> list:
    """The reply to one request, without its token (the caller appends it): "get"/"call" a name of the
    solution, "getattr"/"callattr" an attribute of an object it constructed earlier (`objects`), or
    "release" those objects (the judge's end of a test that used them)."""
    op = request[0]
    try:
        if op == "release":
            objects.clear()
            return ["ok", None]
        if op in ("count", "cost"):
            # start() returns None, which is the "count" reply
            return ["ok", encode(_COUNT.start() if op == "count" else _COUNT.cost())]  # type: ignore[func-returns-value]
        if op in ("get", "call"):
            if request[1] not in namespace:
                return ["raise", "NameError", f"name {request[1]!r} is not defined by the solution"]
            target, args = namespace[request[1]], request[2:4]
        else:
            target, args = getattr(objects[request[1]], request[2]), request[3:5]
        if op in ("get", "getattr"):
            return ["callable"] if callable(target) else _value(target)
        result = _COUNT.call(target, decode(args[0]), decode(args[1]))
        if op == "call" and isinstance(target, type) and type(result) is target:  # Solution(): kept here
            return _value(result, objects)
        return _value(result)
    except BaseException as exc:
        return ["raise", *_describe(exc)]


class _Counter:
    """Steps and allocations of the calls of one test, when the judge asks for them ("count" at the test's
    start, "cost" at its end): every Python line event inside the calls (a line tracer on every frame they
    run) and the peak of the memory allocated while they ran (tracemalloc, over what was allocated when
    the test started). Deterministic for a deterministic program, unlike time and resident memory."""

    def __init__(self) -> None:
        self.on, self.steps, self.base = False, 0, 0

    def start(self) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start()
        self.on, self.steps = True, 0
        tracemalloc.reset_peak()
        self.base = tracemalloc.get_traced_memory()[0]

    def cost(self) -> list:
        peak = max(0, tracemalloc.get_traced_memory()[1] - self.base)
        self.on = False
        return [self.steps, round(peak / 1024, 3)]

    def call(self, target, args: list, kwargs: dict) -> object:
        if not self.on:
            return target(*args, **kwargs)

        def line(frame, event, arg):
            if event == "line":
                self.steps += 1
            return line

        sys.settrace(lambda frame, event, arg: line)
        try:
            return target(*args, **kwargs)
        finally:
            sys.settrace(None)


_COUNT = _Counter()


def _value(value: object, objects: list | None = None) -> list:
    """A value the judge rebuilds; for one the wire refuses, a handle to it that stays here where
    `objects` is given (an instance the solution's class constructed), else "unsupported"."""
    try:
        return ["ok", encode(value)]
    except WireError as exc:
        if objects is None:
            return ["unsupported", str(exc)[:300]]
        objects.append(value)
        return ["object", len(objects) - 1, str(exc)[:300]]


def run_candidate_stdio(code: types.CodeType) -> None:
    """Run the program as __main__ on the inherited stdin/stdout; never returns."""
    # typeshed declares sys.__std*__ Final; the program's own process re-points them on purpose
    sys.stdin = sys.__stdin__ = open(0, closefd=False)  # type: ignore[misc]  # noqa: SIM115
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # type: ignore[misc]  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", closefd=False)  # type: ignore[misc]  # noqa: SIM115
    status = 0
    main = sys.modules["__main__"] = types.ModuleType("__main__")  # not the server's: the program's own
    main.__dict__["__builtins__"] = builtins
    try:
        exec(code, main.__dict__)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status & 0xFF)
