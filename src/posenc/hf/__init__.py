"""posenc on Hugging Face transformers models: ``patch(model, scaling=..., kernel=...)``
replaces a loaded model's rotary position handling with posenc's (float64 angles, any
context-extension method, posenc's kernels); ``unpatch(model)`` restores it. Config reading is
``posenc.encodings.hf`` (``rope_from_hf``) and ``posenc.encodings.hf_attention``."""

from .patch import is_patched, patch, unpatch

__all__ = ["is_patched", "patch", "unpatch"]
