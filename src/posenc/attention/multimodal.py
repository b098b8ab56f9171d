"""M-RoPE position ids of a multimodal prompt (text, images, videos), as Qwen-VL models make
them (Wang et al. 2024, Qwen2-VL, arXiv:2409.12191, sec. 2.1; transformers' ``get_rope_index``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from .._validate import check_mask_tensor, check_ndim, check_positive_int

TEXT, IMAGE, VIDEO = 0, 1, 2


def mrope_positions(
    input_ids: Tensor,
    *,
    image_grid_thw: Tensor | None = None,
    video_grid_thw: Tensor | None = None,
    attention_mask: Tensor | None = None,
    mm_token_type_ids: Tensor | None = None,
    image_token_id: int | None = None,
    video_token_id: int | None = None,
    spatial_merge_size: int = 2,
    tokens_per_second: float | None = None,
    second_per_grid_ts: Tensor | Sequence[float] | None = None,
    frames_apart: bool = False,
) -> Tensor:
    """M-RoPE position ids (t, h, w) of every token, as transformers'.

    M-RoPE position ids (t, h, w) of every token, equal to transformers 5.23's
    ``get_rope_index`` of Qwen2-VL, Qwen2.5-VL and Qwen3-VL.

    Text advances all three ids by one per token. An image or video block (its grid
    (t, h, w) in patches, merged by ``spatial_merge_size`` in h and w) starts at the next text
    position s: its tokens, in raster order, sit at (s + t_i, s + h_i, s + w_i), and the text
    after it resumes at s + max(h, w)/merge. Qwen2.5-VL (``tokens_per_second``): a video's
    frame i sits at s + floor(i·tokens_per_second·seconds) (absolute time; ``second_per_grid_ts``
    per video, default 1, in float32 as transformers computes it). Qwen3-VL
    (``frames_apart=True``): timestamp text separates a video's frames, each its own grid.
    Blocks are the runs of ``mm_token_type_ids`` (0 text, 1 image, 2 video), or of tokens equal
    to ``image_token_id`` / ``video_token_id``; they take the grids in order, row after row.
    Padding (``attention_mask`` 0) gets ids 0 and is skipped. A token decoded after the prompt
    continues at max(ids of its row) + 1 on all three axes.

    Shapes: input_ids (B, T); grids (n, 3) integer; attention_mask (B, T) -> (3, B, T) int64
    (transformers' layout; posenc's grid encodings read ``ids.movedim(0, -1)``, (B, T, 3)).
    Raises: TypeError/ValueError for inputs of another shape or dtype, grids without token
    types, a block whose length is not its grid's t·h·w/merge², or grids left unused.
    """
    check_ndim(input_ids, 2, "input_ids", "(B, T)")
    check_positive_int(spatial_merge_size, "spatial_merge_size")
    B, T = input_ids.shape
    types = _token_types(input_ids, mm_token_type_ids, image_token_id, video_token_id)
    if attention_mask is not None:
        check_mask_tensor(attention_mask, "attention_mask", "integer", (B, T))
    grids = {
        IMAGE: _grids(image_grid_thw, "image_grid_thw"),
        VIDEO: _grids(video_grid_thw, "video_grid_thw"),
    }
    if frames_apart:  # Qwen3-VL: one grid (1, h, w) per frame
        video = grids[VIDEO]
        grids[VIDEO] = video.repeat_interleave(video[:, 0], dim=0).index_fill(
            1, torch.tensor([0]), 1
        )
    seconds = _seconds(second_per_grid_ts)
    left = {kind: iter(g) for kind, g in grids.items()}
    out = torch.zeros(3, B, T, dtype=torch.long, device=input_ids.device)
    for b in range(B):
        keep = (
            torch.ones(T, dtype=torch.bool)
            if attention_mask is None
            else attention_mask[b].bool().cpu()
        )
        row = _row_positions(
            types[b][keep].tolist(), left, spatial_merge_size, tokens_per_second, seconds
        )
        out[:, b, keep.to(out.device)] = row.to(out.device)
    for kind, rest in left.items():
        if (n := sum(1 for _ in rest)) > 0:
            what = "image_grid_thw" if kind == IMAGE else "video_grid_thw"
            raise ValueError(f"{what} has {n} grid(s) more than the prompt has blocks")
    return out


def _token_types(
    input_ids: Tensor, types: Tensor | None, image_id: int | None, video_id: int | None
) -> Tensor:
    """(B, T) int64: 0 text, 1 image, 2 video token, from ``types`` or the token ids."""
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must be an integer tensor, got {input_ids.dtype}")
    if types is not None:
        B, T = input_ids.shape
        check_mask_tensor(types, "mm_token_type_ids", "integer", (B, T))
        return types.long().cpu()
    out = torch.zeros(input_ids.shape, dtype=torch.long)
    for kind, token in ((IMAGE, image_id), (VIDEO, video_id)):
        if token is not None:
            out[input_ids.cpu() == token] = kind
    return out


def _grids(grid_thw: Tensor | None, what: str) -> Tensor:
    """Grids (n, 3) int64 on the host (empty when None)."""
    if grid_thw is None:
        return torch.zeros(0, 3, dtype=torch.long)
    check_ndim(grid_thw, 2, what, "(n, 3)")
    if grid_thw.shape[1] != 3 or grid_thw.dtype.is_floating_point:
        raise ValueError(
            f"{what} must be integer (t, h, w) rows (n, 3), got {grid_thw.dtype} "
            f"{tuple(grid_thw.shape)}"
        )
    return grid_thw.long().cpu()


def _seconds(second_per_grid_ts: Tensor | Sequence[float] | None) -> Iterator[Tensor] | None:
    """Seconds per temporal patch of each video, as float32 0-d tensors (transformers'
    processors hand them over as a float32 tensor), or None."""
    if second_per_grid_ts is None:
        return None
    return iter(torch.as_tensor(second_per_grid_ts, dtype=torch.float32).reshape(-1))


def _row_positions(
    types: list[int],
    grids: dict[int, Iterator[Tensor]],
    merge: int,
    tokens_per_second: float | None,
    seconds: Iterator[Tensor] | None,
) -> Tensor:
    """(3, n) ids of one row's n real tokens of ``types``, taking a grid per vision block."""
    pieces, start, index = [], 0, 0
    for kind, run in itertools.groupby(types):
        n = len(list(run))
        if kind == TEXT:
            pieces.append(torch.arange(start, start + n).expand(3, n))
            start, index = start + n, index + n
            continue
        grid = next(grids[kind], None)
        what = "image" if kind == IMAGE else "video"
        if grid is None:
            raise ValueError(f"the prompt has more {what} blocks than {what}_grid_thw has grids")
        t, h, w = int(grid[0]), int(grid[1]) // merge, int(grid[2]) // merge
        if n != t * h * w:
            raise ValueError(
                f"{'an' if kind == IMAGE else 'a'} {what} block of {n} tokens (at token {index}) "
                f"does not match its grid "
                f"{tuple(grid.tolist())}: t·(h/{merge})·(w/{merge}) = {t * h * w} tokens"
            )
        frames = torch.arange(t)
        if kind == VIDEO and tokens_per_second is not None:  # Qwen2.5-VL: absolute time
            second = 1 if seconds is None else next(seconds, None)
            if second is None:
                raise ValueError("second_per_grid_ts has fewer entries than the prompt has videos")
            frames = (frames * (tokens_per_second * second)).long()
        ids = torch.meshgrid(
            frames + start, torch.arange(h) + start, torch.arange(w) + start, indexing="ij"
        )
        pieces.append(torch.stack(ids).reshape(3, -1))
        start, index = start + max(h, w), index + n
    return torch.cat(pieces, dim=1) if pieces else torch.zeros(3, 0, dtype=torch.long)
