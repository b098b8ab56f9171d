"""The Flax encoding interface: torch's hooks (``posenc.encodings.base``) with JAX array types,
the per-forward ``PositionState``, the registry and the input checks. An encoding takes its
``posenc.encodings.configs`` arguments (read back as attributes: ``pe.head_dim``) and ``rngs``;
positions are integer arrays (T,) or (B, T) (int64 with ``jax_enable_x64``, else int32), or
(T, A) | (B, T, A) for an encoding of A position axes (``pe.axes``: images, video, M-RoPE)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar, Generic, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from .._models import sized_config
from .._validate import check_embed, check_position_rank, check_qk
from ..encodings.configs import EncodingConfig
from ..functional._xp import widest_int

Array = jax.Array
#: A JAX dtype (``jnp.float32``, ``x.dtype``).
DType = jnp.dtype | type
_E = TypeVar("_E", bound=type["PositionalEncoding[Any]"])


@struct.dataclass
class PositionState:
    """The positions of one forward, checked by whoever made it (``PositionalEncoding.prepare``):
    q_pos (T,) | (B, T) this forward's tokens (the queries, and the keys a layer appends to its
    cache), k_pos (L,) | (B, L) every key's (cached ones first; q_pos itself without a cache),
    (T, A) | (B, T, A) for ``axes`` A > 1. A pytree: jit, remat and scan take it as an
    argument. An encoding that shares work between layers derives its own state from it."""

    q_pos: Array
    k_pos: Array
    axes: int = struct.field(pytree_node=False)

    def new_keys(self) -> PositionState:
        """The state of this forward's fresh keys: k_pos = q_pos (attention rotates its own new
        projections with it)."""
        return replace(self, k_pos=self.q_pos)


S = TypeVar("S", bound=PositionState)


def check_positions(pos: object, what: str = "positions", axes: int = 1) -> Array:
    """Integer array (T,) or (B, T) (with ``axes`` A > 1: (T, A) or (B, T, A)), NumPy or JAX
    -> JAX array (unsigned ones as the widest signed int, as torch's int64: differences would
    wrap, 0 - 1 = 255).

    Raises: TypeError for a non-array or a float/bool dtype; ValueError for another shape.
    """
    dtype, shape = getattr(pos, "dtype", None), getattr(pos, "shape", None)
    if dtype is None or shape is None:
        raise TypeError(f"{what} must be an integer array, got {type(pos).__name__}")
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"{what} must be an integer array, got dtype {dtype}")
    check_position_rank(pos, what, axes)
    array = jnp.asarray(pos)
    return array.astype(widest_int(jnp)) if jnp.issubdtype(dtype, jnp.unsignedinteger) else array


def check_ndim(x: object, ndim: int, what: str, layout: str) -> None:
    """Raise unless ``x`` is an array of rank ``ndim`` (``layout`` names the axes)."""
    rank = getattr(x, "ndim", None)
    if rank is None:
        raise TypeError(f"{what} must be an array {layout}, got {type(x).__name__}")
    if rank != ndim:
        raise ValueError(f"{what} must have shape {layout}, got {tuple(getattr(x, 'shape', ()))}")


def tables_dtype(dtype: DType) -> jnp.dtype:
    """The dtype tables and scores are made in for activations of ``dtype``: float32, or the
    wider float64 (``functional._xp.at_least_float32``)."""
    return jnp.result_type(jnp.float32, dtype)


class PositionalEncoding(nnx.Module, Generic[S]):
    """Base class of the Flax encodings: every hook is the identity (no position information),
    as in NoPE. An attention layer calls them in this order: ``embed`` (by the model, on token
    embeddings), ``rotate``, ``bias``, ``relative_logits``, ``relative_values``. ``S`` is the
    encoding's per-forward state (``prepare``); given one as ``ctx``, a hook reads its
    positions and shared work from it, without one it checks its inputs and computes what it
    needs."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    config_class: ClassVar[type[EncodingConfig]] = EncodingConfig
    #: True for an encoding whose ``embed`` adds to token embeddings (torch's
    #: ``capabilities.embeds``): attention layers never call it.
    embeds: ClassVar[bool] = False
    config: EncodingConfig

    def __init__(self, *, rngs: nnx.Rngs | None = None, **config: Any) -> None:
        self.config = self.config_class(**config)
        self.setup(rngs or nnx.Rngs(0))

    def setup(self, rngs: nnx.Rngs) -> None:
        """Parameters and constants from ``self.config``."""

    def __getattr__(self, name: str) -> Any:  # the configuration's values: pe.head_dim
        config = vars(self).get("config")
        if config is None or name.startswith("_") or not hasattr(config, name):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(config, name)

    @property
    def axes(self) -> int:
        """Position axes A the encoding reads (its config's; torch's ``capabilities.axes``)."""
        return self.config_class.axes

    @property
    def kv_policy(self) -> str:
        """As torch's: "reference" caches keys rotated; "rerotate" rotates them at each step."""
        return str(getattr(self.config, "kv_policy", "reference"))

    @property
    def jittable(self) -> bool:
        """False when a hook reads concrete position values (it then runs outside jax.jit)."""
        return True

    def prepare(
        self,
        q_pos: Array,
        k_pos: Array | None = None,
        *,
        dtype: DType = jnp.float32,
        batch: int | None = None,
    ) -> S:
        """The state of one forward at checked positions q_pos and k_pos (default q_pos):
        ``dtype`` the activations' (tables are made in float32 or its wider dtype), ``batch``
        the forward's B (default: q_pos's, else 1). The base state holds the positions alone;
        an encoding with work to share overrides this and returns its own state."""
        state = PositionState(q_pos, q_pos if k_pos is None else k_pos, self.axes)
        return cast(S, state)  # an encoding whose S is not PositionState overrides prepare

    def embed(self, x: Array, pos: Array, *, ctx: S | None = None) -> Array:
        """Add position information to token embeddings. x (B, T, C), pos (B, T) or (T,)."""
        return x

    def rotate(
        self, q: Array, k: Array, q_pos: Array, k_pos: Array, *, ctx: S | None = None
    ) -> tuple[Array, Array]:
        """Rotate queries (B, H, Tq, D) and keys (B, Hkv, Tk, D) by their positions."""
        return q, k

    def bias(self, q_pos: Array, k_pos: Array, *, ctx: S | None = None) -> Array | None:
        """Additive logit bias (B or 1, H or 1, Tq, Tk) from positions alone, or None."""
        return None

    def relative_logits(
        self,
        scores: Array,
        q: Array,
        k: Array,
        q_pos: Array,
        k_pos: Array,
        *,
        ctx: S | None = None,
    ) -> Array:
        """Rewrite scaled logits (B, H, Tq, Tk), masked entries already -inf. q (B, H, Tq, D),
        k (B, H, Tk, D) with key heads repeated to H."""
        return scores

    def relative_values(
        self, probs: Array, q_pos: Array, k_pos: Array, *, ctx: S | None = None
    ) -> Array | None:
        """Term added to the attention output (B, H, Tq, D) from probs (B, H, Tq, Tk), or None."""
        return None

    def check_qk(self, q: Array, k: Array, q_pos: Array, k_pos: Array) -> tuple[Array, Array]:
        """``_validate.check_qk`` with this encoding's head_dim and axes: positions back as JAX
        integer arrays."""
        head_dim: int = getattr(self.config, "head_dim", None) or q.shape[-1]
        checked: tuple[Array, Array] = check_qk(
            q, k, q_pos, k_pos, head_dim, axes=self.axes, ndim=check_ndim, positions=check_positions
        )
        return checked

    def check_embed(self, x: Array, pos: Array) -> Array:
        """``_validate.check_embed`` with this encoding's dim and axes: positions back as a JAX
        integer array."""
        dim: int = getattr(self.config, "dim", None) or x.shape[-1]
        checked: Array = check_embed(
            x, pos, dim, axes=self.axes, ndim=check_ndim, positions=check_positions
        )
        return checked


