"""Helpers the Ray tests share."""

from __future__ import annotations

import time


def kill_dead(ray, actor, timeout_s: float = 60.0) -> None:
    """Kill `actor` and return once Ray answers calls on it with RayActorError. ray.kill is asynchronous:
    a call sent right after it can still reach the live actor and return, so one call is not enough."""
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise TimeoutError(f"the killed actor still answered after {timeout_s:g} s")
