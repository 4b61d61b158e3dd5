"""Connecting to Ray and swapping a recipe's policies and sandbox for their Ray counterparts.

    policy, sandbox = maybe_distribute(policy, sandbox, cfg.ray_address)

`ray_address`: None (no Ray: the objects come back unchanged and ray is never imported), "local"
(start a Ray instance on this machine), "auto" (join the cluster this machine belongs to, started
with `ray start`), or an address ("10.0.0.1:6379", "ray://head:10001"). The driver loop stays
serial; only where `generate` and `run_many` execute changes.

This module does NOT shut Ray down (the driver process's exit does) and does NOT install coral on
the cluster's nodes: every node needs the same coral and Python packages as the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from coral.scale.actors import import_ray


def connect(ray_address: str, num_cpus: int | None = None) -> Any:
    """Start or join Ray (idempotent: an initialised Ray is reused). Returns the ray module."""
    if not isinstance(ray_address, str) or not ray_address.strip():
        raise ValueError(f"ray_address must be 'local', 'auto' or a cluster address, got {ray_address!r}")
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if ray_address == "local":
        ray.init(num_cpus=num_cpus, include_dashboard=False)
    else:
        ray.init(address=ray_address, include_dashboard=False)
    return ray


def maybe_distribute(policy: Any, sandbox: Any, ray_address: str | None, *, rollout_workers: int = 2,
                     sandbox_actors: int = 1, cpus_per_worker: float | None = None,
                     max_retries: int = 2) -> tuple[Any, Any]:
    """(policy, sandbox) to use: unchanged without `ray_address`; else RayPolicy views over one pool of
    `rollout_workers` actors holding every distinct policy (`policy` is one policy or a mapping
    role -> policy; roles sharing a policy share its replica) and a RaySandbox of `sandbox_actors`
    actors with `sandbox`'s settings (`sandbox` None stays None). `cpus_per_worker` None: the cluster's
    free CPUs shared evenly among the actors started here."""
    if ray_address is None:
        return policy, sandbox
    from coral.scale.rollout import RolloutPool
    from coral.scale.sandbox_pool import RaySandbox

    ray = connect(ray_address)
    if cpus_per_worker is None:
        free = ray.available_resources().get("CPU", 0.0)
        if free <= 0:
            raise ValueError(f"the Ray cluster at {ray_address!r} has no free CPU for coral's actors")
        cpus_per_worker = free / (rollout_workers + (sandbox_actors if sandbox is not None else 0))
    roles = dict(policy) if isinstance(policy, Mapping) else {"policy": policy}
    first: dict[int, str] = {}
    for role, p in roles.items():
        first.setdefault(id(p), role)
    pool = RolloutPool({role: roles[role] for role in first.values()}, rollout_workers, max_retries=max_retries,
                       cpus_per_worker=cpus_per_worker)
    views = {role: pool.policy(first[id(p)]) for role, p in roles.items()}
    if sandbox is not None:
        sandbox = RaySandbox.like(sandbox, sandbox_actors, max_retries=max_retries, cpus_per_actor=cpus_per_worker)
    return (views if isinstance(policy, Mapping) else views["policy"]), sandbox


def distribute_agents(agents: Any, sandbox: Any, ray_address: str | None, **kwargs: Any) -> tuple[Any, Any]:
    """`maybe_distribute` for agents (a mapping name -> Agent, or a list): each agent's policy is
    replaced by its RayPolicy (agents sharing a policy share one)."""
    if ray_address is None:
        return agents, sandbox
    items = list(agents.items()) if isinstance(agents, Mapping) else list(enumerate(agents))
    policies, sandbox = maybe_distribute({k: a.policy for k, a in items}, sandbox, ray_address, **kwargs)
    moved = {k: replace(a, policy=policies[k]) for k, a in items}
    return (moved if isinstance(agents, Mapping) else [moved[k] for k, _ in items]), sandbox
