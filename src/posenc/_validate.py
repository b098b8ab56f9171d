"""Input checks shared by every module: each raises ValueError/TypeError saying expected vs got."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import array_api_compat
import torch
from torch import Tensor


def check_even(value: int, what: str) -> None:
    """Raise ValueError unless ``value`` is a positive even integer."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if value <= 0 or value % 2:
        raise ValueError(f"{what} must be a positive even integer, got {value}")


def check_positive_int(value: Any, what: str, *, minimum: int = 1) -> None:
    """Raise unless ``value`` is an int >= ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value}")


#: Seeds are ints in [0, SEED_LIMIT): what every generator a run seeds takes (numpy's legacy
#: RandomState and JAX's PRNGKey stop at 2**32; torch.manual_seed at 2**64; SQLite at 2**63).
SEED_LIMIT = 2**32


def check_seed(value: Any, what: str = "seed") -> None:
    """Raise unless ``value`` is an int in [0, 2**32) (``SEED_LIMIT``; a bool is no seed)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(
            f"{what} must be an int in [0, 2**32), got {type(value).__name__} {value!r}"
        )
    if not 0 <= value < SEED_LIMIT:
        raise ValueError(f"{what} must be an int in [0, 2**32), got {value}")


def check_device(device: Any) -> torch.device:
    """``device`` ("cpu", "cuda", "cuda:1", a torch.device) as a torch.device this torch can
    use. Raises ValueError for an unknown device type or CUDA where this torch has none."""
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'cpu' or 'cuda[:i]', got {device!r}") from err
    if found.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device {device!r} requested but torch.cuda.is_available() is False (this torch "
            "has no CUDA device): use --device cpu"
        )
    if found.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:i]', got {device!r}")
    return found


