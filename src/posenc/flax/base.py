"""The encoding interface in Flax nnx: the torch hooks (``posenc.encodings.base``), same names.

``embed(x, pos)``, ``rotate(q, k, q_pos, k_pos)``, ``bias(q_pos, k_pos)``,
``relative_logits(scores, q, k, q_pos, k_pos)`` and ``relative_values(probs, q_pos, k_pos)``,
all identity by default. Positions are explicit integer arrays (T,) or (B, T): int64 with
``jax_enable_x64``, else int32. Formulas come from ``posenc.functional`` (one implementation).

Shapes: B batch, H query heads, Hkv key/value heads, T length (Tq, Tk), D head dim, C width.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .._validate import check_head_split
from ..functional._xp import widest_int

Array = jax.Array
_E = TypeVar("_E", bound=type["PositionalEncoding"])
#: Registered Flax encodings, by the same names as the torch registry.
ENCODINGS: dict[str, type[PositionalEncoding]] = {}
#: Keys a model passes to every encoding that accepts them (as ``registry.build_for_model``).
SHARED_KEYS: tuple[str, ...] = ("dim", "n_heads", "head_dim", "max_len")


class PositionalEncoding(nnx.Module):
    """Base class: every hook is the identity (no position information), as in NoPE."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    kv_policy: str = "reference"

    @property
    def jittable(self) -> bool:
        """False when a hook reads concrete position values (it then runs outside jax.jit)."""
        return True

    def embed(self, x: Array, pos: Array) -> Array:
        """Add position information to token embeddings. x (B, T, C), pos (B, T) or (T,)."""
        return x

    def rotate(self, q: Array, k: Array, q_pos: Array, k_pos: Array) -> tuple[Array, Array]:
        """Rotate queries (B, H, Tq, D) and keys (B, Hkv, Tk, D) by their positions."""
        return q, k

    def bias(self, q_pos: Array, k_pos: Array) -> Array | None:
        """Additive logit bias (B or 1, H or 1, Tq, Tk) from positions alone, or None."""
        return None

    def relative_logits(
        self, scores: Array, q: Array, k: Array, q_pos: Array, k_pos: Array
    ) -> Array:
        """Rewrite scaled, masked logits (B, H, Tq, Tk); k (B, H, Tk, D) heads repeated."""
        return scores

    def relative_values(self, probs: Array, q_pos: Array, k_pos: Array) -> Array | None:
        """Term added to the attention output (B, H, Tq, D) from probs (B, H, Tq, Tk), or None."""
        return None

    def clear_cache(self) -> None:
        """Drop what one forward memoised (``TinyTransformer`` calls it after each forward)."""


def register(name: str, family: str) -> Callable[[_E], _E]:
    """Class decorator: register a Flax encoding under the torch registry's ``name``."""

    def wrap(cls: _E) -> _E:
        cls.name, cls.family = name, family
        ENCODINGS[name] = cls
        return cls

    return wrap


def keyword_params(cls: type) -> set[str]:
    """Names of the keyword-only constructor parameters of ``cls``."""
    params = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
    return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def build(name: str, **config: Any) -> PositionalEncoding:
    """Build the Flax encoding registered as ``name``; ``rngs`` seeds learned parameters.

    Raises: ValueError for an unknown name or a key the encoding does not take.
    """
    if name not in ENCODINGS:
        raise ValueError(f"unknown Flax encoding {name!r}; expected one of {sorted(ENCODINGS)}")
    cls = ENCODINGS[name]
    if "rngs" not in keyword_params(cls):
        config.pop("rngs", None)
    unknown = set(config) - keyword_params(cls)
    if unknown:
        raise ValueError(
            f"{name!r} takes {sorted(keyword_params(cls))}, got unknown keys {sorted(unknown)}"
        )
    return cls(**config)


def build_for_model(
    name: str,
    *,
    dim: int,
    n_heads: int,
    max_len: int,
    rngs: nnx.Rngs | None = None,
    **config: Any,
) -> PositionalEncoding:
    """``build`` with the model's shared sizes passed to the encodings that take them.

    Raises: ValueError as ``build``, and for n_heads < 1 or a ``dim`` n_heads does not divide.
    """
    if name not in ENCODINGS:
        raise ValueError(f"unknown Flax encoding {name!r}; expected one of {sorted(ENCODINGS)}")
    check_head_split(dim, n_heads)
    shared = {"dim": dim, "n_heads": n_heads, "head_dim": dim // n_heads, "max_len": max_len}
    accepted = keyword_params(ENCODINGS[name])
    merged = {k: v for k, v in shared.items() if k in accepted} | config
    return build(name, rngs=rngs, **merged)


def check_positions(pos: Any, what: str = "positions") -> Array:
    """Integer array (T,) or (B, T) (NumPy or JAX) -> JAX array (unsigned ones as the widest
    signed int, as torch's int64).

    Raises: TypeError for a non-array or a float/bool dtype; ValueError for another rank.
    """
    if not hasattr(pos, "dtype") or not hasattr(pos, "shape"):
        raise TypeError(f"{what} must be an integer array, got {type(pos).__name__}")
    if not jnp.issubdtype(pos.dtype, jnp.integer):
        raise TypeError(f"{what} must be an integer array, got dtype {pos.dtype}")
    if pos.ndim not in (1, 2):
        raise ValueError(f"{what} must have shape (T,) or (B, T), got {tuple(pos.shape)}")
    if jnp.issubdtype(pos.dtype, jnp.unsignedinteger):  # differences would wrap (0 - 1 = 255)
        return jnp.asarray(pos).astype(widest_int(jnp))
    return jnp.asarray(pos)


def check_ndim(x: Any, ndim: int, what: str, layout: str) -> None:
    """Raise unless ``x`` is an array of rank ``ndim`` (``layout`` names the axes)."""
    if not hasattr(x, "ndim"):
        raise TypeError(f"{what} must be an array {layout}, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{what} must have shape {layout}, got {tuple(x.shape)}")


def is_concrete(x: Array) -> bool:
    """False inside ``jax.jit`` (values unknown): value checks are skipped there."""
    return not isinstance(x, jax.core.Tracer)


def extreme(pos: Array, which: str) -> int | None:
    """max or min (``which``) of concrete, non-empty positions read on the host (a jnp
    reduction would be staged into an enclosing trace), else None."""
    if not is_concrete(pos) or pos.size == 0:
        return None
    values = np.asarray(pos)
    return int(values.max() if which == "max" else values.min())


def batch_positions(pos: Array, batch: int) -> Array:
    """Positions (T,) or (1|B, T) as (B, T)."""
    return jnp.broadcast_to(pos, (batch, pos.shape[-1]))
