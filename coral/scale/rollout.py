"""Rollout on Ray: actors holding policy replicas, and RayPolicy, a Policy whose `generate` runs there.

    policy = RayPolicy(trainer_policy, workers=2)     # each actor holds a copy of trainer_policy
    completions = policy.generate(requests)           # same completions, in order, as trainer_policy's
    learner = AgentLearner("coder", policy, cfg)      # training calls go to trainer_policy

    pool = RolloutPool({"planner": p, "coder": c}, workers=2)   # one set of actors for several agents
    planner, coder = pool.policy("planner"), pool.policy("coder")

A batch of requests is cut into contiguous shards, one per actor, and the completions come back in
request order. Requests carry their own seeds, and HFPolicy draws a seeded request's tokens from its
own generator whatever else is in its batch, so the rollouts equal those without Ray (token ids
exactly; logprobs up to float rounding, since padding and thread counts differ).

Weight sync: before every `generate`, the tensors of the trainer's model changed in place since the
last push (torch bumps a tensor's version on every in-place write: optimiser steps, load_state_dict)
go to every actor. Training all weights pushes the full state; training LoRA adapters pushes only the
adapters' tensors. `sync_weights(full=True)` pushes everything. A vLLM replica of a LoRA trainer gets
the changed layers as merged weights (base + scale B A). An actor (first started, or restarted after
dying) is built from the trainers' current weights, which are the pushed ones (every generate syncs
first): a replica sent as an object is the trainer policy itself, and a replica built on the actor from
a spec (a model directory, "vllm:<model>") loads the trainer's full state before it answers any call,
so it never serves the weights on disk.

This module does NOT train and does NOT split one request across actors. Attributes of a RayPolicy
other than `generate`, `name` and the sync methods (forward, parameters, train, eval, save,
tokenizer, ...) are the trainer policy's, so a RayPolicy stands in wherever the local policy did.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from coral.policy.base import Completion, GenerationRequest, Policy
from coral.scale.actors import CALL_TIMEOUT_S, START_TIMEOUT_S, ActorGroup, import_ray, split


class RolloutWorker:
    """The actor: named policy replicas. A replica is a policy object (sent through Ray's object store;
    replicas sent together keep sharing what they share, e.g. one base model under LoRA views) or a
    `load_policy` spec; "vllm:<model>" builds a vLLM engine that loads pushed weights. `weights` (name ->
    tensors) are loaded into the spec-built replicas before the actor answers any call."""

    def __init__(self, objects: Mapping[str, Policy], specs: Mapping[str, str], policy_kwargs: Mapping[str, Any],
                 torch_threads: int, weights: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.policies = {**objects, **{name: build_replica(s, policy_kwargs) for name, s in specs.items()}}
        if "torch" in sys.modules:  # replicas that need no torch (scripted, a server) do not import it
            sys.modules["torch"].set_num_threads(max(1, torch_threads))
        for name, tensors in (weights or {}).items():
            self.load_tensors((name, tensors))

    def generate(self, shard: tuple[str, Sequence[GenerationRequest]]) -> list[Completion]:
        name, requests = shard
        return self.policies[name].generate(requests)

    def node(self, _: Any = None) -> str:
        """The id of the Ray node this actor runs on."""
        return import_ray().get_runtime_context().get_node_id()

    def load_tensors(self, push: tuple[str, Mapping[str, Any]]) -> int:
        """Copy named tensors into one replica's weights; returns how many were loaded."""
        name, tensors = push
        if not isinstance(tensors, Mapping):  # the ObjectRef of one put shared by every actor
            tensors = import_ray().get(tensors, timeout=CALL_TIMEOUT_S)
        policy: Any = self.policies[name]  # one that takes weights: load_weights (vLLM) or .model (transformers)
        if hasattr(policy, "load_weights"):  # an inference engine with its own weight loader (vLLM)
            policy.load_weights(tensors)
            return len(tensors)
        return copy_into(policy.model, tensors)


def build_replica(replica: str, policy_kwargs: Mapping[str, Any]) -> Policy:
    if replica.startswith("vllm:"):
        # lazy: vllm (GPU only) only for vllm replicas
        from coral.scale.vllm_engine import VLLMEngine

        return VLLMEngine(replica.removeprefix("vllm:"), **policy_kwargs)
    # lazy: policies import torch only in a replica, not in the driver
    from coral.policy import load_policy

    return load_policy(replica, **policy_kwargs)


