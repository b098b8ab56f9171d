"""Array-namespace resolution: one formula runs on NumPy, PyTorch and JAX arrays."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import array_api_compat
import array_api_compat.numpy as np_xp
import array_api_compat.torch as torch_xp
import torch


def namespace(*arrays: Any) -> ModuleType:
    """The array-API namespace of ``arrays``; torch tensors skip the (cached) lookup.

    The shortcut keeps ``torch.compile`` free of graph breaks from ``array_namespace``.
    """
    if all(isinstance(a, torch.Tensor) for a in arrays if a is not None):
        return torch_xp
    return array_api_compat.array_namespace(*(a for a in arrays if a is not None))


def widest_float(xp: ModuleType) -> Any:
    """``xp.float64``, or float32 where the namespace has no float64 (JAX without
    ``jax_enable_x64``): asking JAX for float64 there truncates with a warning on every call."""
    return xp.float64 if _has_dtype(xp, "float64", "real floating") else xp.float32


def widest_int(xp: ModuleType) -> Any:
    """``xp.int64``, or int32 where the namespace has no int64 (JAX without x64)."""
    return xp.int64 if _has_dtype(xp, "int64", "signed integer") else xp.int32


def _has_dtype(xp: ModuleType, name: str, kind: str) -> bool:
    if xp is torch_xp or xp is np_xp:
        return True
    info = getattr(xp, "__array_namespace_info__", None)
    return info is None or name in info().dtypes(kind=kind)


def device_of(x: Any) -> Any:
    """The device of array ``x`` (creation functions need it so GPU inputs stay on GPU).

    torch tensors answer directly: array-api-compat's helper goes through ``lru_cache``d type
    checks, which ``torch.compile`` warns about and traces around on every compile.
    """
    if isinstance(x, torch.Tensor):
        return x.device
    return array_api_compat.device(x)


def as_array_of(x: Any, like: Any) -> Any:
    """``x`` (a module's constant: a NumPy array in Flax's) as an array of ``like``'s namespace;
    a torch tensor as it is."""
    if isinstance(x, torch.Tensor):
        return x
    return namespace(like).asarray(x)


def astype(x: Any, dtype: Any) -> Any:
    """x in ``dtype``, x itself where it has that dtype already (torch: ``Tensor.to``;
    array-api-compat's ``astype`` copies by default, through wrappers a forward pays for)."""
    if isinstance(x, torch.Tensor):
        return x if x.dtype == dtype else x.to(dtype)
    return namespace(x).astype(x, dtype, copy=False)


def at_least_float32(*arrays: Any) -> Any:
    """float32, or the widest dtype among ``arrays`` where wider (float64): the dtype softmax,
    fractional counts and score biases run in (bfloat16 and float16 would round them)."""
    if all(isinstance(a, torch.Tensor) for a in arrays):
        return functools.reduce(torch.promote_types, (a.dtype for a in arrays), torch.float32)
    xp = namespace(*arrays)
    return xp.result_type(xp.float32, *(a.dtype for a in arrays))


def move_axis(x: Any, source: int, destination: int) -> Any:
    """x with axis ``source`` moved to ``destination`` (torch: ``Tensor.movedim``)."""
    if isinstance(x, torch.Tensor):
        return x.movedim(source, destination)
    return namespace(x).moveaxis(x, source, destination)


def fill_outside(x: Any, allowed: Any, value: float) -> Any:
    """x where the boolean ``allowed`` (broadcastable to x) holds, ``value`` elsewhere
    (torch: one ``masked_fill``)."""
    if isinstance(x, torch.Tensor):
        return x.masked_fill(~allowed, value)
    return namespace(x).where(allowed, x, value)


def clip(x: Any, low: float | None = None, high: float | None = None) -> Any:
    """min(max(x, low), high) elementwise (either bound may be None).

    torch: ``torch.clamp`` (array-api-compat's ``clip`` looks the namespace up again through
    ``lru_cache``d helpers, which ``torch.compile`` warns about and traces around).
    """
    if isinstance(x, torch.Tensor):
        return torch.clamp(x, low, high)
    return namespace(x).clip(x, low, high)


def cumsum_last(x: Any) -> Any:
    """out[..., i] = Σ_(t<=i) x[..., t] (torch: ``torch.cumsum``, as in ``clip``)."""
    if isinstance(x, torch.Tensor):
        return torch.cumsum(x, dim=-1)
    return namespace(x).cumulative_sum(x, axis=-1)


def take_along_last(x: Any, index: Any) -> Any:
    """out[..., i] = x[..., index[..., i]] for in-range, non-negative ``index`` (same ndim);
    the leading dims broadcast, as the array API's ``take_along_axis``.

    torch: one ``gather`` (array-api-compat's ``take_along_axis`` first wraps negative indices
    with two extra passes over the index, which dominated Transformer-XL's relative shift),
    on views expanded to the common leading shape (gather itself would read a smaller index
    as a slice of x instead of broadcasting it).
    """
    if isinstance(x, torch.Tensor):
        if x.shape[:-1] != index.shape[:-1]:
            lead = torch.broadcast_shapes(x.shape[:-1], index.shape[:-1])
            x, index = x.expand(*lead, x.shape[-1]), index.expand(*lead, index.shape[-1])
        return torch.gather(x, -1, index)
    return namespace(x, index).take_along_axis(x, index, axis=-1)


def scatter_add_last(values: Any, index: Any, size: int) -> Any:
    """out[..., r] = Σ_i values[..., i] over the i with index[..., i] = r, r in [0, size).

    Shapes: values (..., N); index integer in [0, size), broadcastable to values -> (..., size).
    torch uses one ``scatter_add`` into a float32 (or wider) sum: CUDA's adds atomically in the
    output dtype, where a bfloat16 sum of a thousand weights near 1e-3 would stall near 0.25;
    other namespaces sum a one-hot of the index (index's shape + (size,) in memory).
    """
    if isinstance(values, torch.Tensor):
        work = torch.promote_types(values.dtype, torch.float32)
        out = values.new_zeros((*values.shape[:-1], size), dtype=work)
        out = out.scatter_add(-1, index.expand(values.shape), values.to(work))
        return out.to(values.dtype)
    xp = namespace(values, index)
    rows = xp.arange(size, dtype=index.dtype, device=device_of(index))
    one_hot = xp.astype(index[..., None] == rows, values.dtype)  # (..., N, size)
    return xp.matmul(values[..., None, :], one_hot)[..., 0, :]