def check_positive_float(value: Any, what: str, *, upper: float | None = None) -> None:
    """Raise unless ``value`` is a finite real number > 0 (and <= ``upper`` where given)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}")
    if upper is not None and not 0 < value <= upper:
        raise ValueError(f"{what} must be in (0, {upper}], got {value}")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{what} must be a finite number > 0, got {value}")


def check_bool(value: Any, what: str) -> None:
    """Raise TypeError unless ``value`` is a bool (a string such as "no" would be truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a bool, got {type(value).__name__} {value!r}")


def check_real_floating(x: Any, what: str) -> None:
    """Raise TypeError unless array ``x`` (torch, NumPy, JAX) has a real floating dtype: an
    integer, bool or complex result would hold the encoding's values truncated or discarded."""
    if isinstance(x, Tensor):
        floating = x.dtype.is_floating_point
    else:
        floating = array_api_compat.array_namespace(x).isdtype(x.dtype, "real floating")
    if not floating:
        raise TypeError(f"{what} must have a real floating dtype, got {x.dtype}")


def check_positions(pos: Tensor, what: str = "positions", axes: int = 1) -> Tensor:
    """Positions are integer tensors of shape (T,) or (B, T), or with ``axes`` = A > 1 (an
    encoding of grids: A = 2 for images, 3 for video and M-RoPE) (T, A) or (B, T, A), one
    coordinate per axis; returns them as int64.

    Raises:
        TypeError: not a tensor, or a floating/bool dtype (positions are counted, not measured).
        ValueError: a shape other than these (``position_shape_error``).
    """
    if not isinstance(pos, Tensor):
        raise TypeError(f"{what} must be a torch.Tensor of int64, got {type(pos).__name__}")
    if pos.dtype.is_floating_point or pos.dtype.is_complex or pos.dtype == torch.bool:
        raise TypeError(f"{what} must be an integer tensor (int64), got dtype {pos.dtype}")
    check_position_rank(pos, what, axes)
    return pos.long()


def check_position_rank(pos: Any, what: str, axes: int) -> None:
    """Raise ValueError unless ``pos`` (any array) has the shape of positions with ``axes``
    axes: (T,) | (B, T) for one, (T, A) | (B, T, A) for A > 1."""
    if axes == 1 and pos.ndim in (1, 2):
        return
    if axes > 1 and pos.ndim in (2, 3) and pos.shape[-1] == axes:
        return
    if axes == 1:
        hint = (
            ": positions with a trailing axis (B, T, A) need an encoding that takes A axes "
            "(rope_2d, rope_3d, rope_mixed, mrope, sincos_2d, learned_2d)"
            if pos.ndim == 3
            else ""
        )
        raise ValueError(f"{what} must have shape (T,) or (B, T), got {tuple(pos.shape)}{hint}")
    raise ValueError(
        f"{what} must have shape (T, {axes}) or (B, T, {axes}) for an encoding of {axes} "
        f"position axes (one coordinate per axis), got {tuple(pos.shape)}"
    )


def position_length(pos: Any, axes: int = 1) -> int:
    """T of positions (T,) | (B, T), or with ``axes`` > 1 (T, A) | (B, T, A) (any array)."""
    return int(pos.shape[-2] if axes > 1 else pos.shape[-1])


def values_checked(t: Tensor) -> bool:
    """Whether checks of ``t``'s values (not its shape or dtype) run: on CPU in eager mode,
    where reading them is free. Never on an accelerator (a host read waits for the device),
    while ``torch.compile`` traces (a data-dependent branch breaks the graph) nor inside
    ``torch.func`` transforms (vmap, grad: a wrapped tensor has no one value to read): there a
    bad value fails inside the kernel that meets it (an index out of a table's range)."""
    return (
        t.device.type == "cpu"
        and not torch.compiler.is_compiling()
        and not torch._C._functorch.is_functorch_wrapped_tensor(t)
    )


#: Largest |position| a rotary or sinusoidal angle pos·θ is computed for. The float64 angle
#: carries an absolute error up to |pos|·θ·2^-53 rad (θ <= 1): 2^-13 rad (1.2e-4) at 2^40.
#: Measured (tests/functional/test_position_range.py): RoPE scores of N(0, 1) heads of 64
#: shifted by 2^32 move by 3e-6, by 2^40 by 5e-4 (below bfloat16's rounding of scores ~8),
#: by 2^44 by 0.01 and by 2^53 by 13 (one ulp of pos·θ is then 1 rad or more).
ANGLE_POSITION_LIMIT = 2**40
#: Largest |position| a relative offset i - j is computed for: offsets then lie within 2^53,
#: where float64 holds every integer exactly (biases are float), and int64 never overflows
#: (2^62 - (-2^62) wraps to a negative number).
OFFSET_POSITION_LIMIT = 2**52


_NARROW_INTS = (torch.int8, torch.uint8, torch.int16, torch.int32)


def value_range(x: Any) -> tuple[float, float] | None:
    """(min, max) of array ``x`` (torch, NumPy, JAX; ints as Python ints), or None where its
    values are not free to read: empty, a torch tensor not ``values_checked``, a JAX tracer."""
    if isinstance(x, Tensor):
        if not x.numel() or not values_checked(x):
            return None
        low, high = torch.aminmax(x)  # one pass
        return low.item(), high.item()
    if _traced(x) or not getattr(x, "size", 0):
        return None
    xp = array_api_compat.array_namespace(x)
    low, high = xp.min(x), xp.max(x)
    if _traced(low):  # a concrete array inside a JAX trace: its reductions are staged
        return None
    as_number = int if xp.isdtype(x.dtype, "integral") else float
    return as_number(low), as_number(high)


def _traced(x: Any) -> bool:
    """Whether ``x`` is a JAX tracer (a value inside ``jit``/``grad``: none to read)."""
    return any(c.__name__ == "Tracer" for c in type(x).__mro__)


def check_position_range(pos: Any, limit: int, what: str = "positions") -> None:
    """Raise ValueError when a position of ``pos`` (torch, NumPy or JAX, integer or float)
    lies outside [-limit, limit] (``ANGLE_POSITION_LIMIT``, ``OFFSET_POSITION_LIMIT``): past
    it the encoding's numbers are silently wrong. Read where values are free
    (``values_checked`` for torch; NumPy; JAX outside ``jit``, whose tracers have no values)."""
    if isinstance(pos, Tensor) and pos.dtype in _NARROW_INTS and limit >= 2**31:
        return  # an int32 (or narrower) position cannot leave the range
    found = value_range(pos)
    if found is None:
        return
    low, high = found
    if not (-limit <= low and high <= limit):  # NaN fails too
        worst = high if abs(high) >= abs(low) else low
        raise ValueError(
            f"{what} must lie in [-2**{limit.bit_length() - 1}, 2**{limit.bit_length() - 1}] "
            f"(where its float64 numbers hold), got {worst}"
        )


def check_token_range(idx: Any, vocab_size: int, what: str = "idx") -> None:
    """Raise ValueError unless every token id of ``idx`` (torch, NumPy or JAX integer array)
    lies in 0..vocab_size-1: an embedding lookup past it fails deep inside ("index out of range
    in self") or, on an accelerator, reads garbage. Read where values are free (as
    ``check_position_range``)."""
    found = value_range(idx)
    if found is None:
        return
    low, high = found
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{what} must hold token ids in 0..{vocab_size - 1} (vocab_size {vocab_size}), "
            f"got {low if low < 0 else high}"
        )


