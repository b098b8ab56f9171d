"""A transformers rotary embedding rebuilt on posenc: the same position embeddings, from
float64 angles and any posenc context-extension method.

A transformers model computes its position embeddings once per forward
(``model.rotary_emb(x, position_ids)``) and hands them to every layer. Their form depends on
the architecture (``Form``): cos and sin of width 2P as ``cat(c, c)`` (Llama and most) or
``repeat_interleave(c, 2)`` (Cohere), of width P (GPT-OSS), or complex ``c + i·s`` (DeepSeek-V2,
Llama 4). ``RotaryEmbedding`` returns the form of the module it replaces, found by comparing
with it (``detect_form``), so the model's layers read it unchanged.

Position ids come in three shapes: (B, T) for 1-D RoPE; (3, B, T) (or (B, T), the same id on
each axis) for M-RoPE (Qwen-VL text models: ``MRoPE``); (N, A) grid coordinates (row, column)
for the axial RoPE of vision towers (``rope_type: "axial"``: ``AxialRoPE``).
``rope_positions`` reorders them to posenc's (..., T, A).
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

import torch
from torch import Tensor, nn

from ..encodings.grid_rotary import AxialRoPE
from ..encodings.mrope import MRoPE
from ..encodings.rotary import RoPE

__all__ = [
    "FORMS",
    "Form",
    "Rope",
    "RotaryEmbedding",
    "compact",
    "detect_form",
    "expand",
    "rope_positions",
    "sample_positions",
    "takes_layer_type",
]

#: What a replaced rotary module computes with: 1-D RoPE, M-RoPE or axial (grid) RoPE.
Rope = RoPE | AxialRoPE

Form = Literal["cat", "repeat", "compact", "complex"]
_NO_TYPE = "rope"  # the ModuleDict key of a model without layer types
FORMS: tuple[Form, ...] = ("cat", "repeat", "compact", "complex")


def expand(cos: Tensor, sin: Tensor, form: Form) -> Any:
    """posenc's cos, sin (..., P) in a transformers form: a (cos, sin) pair of width 2P
    ("cat", "repeat") or P ("compact"), or one complex tensor (..., P) ("complex")."""
    if form == "cat":
        return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
    if form == "repeat":
        return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    if form == "complex":
        return torch.complex(cos, sin)
    return cos, sin


def compact(embeddings: Any, form: Form) -> tuple[Tensor, Tensor]:
    """The inverse of ``expand``: cos, sin (..., P) (views) from a transformers form."""
    if form == "complex":
        return embeddings.real, embeddings.imag
    cos, sin = embeddings
    if form == "cat":
        P = cos.shape[-1] // 2
        return cos[..., :P], sin[..., :P]
    if form == "repeat":
        return cos[..., ::2], sin[..., ::2]
    return cos, sin


def rope_positions(rope: Rope, position_ids: Tensor) -> Tensor:
    """transformers' position ids as ``rope`` reads them: (B, T) unchanged for RoPE; M-RoPE's
    (3, B, T) or (B, T) -> (B, T, 3); axial RoPE's (N, A) unchanged.

    Raises: ValueError for M-RoPE ids with other than 3 rows, or axial ids whose last
    dimension is not the rope's number of axes."""
    if isinstance(rope, MRoPE):
        if position_ids.ndim == 3 and position_ids.shape[0] != 3:
            raise ValueError(
                f"M-RoPE position ids must be (3, B, T) or (B, T), got {tuple(position_ids.shape)}"
            )
        return position_ids.expand(3, -1, -1).movedim(0, -1)  # (B, T, 3)
    if isinstance(rope, AxialRoPE):
        axes = rope.config.axes
        if position_ids.ndim != 2 or position_ids.shape[-1] != axes:
            raise ValueError(
                f"axial RoPE position ids must be (N, {axes}), got {tuple(position_ids.shape)}"
            )
        return position_ids
    return position_ids


def sample_positions(rope: Rope, T: int, device: torch.device | None = None) -> Tensor:
    """Position ids of T tokens in transformers' shape for ``rope`` that tell its axes apart:
    (1, T) for RoPE, (3, 1, T) for M-RoPE, (T, A) for axial RoPE (each axis its own ids)."""
    t = torch.arange(T, device=device)
    if isinstance(rope, MRoPE):
        return torch.stack([t, (2 * t) % 5, (3 * t + 1) % 7])[:, None]  # (3, 1, T)
    if isinstance(rope, AxialRoPE):
        axes = rope.config.axes
        return torch.stack([(a + 1) * t % (5 + 2 * a) for a in range(axes)], dim=-1)  # (T, A)
    return t[None]  # (1, T)


