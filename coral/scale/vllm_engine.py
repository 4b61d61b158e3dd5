"""vLLM behind the rollout worker's interface: generate, plus `load_weights` for pushed trainer weights.

`VLLMEngine` is coral's VLLMPolicy (in-process engine, sampled token ids and their logprobs) with two
additions a rollout worker needs: the logprobs are those of the distribution it sampled from
(temperature and top-p applied, `logprobs_mode="processed_logprobs"` on vLLM releases that have it),
which is what the trainer's importance correction compares against; and weights pushed by the
trainer (HF parameter names) are loaded into the running engine. A LoRA trainer's changes arrive as
merged weights of the adapted layers (`merged_lora_weights`), so the engine needs no LoRA support.

vllm is imported when an engine is built, never on import. This module is NOT exercised by the CPU
test suite beyond `merged_lora_weights` and the missing-package error; tests marked `gpu` run it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from coral.policy.vllm import VLLMPolicy, import_vllm

PEFT_PREFIX = "base_model.model."


def merged_lora_weights(model: Any, names: Iterable[str]) -> dict[str, Any]:
    """Plain HF-named weights of a peft model for the state entries `names` that changed: each adapted
    layer with a changed adapter tensor becomes its merged weight W + scale * B @ A (active adapter);
    other changed entries keep their value; adapter tensors themselves are not sent."""
    # lazy: torch only when weights are pushed to an engine
    import torch

    names = list(names)
    adapted = {n.split(".lora_")[0] for n in names if ".lora_" in n}
    adapter = model.active_adapter
    state = model.state_dict()
    out: dict[str, Any] = {}
    with torch.no_grad():
        for prefix, module in model.named_modules():
            if prefix in adapted and hasattr(module, "get_delta_weight"):
                weight = module.base_layer.weight + module.get_delta_weight(adapter).to(module.base_layer.weight.dtype)
                out[_plain(prefix + ".weight")] = weight.detach()
        for n in names:  # the base weight of a merged layer is already in `out`, merged: keep that one
            if ".lora_" not in n and _plain(n) not in out:
                out[_plain(n)] = state[n].detach()
    return out


def _plain(name: str) -> str:
    return name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")


class VLLMEngine(VLLMPolicy):
    """A VLLMPolicy that reports the sampler's (processed) logprobs and loads pushed weights."""

    def __init__(self, model: str, name: str | None = None, **engine_kwargs: Any) -> None:
        vllm = import_vllm()
        if "logprobs_mode" in inspect.signature(vllm.EngineArgs).parameters:
            engine_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        super().__init__(model, name=name, **engine_kwargs)

    def load_weights(self, tensors: Mapping[str, Any]) -> None:
        """Load HF-named tensors into the engine's model (vLLM's own loader maps names, fuses qkv)."""
        items = list(tensors.items())
        if hasattr(self.llm, "collective_rpc"):  # the V1 engine: the model lives in worker processes
            self.llm.collective_rpc(_load_on_worker, args=(items,))
            if hasattr(self.llm, "reset_prefix_cache"):  # cached prefixes hold the old weights' keys
                self.llm.reset_prefix_cache()
            return
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.model.load_weights(items)


def _load_on_worker(worker: Any, items: list[tuple[str, Any]]) -> None:
    worker.model_runner.model.load_weights(items)
