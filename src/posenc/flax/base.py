"""The Flax encoding interface: torch's hooks (``posenc.encodings.base``), position context,
registry and input checks. An encoding takes its ``posenc.encodings.configs`` arguments (read
back as attributes: ``pe.head_dim``) and ``rngs``; positions are integer arrays (T,) or (B, T)
(int64 with ``jax_enable_x64``, else int32), or (T, A) | (B, T, A) for an encoding of A position
axes (``pe.axes``: images, video, M-RoPE)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.nnx.tracers import TraceState

from .._models import sized_config
from .._validate import check_position_rank
from ..encodings import context
from ..encodings.configs import EncodingConfig
from ..encodings.flows import Hooks
from ..functional._xp import widest_int

Array = jax.Array
T = TypeVar("T")
_E = TypeVar("_E", bound=type["PositionalEncoding"])
#: Registered Flax encodings, by the same names as the torch registry.
ENCODINGS: dict[str, type[PositionalEncoding]] = {}


@jax.tree_util.register_pytree_node_class
class PositionContext(context.PositionContext):
    """torch's ``PositionContext`` (``q_pos``, ``k_pos``, ``role``, ``shared``) as a pytree:
    jit, remat and scan take it as an argument with the work shared so far. Work is kept only in
    the trace the context was made in: one closed over by a transform reads what it holds but
    computes anything new afresh (no tracer leaks out)."""

    def __init__(self, q_pos: Array, k_pos: Array | None = None, *, axes: int = 1) -> None:
        super().__init__(q_pos, k_pos, axes=axes)
        self.trace = TraceState()

    def shared(self, key: Hashable, make: Callable[[], T]) -> T:
        if self.trace.is_valid() or key in self._shared:
            return super().shared(key, make)
        return make()

    def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        k_pos = None if self.k_pos is self.q_pos else self.k_pos
        return (self.q_pos, k_pos, *self._shared.values()), (self.axes, *self._shared)

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, ...], leaves: Any) -> PositionContext:
        ctx = cls(leaves[0], leaves[1], axes=aux[0])
        ctx._shared.update(zip(aux[1:], leaves[2:], strict=True))
        return ctx


Ctx = PositionContext | None


def check_positions(pos: Any, what: str = "positions", axes: int = 1) -> Array:
    """Integer array (T,) or (B, T) (with ``axes`` A > 1: (T, A) or (B, T, A)), NumPy or JAX
    -> JAX array (unsigned ones as the widest signed int, as torch's int64: differences would
    wrap, 0 - 1 = 255).

    Raises: TypeError for a non-array or a float/bool dtype; ValueError for another shape.
    """
    if not hasattr(pos, "dtype") or not hasattr(pos, "shape"):
        raise TypeError(f"{what} must be an integer array, got {type(pos).__name__}")
    if not jnp.issubdtype(pos.dtype, jnp.integer):
        raise TypeError(f"{what} must be an integer array, got dtype {pos.dtype}")
    check_position_rank(pos, what, axes)
    unsigned = jnp.issubdtype(pos.dtype, jnp.unsignedinteger)
    return jnp.asarray(pos).astype(widest_int(jnp)) if unsigned else jnp.asarray(pos)


def check_ndim(x: Any, ndim: int, what: str, layout: str) -> None:
    """Raise unless ``x`` is an array of rank ``ndim`` (``layout`` names the axes)."""
    if not hasattr(x, "ndim"):
        raise TypeError(f"{what} must be an array {layout}, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{what} must have shape {layout}, got {tuple(x.shape)}")


class PositionalEncoding(Hooks, nnx.Module):
    """Base class: every hook is the identity (no position information), as in NoPE."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    config_class: ClassVar[type[EncodingConfig]] = EncodingConfig

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

    def prepare(self, q_pos: Array, k_pos: Array | None = None) -> PositionContext:
        """As torch's: the context of one forward, positions already checked."""
        return PositionContext(q_pos, k_pos, axes=self.axes)

    def shared_key(self, name: str, *parts: Hashable) -> tuple[Hashable, ...]:
        """The context key of this module's shared work ``name``: hashable values only (a
        pytree's keys; ``posenc.encodings.flows``)."""
        return (name, *parts)

    #: The array checks the flows call (``posenc.encodings.flows``).
    check_positions = staticmethod(check_positions)
    check_ndim = staticmethod(check_ndim)

    def param(self, name: str, dtype: Any = None) -> Array:
        """The parameter ``name``'s value, in ``dtype`` if given (``posenc.encodings.flows``)."""
        value: Array = getattr(self, name)[...]
        return value if dtype is None else value.astype(dtype)


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


def build(name: str, **config: Any) -> PositionalEncoding:
    """Build the Flax encoding registered as ``name``; ``rngs`` seeds learned parameters.

    Raises: ValueError for an unknown name or a key the encoding does not take.
    """
    accepted = accepted_keys(name)
    if unknown := set(config) - set(accepted):
        raise ValueError(f"{name!r} takes {sorted(accepted)}, got unknown keys {sorted(unknown)}")
    return ENCODINGS[name](**config)


def build_for_model(
    name: str, *, dim: int, n_heads: int, max_len: int, rngs: nnx.Rngs | None = None, **config: Any
) -> PositionalEncoding:
    """As torch's ``registry.build_for_model``, with ``rngs``."""
    sizes = {"dim": dim, "n_heads": n_heads, "max_len": max_len}
    return build(name, rngs=rngs, **sized_config(accepted_keys(name), config, **sizes))


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


def on_host_if(fails: Array, check: Callable[..., None], *args: Any) -> None:
    """Inside ``jax.jit``: ``check(*args)`` (which raises) as a host callback, run only where the
    traced ``fails`` is True, so the compiled step fails with its message."""
    jax.lax.cond(fails, lambda: jax.debug.callback(check, *args), lambda: None)


def batch_positions(pos: Array, batch: int, axes: int = 1) -> Array:
    """Positions (T,) or (1|B, T) as (B, T); with ``axes`` A > 1, (T, A) or (1|B, T, A) as
    (B, T, A)."""
    return jnp.broadcast_to(pos, (batch, *pos.shape[-2 if axes > 1 else -1 :]))
