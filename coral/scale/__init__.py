"""coral.scale: Ray rollout workers, sandbox pools and weight sync; the only package that imports ray.

    from coral.scale import ScaleOut
    with ScaleOut(ray_address) as scale:                        # None: no Ray, and ray is never imported
        policies, sandbox = scale.distribute(policies, sandbox)  # RayPolicy views and a RaySandbox

Importing this package does NOT import ray: each name loads its module on first use, and ray is
imported only when an actor group is built or Ray is connected.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ScaleOut": "coral.scale.cluster",
    "maybe_distribute": "coral.scale.cluster",
    "distribute_agents": "coral.scale.cluster",
    "connect": "coral.scale.cluster",
    "RayPolicy": "coral.scale.rollout",
    "RolloutPool": "coral.scale.rollout",
    "RaySandbox": "coral.scale.sandbox_pool",
    "ActorGroup": "coral.scale.actors",
    "ActorLostError": "coral.scale.actors",
    "merged_lora_weights": "coral.scale.vllm_engine",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'coral.scale' has no attribute {name!r}")
