"""posenc's RoPE kernels inside a transformers attention layer.

A transformers attention module rotates q and k by calling a function of its modeling module
from its forward: ``apply_rotary_pos_emb(q, k, cos, sin)`` in most models,
``apply_rotary_pos_emb_interleave`` in DeepSeek-V3 (pairs read interleaved, stored as halves),
``apply_rotary_emb(q, k, freqs_cis)`` with complex embeddings in DeepSeek-V2 and Llama 4
(q as (B, T, H, D) there), ``apply_rotary_pos_emb(x, cos, sin)`` of one tensor in Gemma 3n, and
``apply_rotary_pos_emb(q, k=None, ...)`` in Qwen4-Exp. ``install`` gives one attention module
its own copy of its forward whose globals name posenc's rotation instead: other instances and
the modeling module are untouched, and ``uninstall`` deletes the copy. The rotation is chosen
by ``verified``: the variant (pair layout; where the heads sit) that equals the function it
replaces on random inputs, or a ValueError. Without autograd it writes the rotation into q and
k (``fresh``): the forward's own projections, which it rebinds to the result.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from ..kernels.rope import rotate_pair
from ..kernels.rope_eager import apply_rope
from .rotary import Form, compact

__all__ = ["ROTATIONS", "fresh", "install", "rotations_in", "single", "uninstall", "verified"]

#: Names of the functions transformers' attention layers rotate q and k with.
ROTATIONS = ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave", "apply_rotary_emb")
Rotation = Callable[..., Any]
#: Features past the rotated width in ``verified``'s heads: a partial rotation that rotates
#: the wrong end of the head (leading vs trailing rope features) fails the comparison.
_PASS = 4


def rotations_in(module: nn.Module) -> list[str]:
    """The rotation functions ``module``'s forward calls (by name, from its modeling module)."""
    forward = type(module).forward
    code, namespace = getattr(forward, "__code__", None), getattr(forward, "__globals__", {})
    if code is None:
        return []
    return [n for n in ROTATIONS if n in code.co_names and callable(namespace.get(n))]


def fresh(q: Tensor, k: Tensor) -> bool:
    """Whether the rotation may overwrite q and k, the attention forward's own projections
    (the only tensors an installed forward hands it): autograd off (nothing records them),
    torch.compile not tracing, each element of q and k reached once (no stride 0), and q and k
    in separate memory (views of one fused projection go out of place)."""
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return False
    if any(st == 0 and n > 1 for x in (q, k) for n, st in zip(x.shape, x.stride(), strict=True)):
        return False
    return q.untyped_storage().data_ptr() != k.untyped_storage().data_ptr()


def _pair(
    form: Form, layout: str, kernel: str, clockwise: bool = False, q_last: bool = False
) -> Rotation:
    """``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` by posenc's kernel;
    ``clockwise``: each pair turned by -pos·θ (NanoChat's ``rotate_half`` returns (x2, -x1));
    ``q_last``: q shorter than k takes the last Tq positions of cos and sin (a draft model's
    queries after its keys' context: Muse Glimmer's assistant)."""

    def apply_rotary_pos_emb(
        q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1
    ) -> tuple[Tensor, Tensor]:
        c, s = compact((cos, sin), form)  # (B, T, P)
        s = -s if clockwise else s
        cq, sq = c, s
        if q_last:
            Tq = q.shape[unsqueeze_dim + 1 if unsqueeze_dim == 1 else unsqueeze_dim - 1]
            cq, sq = c[..., c.shape[-2] - Tq :, :], s[..., s.shape[-2] - Tq :, :]
        c, s = c.unsqueeze(unsqueeze_dim), s.unsqueeze(unsqueeze_dim)  # (B, 1, T, P)
        cq, sq = cq.unsqueeze(unsqueeze_dim), sq.unsqueeze(unsqueeze_dim)
        return rotate_pair(q, k, cq, sq, c, s, layout=layout, inplace=fresh(q, k), kernel=kernel)

    return apply_rotary_pos_emb


