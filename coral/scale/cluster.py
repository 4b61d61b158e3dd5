"""Connecting to Ray and swapping a recipe's policies and sandbox for their Ray counterparts.

    with Sandbox(...) as sandbox, ScaleOut(cfg.ray_address) as scale:
        ...                                                  # cold start, KL references: local
        policies, sandbox = scale.distribute(policies, sandbox)
        ...                                                  # the same serial loop, rollouts on Ray

`ray_address`: None (no Ray: the objects come back unchanged and ray is never imported), "local"
(start a fresh Ray instance of this process's own, listening on 127.0.0.1 only: never one that `ray
start`, RAY_ADDRESS or a crashed run left behind), "auto" (join the cluster this machine belongs to,
started with `ray start`), or an address ("10.0.0.1:6379", "ray://head:10001"). The driver loop stays
serial; only where `generate` and `run_many` execute changes. The swapped policies are RayPolicy
views: training calls (forward, parameters, save, ...) reach the trainer policies, and each
`generate` first pushes the trainer's weights changed since the last push (rollout.py), so a step's
update reaches the replicas before the next step samples.

This module does NOT shut Ray down (the driver process's exit does) and does NOT install coral on
the cluster's nodes: every node needs the same coral and Python packages as the driver. Frozen copies
(a KL reference) must be taken before `distribute`: a RayPolicy view is not a model to copy.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from coral.scale.actors import CALL_TIMEOUT_S, START_TIMEOUT_S, import_ray
from coral.scale.rollout import RolloutPool
from coral.scale.sandbox_pool import RaySandbox

if TYPE_CHECKING:
    from coral.policy.base import Policy
    from coral.sandbox.protocol import SandboxProtocol

    # what `distribute` takes: one policy, a mapping name -> policy or a sequence (the same shape comes back);
    # a mapping's keys name the replicas as str(key)
    Policies = Policy | Mapping[Any, Policy] | Sequence[Policy]

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def connect(ray_address: str, num_cpus: int | None = None) -> Any:
    """Start or join Ray (idempotent: a Ray this process already started or joined is reused). Returns
    the ray module."""
    if not isinstance(ray_address, str) or not ray_address.strip():
        raise ValueError(f"ray_address must be 'local', 'auto' or a cluster address, got {ray_address!r}")
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if ray_address == "local":
        return start_local(num_cpus)
    ray.init(address=ray_address, include_dashboard=False)
    return ray


def start_local(num_cpus: int | None = None, **init_kwargs: Any) -> Any:
    """Start a fresh Ray instance for this process, on 127.0.0.1 only; returns the ray module.

    `ray.init()` without an address joins RAY_ADDRESS or the cluster named in
    <ray temp dir>/ray_current_cluster (which a crashed run leaves behind): `address="local"` never
    joins anything. On Linux Ray listens on the machine's network address and turns 127.0.0.1 into it;
    `on_loopback` keeps every server of this instance on loopback, which is all one machine needs."""
    ray = import_ray()
    with on_loopback():
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, _node_ip_address=LOOPBACK,
                 **init_kwargs)
    address = ray.util.get_node_ip_address()
    if address != LOOPBACK:  # a Ray release that no longer honours on_loopback: say so, it still runs
        logger.warning("the local Ray instance listens on %s, not only on %s", address, LOOPBACK)
    return ray


@contextlib.contextmanager
def on_loopback() -> Iterator[str]:
    """Inside, Ray takes 127.0.0.1 as this machine's address (as it does on macOS and Windows, where it
    runs single-machine by default): nodes started and addresses resolved here stay on loopback. Ray
    reads its switch (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER) once at import, so it is set on the module."""
    # lazy: ray (seconds, optional) only with --ray-address
    from ray._private import ray_constants

    saved = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield LOOPBACK
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


class ScaleOut:
    """The Ray actors of one run. `distribute(policies, sandbox)` returns Ray counterparts (without
    `ray_address`: the arguments themselves, and ray is never imported); `close()`, or the end of a
    `with` block, stops every actor it started. `rollout_workers` / `sandbox_actors` None: one per
    node of the cluster (at least 2 rollout workers, so that batches are sharded even on one node).
    `cpus_per_worker` None: the cluster's free CPUs shared evenly among the actors started here.
    `start_timeout_s` and `call_timeout_s` bound an actor's start and one shard (see actors.py)."""

    def __init__(self, ray_address: str | None, *, rollout_workers: int | None = None,
                 sandbox_actors: int | None = None, cpus_per_worker: float | None = None,
                 max_retries: int = 2, start_timeout_s: float = START_TIMEOUT_S,
                 call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.ray_address = ray_address
        self.rollout_workers, self.sandbox_actors = rollout_workers, sandbox_actors
        self.cpus_per_worker = cpus_per_worker
        self.group_kwargs: dict[str, Any] = {"max_retries": max_retries, "start_timeout_s": start_timeout_s,
                             "call_timeout_s": call_timeout_s}
        self.started: list[Any] = []  # the pools and sandboxes to close

    def distribute(self, policies: Policies, sandbox: SandboxProtocol | None) -> tuple[Any, Any]:
        """(policies, sandbox) to use. `policies` is one policy, a mapping name -> policy or a sequence
        (the same shape comes back, as RayPolicy views of one pool holding every distinct policy:
        roles sharing a policy share its replica); `sandbox` (None stays None) becomes a RaySandbox
        whose actors each hold a Sandbox with its settings."""
        if self.ray_address is None:
            return policies, sandbox
        try:
            return self._distribute(self.ray_address, policies, sandbox)
        except BaseException:
            self.close()  # callers that build ScaleOut outside a `with` would otherwise keep the pool alive
            raise

    def _distribute(self, ray_address: str, policies: Policies,
                    sandbox: SandboxProtocol | None) -> tuple[Any, SandboxProtocol | None]:

        ray = connect(ray_address)
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        workers = self.rollout_workers or max(2, nodes)
        actors = (self.sandbox_actors or max(1, nodes)) if sandbox is not None else 0
        cpus = self.cpus_per_worker or _fair_share(ray, ray_address, workers + actors)
        named = _as_named(policies)
        first: dict[int, str] = {}
        for name, p in named.items():
            first.setdefault(id(p), name)
        pool = RolloutPool({name: named[name] for name in first.values()}, workers, cpus_per_worker=cpus,
                           **self.group_kwargs)
        self.started.append(pool)
        views = {name: pool.policy(first[id(p)]) for name, p in named.items()}
        if sandbox is not None:
            sandbox = RaySandbox.like(sandbox, actors, cpus_per_actor=cpus, **self.group_kwargs)
            self.started.append(sandbox)
        return _same_shape(policies, views), sandbox

    def close(self) -> None:
        """Stop the actors started here (idempotent); Ray itself keeps running."""
        while self.started:
            self.started.pop().close()

    def __enter__(self) -> ScaleOut:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fair_share(ray: Any, ray_address: str, actors: int) -> float:
    """The free CPUs shared evenly among `actors`, as a quantity Ray accepts: whole above 1, at most four
    decimals below (2 CPUs among 3 actors is 0.6666, not 0.666..., which Ray refuses)."""
    free = ray.available_resources().get("CPU", 0.0)
    share = free / actors
    share = math.floor(share) if share >= 1 else math.floor(share * 1e4) / 1e4
    if share <= 0:
        raise ValueError(f"the Ray cluster at {ray_address!r} has no free CPU for coral's actors "
                         f"({free:g} free for {actors})")
    return share


def _as_named(policies: Policies) -> dict[str, Policy]:
    """Replica names are strings (a pool's keys): a sequence's policies are named by their index."""
    if isinstance(policies, Mapping):
        return {str(k): p for k, p in policies.items()}
    if isinstance(policies, Sequence) and not isinstance(policies, str):
        return {str(i): p for i, p in enumerate(policies)}
    return {"policy": policies}


def _same_shape(policies: Policies, views: dict[str, Any]) -> Any:
    if isinstance(policies, Mapping):
        return {k: views[str(k)] for k in policies}
    if isinstance(policies, Sequence) and not isinstance(policies, str):
        return [views[str(i)] for i in range(len(policies))]
    return views["policy"]


def maybe_distribute(policy: Policies, sandbox: SandboxProtocol | None, ray_address: str | None,
                     **kwargs: Any) -> tuple[Any, Any]:
    """`ScaleOut(ray_address, **kwargs).distribute(policy, sandbox)` for callers that keep the actors
    until the process exits (they are not closed here)."""
    return ScaleOut(ray_address, **kwargs).distribute(policy, sandbox)


def distribute_agents(agents: Any, sandbox: SandboxProtocol | None,
                      scale: ScaleOut | str | None) -> tuple[Any, Any]:
    """`distribute` for agents (a mapping name -> Agent, or a list): each agent's policy is replaced by
    its RayPolicy (agents sharing a policy share one). `scale` is a ScaleOut (which closes the actors)
    or a ray_address."""
    if not isinstance(scale, ScaleOut):
        scale = ScaleOut(scale)
    if scale.ray_address is None:
        return agents, sandbox
    items = list(agents.items()) if isinstance(agents, Mapping) else list(enumerate(agents))
    policies, sandbox = scale.distribute({k: a.policy for k, a in items}, sandbox)
    moved = {k: replace(a, policy=policies[k]) for k, a in items}
    return (moved if isinstance(agents, Mapping) else [moved[k] for k, _ in items]), sandbox
