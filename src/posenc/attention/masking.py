"""The masks one attention call is handed, checked where they enter: each new token's validity
and segment id (``mask_inputs``), and whether the causal or bidirectional mask alone applies
(``plain``).

Shapes: padding_mask (B, T) bool; segment_ids (B, T) integer.
"""

from __future__ import annotations

from torch import Tensor

from .._validate import check_mask_tensor
from ..functional import masks
from ..functional._xp import namespace
from .cache import KeyValueCache


def mask_inputs(
    B: int,
    T: int,
    like: Tensor,
    padding_mask: Tensor | None,
    segment_ids: Tensor | None,
    cache: KeyValueCache | None = None,
) -> tuple[Tensor, Tensor]:
    """Validity (B, T) bool and segment ids (B, T) int64 of T new tokens
    (``functional.masks.mask_inputs``): ``padding_mask`` and ``segment_ids`` as given (checked),
    or the defaults (all valid; one segment, or after ``cache``'s entries each row's latest), on
    ``like``'s device.

    Raises: TypeError/ValueError for a mask that is not a (B, T) tensor of its dtype (bool;
    integer)."""
    if padding_mask is not None:
        check_mask_tensor(padding_mask, "padding_mask", "bool", (B, T))
    if segment_ids is not None:
        check_mask_tensor(segment_ids, "segment_ids", "integer", (B, T))
    last = None if cache is None else cache.last_segment()  # (B, 1) or None
    valid, segment = masks.mask_inputs(
        B, T, padding_mask, segment_ids, last, xp=namespace(like), device=like.device
    )
    return valid, segment  # (B, T) bool, (B, T) int64


def plain(padding_mask: Tensor | None, segment_ids: Tensor | None, offset: int) -> bool:
    """No padding, segments or cache offset: SDPA's ``is_causal`` (or nothing) masks."""
    return padding_mask is None and segment_ids is None and not offset