def _deinterleaving(form: Form, kernel: str) -> Rotation:
    """DeepSeek-V3's ``apply_rotary_pos_emb_interleave``: pairs (2i, 2i + 1) rotated and stored
    as halves, i.e. the features de-interleaved, then rotated in the half layout."""

    def apply_rotary_pos_emb_interleave(
        q: Tensor,
        k: Tensor,
        cos: Tensor,
        sin: Tensor,
        position_ids: Tensor | None = None,
        unsqueeze_dim: int = 1,
    ) -> tuple[Tensor, Tensor]:
        c, s = compact((cos, sin), form)
        c, s = c.unsqueeze(unsqueeze_dim), s.unsqueeze(unsqueeze_dim)
        q, k = (x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2) for x in (q, k))
        return rotate_pair(q, k, c, s, c, s, layout="half", inplace=fresh(q, k), kernel=kernel)

    return apply_rotary_pos_emb_interleave


def _complex(layout: str, kernel: str, heads_dim: int) -> Rotation:
    """``apply_rotary_emb(xq, xk, freqs_cis)``: complex c + i·s (B, T, P), heads of q and k at
    dimension ``heads_dim`` (1: (B, H, T, D); 2: (B, T, H, D))."""

    def apply_rotary_emb(xq: Tensor, xk: Tensor, freqs_cis: Tensor) -> tuple[Tensor, Tensor]:
        c, s = compact(freqs_cis.to(xq.device), "complex")
        c, s = c.unsqueeze(heads_dim), s.unsqueeze(heads_dim)
        inplace = fresh(xq, xk)
        return rotate_pair(xq, xk, c, s, c, s, layout=layout, inplace=inplace, kernel=kernel)

    return apply_rotary_emb


