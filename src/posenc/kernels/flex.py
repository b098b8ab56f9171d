"""Score biases fused into attention with FlexAttention: no bias tensor is ever materialised.

For offset-only biases (``capabilities.bias == "offset"``: ALiBi, T5, Kerple) the caller hands
the bias at every offset the call can meet, an ``OffsetTable`` (H, n_offsets) (``Attention``'s
backend evaluates the encoding's ``bias`` once per offset: ``attention.backends.offset_table``),
and a ``score_mod`` adds ``table[h, q_pos - k_pos]`` inside the compiled kernel; causal
attention also skips fully masked blocks (a block mask). Opt in with ``Attention(...,
bias_backend="flex")``; the first call per shape compiles.

Not on CPU (``flex_runs_on``): Inductor's CPU FlexAttention kernel (torch 2.13) is wrong on AVX2
machines without AVX-512 (``torch.compile(flex_attention)(q, k, v)`` with q = k = v of shape
(1, 2, 40, 8) differs from SDPA by 0.5-1.0, NaN in masked rows; also lengths 24, 56, 72, 152,
200 and head dim 16 at 200) and its generated C++ does not compile under
``ATEN_CPU_CAPABILITY=default`` (``at::vec::pack_vnni2`` undeclared). ``Attention`` takes its
CPU path there (the Toeplitz view, same numbers); ``compiled=False`` runs the same score_mod
and block mask through flex's eager form, which is how posenc's part is tested on CPU.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .._validate import check_positions, check_positions_match

#: Input dtypes FlexAttention compiles for on CPU (torch 2.13: float64 raises in Inductor).
FLEX_CPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class OffsetTable(NamedTuple):
    """An offset-only bias at the offsets lo .. lo + n - 1: ``values[h, o - lo]`` is head h's
    bias at offset o = q_pos - k_pos.

    Shapes: values (H, n).
    """

    values: Tensor
    lo: int

    def rows(self, n_heads: int) -> Tensor:
        """``values`` (H, n), checked to have one row per head.

        Raises:
            ValueError: a table of another rank or with other than ``n_heads`` rows.
        """
        if self.values.ndim != 2 or self.values.shape[0] != n_heads:
            raise ValueError(
                f"the offset table must be (H, n) with H = {n_heads}, got "
                f"{tuple(self.values.shape)}"
            )
        return self.values

    def covering(self, lo: int, hi: int, n_heads: int) -> Tensor:
        """The columns for offsets lo..hi: (H, hi - lo + 1), a view (a learned table's gradient
        flows back).

        Raises:
            ValueError: a table with other than ``n_heads`` rows (``rows``), or not covering
                lo..hi.
        """
        values = self.rows(n_heads)
        first, last = self.lo, self.lo + values.shape[1] - 1
        if lo < first or hi > last:
            raise ValueError(
                f"the offset table covers offsets {first}..{last}, the call needs {lo}..{hi}"
            )
        return values[:, lo - first : hi - first + 1]


def flex_runs_on(device: torch.device) -> bool:
    """Whether posenc runs compiled FlexAttention on ``device``: not on CPU (module docstring)."""
    return device.type != "cpu"


def _eager_flex(*args: Any, **kwargs: Any) -> Tensor:
    """flex_attention without compiling: the (B, H, T, L) scores materialised (tests on CPU)."""
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out: Tensor = flex_attention(*args, **kwargs)
    return out


@functools.cache
def _compiled_flex() -> Callable[..., Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@functools.cache
def _causal_block_mask(T: int, L: int, device: torch.device) -> Any:
    """The causal block mask for (T, L) on ``device`` (with its index: one per GPU), kept for
    every later call: built outside ``inference_mode``, since flex saves its tensors for
    backward, which inference tensors cannot be."""
    from torch.nn.attention.flex_attention import create_block_mask

    shift = L - T  # query i sits at cache index shift + i

    def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx <= q_idx + shift

    with torch.inference_mode(False):
        return create_block_mask(causal, None, None, T, L, device=device)


def check_qkv(q: Tensor, k: Tensor, v: Tensor, *, same_dtype: bool) -> None:
    """The fused attention paths' q (B, H, T, D) and k, v (B, Hkv, L, D) with Hkv dividing H.
    ``same_dtype``: k, v as q's dtype.

    Raises:
        TypeError: a non-tensor, non-floating q/k/v, or mixed dtypes (``same_dtype``).
        ValueError: ranks or sizes that do not fit together.
    """
    for t, what in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, Tensor) or not t.dtype.is_floating_point:
            kind = t.dtype if isinstance(t, Tensor) else type(t).__name__
            raise TypeError(f"{what} must be a floating-point tensor, got {kind}")
        if t.ndim != 4:
            raise ValueError(f"{what} must have 4 dimensions (B, heads, len, D), got {t.ndim}")
    B, H, _, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(
            f"k and v must be (B, Hkv, L, D) = ({B}, Hkv, L, {D}) like q {tuple(q.shape)}, got "
            f"{tuple(k.shape)} and {tuple(v.shape)}"
        )
    if k.shape[1] == 0 or H % k.shape[1]:
        raise ValueError(f"q's {H} heads must be a multiple of k's {k.shape[1]}")
    if same_dtype and not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")


def check_attention_inputs(
    q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, *, same_dtype: bool
) -> None:
    """``check_qkv``, and q_pos (T,) | (B, T) and k_pos (L,) | (B, L) integer.

    Raises:
        TypeError: as ``check_qkv``, or non-integer positions.
        ValueError: ranks or sizes that do not fit together.
    """
    check_qkv(q, k, v, same_dtype=same_dtype)
    B, T, L = q.shape[0], q.shape[2], k.shape[2]
    check_positions_match(check_positions(q_pos, "q_pos"), B, T, "q_pos")
    check_positions_match(check_positions(k_pos, "k_pos"), B, L, "k_pos")


def flex_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    table: OffsetTable,
    q_pos: Tensor,
    k_pos: Tensor,
    *,
    causal: bool,
    compiled: bool = True,
    checked: bool = False,
) -> Tensor | None:
    """softmax(q k^T / sqrt(D) + bias) v with the bias added per score inside the kernel, or
    None when flex does not apply: a CPU tensor with ``compiled`` (``flex_runs_on``), gradients
    it cannot give (a learned bias; any on CPU), a dtype it does not compile on CPU (float64),
    or no queries or keys (T, L or B = 0). ``compiled=False``: flex's eager form, which builds
    the scores whole (a reference for posenc's score_mod and block mask, not a fast path).

    Shapes: q (B, H, T, D); k, v (B, Hkv, L, D); q_pos (T,) | (B, T); k_pos (L,) | (B, L);
    ``table`` (H, n) covering every offset q_pos - k_pos (the caller's promise: checking it
    would read the positions on the host). Causal masking is by index (query i sees keys up to
    L - T + i), as in ``Attention``.

    Raises:
        TypeError / ValueError: inputs of the wrong kind or shape (``check_attention_inputs``),
            or a table with other than H rows (``OffsetTable.rows``).
    """
    if not checked:  # (``Attention`` checked its inputs once)
        check_attention_inputs(q, k, v, q_pos, k_pos, same_dtype=True)
    if compiled and not flex_runs_on(q.device):
        return None
    if q.numel() == 0 or k.numel() == 0:  # nothing to reduce over; the caller's blocks
        return None
    if q.device.type == "cpu" and q.dtype not in FLEX_CPU_DTYPES:
        return None
    B, H, T, D = q.shape
    qp, kp = q_pos.expand(B, T), k_pos.expand(B, k.shape[2])  # (B, T), (B, L)
    values, lo = table.rows(H).to(torch.float32), table.lo  # (H, n)
    cpu_grad = any(t.requires_grad and t.device.type == "cpu" for t in (q, k, v))
    if torch.is_grad_enabled() and (values.requires_grad or cpu_grad):
        # Flex cannot send gradients to a captured table, nor run any backward on CPU (torch
        # 2.13): the caller then uses the blockwise path.
        return None

    def add_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score + values[h, qp[b, q_idx] - kp[b, kv_idx] - lo]

    mask = _causal_block_mask(T, k.shape[2], q.device) if causal else None
    out: Tensor = (_compiled_flex() if compiled else _eager_flex)(
        q,
        k,
        v,
        score_mod=add_bias,
        block_mask=mask,
        scale=1.0 / math.sqrt(D),
        enable_gqa=k.shape[1] != H,
    )
    return out
