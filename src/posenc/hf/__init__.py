"""posenc on Hugging Face transformers models: ``patch(model, scaling=..., kernel=...)``
replaces a loaded model's rotary position handling with posenc's (float64 angles, any
context-extension method, posenc's kernels); ``unpatch(model)`` restores it. Config reading is
``posenc.hf.rope_config`` (``rope_from_hf``) and ``posenc.hf.attention_config``.
``SinkCache(model, window=, sinks=)`` streams a model's ``generate()`` past its window."""

from typing import TYPE_CHECKING, Any

from .patch import is_patched, patch, unpatch

if TYPE_CHECKING:
    from .sink_cache import SinkCache

__all__ = ["SinkCache", "is_patched", "patch", "unpatch"]


def __getattr__(name: str) -> Any:
    """``SinkCache`` imports transformers: loaded on first use only."""
    if name == "SinkCache":
        from .sink_cache import SinkCache

        return SinkCache
    raise AttributeError(f"module 'posenc.hf' has no attribute {name!r}")