def copy_into(model: Any, tensors: Mapping[str, Any]) -> int:
    """Copy `tensors` into `model`'s state by name; an unknown name or a shape mismatch is an error."""
    # lazy: torch only in a replica that holds weights
    import torch

    state = model.state_dict()
    unknown = [name for name in tensors if name not in state]
    if unknown:
        raise KeyError(f"pushed weights name {len(unknown)} tensors the replica does not have "
                       f"(first: {unknown[0]!r}); replica and trainer must be the same architecture")
    with torch.no_grad():
        for name, value in tensors.items():
            if state[name].shape != value.shape:
                raise ValueError(f"pushed tensor {name!r} has shape {tuple(value.shape)}, the replica's is "
                                 f"{tuple(state[name].shape)}")
            state[name].copy_(value)
    return len(tensors)


def tensor_versions(model: Any) -> dict[str, int]:
    """Each state tensor's in-place write counter: a changed counter means changed weights."""
    return {name: t._version for name, t in model.state_dict(keep_vars=True).items()}


def changed_tensors(model: Any, synced: Mapping[str, int], full: bool = False,
                    merge_lora: bool = False) -> tuple[dict[str, Any], dict[str, int]]:
    """(tensors to push, versions after the push): the state entries whose version differs from
    `synced` (all with `full`); `merge_lora` sends adapted layers as merged plain-named weights."""
    current = tensor_versions(model)
    names = [n for n, v in current.items() if full or synced.get(n) != v]
    if not names:
        return {}, current
    if merge_lora and hasattr(model, "peft_config"):
        # lazy: vllm (GPU only) only for vllm replicas
        from coral.scale.vllm_engine import merged_lora_weights

        return merged_lora_weights(model, names), current
    state = model.state_dict()
    return {n: state[n].detach() for n in names}, current


