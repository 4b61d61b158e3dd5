"""Several agents as LoRA adapters on one base model held once in memory.

`shared_lora(policy, ["planner", "coder"])` turns one HFPolicy's model into a peft model with one
adapter per name and returns an `AdapterPolicy` per name. Each view switches the shared model to its
own adapter before every generate / forward / parameters call, so agents take turns on one set of base
weights: a planner's update moves only the planner's adapter (the coder's adapter and the base receive
no gradient). Views are not thread-safe: two agents must not run on the shared model at the same time.

Checkpoints and saving hold a view's own adapter only: `state_dict()` is that adapter's weights, and
`save(path)` writes the base plus that adapter as the "default" one, which `HFPolicy.load` reads as an
ordinary LoRA policy. This module does NOT decide ranks or which agents share a base.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from coral.policy.hf import ADAPTER_DIR, HFPolicy
from coral.policy.hf_model import is_peft


class AdapterPolicy(HFPolicy):
    """One agent's view of a shared peft model: its adapter is active whenever the view is used."""

    def __init__(self, shared: Any, tokenizer: Any, adapter: str, name: str, batch_size: int = 16,
                 truncate_prompt_left: bool = False, dtype: str = "float32") -> None:
        if adapter not in getattr(shared, "peft_config", {}):
            raise ValueError(f"the shared model has no adapter {adapter!r}")
        self.adapter = adapter
        super().__init__(shared, tokenizer, name=name, batch_size=batch_size, truncate_prompt_left=truncate_prompt_left,
                         dtype=dtype)

    def activate(self) -> None:
        """Make this view's adapter the active one (and the only one whose weights require grad)."""
        if self.model.active_adapter != self.adapter:
            self.model.set_adapter(self.adapter)

    def own_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """(name, parameter) of this view's adapter, whatever adapter is active."""
        tag = f".{self.adapter}."
        return [(n, p) for n, p in self.model.named_parameters() if ".lora_" in n and tag in n + "."]

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """This view's adapter weights only (the base and the other adapters are not this agent's)."""
        self.activate()
        return (p for _, p in self.own_parameters())

    def generate(self, requests: Sequence[Any]) -> list[Any]:
        self.activate()
        return super().generate(requests)

    def forward(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        self.activate()
        return super().forward(prompt_ids, completion_ids, temperature=temperature)

    # ------------------------------------------------------------------ checkpoints and saving
    def state_dict(self) -> dict[str, torch.Tensor]:
        """This view's adapter weights (peft's names, adapter name removed)."""
        # lazy: peft (about a second) only when adapters are built or saved
        from peft import get_peft_model_state_dict

        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model, adapter_name=self.adapter).items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Set this view's adapter from `state_dict()`'s output; every adapter weight must be there."""
        # lazy: peft (about a second) only when adapters are built or saved
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        expected = set(get_peft_model_state_dict(self.model, adapter_name=self.adapter))
        if set(state) != expected:
            missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
            raise ValueError(f"adapter {self.adapter!r}: state does not match (missing {missing[:3]}, unexpected {extra[:3]})")
        set_peft_model_state_dict(self.model, state, adapter_name=self.adapter)

    def adopt(self, trained: HFPolicy) -> None:
        """Take the adapter weights of `trained`, a policy loaded from this view's `save` and trained since."""
        # lazy: peft (about a second) only when adapters are built or saved
        from peft import get_peft_model_state_dict

        if not is_peft(trained.model):
            raise ValueError(f"adapter {self.adapter!r}: the trained policy {trained.name!r} has no LoRA adapter")
        self.load_state_dict(get_peft_model_state_dict(trained.model))

    def _save(self, path: Path) -> None:
        """The base model (no adapter weights) plus this view's adapter as the "default" one."""
        # lazy: safetensors.torch pulls torch, only when adapters are saved
        from safetensors.torch import save_file

        self._save_base(path)
        adapter = path / ADAPTER_DIR
        adapter.mkdir(parents=True, exist_ok=True)
        self.model.peft_config[self.adapter].save_pretrained(str(adapter))
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(adapter / "adapter_model.safetensors"))
        self._save_tokenizer_and_meta(path)


def shared_lora(policy: HFPolicy, names: Sequence[str], r: int = 8, alpha: int = 16,
                target_modules: Sequence[str] | None = None) -> dict[str, AdapterPolicy]:
    """One LoRA adapter per name on `policy`'s model (default targets: every linear layer but the head);
    returns a view per name. The base weights are frozen and held once. B starts at zero, so every view
    starts as the base model."""
    # lazy: peft (about a second) only when adapters are built or saved
    from peft import LoraConfig, get_peft_model

    names = list(names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"shared_lora needs distinct agent names, got {names}")
    clash = [name for name in names if name in "lora_" or "." in name]
    if clash:  # peft finds an adapter's weights by name: "a" or "lo" would match every "lora_" weight
        raise ValueError(f"shared_lora: adapter name {clash[0]!r} is part of 'lora_' or holds a '.'; pick another")
    if is_peft(policy.model):
        raise ValueError(f"policy {policy.name!r} already has LoRA adapters")
    targets = list(target_modules) if target_modules is not None else "all-linear"

    def config() -> Any:
        return LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, task_type="CAUSAL_LM")

    model = get_peft_model(policy.model, config(), adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, config())
    views = {name: AdapterPolicy(model, policy.tokenizer, name, name=name, batch_size=policy.batch_size,
                                 truncate_prompt_left=policy.truncate_prompt_left, dtype=policy.dtype_spec)
             for name in names}
    views[names[0]].activate()
    return views