#: Any registered Flax encoding, whatever its state (what attention layers and models hold).
Encoding = PositionalEncoding[Any]
#: Registered Flax encodings, by the same names as the torch registry.
ENCODINGS: dict[str, type[Encoding]] = {}


def register(config: type[EncodingConfig]) -> Callable[[_E], _E]:
    """Class decorator: register a Flax encoding taking ``config``'s arguments (and ``rngs``)
    under its torch registry name."""

    def wrap(cls: _E) -> _E:
        cls.name, cls.family, cls.config_class = config.name, config.family, config
        rngs = inspect.Parameter("rngs", inspect.Parameter.KEYWORD_ONLY, default=None)
        signature = inspect.signature(config)
        cls.__signature__ = signature.replace(parameters=[*signature.parameters.values(), rngs])  # type: ignore[attr-defined]
        ENCODINGS[config.name] = cls
        return cls

    return wrap


def accepted_keys(name: str) -> tuple[str, ...]:
    """The constructor arguments of the encoding registered as ``name`` (``rngs`` last).

    Raises: ValueError for an unknown name.
    """
    if name not in ENCODINGS:
        raise ValueError(f"unknown Flax encoding {name!r}; expected one of {sorted(ENCODINGS)}")
    return (*ENCODINGS[name].config_class.keys(), "rngs")