def check_nonnegative(pos: Tensor, what: str = "positions") -> None:
    """Absolute encodings index a table: negative positions mean nothing there (checked where
    ``values_checked``).
    Raises: ValueError naming the smallest position when it is negative.
    """
    if pos.numel() and values_checked(pos) and int(pos.min()) < 0:
        raise ValueError(f"{what} must be >= 0 for an absolute encoding, got min {int(pos.min())}")


def check_positions_match(pos: Any, batch: int, length: int, what: str, axes: int = 1) -> None:
    """``pos`` of shape (T,) or (B, T) (with ``axes`` > 1: (T, A) or (B, T, A)) must agree
    with batch ``batch`` and length T (any array)."""
    lead = tuple(pos.shape[:-1] if axes > 1 else pos.shape)  # (T,) | (B, T)
    if lead[-1] != length or (len(lead) == 2 and lead[0] not in (1, batch)):
        a = f", {axes}" if axes > 1 else ""
        raise ValueError(
            f"{what} must have shape ({length}{a or ','}) or ({batch}, {length}{a}), "
            f"got {tuple(pos.shape)}"
        )


def check_ndim(x: Any, ndim: int, what: str, layout: str) -> None:
    """Raise unless ``x`` is a tensor of rank ``ndim`` (``layout`` names the axes).

    Raises: TypeError when x is not a tensor, ValueError when its rank is not ndim.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} must be a torch.Tensor {layout}, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{what} must have shape {layout}, got {tuple(x.shape)}")


def check_scores(scores: Any, q: Any, k: Any) -> None:
    """Raise ValueError unless logits ``scores`` are (B, H, Tq, Tk) for q (B, H, Tq, D) and
    k (B, H|Hkv, Tk, D): a relative term of that shape is added to them, never broadcast."""
    want = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if tuple(scores.shape) != want:
        raise ValueError(
            f"scores must have shape (B, H, Tq, Tk) = {want} from q and k, "
            f"got {tuple(scores.shape)}"
        )


def check_mask_tensor(
    x: Any, what: str, kind: str, shape: tuple[int, int] | None = None, *, arrays: bool = False
) -> None:
    """Raise unless ``x`` is a torch tensor (B, T) (any array with ``arrays``: NumPy, JAX), of
    ``shape`` if given, with a bool dtype (``kind`` "bool": padding masks) or an integer one
    ("integer": segment ids; torch's may be bool)."""
    tensor = isinstance(x, Tensor)
    if not (tensor or (arrays and hasattr(x, "dtype") and hasattr(x, "shape"))):
        noun = "array" if arrays else "torch.Tensor"
        raise TypeError(f"{what} must be a {kind} {noun} (B, T), got {type(x).__name__}")
    if not tensor:
        xp = array_api_compat.array_namespace(x)
        dtype_ok = xp.isdtype(x.dtype, "bool" if kind == "bool" else "integral")
    elif kind == "bool":
        dtype_ok = x.dtype == torch.bool
    else:
        dtype_ok = not (x.dtype.is_floating_point or x.dtype.is_complex)
    if not dtype_ok or x.ndim != 2 or (shape is not None and tuple(x.shape) != shape):
        want = "(B, T)" if shape is None else str(shape)
        article = "an" if kind[0] in "aeiou" else "a"
        raise ValueError(
            f"{what} must be {article} {kind} {'tensor' if tensor else 'array'} of shape "
            f"{want}, got {x.dtype} {tuple(x.shape)}"
        )


def check_position_batches(q_pos: Any, k_pos: Any) -> None:
    """q_pos (Tq,) | (B, Tq) and k_pos (Tk,) | (B, Tk) must have batches 1 or equal (any array)."""
    Bq = q_pos.shape[0] if q_pos.ndim == 2 else 1
    Bk = k_pos.shape[0] if k_pos.ndim == 2 else 1
    if 1 not in (Bq, Bk) and Bq != Bk:
        raise ValueError(
            f"q_pos (B, Tq) and k_pos (B, Tk) must agree on B, got {tuple(q_pos.shape)} "
            f"and {tuple(k_pos.shape)}"
        )


def as_4d(bias: Any) -> Any:
    """Bias (H, Tq, Tk) -> (1, H, Tq, Tk); (B, H, Tq, Tk) unchanged (any array)."""
    return bias if bias.ndim == 4 else bias[None]


def check_qk_agree(q: Any, k: Any, q_pos: Any, k_pos: Any, axes: int = 1) -> None:
    """q (B, H, Tq, D) and k (B, Hkv, Tk, D) agree on B and D, and each position array fits its
    tensor (any array; ranks checked by the caller; ``axes`` as ``check_positions_match``)."""
    if q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q (B, H, Tq, D) and k (B, Hkv, Tk, D) must agree on B and D, got "
            f"q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    check_positions_match(q_pos, q.shape[0], q.shape[2], "q_pos", axes)
    check_positions_match(k_pos, k.shape[0], k.shape[2], "k_pos", axes)


def check_cache_axes(cached: Any, pos: Any) -> None:
    """Raise ValueError unless positions ``pos`` (B, T[, A]) have the cached ones' axes (a 1-D
    KV cache cannot take grid positions, nor the reverse; torch or Flax arrays)."""
    if cached.shape[2:] != pos.shape[2:]:
        have = f"(B, L, {cached.shape[2]})" if cached.ndim == 3 else "(B, L)"
        raise ValueError(
            f"KVCache holds positions {have}; new positions must have the same axes, got "
            f"{tuple(pos.shape)}"
        )


def check_encoding_heads(pe: Any, n_heads: int, head_dim: int) -> None:
    """Raise ValueError when ``pe`` (torch or Flax) was built for another attention: its
    ``n_heads`` neither ``n_heads`` nor 1 (one set shared by all heads), or its ``head_dim``
    not the attention's d_model / n_heads."""
    pe_heads, pe_head_dim = getattr(pe, "n_heads", None), getattr(pe, "head_dim", None)
    if isinstance(pe_heads, int) and pe_heads not in (1, n_heads):
        raise ValueError(
            f"pe {pe.name!r} has n_heads={pe_heads}, attention has {n_heads} heads (build pe "
            f"with n_heads={n_heads}, or 1 to share one set)"
        )
    if isinstance(pe_head_dim, int) and pe_head_dim != head_dim:
        raise ValueError(
            f"pe {pe.name!r} has head_dim={pe_head_dim}, attention's heads have "
            f"d_model / n_heads = {head_dim}"
        )


def check_head_split(dim: int, n_heads: int) -> None:
    """Raise unless ``n_heads`` >= 1 divides the model width ``dim`` (head_dim = dim / n_heads)."""
    check_positive_int(dim, "dim")
    check_positive_int(n_heads, "n_heads")
    if dim % n_heads:
        raise ValueError(f"dim must be divisible by n_heads, got {dim} and {n_heads}")


def check_context(ctx: Any, pos: Any, new: int, keys: int) -> None:
    """A position context handed to an attention call (torch or Flax): positions not given
    twice, and its q_pos / k_pos as long as the call's ``new`` tokens / ``keys`` (with the
    cache's)."""
    if pos is not None and pos is not ctx.q_pos:
        raise ValueError("pass positions either as pos or in ctx, not both")
    axes = getattr(ctx, "axes", 1)
    have_q, have_k = position_length(ctx.q_pos, axes), position_length(ctx.k_pos, axes)
    if have_q != new or have_k != keys:
        raise ValueError(
            f"ctx holds {have_q} query and {have_k} key positions;"
            f" this call has {new} new tokens and {keys} keys with its cache"
        )


def check_cross_context(ctx: Any, pos: Any, new: int, memory_pos: Any) -> None:
    """A position context handed to a cross-attention call (torch or Flax): positions not
    given twice, ``new`` query positions of one axis and as many key positions as the memory
    holds, ``memory_pos`` (B, S) or (B, S, A) (an encoder of A axes)."""
    if pos is not None and pos is not ctx.q_pos:
        raise ValueError("pass positions either as pos or in ctx, not both")
    key_axes = memory_pos.shape[-1] if memory_pos.ndim == 3 else 1
    have_q, have_k = position_length(ctx.q_pos, 1), position_length(ctx.k_pos, key_axes)
    if have_q != new or have_k != memory_pos.shape[1]:
        raise ValueError(
            f"ctx holds {have_q} query and {have_k} key positions; this cross-attention call "
            f"has {new} queries and a memory of {memory_pos.shape[1]} keys"
        )


def check_embed(
    x: Any,
    pos: Any,
    dim: int,
    *,
    axes: int = 1,
    ndim: Callable[[Any, int, str, str], None] = check_ndim,
    positions: Callable[[Any, str, int], Any] = check_positions,
) -> Any:
    """Validate an additive encoding's x (B, T, C) with C = ``dim`` (real floating: an integer x
    would round the table away) and its positions (T,) | (B, T) ((T, A) | (B, T, A) for
    ``axes`` = A > 1); return the positions as ``positions`` gives them (torch's checks by
    default; the Flax modules pass their array checks)."""
    ndim(x, 3, "x", "(B, T, C)")
    check_real_floating(x, "x")
    if x.shape[-1] != dim:
        raise ValueError(f"x must have C = dim = {dim} features, got {x.shape[-1]}")
    pos = positions(pos, "pos", axes)
    check_positions_match(pos, x.shape[0], x.shape[1], "pos", axes)
    return pos


def check_positions_given(pos: Any, axes: int, name: str) -> None:
    """Raise unless ``pos`` is given where an encoding ``name`` reads ``axes`` > 1 position
    axes (grids have no default positions)."""
    if pos is None and axes > 1:
        raise ValueError(
            f"pe {name!r} reads {axes} position axes: pass pos of shape (T, {axes}) or "
            f"(B, T, {axes}) (e.g. posenc.grid_positions(...) for an image or video grid)"
        )


def check_memory(
    memory: Any,
    pos: Any,
    d_model: int,
    *,
    axes: int = 1,
    ndim: Callable[[Any, int, str, str], None] = check_ndim,
    positions: Callable[[Any, str, int], Any] = check_positions,
) -> Any:
    """Validate an encoder output ``memory`` (B, S, C) with C = ``d_model`` and its source
    positions (S,) | (B, S) ((S, A) | (B, S, A) for ``axes`` = A > 1); return the positions as
    ``positions`` gives them."""
    ndim(memory, 3, "memory", "(B, S, C)")
    B, S, C = memory.shape
    if C != d_model:
        raise ValueError(f"memory must have C = d_model = {d_model} features, got {C}")
    pos = positions(pos, "memory pos", axes)
    check_positions_match(pos, B, S, "memory pos", axes)
    return pos


def check_cross(
    x: Any,
    memory: Any,
    memory_type: type[Any],
    d_model: int,
    causal: bool,
    *,
    ndim: Callable[[Any, int, str, str], None] = check_ndim,
) -> None:
    """Validate cross-attention's decoder states x (B, T, C), C = ``d_model``, over a
    ``memory_type`` ``memory`` of the same B, in a non-``causal`` attention."""
    ndim(x, 3, "x", "(B, T, C)")
    if causal:
        raise ValueError("cross-attention needs a non-causal Attention (causal=False)")
    if not isinstance(memory, memory_type):
        raise TypeError(
            "memory must be a Memory (the cross-attention layer's project_memory), got "
            f"{type(memory).__name__}"
        )
    batch = memory.keys.k.shape[0]
    if x.shape[-1] != d_model or x.shape[0] != batch:
        raise ValueError(
            f"x must be (B, T, C) with C = d_model = {d_model} and the memory's "
            f"B = {batch}, got {tuple(x.shape)}"
        )


def check_qk(
    q: Any,
    k: Any,
    q_pos: Any,
    k_pos: Any,
    head_dim: int,
    *,
    ndim: Callable[[Any, int, str, str], None] = check_ndim,
    positions: Callable[[Any, str, int], Any] = check_positions,
    axes: int = 1,
) -> tuple[Any, Any]:
    """Validate q (B, H, Tq, D), k (B, Hkv, Tk, D) with D = ``head_dim`` and their positions
    ((T,) | (B, T), or (T, A) | (B, T, A) for ``axes`` = A > 1); return the positions as
    ``positions`` gives them (torch's checks by default; the Flax modules pass their array
    checks)."""
    ndim(q, 4, "q", "(B, H, Tq, D)")
    ndim(k, 4, "k", "(B, Hkv, Tk, D)")
    if q.shape[-1] != head_dim:
        raise ValueError(f"q/k must have head_dim={head_dim} features, got {q.shape[-1]}")
    q_pos, k_pos = positions(q_pos, "q_pos", axes), positions(k_pos, "k_pos", axes)
    check_qk_agree(q, k, q_pos, k_pos, axes)
    return q_pos, k_pos
