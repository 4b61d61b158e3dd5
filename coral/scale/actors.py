"""ActorGroup: N Ray actors of one class that run shards of a batch, restarting dead ones.

`map(method, shards)` sends shard i to actor i % N and returns the results in shard order. When an
actor dies (killed, OOM, node lost) while it holds a shard, or is found dead when a shard is sent,
the group starts a replacement from `make_args()` (read again at restart time, so a rollout replica
comes back with the trainer's current weights) and sends the shard again, at most `max_retries`
times per shard; after that `map` raises `ActorLostError` naming the group, the actor and the shard.
An exception raised by the method itself (bad input, a bug) is not retried: it propagates as is,
because running the same input again would fail the same way. A retried shard is the same object
sent again: its requests keep their seeds, so the retry returns what the lost call would have.

Every wait has a bound. New actors must answer within `start_timeout_s` (else the actors started with
them are killed: a failed start leaves none behind). A shard's result must come within
`call_timeout_s` of its send, else `TimeoutError` naming the shard, and its actor is killed (the next
call starts a replacement). A replacement starts only when the cluster has room for it (a lost node
takes its CPUs with it; Ray would keep the replacement pending and the call waiting forever): else
`ActorLostError` naming the CPUs it needs and the CPUs free.

This module does NOT decide how a batch is split (see `split`) and does NOT place actors by resource
beyond `num_cpus` and Ray's SPREAD strategy (one actor per node while nodes remain).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

# an actor's start: a torch import and a model load, or a vLLM engine's start (minutes on a large model)
START_TIMEOUT_S = 600.0
# one shard: a batch of long generations on a large model, or a batch of slow programs
CALL_TIMEOUT_S = 3600.0
# Ray frees a killed actor's CPUs a moment after `ray.kill`: a group (or a replacement) that fits the
# cluster but not its free CPUs waits this long for actors being torn down before it fails
ROOM_WAIT_S = 30.0
# Ray's resource figures are rounded in the fourth decimal (0.0002 CPU free plus a killed actor's 0.6666
# came back as 0.6667): comparisons of them allow this much
ROUNDING = 1e-3


class ActorLostError(RuntimeError):
    """An actor died and could not be replaced in time (it kept dying, failed to start, or no node had
    room): the step cannot complete (never turned into a default result)."""


def import_ray() -> Any:
    try:
        # lazy: ray (seconds, optional) only with --ray-address
        import ray
    except ImportError as error:
        raise ImportError("coral.scale needs the 'ray' package, which is not installed: "
                          "pip install 'coral-rl[ray]'") from error
    return ray


def split(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """`items` cut into at most `parts` contiguous, non-empty shards whose sizes differ by at most one."""
    if parts < 1:
        raise ValueError(f"split: parts must be >= 1, got {parts}")
    parts = min(parts, len(items))
    size, extra = divmod(len(items), parts) if parts else (0, 0)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + size + (i < extra)
        out.append(list(items[lo:hi]))
        lo = hi
    return out


def _poll(ray: Any, done: Callable[[dict, dict], bool]) -> bool:
    """Whether `done(free, total)` (Ray's available and total resources) came true within ROOM_WAIT_S,
    asked every 50 ms."""
    deadline = time.monotonic() + ROOM_WAIT_S
    while True:
        if done(ray.available_resources(), ray.cluster_resources()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _shortfall(ray: Any, need: dict[str, float]) -> tuple[str, float, float] | None:
    """None when the cluster has `need` free; else (resource short, free, total). Fails at once when the
    whole cluster is too small; waits up to ROOM_WAIT_S for free resources (actors being torn down)."""
    def short(available: dict) -> list[str]:
        return [r for r, n in need.items() if n > available.get(r, 0.0) + ROUNDING]

    if not short(ray.cluster_resources()) and _poll(ray, lambda free, total: not short(free)):
        return None
    free, total = ray.available_resources(), ray.cluster_resources()
    resource = (short(total) or short(free) or ["CPU"])[0]
    return resource, free.get(resource, 0.0), total.get(resource, 0.0)


def _check_room(ray: Any, name: str, size: int, num_cpus: float, num_gpus: float) -> None:
    """Fail now, not hang: Ray keeps an actor that no node can fit pending forever, and calls on it wait."""
    need = {"CPU": size * num_cpus, "GPU": size * num_gpus}
    missing = _shortfall(ray, need)
    if missing is None:
        return
    resource, free, total = missing
    each = num_cpus if resource == "CPU" else num_gpus
    raise ValueError(f"{name}: {size} actors x {each:g} {resource} need {need[resource]:g} {resource}s, the Ray "
                     f"cluster has {free:g} free of {total:g}; lower the {resource} per actor or add nodes")


def _wait_released(ray: Any, before: dict, held: dict) -> None:
    """Wait until `held` is back in the free resources (capped at the cluster's total), for at most
    ROOM_WAIT_S: on a shared cluster another client may take the freed CPUs first, which is no error."""
    if not _poll(ray, lambda free, total: all(free.get(r, 0.0) + ROUNDING >= min(total.get(r, 0.0), before.get(r, 0.0) + n)
                                              for r, n in held.items() if n > 0)):
        logger.info("actors closed, but Ray had not given back all their resources after %.0f s", ROOM_WAIT_S)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _reason(error: BaseException) -> str:
    """One line for a log or an error: a remote traceback's last line (the exception), else the text."""
    text = _ANSI.sub("", str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if '\n  File "' in text and lines:
        return lines[-1][:300]
    return " ".join(text.split())[:300]


class ActorGroup:
    """`size` actors of `cls` (a plain class; wrapped with ray.remote here), each built with
    `cls(*make_args())`. `name` appears in every error and log line. A slot of `actors` is None while
    its actor is known dead and not yet replaced (the next call to it starts a replacement)."""

    def __init__(self, name: str, cls: type, make_args: Callable[[], tuple], size: int,
                 max_retries: int = 2, num_cpus: float = 1.0, num_gpus: float = 0.0,
                 start_timeout_s: float = START_TIMEOUT_S, call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        if size < 1:
            raise ValueError(f"{name}: the number of actors must be >= 1, got {size}")
        if max_retries < 0:
            raise ValueError(f"{name}: max_retries must be >= 0, got {max_retries}")
        for field, value in (("start_timeout_s", start_timeout_s), ("call_timeout_s", call_timeout_s)):
            if not value > 0:
                raise ValueError(f"{name}: {field} must be > 0, got {value}")
        self.ray = import_ray()
        self.name, self.make_args, self.max_retries = name, make_args, max_retries
        self.start_timeout_s, self.call_timeout_s = start_timeout_s, call_timeout_s
        self.each = {"CPU": num_cpus, "GPU": num_gpus}  # what one actor reserves
        _check_room(self.ray, name, size, num_cpus, num_gpus)
        self._remote = self.ray.remote(cls).options(num_cpus=num_cpus, num_gpus=num_gpus,
                                                    scheduling_strategy="SPREAD")
        # ActorUnavailableError (an actor unreachable for now) exists from ray 2.22 on
        self._lost = tuple(getattr(self.ray.exceptions, n) for n in ("RayActorError", "ActorUnavailableError")
                           if hasattr(self.ray.exceptions, n))
        self.restarts = 0  # replacements started over the group's life (a metric, and what tests check)
        # called as before_send(method, actor index, shard index) before every send, retries included: a
        # seam for fault tests, which kill an actor at a known point of a step instead of racing a timer
        self.before_send: Callable[[str, int, int], None] | None = None
        self.actors: list[Any] = self._start(0, size)

    def _start(self, first: int, count: int) -> list[Any]:
        """`count` new actors (numbered from `first` in messages), returned once each has answered; if
        building, placing or starting any of them fails, all of them are killed before the error rises."""
        started: list[Any] = []
        try:
            for _ in range(count):
                started.append(self._remote.remote(*self.make_args()))
            refs = {actor.__ray_ready__.remote(): first + j for j, actor in enumerate(started)}
            ready, waiting = self.ray.wait(list(refs), num_returns=len(refs), timeout=self.start_timeout_s)
            if waiting:
                raise TimeoutError(f"{self.name}: actor {refs[waiting[0]]} had not started after start_timeout_s="
                                   f"{self.start_timeout_s:g} s (no node can place it, or its start is slower)")
            for ref in ready:
                try:
                    self.ray.get(ref, timeout=self.start_timeout_s)
                except self._lost as error:
                    raise ActorLostError(f"{self.name}: actor {refs[ref]} failed to start: {_reason(error)}") from error
        except BaseException:
            for actor in started:
                self.ray.kill(actor)
            raise
        return started

    def map(self, method: str, shards: Sequence[Any]) -> list[Any]:
        """`getattr(actor, method)(shard)` for each shard, on actor i % size; results in shard order."""
        if not self.actors:
            raise RuntimeError(f"{self.name}: the actor group is closed; build a new one")
        tries = [0] * len(shards)
        pending: dict[Any, tuple[int, Any, float]] = {}  # result ref -> (shard, actor it went to, deadline)
        for i, shard in enumerate(shards):
            self._submit(pending, method, i, shard)
        results: list[Any] = [None] * len(shards)
        while pending:
            ref = self._next_ready(pending, method)
            i, actor, _ = pending.pop(ref)
            try:
                results[i] = self.ray.get(ref, timeout=self.call_timeout_s)  # ready: returns at once
            except self._lost as error:
                tries[i] += 1
                self._drop(i % len(self.actors), actor, tries[i], error)
                self._submit(pending, method, i, shards[i])
        return results

    def _submit(self, pending: dict, method: str, i: int, shard: Any) -> None:
        k = i % len(self.actors)
        if self.actors[k] is None:
            self._respawn(k)
        if self.before_send is not None:
            self.before_send(method, k, i)
        actor = self.actors[k]
        pending[getattr(actor, method).remote(shard)] = (i, actor, time.monotonic() + self.call_timeout_s)

    def _next_ready(self, pending: dict, method: str) -> Any:
        """The ref of a finished shard; TimeoutError once the shard sent longest ago is past its deadline
        (its actor is killed: hung or not, it holds resources and would answer a later call late)."""
        oldest = min(pending, key=lambda r: pending[r][2])
        ready, _ = self.ray.wait(list(pending), num_returns=1, timeout=max(0.0, pending[oldest][2] - time.monotonic()))
        if ready:
            return ready[0]
        i, actor, _ = pending[oldest]
        k = i % len(self.actors)
        if self.actors[k] is actor:
            self.ray.kill(actor)
            self.actors[k] = None
        raise TimeoutError(f"{self.name}: {method} of shard {i} on actor {k} gave no result within call_timeout_s="
                           f"{self.call_timeout_s:g} s; the actor was killed (the next call starts a replacement)")

    def _drop(self, k: int, lost: Any, tries: int, error: BaseException) -> None:
        """Mark actor k dead (its slot None: `_submit` replaces it), unless it was already replaced since
        `lost` (the actor the failed shard went to) was sent the shard: two shards lost with one actor
        must not also kill its replacement. Past max_retries for this shard: ActorLostError."""
        if self.actors[k] is lost:
            self.ray.kill(lost)  # an actor that is only unreachable must not come back as a twin
            self.actors[k] = None
        if tries > self.max_retries:
            raise ActorLostError(f"{self.name}: actor {k} died {tries} times running one shard; gave up after "
                                 f"max_retries={self.max_retries} ({_reason(error)})") from error
        logger.warning("%s: actor %d died (%s); retrying its shard on a replacement (retry %d of %d)",
                       self.name, k, _reason(error), tries, self.max_retries)

    def _respawn(self, k: int) -> None:
        missing = _shortfall(self.ray, self.each)
        if missing is not None:
            resource, free, total = missing
            raise ActorLostError(f"{self.name}: actor {k} died and cannot be replaced: it needs {self.each[resource]:g} "
                                 f"{resource}, the Ray cluster has {free:g} {resource} free of {total:g} (a lost node "
                                 f"takes its {resource}s with it); add nodes or give each actor fewer {resource}s")
        self.actors[k] = self._start(k, 1)[0]
        self.restarts += 1

    def broadcast(self, method: str, arg: Any) -> list[Any]:
        """`method(arg)` on every actor (e.g. a weight push); a dead actor is replaced and the call repeated
        on its replacement."""
        return self.map(method, [arg] * len(self.actors))

    def nodes(self) -> list[str]:
        """The Ray node id of each actor, in actor order (its class must define `node`)."""
        return self.map("node", [None] * len(self.actors))

    def close(self) -> None:
        """Kill the actors and wait (up to ROOM_WAIT_S) until Ray has given their CPUs and GPUs back, so
        that a group built right after this one sees them free (Ray frees them a moment after `kill`)."""
        if not self.actors:
            return
        alive = [actor for actor in self.actors if actor is not None]
        before = self.ray.available_resources()
        for actor in alive:
            self.ray.kill(actor)
        self.actors = []
        _wait_released(self.ray, before, {r: n * len(alive) for r, n in self.each.items()})