def _one(form: Form, layout: str, trailing: bool = False) -> Rotation:
    """``apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1)`` rotating one tensor (Gemma 3n
    rotates q and k in separate calls), by posenc's eager kernel; ``trailing``: the rotated
    features are the last 2P of each head, [pass | rope] (DeepSeek-V4), not the first."""

    def apply_rotary_pos_emb(x: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> Tensor:
        c, s = compact((cos, sin), form)
        c, s = c.unsqueeze(unsqueeze_dim), s.unsqueeze(unsqueeze_dim)
        if not trailing:
            return apply_rope(x, c, s, layout=layout)
        R = 2 * c.shape[-1]
        kept, rotated = x[..., : x.shape[-1] - R], x[..., x.shape[-1] - R :]  # (.., D-R), (.., R)
        return torch.cat([kept, apply_rope(rotated, c, s, layout=layout)], dim=-1)

    return apply_rotary_pos_emb


def _optional_k(form: Form, layout: str, kernel: str) -> Rotation:
    """``apply_rotary_pos_emb(q, k=None, cos=None, sin=None, unsqueeze_dim=1)``: q and k, or q
    alone when k is None (Qwen4-Exp's block attention)."""
    pair = _pair(form, layout, kernel)
    one = _one(form, layout)

    def apply_rotary_pos_emb(
        q: Tensor,
        k: Tensor | None = None,
        cos: Tensor | None = None,
        sin: Tensor | None = None,
        unsqueeze_dim: int = 1,
    ) -> Any:
        if cos is None or sin is None:
            raise ValueError("apply_rotary_pos_emb needs cos and sin")
        if k is None:
            return one(q, cos, sin, unsqueeze_dim)
        return pair(q, k, cos, sin, unsqueeze_dim)

    return apply_rotary_pos_emb


def signature_kind(original: Rotation) -> str:
    """How a rotation function takes its tensors: "pair" (q, k, ...), "one" (x, cos, sin)
    or "optional_k" (q, k=None, cos=None, sin=None)."""
    try:
        params = list(inspect.signature(original).parameters.values())
    except (TypeError, ValueError):
        return "pair"
    if len(params) >= 3 and params[1].name == "cos":
        return "one"
    if len(params) >= 2 and params[1].default is None:
        return "optional_k"
    return "pair"


def _candidates(name: str, form: Form, layout: str, kernel: str) -> Iterator[tuple[Rotation, int]]:
    """posenc rotations that may stand for ``name``, each with where its heads sit (the layout
    ``layout`` first)."""
    layouts = (layout, "interleaved" if layout == "half" else "half")
    if name == "apply_rotary_pos_emb_interleave":
        yield _deinterleaving(form, kernel), 1
    elif name == "apply_rotary_emb":
        for heads_dim in (1, 2):
            for lay in layouts:
                yield _complex(lay, kernel, heads_dim), heads_dim
    else:
        for clockwise in (False, True):
            for lay in layouts:
                yield _pair(form, lay, kernel, clockwise), 1


def verified(
    name: str, original: Rotation, embeddings: Any, form: Form, layout: str, kernel: str
) -> Rotation:
    """The posenc rotation equal to ``original`` (transformers' function ``name``) on random q
    and k with ``embeddings`` (the form's output for positions (1, T)).

    Raises: ValueError when no variant equals it (a rotation posenc does not know).
    """
    cos = compact(embeddings, form)[0]  # (1, T, P)
    T, D = cos.shape[-2], 2 * cos.shape[-1] + _PASS
    g = torch.Generator().manual_seed(0)
    kind = signature_kind(original) if name == "apply_rotary_pos_emb" else "pair"
    if kind != "pair":
        return _verified_single(name, original, embeddings, form, layout, kernel, kind)
    for ours, heads_dim in _candidates(name, form, layout, kernel):
        shape_q = (1, 2, T, D) if heads_dim == 1 else (1, T, 2, D)
        shape_k = (1, 1, T, D) if heads_dim == 1 else (1, T, 1, D)
        q = torch.randn(shape_q, generator=g).to(cos.device)
        k = torch.randn(shape_k, generator=g).to(cos.device)
        args = (embeddings,) if form == "complex" else tuple(embeddings)
        try:
            theirs = original(q, k, *args)
        except RuntimeError:  # shapes of the other convention, or no pass-through features
            try:
                q, k = q[..., : D - _PASS], k[..., : D - _PASS]
                theirs = original(q, k, *args)
            except RuntimeError:
                continue
        mine = ours(q, k, *args)
        if all(
            torch.allclose(a, b, atol=1e-5, rtol=1e-5) for a, b in zip(mine, theirs, strict=True)
        ):
            return _shorter_q(name, original, ours, q, k, args, form, layout, kernel)
    raise ValueError(
        f"{name} of {getattr(original, '__module__', '?')} rotates q and k in a way posenc's "
        f"kernels do not reproduce (tried layouts half and interleaved, turned by +pos·θ and "
        "-pos·θ, the rotated features first in the head); patch with kernel=None to keep the "
        "model's own rotation"
    )


def _shorter_q(
    name: str,
    original: Rotation,
    ours: Rotation,
    q: Tensor,
    k: Tensor,
    args: tuple[Tensor, ...],
    form: Form,
    layout: str,
    kernel: str,
) -> Rotation:
    """``ours`` (verified on q and k of one length) where ``original`` refuses a q shorter
    than k, as Llama's does; where it rotates one (q at the last Tq positions of cos and sin:
    Muse Glimmer's assistant), the ``q_last`` variant of ``ours``'s layout and direction that
    equals it there.

    Raises: ValueError when none does."""
    if name != "apply_rotary_pos_emb" or form == "complex" or q.shape[2] < 2:
        return ours
    short = q[:, :, 1:].clone()  # (1, H, T - 1, D): the queries of the last T - 1 positions
    try:
        theirs = original(short.clone(), k.clone(), *args)
    except RuntimeError:  # q and cos of other lengths do not broadcast: the usual rotation
        return ours
    same = ours(q.clone(), k.clone(), *args)  # our rotations may write into their inputs
    for clockwise in (False, True):
        for lay in (layout, "interleaved" if layout == "half" else "half"):
            variant = _pair(form, lay, kernel, clockwise, q_last=True)
            full = variant(q.clone(), k.clone(), *args)
            mine = variant(short.clone(), k.clone(), *args)
            if all(
                torch.allclose(a, b, atol=1e-5, rtol=1e-5)
                for a, b in zip((*mine, *full), (*theirs, *same), strict=True)
            ):
                return variant
    raise ValueError(
        f"{name} of {getattr(original, '__module__', '?')} rotates a q shorter than k in a way "
        "posenc's kernels do not reproduce (tried q at the last positions of cos and sin); "
        "patch with kernel=None to keep the model's own rotation"
    )


def _verified_single(
    name: str, original: Rotation, embeddings: Any, form: Form, layout: str, kernel: str, kind: str
) -> Rotation:
    """``verified`` for rotations of one tensor at a time ("one", "optional_k"): q alone (and
    q with k for "optional_k") in either pair layout, heads at dimension 1 and 2."""
    cos, sin = embeddings
    P = compact(embeddings, form)[0].shape[-1]
    T = cos.shape[-2]
    g = torch.Generator().manual_seed(0)
    variants = [
        (lay, trailing)
        for lay in (layout, "interleaved" if layout == "half" else "half")
        for trailing in ((False, True) if kind == "one" else (False,))
    ]
    for lay, trailing in variants:
        ours = _one(form, lay, trailing) if kind == "one" else _optional_k(form, lay, kernel)
        agree = True
        for dim, shape in ((1, (1, 2, T, 2 * P + _PASS)), (2, (1, T, 2, 2 * P + _PASS))):
            x = torch.randn(shape, generator=g).to(cos.device)
            try:
                theirs = original(x, cos=cos, sin=sin, unsqueeze_dim=dim)
            except RuntimeError:  # a rotation of the whole head: no pass-through features
                x = x[..., : 2 * P]
                theirs = original(x, cos=cos, sin=sin, unsqueeze_dim=dim)
            agree &= torch.allclose(ours(x, cos=cos, sin=sin, unsqueeze_dim=dim), theirs, atol=1e-5)
            if kind == "optional_k":
                k = torch.randn(shape, generator=g).to(cos.device)
                pair_theirs = original(x, k, cos, sin, dim)
                pair_ours = ours(x, k, cos, sin, dim)
                agree &= all(
                    torch.allclose(a, b, atol=1e-5)
                    for a, b in zip(pair_ours, pair_theirs, strict=True)
                )
        if agree:
            return ours
    raise ValueError(
        f"{name} of {getattr(original, '__module__', '?')} rotates one tensor in a way posenc's "
        "kernels do not reproduce (tried layouts half and interleaved, the rotated features "
        "first or last in the head); patch with kernel=None to keep the model's own rotation"
    )


def single(original: Rotation) -> Rotation:
    """GPT-J / CodeGen's ``apply_rotary_pos_emb(x, sin, cos)`` (x (B, T, H, D); sin, cos
    (B, T, P), pairs interleaved) by posenc's eager kernel: those models rotate q and k in
    separate calls, which the fused kernels cannot pair."""

    def apply_rotary_pos_emb(x: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
        return apply_rope(x, cos[:, :, None, :], sin[:, :, None, :], layout="interleaved")

    g = torch.Generator().manual_seed(0)
    x, angles = torch.randn(1, 5, 2, 8, generator=g), torch.randn(1, 5, 4, generator=g)
    sin, cos = angles.sin(), angles.cos()
    if not torch.allclose(apply_rotary_pos_emb(x, sin, cos), original(x, sin, cos), atol=1e-5):
        raise ValueError(
            f"apply_rotary_pos_emb of {original.__module__} is not GPT-J's rotation; patch with "
            "kernel=None to keep it"
        )
    return apply_rotary_pos_emb


def install(module: nn.Module, replacements: dict[str, Rotation]) -> None:
    """Give ``module`` its own forward: its class's, reading ``replacements`` (name ->
    function) in place of its modeling module's functions of those names."""
    forward = type(module).forward
    namespace = {**forward.__globals__, **replacements}
    copy = types.FunctionType(
        forward.__code__, namespace, forward.__name__, forward.__defaults__, forward.__closure__
    )
    copy.__kwdefaults__ = forward.__kwdefaults__
    copy.__qualname__, copy.__doc__ = forward.__qualname__, forward.__doc__
    module.forward = types.MethodType(copy, module)


def uninstall(module: nn.Module) -> None:
    """Remove the forward ``install`` gave ``module`` (its class's applies again)."""
    module.__dict__.pop("forward", None)
