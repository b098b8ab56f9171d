"""What checks and plots run on: small encodings of one geometry, predicates that pick the
checks an encoding gets (from its family and the hooks it overrides), and attention weights.

Shapes: B batch, H heads, T length (Tq, Tk), D head dim, C model width.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from ..attention import Attention, TinyTransformer
from ..encodings.base import PositionalEncoding
from ..registry import build_for_model

#: The geometry every check and plot builds its encodings with.
D_MODEL, N_HEADS, MAX_LEN, VOCAB = 32, 4, 256, 32
HEAD_DIM = D_MODEL // N_HEADS


def subject(name: str, **config: object) -> PositionalEncoding:
    """Encoding ``name`` built for the shared geometry (extra ``config`` keys passed through)."""
    return build_for_model(name, dim=D_MODEL, n_heads=N_HEADS, max_len=MAX_LEN, **config)


def resolve(pe: PositionalEncoding | str) -> PositionalEncoding:
    """An encoding instance from an instance or a registered name."""
    if isinstance(pe, str):
        return subject(pe)
    if not isinstance(pe, PositionalEncoding):
        raise TypeError(f"expected a PositionalEncoding or a registered name, got {type(pe).__name__}")
    return pe


def overrides(pe: PositionalEncoding, hook: str) -> bool:
    """True when ``pe``'s class replaces the identity ``hook`` of the base class."""
    return getattr(type(pe), hook) is not getattr(PositionalEncoding, hook)


def is_additive(pe: PositionalEncoding) -> bool:
    return overrides(pe, "embed")


def is_rotary(pe: PositionalEncoding) -> bool:
    return overrides(pe, "rotate")


def has_bias(pe: PositionalEncoding) -> bool:
    return overrides(pe, "bias")


def is_parameter_free(pe: PositionalEncoding) -> bool:
    return not any(True for _ in pe.parameters())


def _scramble(model: nn.Module, pe: PositionalEncoding, seed: int) -> None:
    """Re-draw every non-encoding weight at a scale where attention is far from uniform, so a
    position effect is visible in float64 outputs (GPT-2's 0.02 std hides it)."""
    owned = {id(p) for p in pe.parameters()}
    gen = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        if id(p) not in owned and p.ndim == 2:
            p.data.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) / p.shape[-1] ** 0.25)


def tiny_model(pe: PositionalEncoding, *, causal: bool, seed: int = 0) -> TinyTransformer:
    """A float64 TinyTransformer around a private copy of ``pe`` (the caller's is untouched)."""
    pe = copy.deepcopy(pe)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = TinyTransformer(
            vocab_size=VOCAB, pe=pe, d_model=D_MODEL, n_heads=N_HEADS, causal=causal,
            max_len=MAX_LEN,
        )
    model = model.double().eval()
    _scramble(model, model.pe, seed)
    return model


def tiny_attention(pe: PositionalEncoding, *, causal: bool = True, seed: int = 0) -> Attention:
    """A float64 attention layer around a private copy of ``pe``."""
    pe = copy.deepcopy(pe)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        attn = Attention(D_MODEL, N_HEADS, pe=pe, causal=causal)
    attn = attn.double().eval()
    _scramble(attn, attn.pe, seed)
    return attn


def attention_weights(attn: Attention, x: Tensor, pos: Tensor) -> Tensor:
    """Softmax weights (B, H, T, T) that ``attn`` gives x (B, T, C) at positions pos.

    Calls the encoding's hooks in ``Attention``'s order (rotate, bias, causal mask,
    relative_logits); ``tests/analysis`` checks probs @ v against ``attn``'s own output.
    """
    q, k, _ = attn._project(x)  # (B, H, T, D), (B, Hkv, T, D)
    q, k = attn.pe.rotate(q, k, pos, pos)
    groups = attn.n_heads // attn.n_kv_heads
    k = k.repeat_interleave(groups, dim=1)  # (B, H, T, D)
    scores = q @ k.transpose(-2, -1) / attn.head_dim**0.5  # (B, H, T, T)
    bias = attn.pe.bias(pos, pos)
    scores = scores if bias is None else scores + bias
    if attn.causal:
        T = x.shape[1]
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    scores = attn.pe.relative_logits(scores, q, k, pos, pos)
    return torch.softmax(scores, dim=-1)
