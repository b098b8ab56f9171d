"""Encodings whose position comes from the data: forgetting attention (FoX), stick-breaking
attention and PaTH attention.

None of them reads position ids: order enters through the tokens themselves (a forget gate, a
stick broken nearest key first, Householder transforms), so each computes its layer's whole
causal attention from the layer's input x and its q, k, v (``PositionalEncoding.attention_form``,
dispatched by ``posenc.attention.Attention`` when ``capabilities.attention_form`` says so). The
formulas are ``posenc.functional``'s (blockwise, no (L, L) tensor); these modules add the
projections of x and what the KV cache must keep between steps (the ``terms``).

They are causal self-attention only (no encoder, no cross-attention, no sliding window or
chunk, no streaming cache, no learned sinks, no attention dropout: ``Attention`` refuses
those). Each layer needs its own module: the models build one per layer by name.

Shapes: B batch, H query heads, Hkv key/value heads, T new tokens, L keys (cached + new),
D head dim, C width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import functional as PF
from ..registry import register
from .base import AttentionInputs, PositionalEncoding
from .capabilities import Capabilities
from .configs import FoXConfig, PaTHConfig, StickBreakingConfig


def _all_terms(past: Tensor | None, new: Tensor) -> Tensor:
    """Terms (B, L, E) of every key: the cached ones (B, L - T, E), then this call's (B, T, E)."""
    return new if past is None else torch.cat([past.to(new.dtype), new], dim=1)


def _by_head(terms: Tensor, heads: int) -> Tensor:
    """(B, L, Hg) -> (B, heads, L): one column per head, or one shared by every head (Hg = 1)."""
    B, L, _ = terms.shape
    return terms.transpose(1, 2).expand(B, heads, L)


def _new_valid(inputs: AttentionInputs) -> Tensor:
    """(B, T, 1) float: 1 for this call's real tokens, 0 for padding."""
    T = inputs.x.shape[1]
    return inputs.valid[:, -T:, None].to(inputs.x.dtype)


@register("fox", family="data_dependent", paper="Lin et al., arXiv:2503.02130", year=2025)
class ForgettingAttention(PositionalEncoding):
    """Forgetting attention, FoX: softmax attention whose logits decay by a forget gate.

    Lin et al. 2025, arXiv:2503.02130, eq. 3-4:
    log f_t = logsigmoid(w_f·x_t + b_f) per head, s_ij = scale·q_i·k_j + Σ_(l=j+1..i) log f_l,
    o_i = Σ_(j<=i) softmax_j(s_ij) v_j (``posenc.functional.forgetting_attention``).

    ``gate`` (C -> n_heads) is w_f, b_f, in nn.Linear's default initialisation; n_heads = 1
    shares one gate by every head. A padding token's gate is 1 (log f = 0), so padding inside
    a row (right padding, then decoding) forgets nothing. The KV cache keeps each key's
    log f (terms (B, L, n_heads)).

    Shapes: x (B, T, C) -> log f (B, T, n_heads); ``attention_form`` as
    ``PositionalEncoding.attention_form``.
    Raises: ValueError (``attention_form``) when the attention has other than n_heads heads
    (or 1).
    """

    capabilities = Capabilities(attention_form=True)
    config_class = FoXConfig

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.gate = nn.Linear(self.dim, self.n_heads)  # w_f, b_f

    def attention_form(self, inputs: AttentionInputs) -> tuple[Tensor, Tensor]:
        """FoX's attention of the call and every key's log f (B, L, n_heads).

        Raises: ValueError when the attention has other than n_heads heads (or 1)."""
        q = inputs.q
        H = q.shape[1]
        if self.n_heads not in (1, H):
            raise ValueError(f"fox has {self.n_heads} gates; attention has {H} heads")
        new = F.logsigmoid(self.gate(inputs.x)) * _new_valid(inputs)  # (B, T, Hg)
        terms = _all_terms(inputs.past, new)  # (B, L, Hg)
        out = PF.forgetting_attention(
            q,
            inputs.k,
            inputs.v,
            _by_head(terms, H),
            scale=inputs.scale,
            segment_ids=inputs.segment_ids,
        )  # (B, H, T, D)
        return out, terms