def build(name: str, **config: Any) -> Encoding:
    """Build the Flax encoding registered as ``name``; ``rngs`` seeds learned parameters.

    Raises: ValueError for an unknown name or a key the encoding does not take.
    """
    accepted = accepted_keys(name)
    if unknown := set(config) - set(accepted):
        raise ValueError(f"{name!r} takes {sorted(accepted)}, got unknown keys {sorted(unknown)}")
    return ENCODINGS[name](**config)


def build_for_model(
    name: str,
    *,
    dim: int,
    n_heads: int,
    max_len: int,
    n_kv_heads: int | None = None,
    rngs: nnx.Rngs | None = None,
    **config: Any,
) -> Encoding:
    """As torch's ``registry.build_for_model`` (``n_kv_heads`` passed where the encoding takes
    it, PaTH's), with ``rngs``."""
    sized = sized_config(
        accepted_keys(name),
        config,
        dim=dim,
        n_heads=n_heads,
        max_len=max_len,
        n_kv_heads=n_kv_heads,
    )
    return build(name, rngs=rngs, **sized)


def is_concrete(x: Array) -> bool:
    """False inside ``jax.jit`` (values unknown): value checks are skipped there."""
    return not isinstance(x, jax.core.Tracer)


def bounds(pos: Array) -> tuple[int, int] | None:
    """(min, max) of concrete, non-empty positions, read on the host (a jnp reduction would be
    staged into an enclosing trace), else None."""
    if not is_concrete(pos) or pos.size == 0:
        return None
    values = np.asarray(pos)
    return int(values.min()), int(values.max())


def on_host_if(fails: Array, check: Callable[..., None], *args: object) -> None:
    """Inside ``jax.jit``: ``check(*args)`` (which raises) as a host callback, run only where the
    traced ``fails`` is True, so the compiled step fails with its message."""
    jax.lax.cond(fails, lambda: jax.debug.callback(check, *args), lambda: None)


def batch_positions(pos: Array, batch: int, axes: int = 1) -> Array:
    """Positions (T,) or (1|B, T) as (B, T); with ``axes`` A > 1, (T, A) or (1|B, T, A) as
    (B, T, A)."""
    return jnp.broadcast_to(pos, (batch, *pos.shape[-2 if axes > 1 else -1 :]))
