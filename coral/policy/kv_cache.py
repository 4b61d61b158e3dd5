"""The KV cache of HFPolicy's decoding loop: layers that write into buffers preallocated for prompt +
budget instead of growing by concatenation, and the cache a forward pass returned as a Cache object.

This module does NOT decide what to decode; it falls back to the model's own cache (None) for
transformers without cache layers or models with special (sliding-window, ...) layers.
"""

from __future__ import annotations

import functools
from typing import Any

from torch import Tensor


def buffered_cache(model: Any, capacity: int) -> Any:
    """A fresh KV cache whose layers write into buffers of `capacity` positions instead of growing by
    concatenation (which copies the whole cache at every decoding step); None -- the model's own
    cache -- for transformers without cache layers (< 4.56) or models with sliding-window or other
    special layers."""
    try:
        # lazy: transformers (seconds) only when a cache is built
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:
        return None
    try:
        cache = DynamicCache(config=model.config)
    except TypeError:
        return None
    layer_class = _buffered_layer_class()
    if layer_class is None or not cache.layers or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [layer_class(capacity) for _ in cache.layers]
    return cache


@functools.cache
def _buffered_layer_class() -> type | None:
    """The buffered layer class, built once; None for a layer API older than the one it was built on."""
    # lazy: transformers (seconds) only when a cache is built
    from transformers.cache_utils import DynamicLayer

    if getattr(DynamicLayer(), "is_initialized", None) is not False:
        return None

    class BufferedLayer(DynamicLayer):
        """A DynamicLayer that keeps keys and values in preallocated [batch, heads, capacity, dim]
        buffers; `keys` / `values` are views of the filled part (grown by doubling if a step runs past
        the capacity)."""

        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity, self.length = capacity, 0
            self.key_buffer: Tensor | None = None
            self.value_buffer: Tensor | None = None

        def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
            if not self.is_initialized:
                self.device, self.is_initialized = key_states.device, True
            end = self.length + key_states.shape[-2]
            if self.key_buffer is None or self.value_buffer is None or end > self.key_buffer.shape[-2]:
                self._grow(key_states, value_states, max(end, self.capacity, 2 * self.length))
            keys, values = self._buffers()
            keys[:, :, self.length : end] = key_states
            values[:, :, self.length : end] = value_states
            self.length = end
            return self._views()

        def _grow(self, key_states: Tensor, value_states: Tensor, capacity: int) -> None:
            b, h, _, d = key_states.shape
            keys = key_states.new_empty(b, h, capacity, d)
            values = value_states.new_empty(b, h, capacity, value_states.shape[-1])
            if self.length:
                old_keys, old_values = self._buffers()
                keys[:, :, : self.length] = old_keys[:, :, : self.length]
                values[:, :, : self.length] = old_values[:, :, : self.length]
            self.key_buffer, self.value_buffer = keys, values

        def _buffers(self) -> tuple[Tensor, Tensor]:
            """The key and value buffers, which exist from the first update on."""
            if self.key_buffer is None or self.value_buffer is None:
                raise RuntimeError("a BufferedLayer has no buffers before its first update")
            return self.key_buffer, self.value_buffer

        def get_seq_length(self, *args: Any, **kwargs: Any) -> int:
            return self.length

        def _views(self) -> tuple[Tensor, Tensor]:
            keys, values = self._buffers()
            filled = keys[:, :, : self.length], values[:, :, : self.length]
            self.keys, self.values = filled
            return filled

        def batch_select_indices(self, indices: Tensor) -> None:
            if self.length:
                keys, values = self._buffers()
                self.key_buffer, self.value_buffer = keys.index_select(0, indices), values.index_select(0, indices)
                self._views()

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.length:
                keys, values = self._buffers()
                self.key_buffer = keys.repeat_interleave(repeats, dim=0)
                self.value_buffer = values.repeat_interleave(repeats, dim=0)
                self._views()

        def crop(self, tokens_to_remove: int) -> None:
            raise NotImplementedError("coral's generation cache is never cropped")

        def reset(self) -> None:
            self.key_buffer = self.value_buffer = None
            self.length = 0
            super().reset()

    return BufferedLayer


def cache_of(out: Any) -> Any:
    """The KV cache a forward pass returned, as a transformers Cache object (older transformers hand
    back a tuple of tuples, which has no batch_select_indices / batch_repeat_interleave)."""
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = out.past_key_values
    if isinstance(cache, tuple):
        # lazy: transformers (seconds) only when a cache is built
        from transformers import DynamicCache

        # gone from transformers 5, whose forward passes never return tuples; this branch is for older releases
        cache = DynamicCache.from_legacy_cache(cache)  # type: ignore[attr-defined]
    return cache

