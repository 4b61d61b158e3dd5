"""Strict, type-exact value encoding and length-prefixed framing for the sandbox channels.

Values crossing from the untrusted candidate process to the judge are encoded here. Only exact
builtin types are accepted (`type(x) is int`, never a subclass), so a candidate cannot smuggle an
object with an overridden `__eq__`, `__hash__` or `__bool__` into the judge: the judge rebuilds
fresh builtin objects from JSON and compares those.

This module does NOT decide verdicts and does NOT execute anything; it is stdlib-only because it
is imported by the server that runs inside the sandbox.
"""

from __future__ import annotations

import array
import json
import os
import socket
import struct
from typing import Any  # typing is preloaded in the sandbox's server (_server.PRELOAD)

MAX_DEPTH = 64
MAX_ITEMS = 1_000_000
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a reply frame; the judge decodes it under its memory cap
_LAZY_TYPES = ("generator", "map", "filter", "zip", "enumerate", "reversed", "list_iterator",
               "tuple_iterator", "str_iterator", "range_iterator", "dict_keyiterator",
               "dict_valueiterator", "dict_itemiterator", "set_iterator")


class WireError(ValueError):
    """A value that cannot cross the channel (unsupported type, too deep, malformed)."""


def encode(value: Any, depth: int = 0) -> object:
    """JSON-able tagged form of `value`; raises WireError on any non-builtin type. (`value` is Any, not
    object: the exact-type checks below narrow it through `t`, which a type checker does not follow.)"""
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:  # big ones in hex: str(int) refuses more than 4300 digits, hex has no such limit
        return {"x": format(value, "x")} if abs(value) > 2**53 else value
    if t is float:
        return {"f": value.hex()}
    if t is list:
        return [encode(v, depth + 1) for v in value]
    if t is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "fs": [encode(v, depth + 1) for v in value]}
    if t is bytes:
        return {"b": value.hex()}
    if t is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    if t is range:
        return {"r": [value.start, value.stop, value.step]}
    if t.__name__ in _LAZY_TYPES and t.__module__ == "builtins":
        items = []
        for v in value:  # materialise lazy iterators; the judge gets an iterator back
            items.append(encode(v, depth + 1))
            if len(items) > MAX_ITEMS:
                raise WireError("iterator too long")
        return {"it": items}
    raise WireError(f"unsupported type {t.__module__}.{t.__qualname__}")


def decode(data: Any, depth: int = 0) -> object:
    """Inverse of `encode`, validating shape; builds only fresh builtin objects."""
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    t = type(data)
    if data is None or t is bool or t is str or t is int:
        return data
    if t is list:
        return [decode(v, depth + 1) for v in data]
    if t is not dict or len(data) != 1:
        raise WireError(f"malformed value of type {t.__name__}")
    ((tag, body),) = data.items()
    if tag == "x" and type(body) is str:
        return int(body, 16)
    if tag == "f" and type(body) is str:
        return float.fromhex(body)
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2:
        return complex(float.fromhex(str(body[0])), float.fromhex(str(body[1])))
    if tag == "r" and type(body) is list and len(body) == 3 and all(type(x) is int for x in body):
        return range(*body)
    if type(body) is not list:
        raise WireError(f"malformed tagged value {tag!r}")
    items: list[Any] = [decode(v, depth + 1) for v in body]  # Any: a "d" body's pairs are checked below
    if tag == "t":
        return tuple(items)
    if tag == "s":
        return set(items)
    if tag == "fs":
        return frozenset(items)
    if tag == "it":
        return iter(items)
    if tag == "d":
        if not all(type(kv) is list and len(kv) == 2 for kv in items):
            raise WireError("malformed dict")
        return {k: v for k, v in items}
    raise WireError(f"unknown tag {tag!r}")


def dumps(message: object) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def loads(raw: bytes) -> object:
    return json.loads(raw.decode())


def write_frame(fd: int, message: object) -> None:
    """Write one length-prefixed JSON message to a file descriptor."""
    body = dumps(message)
    view = memoryview(struct.pack("<Q", len(body)) + body)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("channel closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> object:
    """Read one length-prefixed JSON message; EOFError when the peer is gone."""
    (size,) = struct.unpack("<Q", _read_exact(fd, 8))
    if size > MAX_MESSAGE_BYTES:
        raise WireError(f"message of {size} bytes exceeds {MAX_MESSAGE_BYTES}")
    return loads(_read_exact(fd, size))


def recv_request(sock: socket.socket) -> tuple[dict, list[int]]:
    """One request of the host's control socket: an 8-byte length, JSON, and the fds that came with it."""
    fds = array.array("i")
    header, ancdata, _, _ = sock.recvmsg(8, socket.CMSG_SPACE(8 * fds.itemsize))
    if not header:
        raise EOFError
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    header += _read_exact(sock.fileno(), 8 - len(header))
    body = _read_exact(sock.fileno(), int.from_bytes(header, "little"))
    return json.loads(body), list(fds)