class RolloutPool:
    """`workers` rollout actors, each holding a replica of every policy in `replicas` (name -> policy
    object or spec string). `trainers` (name -> policy) are the policies whose weights are pushed;
    by default the replica objects themselves (spec-built replicas have none and never change).
    `start_timeout_s` and `call_timeout_s` bound an actor's start and one shard (see actors.py)."""

    def __init__(self, replicas: Mapping[str, Policy | str], workers: int = 2, *,
                 trainers: Mapping[str, Any] | None = None, policy_kwargs: Mapping[str, Any] | None = None,
                 max_retries: int = 2, cpus_per_worker: float = 1.0, gpus_per_worker: float = 0.0,
                 start_timeout_s: float = START_TIMEOUT_S, call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        if not replicas:
            raise ValueError("RolloutPool needs at least one replica")
        self.replicas = dict(replicas)
        # a trainer: whatever holds the weights a replica copies, as `.model` (a transformers policy)
        self.trainers: dict[str, Any] = dict(trainers) if trainers is not None else {
            n: r for n, r in self.replicas.items() if not isinstance(r, str)}
        unknown = sorted(set(self.trainers) - set(self.replicas))
        if unknown:
            raise ValueError(f"RolloutPool: trainer {unknown[0]!r} has no replica; replicas: {sorted(self.replicas)}")
        self.policy_kwargs = dict(policy_kwargs or {})
        # what each replica holds, by sync key: replicas sent as objects that share a trainer model (LoRA
        # views of one base) share it on the actors too, so one push serves them all
        self._synced = {self._sync_key(n): tensor_versions(t.model) for n, t in self.trainers.items()
                        if hasattr(t, "model")}
        # (the replica objects, the full trainer state of replicas not sent as their trainer) in Ray's
        # object store: what a starting actor is built from, put once per weight version
        self._ref: tuple[Any, Any] | None = None
        self.pushed_tensors = 0
        threads = max(1, int(cpus_per_worker))
        self.group = ActorGroup("rollout", RolloutWorker, lambda: self._worker_args(threads), workers,
                                max_retries=max_retries, num_cpus=cpus_per_worker, num_gpus=gpus_per_worker,
                                start_timeout_s=start_timeout_s, call_timeout_s=call_timeout_s)

    def _worker_args(self, threads: int) -> tuple:
        """A starting actor's arguments, with the trainers' current weights: an actor replacing a dead one
        mid-step must serve what the others serve (the last push), not the weights on disk."""
        if self._ref is None:
            ray = import_ray()
            objects = {n: r for n, r in self.replicas.items() if not isinstance(r, str)}
            weights = {n: changed_tensors(t.model, {}, full=True, merge_lora=_is_vllm(self.replicas[n]))[0]
                       for n, t in self.trainers.items() if hasattr(t, "model") and self.replicas[n] is not t}
            self._ref = (ray.put(objects) if objects else {}, ray.put(weights) if weights else {})
        specs = {n: r for n, r in self.replicas.items() if isinstance(r, str)}
        return self._ref[0], specs, self.policy_kwargs, threads, self._ref[1]

    def policy(self, name: str) -> RayPolicy:
        if name not in self.replicas:
            raise KeyError(f"RolloutPool has no policy {name!r}; it has {sorted(self.replicas)}")
        return RayPolicy(self, name)

    def generate(self, name: str, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One completion per request, in order, after pushing `name`'s weights changed since the last call."""
        if not requests:
            return []
        self.sync_weights(name)
        shards = split(list(requests), max(1, len(self.group.actors)))  # a closed group says so in map
        completions = [c for out in self.group.map("generate", [(name, s) for s in shards]) for c in out]
        if len(completions) != len(requests):
            raise RuntimeError(f"rollout {name!r}: {len(completions)} completions for {len(requests)} requests")
        return completions

    def sync_weights(self, name: str, full: bool = False) -> int:
        """Push `name`'s trainer tensors changed since the last push (all of them with `full`) to every
        actor; returns how many tensors went out (0: the replicas are current)."""
        key = self._sync_key(name)
        if key not in self._synced:
            return 0
        tensors, current = changed_tensors(self.trainers[name].model, self._synced[key], full,
                                           merge_lora=_is_vllm(self.replicas[name]))
        if not tensors:
            return 0
        self._ref = None  # an actor (re)started from now on is built from the new weights
        self.group.broadcast("load_tensors", (name, import_ray().put(tensors)))
        self._synced[key] = current
        self.pushed_tensors += len(tensors)
        return len(tensors)

    def _sync_key(self, name: str) -> int | str:
        trainer: Any = self.trainers.get(name)  # None: no trainer, which has no .model either
        if isinstance(self.replicas[name], str) or not hasattr(trainer, "model"):
            return name  # a replica built on the actor holds its own weights, whatever the trainer shares
        return id(trainer.model)

    @property
    def restarts(self) -> int:
        """Rollout actors replaced after dying, over this pool's life."""
        return self.group.restarts

    def close(self) -> None:
        self.group.close()


class RayPolicy:
    """A Policy view of one replica of a RolloutPool. `RayPolicy(policy, workers)` builds a pool of
    its own; `pool.policy(name)` shares a pool between agents."""

    def __init__(self, replica: Policy | str | RolloutPool, workers: int | str = 2, **pool_kwargs: Any) -> None:
        if isinstance(replica, RolloutPool):
            self.pool, key = replica, str(workers)
        else:
            key = replica if isinstance(replica, str) else replica.name
            self.pool = RolloutPool({key: replica}, int(workers), **pool_kwargs)
        self.key = key
        self.name = f"ray:{key}"
        self.trainer = self.pool.trainers.get(key)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return self.pool.generate(self.key, requests)

    def sync_weights(self, full: bool = False) -> int:
        return self.pool.sync_weights(self.key, full=full)

    @property
    def group(self) -> ActorGroup:
        return self.pool.group

    @property
    def restarts(self) -> int:
        return self.pool.restarts

    @property
    def pushed_tensors(self) -> int:
        return self.pool.pushed_tensors

    def close(self) -> None:
        self.pool.close()

    def __reduce_ex__(self, protocol: Any) -> Any:
        # copy.copy, copy.deepcopy and pickle all land here; without this a copy would reach the actor
        # pool and fail with "cannot pickle 'module' object", naming neither the view nor the fix
        raise TypeError(f"RayPolicy {self.name!r} is a view of Ray actors and cannot be copied or pickled: take "
                        "copies (a KL reference) of the trainer policy before ScaleOut.distribute, or of `.trainer`")

    def __deepcopy__(self, memo: Any) -> Any:  # else __getattr__ would hand out the trainer's copier
        return self.__reduce_ex__(None)

    def __copy__(self) -> Any:
        return self.__reduce_ex__(None)

    def __getattr__(self, attr: str) -> Any:
        trainer = self.__dict__.get("trainer")
        if trainer is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {attr!r} (and no trainer policy)")
        return getattr(trainer, attr)


def _is_vllm(replica: Any) -> bool:
    return isinstance(replica, str) and replica.startswith("vllm:")
