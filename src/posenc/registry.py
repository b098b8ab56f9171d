"""Name -> encoding class registry: ``names()``, ``build(name, **config)``, ``info(name)``."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ._models import sized_config
from ._validate import check_head_split
from .encodings.base import PositionalEncoding

__all__ = ["EncodingInfo", "build", "build_for_model", "info", "names", "register"]

E = TypeVar("E", bound=type[PositionalEncoding])
_REGISTRY: dict[str, EncodingInfo] = {}


@dataclass(frozen=True)
class EncodingInfo:
    """What ``posenc list`` shows about one encoding."""

    name: str
    cls: type[PositionalEncoding]
    family: str
    paper: str
    year: int

    @property
    def parameters(self) -> dict[str, inspect.Parameter]:
        """Keyword-only constructor parameters, in order: the config's fields, then any
        torch-only ones (``PositionalEncoding.config_class``)."""
        sig = inspect.signature(self.cls)
        return {n: p for n, p in sig.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}

    def signature(self) -> str:
        """``head_dim, base=10000.0, ...`` for tables and error messages."""
        return ", ".join(
            n if p.default is inspect.Parameter.empty else f"{n}={p.default!r}"
            for n, p in self.parameters.items()
        )


def register(name: str, *, family: str, paper: str, year: int) -> Callable[[E], E]:
    """Class decorator adding an encoding under ``name``; the name must be new."""

    def decorate(cls: E) -> E:
        if name in _REGISTRY:
            raise ValueError(f"encoding {name!r} is already registered")
        cls.name = name
        cls.family = family
        _REGISTRY[name] = EncodingInfo(name, cls, family, paper, year)
        return cls

    return decorate


def _load() -> None:
    from .encodings import MODULES

    for module in MODULES:
        importlib.import_module(f"posenc.encodings.{module}")


def names(*, axes: int | None = None) -> list[str]:
    """Registered encoding names, sorted; with ``axes``, those reading that many position axes
    (``capabilities.axes``: 1 for sequences, 2 for images, 3 for video and M-RoPE)."""
    _load()
    return sorted(n for n, e in _REGISTRY.items() if axes in (None, e.cls.capabilities.axes))


def info(name: str) -> EncodingInfo:
    """Registry entry for ``name``. Raises ValueError naming the valid choices."""
    _load()
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown positional encoding {name!r}; choose one of {names()}")
    return _REGISTRY[name]


def build(name: str, **config: Any) -> PositionalEncoding:
    """Build encoding ``name`` with keyword ``config``, e.g. ``build("rope", head_dim=64)``.

    Raises: ValueError for an unknown name, an unknown or missing config key (naming the valid
    keys), or an invalid value (raised by the encoding itself).
    """
    entry = info(name)
    params = entry.parameters
    if unknown := sorted(set(config) - set(params)):
        raise ValueError(
            f"unknown config key(s) {unknown} for {name!r}; valid keys: {entry.signature()}"
        )
    required = [n for n, p in params.items() if p.default is inspect.Parameter.empty]
    if missing := [n for n in required if n not in config]:
        raise ValueError(f"{name!r} needs config key(s) {missing}; signature: {entry.signature()}")
    return entry.cls(**config)


def build_for_model(
    name: str,
    *,
    dim: int,
    n_heads: int,
    max_len: int,
    n_kv_heads: int | None = None,
    **config: Any,
) -> PositionalEncoding:
    """Build ``name`` for a model of width ``dim`` with ``n_heads`` heads (``n_kv_heads``
    key/value heads, when given) and ``max_len``.

    The shared keys (dim, n_heads, head_dim = dim // n_heads, max_len, n_kv_heads) are passed
    only where the encoding takes them; ``config`` keys are passed as given (and validated by
    ``build``).
    Raises: ValueError also for n_heads < 1 or a ``dim`` that n_heads does not divide.
    """
    check_head_split(dim, n_heads)  # before the name's lookup
    sizes = {"dim": dim, "n_heads": n_heads, "max_len": max_len}
    accepted = info(name).parameters
    return build(name, **sized_config(accepted, config, **sizes, n_kv_heads=n_kv_heads))
