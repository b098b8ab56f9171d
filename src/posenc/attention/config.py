"""An attention layer's constructor arguments besides its encoding, validated once for torch's
``posenc.attention.Attention`` and Flax's ``posenc.flax.Attention``."""

from __future__ import annotations

from dataclasses import dataclass

from .._validate import check_bool, check_positive_int


@dataclass(frozen=True, kw_only=True)
class AttentionConfig:
    """An attention layer's arguments besides its encoding: ``n_kv_heads`` None is stored as
    n_heads; ``window`` W (a sliding window: each query sees the keys less than W positions
    away) and ``chunk`` C (each query sees the keys of its chunk of C positions), None for
    none (``functional.masks.local_keys``); the checks of torch's ``Attention``."""

    d_model: int
    n_heads: int
    causal: bool
    n_kv_heads: int | None = None
    dropout: float = 0.0
    bias: bool = False
    window: int | None = None
    chunk: int | None = None

    def __post_init__(self) -> None:
        for what in ("window", "chunk"):
            if getattr(self, what) is not None:
                check_positive_int(getattr(self, what), what)
        check_positive_int(self.d_model, "d_model")
        check_positive_int(self.n_heads, "n_heads")
        n_kv = self.n_heads if self.n_kv_heads is None else self.n_kv_heads
        check_positive_int(n_kv, "n_kv_heads")
        object.__setattr__(self, "n_kv_heads", n_kv)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model must be divisible by n_heads, got {self.d_model} and {self.n_heads}"
            )
        if self.n_heads % n_kv:
            raise ValueError(f"n_heads must be divisible by n_kv_heads, got {self.n_heads}, {n_kv}")
        check_bool(self.causal, "causal")
        check_bool(self.bias, "bias")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def local(self) -> bool:
        """Whether each query sees only nearby keys (a sliding window or a chunk)."""
        return self.window is not None or self.chunk is not None

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads
