"""A transformers rotary embedding rebuilt on posenc: the same position embeddings, from
float64 angles and any posenc context-extension method.

A transformers model computes its position embeddings once per forward
(``model.rotary_emb(x, position_ids)``) and hands them to every layer. Their form depends on
the architecture (``Form``): cos and sin of width 2P as ``cat(c, c)`` (Llama and most) or
``repeat_interleave(c, 2)`` (Cohere), of width P (GPT-OSS), complex ``c + i·s`` (DeepSeek-V2,
Llama 4), or, for two-axis RoPE, each axis's half of the pairs as its own ``cat``,
``cat(c_0, c_0, c_1, c_1)`` ("axis_cat": Gemma 4's vision tower). ``RotaryEmbedding`` returns
the form of the module it replaces, found by comparing with it (``detect_output``), so the
model's layers read it unchanged; some vision towers (SAM 3) add a leading batch dimension of 1.

Position ids come in three shapes: (B, T) for 1-D RoPE; (A, B, T) (or (B, T), the same id on
each axis) for M-RoPE (Qwen-VL text models, A = 3: ``MRoPE``; NeoMME, A = 2:
``TwoAxisMRoPE``); (N, A) or (B, N, A) grid coordinates (row, column), integer or float, for
the axial RoPE of vision towers (``rope_type: "axial"``: ``AxialRoPE``).
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
    "detect_output",
    "expand",
    "keeps_float32",
    "rope_positions",
    "sample_positions",
    "takes_layer_type",
]

#: What a replaced rotary module computes with: 1-D RoPE, M-RoPE or axial (grid) RoPE.
Rope = RoPE | AxialRoPE

Form = Literal["cat", "repeat", "compact", "complex", "axis_cat"]
_NO_TYPE = "rope"  # the ModuleDict key of a model without layer types
FORMS: tuple[Form, ...] = ("cat", "repeat", "compact", "complex", "axis_cat")


def _axis_cat(c: Tensor) -> Tensor:
    """(..., P) -> (..., 2P): each half c_a of the pairs doubled, cat(c_0, c_0, c_1, c_1)."""
    c0, c1 = c.chunk(2, dim=-1)
    return torch.cat([c0, c0, c1, c1], dim=-1)


def expand(cos: Tensor, sin: Tensor, form: Form) -> Any:
    """posenc's cos, sin (..., P) in a transformers form: a (cos, sin) pair of width 2P
    ("cat", "repeat", "axis_cat": each half of the pairs as its own cat) or P ("compact"), or
    one complex tensor (..., P) ("complex")."""
    if form == "cat":
        return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
    if form == "axis_cat":
        return _axis_cat(cos), _axis_cat(sin)
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
    if form == "axis_cat":
        Q = cos.shape[-1] // 4
        return (
            torch.cat([cos[..., :Q], cos[..., 2 * Q : 3 * Q]], dim=-1),
            torch.cat([sin[..., :Q], sin[..., 2 * Q : 3 * Q]], dim=-1),
        )
    return cos, sin


def rope_positions(rope: Rope, position_ids: Tensor) -> Tensor:
    """transformers' position ids as ``rope`` reads them: (B, T) unchanged for RoPE; M-RoPE's
    (A, B, T) or (B, T) -> (B, T, A) (A = ``rope.config.axes``: 3, or 2 for NeoMME); axial
    RoPE's (N, A) or (B, N, A) unchanged.

    Raises: ValueError for M-RoPE ids with other than A rows, or axial ids whose last
    dimension is not the rope's number of axes."""
    if isinstance(rope, MRoPE):
        axes = rope.config.axes
        if position_ids.ndim == 3 and position_ids.shape[0] != axes:
            raise ValueError(
                f"M-RoPE position ids must be ({axes}, B, T) or (B, T), got "
                f"{tuple(position_ids.shape)}"
            )
        return position_ids.expand(axes, -1, -1).movedim(0, -1)  # (B, T, A)
    if isinstance(rope, AxialRoPE):
        axes = rope.config.axes
        if position_ids.ndim not in (2, 3) or position_ids.shape[-1] != axes:
            raise ValueError(
                f"axial RoPE position ids must be (N, {axes}) or (B, N, {axes}), got "
                f"{tuple(position_ids.shape)}"
            )
        return position_ids
    return position_ids


def sample_positions(rope: Rope, T: int, device: torch.device | None = None) -> Tensor:
    """Position ids of T tokens in transformers' shape for ``rope`` that tell its axes apart:
    (1, T) for RoPE, (A, 1, T) for M-RoPE, (T, A) for axial RoPE (each axis its own ids)."""
    t = torch.arange(T, device=device)
    if isinstance(rope, MRoPE):
        rows = [t, (2 * t) % 5, (3 * t + 1) % 7][: rope.config.axes]
        return torch.stack(rows)[:, None]  # (A, 1, T)
    if isinstance(rope, AxialRoPE):
        axes = rope.config.axes
        return torch.stack([(a + 1) * t % (5 + 2 * a) for a in range(axes)], dim=-1)  # (T, A)
    return t[None]  # (1, T)


def takes_layer_type(module: nn.Module) -> bool:
    """Whether a rotary module's forward takes a ``layer_type`` (Gemma 3: one per type)."""
    return "layer_type" in inspect.signature(module.forward).parameters


def detect_form(original: nn.Module, ropes: dict[str | None, Rope]) -> Form:
    """The form of ``original``'s output (``detect_output`` without the leading dimension).

    Raises: ValueError when none matches (an architecture whose embeddings posenc cannot make).
    """
    return detect_output(original, ropes)[0]


def detect_output(original: nn.Module, ropes: dict[str | None, Rope]) -> tuple[Form, bool]:
    """The form of ``original``'s output and whether it adds a leading dimension of 1, by
    comparing it at 8 positions (``sample_positions``: every axis its own ids) with each form
    of posenc's (unscaled) cos and sin of the same config, for each of ``ropes``' layer types,
    within the rounding of its frequency buffer (a model cast to bfloat16 rounds
    transformers' ``inv_freq`` to 8 bits). Axial RoPE is also tried at batched grid ids
    (1, N, A) (Gemma 4's tower) and with the leading 1 of SAM 3's tower, (N, A) -> (1, N, 2P).

    Raises: ValueError when none matches (an architecture whose embeddings posenc cannot make).
    """
    floating = [b for b in original.buffers() if b.is_floating_point()]
    device = floating[0].device if floating else torch.device("cpu")
    atol = 1e-5 + 8 * torch.finfo(floating[0].dtype if floating else torch.float32).eps
    x = torch.zeros(1, 8, 1, device=device)
    first = next(iter(ropes))
    grid = isinstance(ropes[first], AxialRoPE) and not isinstance(ropes[first], MRoPE)
    found: tuple[Form, bool] | None = None
    for layer_type, rope in ropes.items():
        pos = sample_positions(rope, 8, device)
        shapes = (pos, pos[None]) if grid else (pos,)
        theirs = [_call(original, x, p, layer_type) for p in shapes]
        errors = [out for out in theirs if isinstance(out, Exception)]
        if len(errors) == len(theirs):  # the module fails at every shape: its own error
            raise errors[0]
        match = next(
            (
                (form, lead)
                for form in FORMS
                for lead in ((False, True) if grid else (False,))
                for p, out in zip(shapes, theirs, strict=True)
                if _close(_ours(rope, p, form, lead), out, atol)
            ),
            None,
        )
        if match is None or (found is not None and match != found):
            width = f"rotary_dim {rope.rotary_dim}" if isinstance(rope, RoPE) else f"{rope.name}"
            shape = tuple(_ours(rope, pos, "cat", False)[0].shape)
            ran = next((o for o in theirs if not isinstance(o, Exception)), theirs[0])
            kind = "" if layer_type is None else f" for layer type {layer_type!r}"
            raise ValueError(
                f"{type(original).__name__} returns position embeddings{kind} in a form posenc "
                f"does not make ({_describe(ran)} at position ids {tuple(pos.shape)}); "
                f"posenc makes {'/'.join(FORMS)}, {shape} for cat, from head_dim "
                f"{rope.config.head_dim}, {width}"
            )
        found = match
    assert found is not None
    return found


def keeps_float32(original: nn.Module, ropes: dict[str | None, Rope]) -> bool:
    """Whether ``original`` returns float32 (cos, sin) for bfloat16 inputs x (SAM 3's vision
    rotary) where most cast them to x's dtype."""
    device = next((b.device for b in original.buffers()), torch.device("cpu"))
    layer_type = next(iter(ropes))
    rope = ropes[layer_type]
    x = torch.zeros(1, 8, 1, device=device, dtype=torch.bfloat16)
    pos = sample_positions(rope, 8, x.device)
    grid = isinstance(rope, AxialRoPE) and not isinstance(rope, MRoPE)
    outs = [_call(original, x, p, layer_type) for p in ((pos, pos[None]) if grid else (pos,))]
    out = next((o for o in outs if not isinstance(o, Exception)), None)
    items = (out,) if isinstance(out, Tensor) else tuple(out or ())
    return bool(items) and all(isinstance(t, Tensor) and t.dtype == torch.float32 for t in items)


def _ours(rope: Rope, pos: Tensor, form: Form, lead: bool) -> Any:
    """posenc's embeddings of ``rope`` at transformers' ids ``pos`` in ``form``, with a
    leading dimension of 1 when ``lead``."""
    out = expand(*rope.cos_sin(rope_positions(rope, pos)), form)
    if not lead:
        return out
    return out[None] if isinstance(out, Tensor) else tuple(t[None] for t in out)


def _call(original: nn.Module, x: Tensor, pos: Tensor, layer_type: str | None) -> Any:
    """``original``'s output at ``pos``, or the exception it raises (ids of a shape its
    forward does not take)."""
    try:
        return original(x, pos) if layer_type is None else original(x, pos, layer_type)
    except (RuntimeError, IndexError, TypeError, ValueError) as err:
        return err


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
    if isinstance(out, Exception):
        return f"{type(out).__name__}: {out}"
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
    ``lead``: a leading dimension of 1 on each output (SAM 3's vision tower); ``float32``:
    outputs in float32 whatever x's dtype (SAM 3's, which its rotation multiplies in float32).
    Shapes: x (B, T, C) (only its dtype is read); position_ids (B, T) (RoPE), (A, B, T) or
    (B, T) (M-RoPE) -> (B, T, 2P) each, or (B, T, P); (N, A) | (B, N, A) (axial) ->
    (N, 2P) | (B, N, 2P) each ((1, N, 2P) with ``lead``).
    """

    def __init__(
        self,
        ropes: dict[str | None, Rope],
        form: Form,
        config: Any = None,
        *,
        lead: bool = False,
        float32: bool = False,
    ) -> None:
        super().__init__()
        self.config = config  # the replaced module's (Granite-SWA reads rotary_emb.config)
        self.layer_types = tuple(ropes)
        self.ropes = nn.ModuleDict({_NO_TYPE if t is None else t: r for t, r in ropes.items()})
        self.form: Form = form
        self.lead = lead
        self.float32 = float32

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor, layer_type: str | None = None) -> Any:
        if layer_type not in self.layer_types:
            raise ValueError(
                f"layer_type must be one of {list(self.layer_types)} for this rotary embedding, "
                f"got {layer_type!r}"
            )
        key = _NO_TYPE if layer_type is None else layer_type
        dtype = torch.float32 if self.form == "complex" or self.float32 else x.dtype
        rope: Any = self.ropes[key]
        cos, sin = rope.cos_sin(rope_positions(rope, position_ids), dtype)  # (B, T, P)
        if self.lead:
            cos, sin = cos[None], sin[None]
        return expand(cos, sin, self.form)

    def extra_repr(self) -> str:
        flags = (", lead=True" if self.lead else "") + (", float32=True" if self.float32 else "")
        return f"form={self.form!r}{flags}"