def takes_layer_type(module: nn.Module) -> bool:
    """Whether a rotary module's forward takes a ``layer_type`` (Gemma 3: one per type)."""
    return "layer_type" in inspect.signature(module.forward).parameters


def detect_form(original: nn.Module, ropes: dict[str | None, Rope]) -> Form:
    """The form of ``original``'s output, by comparing it at 8 positions (``sample_positions``:
    every axis its own ids) with each form of posenc's (unscaled) cos and sin of the same
    config, within the rounding of its frequency buffer (a model cast to bfloat16 rounds
    transformers' ``inv_freq`` to 8 bits).

    Raises: ValueError when none matches (an architecture whose embeddings posenc cannot make).
    """
    floating = [b for b in original.buffers() if b.is_floating_point()]
    device = floating[0].device if floating else torch.device("cpu")
    atol = 1e-5 + 8 * torch.finfo(floating[0].dtype if floating else torch.float32).eps
    x = torch.zeros(1, 8, 1, device=device)
    layer_type = next(iter(ropes))
    rope = ropes[layer_type]
    pos = sample_positions(rope, 8, device)
    theirs = original(x, pos) if layer_type is None else original(x, pos, layer_type)
    for form in FORMS:
        ours = expand(*rope.cos_sin(rope_positions(rope, pos)), form)
        if _close(ours, theirs, atol):
            return form
    width = f"rotary_dim {rope.rotary_dim}" if isinstance(rope, RoPE) else f"{rope.name}"
    shape = tuple(expand(*rope.cos_sin(rope_positions(rope, pos)), "cat")[0].shape)
    raise ValueError(
        f"{type(original).__name__} returns position embeddings in a form posenc does not make "
        f"({_describe(theirs)} at position ids {tuple(pos.shape)}); posenc makes "
        f"{'/'.join(FORMS)}, {shape} for cat, from head_dim {rope.config.head_dim}, {width}"
    )


def _close(ours: Any, theirs: Any, atol: float) -> bool:
    """Whether two outputs (a tensor or a pair) agree in structure, shape, dtype and values."""
    a = (ours,) if isinstance(ours, Tensor) else tuple(ours)
    b = (theirs,) if isinstance(theirs, Tensor) else theirs
    if not isinstance(b, tuple | list) or len(a) != len(b):
        return False
    return all(
        isinstance(y, Tensor)
        and x.shape == y.shape
        and x.dtype == y.dtype
        and torch.allclose(x.to(y.device), y, atol=atol, rtol=0)
        for x, y in zip(a, b, strict=True)
    )


def _describe(out: Any) -> str:
    items = (out,) if isinstance(out, Tensor) else out
    return ", ".join(
        f"{tuple(t.shape)} {t.dtype}" if isinstance(t, Tensor) else type(t).__name__ for t in items
    )


class RotaryEmbedding(nn.Module):
    """Drop-in for a transformers ``*RotaryEmbedding``: ``forward(x, position_ids[,
    layer_type])`` returns the replaced module's form of cos and sin, computed by posenc RoPE
    modules (one per layer type; key "" without types) from float64 angles, times their
    attention scaling, in x's dtype (complex64 for "complex", as transformers).

    Dynamic methods (dynamic NTK, LongRoPE's short/long switch) follow each call's length
    max(position_ids) + 1, as transformers' ``dynamic_rope_update`` does while lengths grow.
    Shapes: x (B, T, C) (only its dtype is read); position_ids (B, T) (RoPE), (3, B, T) or
    (B, T) (M-RoPE) -> (B, T, 2P) each, or (B, T, P); (N, A) (axial) -> (N, 2P) each.
    """

    def __init__(self, ropes: dict[str | None, Rope], form: Form, config: Any = None) -> None:
        super().__init__()
        self.config = config  # the replaced module's (Granite-SWA reads rotary_emb.config)
        self.layer_types = tuple(ropes)
        self.ropes = nn.ModuleDict({_NO_TYPE if t is None else t: r for t, r in ropes.items()})
        self.form: Form = form

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor, layer_type: str | None = None) -> Any:
        if layer_type not in self.layer_types:
            raise ValueError(
                f"layer_type must be one of {list(self.layer_types)} for this rotary embedding, "
                f"got {layer_type!r}"
            )
        key = _NO_TYPE if layer_type is None else layer_type
        dtype = torch.float32 if self.form == "complex" else x.dtype
        rope: Any = self.ropes[key]
        cos, sin = rope.cos_sin(rope_positions(rope, position_ids), dtype)  # (B, T, P)
        return expand(cos, sin, self.form)

    def extra_repr(self) -> str:
        return f"form={self.form!r}"