@register(
    "stick_breaking", family="data_dependent", paper="Tan et al., arXiv:2410.17980", year=2024
)
class StickBreaking(PositionalEncoding):
    """Stick-breaking attention: each key breaks off a share of the stick, in place of softmax.

    Tan et al. 2024, arXiv:2410.17980, eq. 2-3: β_ij = σ(scale·q_i·k_j),
    A_ij = β_ij Π_(j<l<i) (1 - β_il), o_i = Σ_j A_ij v_j
    (``posenc.functional.stick_breaking_attention``); ``attend_current`` lets query i break
    the stick at its own key (j <= i). With ``remainder`` (default) what is left of the stick,
    rem_i = 1 - Σ_j A_ij, goes to the query's own value (o_i += rem_i v_i), so a row's weights
    sum to 1 and the first token of a sequence sees itself. No parameters and nothing cached
    beyond the keys (terms (B, L, 0)).

    Shapes: as ``PositionalEncoding.attention_form``.
    """

    capabilities = Capabilities(attention_form=True)
    config_class = StickBreakingConfig

    def attention_form(self, inputs: AttentionInputs) -> tuple[Tensor, Tensor]:
        """Stick-breaking attention of the call (plus the remainder), and no terms (B, L, 0)."""
        q, v = inputs.q, inputs.v
        B, H, T, _ = q.shape
        out, rem = PF.stick_breaking_attention(
            q,
            inputs.k,
            v,
            scale=inputs.scale,
            attend_current=self.attend_current,
            segment_ids=inputs.segment_ids,
        )  # (B, H, T, D), (B, H, T)
        if self.remainder:
            own = v[:, :, -T:].repeat_interleave(H // v.shape[1], dim=1)  # (B, H, T, D)
            out = out + rem[..., None] * own
        return out, inputs.x.new_zeros(B, inputs.k.shape[2], 0)


@register("path", family="data_dependent", paper="Yang et al., arXiv:2505.16381", year=2025)
class PaTH(PositionalEncoding):
    """PaTH attention: position as data-dependent Householder transforms between key and query.

    Yang et al. 2025, arXiv:2505.16381, sec. 3: per key head and token a Householder transform
    H_t = I - β_t w_t w_tᵀ,

    w_t = W_w x_t / |W_w x_t|,  β_t = 2σ(W_β x_t + b_β) in (0, 2),
    s_ij = scale · q_iᵀ H_i ··· H_(j+1) k_j (+ Σ_(l=j+1..i) log f_l with ``forget_gate``,
    PaTH-FoX), o_i = Σ_(j<=i) softmax_j(s_ij) v_j (``posenc.functional.path_attention``).

    ``w_proj`` (C -> Hkv·D, no bias) and ``beta_proj`` (C -> Hkv) read the layer's input
    directly (the paper's models add a short convolution and a low-rank W_w; posenc does
    not); ``gate`` (C -> n_heads) is the optional forget gate; nn.Linear's default
    initialisation. A padding token's β is 0 (H_t = I) and its gate 1. The KV cache keeps
    each key's w_t, β_t (and log f_t), and the key carried to the last token,
    H_(L-1) ··· H_(j+1) k_j, as the paper decodes (``PF.path_attention_cached``: a decode
    step applies its H_t to the carried keys once, O(L·D)): terms
    (B, L, Hkv·D + Hkv (+ H) + Hkv·D).

    Shapes: x (B, T, C) -> w (B, Hkv, T, D), β (B, Hkv, T), log f (B, H, T);
    ``attention_form`` as ``PositionalEncoding.attention_form``.
    Raises: ValueError (``attention_form``) for an attention of other heads, key heads or
    head dim than the module was built for.
    """

    capabilities = Capabilities(attention_form=True)
    config_class = PaTHConfig

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        Hkv, D = self.key_heads, self.head_dim
        self.w_proj = nn.Linear(self.dim, Hkv * D, bias=False)  # W_w
        self.beta_proj = nn.Linear(self.dim, Hkv)  # W_β, b_β
        self.gate: nn.Linear | None = (
            nn.Linear(self.dim, self.n_heads) if self.forget_gate else None
        )  # w_f, b_f

    def attention_form(self, inputs: AttentionInputs) -> tuple[Tensor, Tensor]:
        """PaTH's attention of the call and every key's w_t, β_t (and log f_t) as terms.

        Raises: ValueError for an attention of other heads, key heads or head dim than the
        module was built for."""
        q, k, x = inputs.q, inputs.k, inputs.x
        B, H, _, D = q.shape
        Hkv, L = k.shape[1], k.shape[2]
        if (Hkv, D, H) != (self.key_heads, self.head_dim, self.n_heads):
            raise ValueError(
                f"path was built for n_heads={self.n_heads}, n_kv_heads={self.key_heads}, "
                f"head_dim={self.head_dim}; attention has {H} heads, {Hkv} key heads of {D} "
                "(build it with the attention's n_kv_heads)"
            )
        T = x.shape[1]
        P = L - T  # cached tokens
        valid = _new_valid(inputs)  # (B, T, 1)
        w = F.normalize(self.w_proj(x).view(B, T, Hkv, D), dim=-1).flatten(2)  # (B, T, Hkv·D)
        beta = 2 * torch.sigmoid(self.beta_proj(x)) * valid  # (B, T, Hkv)
        parts = [w, beta]
        if self.gate is not None:
            parts.append(F.logsigmoid(self.gate(x)) * valid)  # (B, T, H)
        new = torch.cat(parts, dim=-1)  # (B, T, E - Hkv·D)
        past = inputs.past
        carried = None
        if past is not None:  # (B, P, E): each token's terms, then its key carried to P - 1
            carried = past[..., -Hkv * D :].to(k.dtype).reshape(B, P, Hkv, D).transpose(1, 2)
            new = torch.cat([past[..., : -Hkv * D].to(new.dtype), new], dim=1)  # (B, L, ...)
        log_f = None
        if self.gate is not None:
            log_f = _by_head(new[..., Hkv * D + Hkv :], H)  # (B, H, L)
        out, keys = PF.path_attention_cached(
            q,
            k[:, :, P:],
            inputs.v,
            w.reshape(B, T, Hkv, D).transpose(1, 2),  # (B, Hkv, T, D)
            beta.transpose(1, 2),  # (B, Hkv, T)
            log_f,
            carried=carried,
            scale=inputs.scale,
            segment_ids=inputs.segment_ids,
        )  # (B, H, T, D), every key carried to L - 1 (B, Hkv, L, D)
        return out, torch.cat([new, keys.transpose(1, 2).flatten(2).to(new.dtype)], dim=-1)
