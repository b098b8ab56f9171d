"""Position ids for the layouts attention meets: padding, packing, decoding, grids."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .._validate import check_mask_tensor, check_positive_int


def positions_from_padding(padding_mask: Tensor) -> Tensor:
    """Positions counting only real tokens: left padding does not shift them.

    padding_mask (B, T) bool, True for real tokens -> (B, T) int64; padding gets position 0.
    Example: [F, F, T, T, T] -> [0, 0, 0, 1, 2].
    Raises: TypeError/ValueError unless ``padding_mask`` is a (B, T) bool tensor.
    """
    check_mask_tensor(padding_mask, "padding_mask", "bool")
    counted = padding_mask.long().cumsum(-1) - 1  # (B, T) index among real tokens
    return counted.masked_fill(~padding_mask, 0)


def packed_positions(segment_ids: Tensor) -> Tensor:
    """Positions restarting at 0 at each new segment of a packed row.

    segment_ids (B, T) int, constant within a segment -> (B, T) int64.
    Example: [0, 0, 0, 1, 1, 2] -> [0, 1, 2, 0, 1, 0].
    Raises: TypeError/ValueError unless ``segment_ids`` is a (B, T) integer tensor.
    """
    check_mask_tensor(segment_ids, "segment_ids", "integer")
    B, T = segment_ids.shape
    idx = torch.arange(T, device=segment_ids.device).expand(B, T)
    starts = torch.ones_like(segment_ids, dtype=torch.bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    start_idx = torch.where(starts, idx, torch.zeros_like(idx)).cummax(dim=-1).values
    return idx - start_idx


def decode_positions(prefix_len: int, n_new: int, *, device: torch.device | None = None) -> Tensor:
    """Positions of ``n_new`` tokens decoded after a prefix.

    Positions of ``n_new`` tokens decoded after a prefix of ``prefix_len``: they advance by
    one from the prefix length. Returns (n_new,) int64.

    Raises: TypeError for a length that is not an int; ValueError for a negative one.
    """
    check_positive_int(prefix_len, "prefix_len", minimum=0)
    check_positive_int(n_new, "n_new", minimum=0)
    return torch.arange(prefix_len, prefix_len + n_new, dtype=torch.long, device=device)


def grid_positions(
    *sizes: int, offset: int | Sequence[int] = 0, device: torch.device | None = None
) -> Tensor:
    """Positions of the cells of an image or video grid, in raster order.

    Positions of the cells of a grid of ``sizes`` (rows, columns) for an image or (frames,
    rows, columns) for a video, in raster order (the last axis fastest), each axis starting
    at ``offset`` (one int, or one per axis): what the grid encodings (rope_2d, rope_3d,
    mrope, sincos_2d, ...) read. Example: grid_positions(2, 3) -> [[0, 0], [0, 1], [0, 2],
    [1, 0], [1, 1], [1, 2]].

    Shapes: returns (N, A) int64, N = Π sizes, A = len(sizes).
    Raises: TypeError/ValueError for no sizes, a size that is not an int >= 1, or offsets
    that do not give one int per axis.
    """
    if not sizes:
        raise ValueError("grid_positions needs the size of at least one axis")
    for n in sizes:
        check_positive_int(n, "each grid size")
    offsets = (offset,) * len(sizes) if isinstance(offset, int) else tuple(offset)
    if len(offsets) != len(sizes) or not all(isinstance(o, int) for o in offsets):
        raise ValueError(f"offset must be an int or one int per axis {sizes}, got {offset!r}")
    axes = [
        torch.arange(o, o + n, dtype=torch.long, device=device)
        for o, n in zip(offsets, sizes, strict=True)
    ]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, len(sizes))
