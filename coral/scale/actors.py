"""ActorGroup: N Ray actors of one class that run shards of a batch, restarting dead ones.

`map(method, shards)` sends shard i to actor i % N and returns the results in shard order. When an
actor dies (killed, OOM, node lost) while it holds a shard, or is found dead when a shard is sent,
the group starts a replacement from `make_args()` (read again at restart time, so a rollout replica
comes back with the trainer's current weights) and sends the shard again, at most `max_retries`
times per shard; after that `map` raises `ActorLostError` naming the group, the actor and the shard.
An exception raised by the method itself (bad input, a bug) is not retried: it propagates as is,
because running the same input again would fail the same way. A retried shard is the same object
sent again: its requests keep their seeds, so the retry returns what the lost call would have.

This module does NOT decide how a batch is split (see `split`) and does NOT place actors by resource
beyond `num_cpus` and Ray's SPREAD strategy (one actor per node while nodes remain).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger(__name__)


class ActorLostError(RuntimeError):
    """An actor kept dying on a shard: the step cannot complete (never turned into a default result)."""


def import_ray() -> Any:
    try:
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


# Ray frees a killed actor's CPUs a moment after `ray.kill` returns: a group that fits the cluster but not
# its free CPUs waits this long for actors being torn down (a closed group's) before it fails
ROOM_WAIT_S = 30.0


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


def _check_room(ray: Any, name: str, size: int, num_cpus: float, num_gpus: float) -> None:
    """Fail now, not hang: Ray keeps an actor that no node can fit pending forever, and calls on it wait.
    A group larger than the cluster fails at once; one that fits the cluster but not its free resources
    waits up to ROOM_WAIT_S for them (actors being torn down)."""
    need = {"CPU": size * num_cpus, "GPU": size * num_gpus}

    def short(available: dict) -> list[str]:
        return [r for r, n in need.items() if n > available.get(r, 0.0) + 1e-9]

    if not short(ray.cluster_resources()) and _poll(ray, lambda free, total: not short(free)):
        return
    free, total = ray.available_resources(), ray.cluster_resources()
    resource = (short(total) or short(free) or ["CPU"])[0]
    each = num_cpus if resource == "CPU" else num_gpus
    raise ValueError(f"{name}: {size} actors x {each:g} {resource} need {need[resource]:g} {resource}s, the Ray "
                     f"cluster has {free.get(resource, 0.0):g} free of {total.get(resource, 0.0):g}; lower the "
                     f"{resource} per actor or add nodes")


def _wait_released(ray: Any, before: dict, held: dict) -> None:
    """Wait until `held` is back in the free resources (capped at the cluster's total), for at most
    ROOM_WAIT_S: on a shared cluster another client may take the freed CPUs first, which is no error."""
    if not _poll(ray, lambda free, total: all(free.get(r, 0.0) + 1e-9 >= min(total.get(r, 0.0), before.get(r, 0.0) + n)
                                              for r, n in held.items() if n > 0)):
        logger.info("actors closed, but Ray had not given back all their resources after %.0f s", ROOM_WAIT_S)


class ActorGroup:
    """`size` actors of `cls` (a plain class; wrapped with ray.remote here), each built with
    `cls(*make_args())`. `name` appears in every error and log line."""

    def __init__(self, name: str, cls: type, make_args: Callable[[], tuple], size: int,
                 max_retries: int = 2, num_cpus: float = 1.0, num_gpus: float = 0.0) -> None:
        if size < 1:
            raise ValueError(f"{name}: the number of actors must be >= 1, got {size}")
        if max_retries < 0:
            raise ValueError(f"{name}: max_retries must be >= 0, got {max_retries}")
        self.ray = import_ray()
        self.name, self.make_args, self.max_retries = name, make_args, max_retries
        self.held = {"CPU": size * num_cpus, "GPU": size * num_gpus}  # what the group's actors reserve
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
        self.actors = [self._spawn() for _ in range(size)]

    def _spawn(self) -> Any:
        return self._remote.remote(*self.make_args())

    def map(self, method: str, shards: Sequence[Any]) -> list[Any]:
        """`getattr(actor, method)(shard)` for each shard, on actor i % size; results in shard order."""
        if not self.actors:
            raise RuntimeError(f"{self.name}: the actor group is closed; build a new one")
        ray = self.ray
        tries = [0] * len(shards)
        pending = dict(self._submit(method, i, shards[i]) for i in range(len(shards)))  # ref -> (shard, actor)
        results: list[Any] = [None] * len(shards)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            i, actor = pending.pop(ready[0])
            try:
                results[i] = ray.get(ready[0])
            except self._lost as error:
                tries[i] += 1
                self._replace(i % len(self.actors), actor, tries[i], error)
                ref, sent = self._submit(method, i, shards[i])
                pending[ref] = sent
        return results

    def _submit(self, method: str, i: int, shard: Any) -> tuple[Any, tuple[int, Any]]:
        """(the result's ObjectRef, (i, the actor it was sent to))."""
        k = i % len(self.actors)
        if self.before_send is not None:
            self.before_send(method, k, i)
        actor = self.actors[k]
        return getattr(actor, method).remote(shard), (i, actor)

    def _replace(self, k: int, lost: Any, tries: int, error: BaseException) -> None:
        """Replace actor k, unless it was already replaced since `lost` (the actor the failed shard went
        to) was sent the shard: two shards lost with one actor must not also kill its replacement."""
        reason = " ".join(str(error).split())[:300]
        if tries > self.max_retries:
            raise ActorLostError(f"{self.name}: actor {k} died {tries} times running one shard; gave up after "
                                 f"max_retries={self.max_retries} ({reason})") from error
        if self.actors[k] is not lost:
            return
        logger.warning("%s: actor %d died (%s); starting a replacement and retrying its shard (retry %d of %d)",
                       self.name, k, reason, tries, self.max_retries)
        self.ray.kill(self.actors[k])  # an actor that is only unreachable must not come back as a twin
        self.actors[k] = self._spawn()
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
        before = self.ray.available_resources()
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []
        _wait_released(self.ray, before, self.held)
