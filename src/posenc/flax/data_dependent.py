"""Flax encodings whose position comes from the data: forgetting attention (FoX), stick-breaking
attention and PaTH attention, as torch's ``posenc.encodings.data_dependent`` (same arguments and
parameter names).

None reads position ids: each computes its layer's whole causal attention from the layer's
input x and its q, k, v, by the formulas of ``posenc.functional`` (blockwise, no (L, L)
tensor). ``attention_terms`` projects x to what the KV cache keeps of each key (its
``terms``); ``attention_form`` attends with every key's terms. ``Attention`` calls both in
place of the rotation, mask and softmax, and refuses what they cannot be (bidirectional, a
sliding window or chunk, attention dropout). Each layer needs its own module: the models
build one per layer by name.

Shapes: B batch, H query heads, Hkv key/value heads, T new tokens, L keys (cached + new; the
new ones last), D head dim, C width, E the terms' width.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from .. import functional as PF
from ..encodings import configs
from .base import PositionalEncoding, PositionState, register
from .bias import torch_linear

Array = jax.Array


def by_head(terms: Array, heads: int) -> Array:
    """(B, L, Hg) -> (B, heads, L): one column per head, or one shared by every head (Hg = 1)."""
    B, L, _ = terms.shape
    return jnp.broadcast_to(terms.swapaxes(1, 2), (B, heads, L))


class DataDependent(PositionalEncoding[PositionState]):
    """An encoding computing the whole causal attention from the data (torch's
    ``capabilities.attention_form``): position hooks the identity, attention by
    ``attention_terms`` and ``attention_form``."""

    computes_attention: ClassVar[bool] = True

    def attention_terms(self, x: Array, valid: Array) -> Array:
        """The terms (B, T, E) of this call's tokens x (B, T, C); ``valid`` (B, T) bool, False
        for padding (whose terms leave the others unchanged)."""
        return jnp.zeros((*x.shape[:2], 0), x.dtype)

    def attention_form(
        self, q: Array, k: Array, v: Array, terms: Array, segment_ids: Array, scale: float
    ) -> Array:
        """The attention (B, H, T, D) of queries q (B, H, T, D), the last T of the L keys k, v
        (B, Hkv, L, D) with their ``terms`` (B, L, E); ``segment_ids`` (B, L), padding in a
        segment of its own; ``scale`` the logits' 1/√D."""
        raise NotImplementedError


@register(configs.FoXConfig)
class ForgettingAttention(DataDependent):
    """As torch's ``ForgettingAttention`` (Lin et al. 2025, arXiv:2503.02130, eq. 3-4):
    log f_t = logsigmoid(w_f·x_t + b_f) per head, s_ij = scale·q_i·k_j + Σ_(l=j+1..i) log f_l
    (``PF.forgetting_attention``). ``gate`` (C -> n_heads) is w_f, b_f, initialised as torch's
    nn.Linear; n_heads = 1 shares one gate. Terms: each key's log f (B, L, n_heads).

    Shapes: x (B, T, C) -> log f (B, T, n_heads).
    Raises: ValueError (``attention_form``) when the attention has other than n_heads heads
    (or 1)."""

    config: configs.FoXConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        self.gate = torch_linear(self.config.dim, self.config.n_heads, rngs)  # w_f, b_f

    def attention_terms(self, x: Array, valid: Array) -> Array:
        return jax.nn.log_sigmoid(self.gate(x)) * valid[..., None].astype(x.dtype)  # (B, T, Hg)

    def attention_form(
        self, q: Array, k: Array, v: Array, terms: Array, segment_ids: Array, scale: float
    ) -> Array:
        H = q.shape[1]
        if self.config.n_heads not in (1, H):
            raise ValueError(f"fox has {self.config.n_heads} gates; attention has {H} heads")
        out: Array = PF.forgetting_attention(
            q, k, v, by_head(terms.astype(q.dtype), H), scale=scale, segment_ids=segment_ids
        )
        return out  # (B, H, T, D)


@register(configs.StickBreakingConfig)
class StickBreaking(DataDependent):
    """As torch's ``StickBreaking`` (Tan et al. 2024, arXiv:2410.17980, eq. 2-3): β_ij =
    σ(scale·q_i·k_j), A_ij = β_ij Π_(j<l<i) (1 - β_il) (``PF.stick_breaking_attention``);
    with ``remainder`` what is left of the stick goes to the query's own value. No parameters
    and no terms (B, L, 0).

    Shapes: as ``DataDependent.attention_form``."""

    config: configs.StickBreakingConfig

    def attention_form(
        self, q: Array, k: Array, v: Array, terms: Array, segment_ids: Array, scale: float
    ) -> Array:
        H, T = q.shape[1], q.shape[2]
        out, rem = PF.stick_breaking_attention(
            q,
            k,
            v,
            scale=scale,
            attend_current=self.config.attend_current,
            segment_ids=segment_ids,
        )  # (B, H, T, D), (B, H, T)
        if self.config.remainder:
            own = jnp.repeat(v[:, :, -T:], H // v.shape[1], axis=1)  # (B, H, T, D)
            out = out + rem[..., None] * own
        result: Array = out
        return result


@register(configs.PaTHConfig)
class PaTH(DataDependent):
    """As torch's ``PaTH`` (Yang et al. 2025, arXiv:2505.16381, sec. 3): per key head and token
    a Householder transform H_t = I - β_t w_t w_tᵀ, w_t = W_w x_t / |W_w x_t|, β_t = 2σ(W_β x_t
    + b_β), s_ij = scale · q_iᵀ H_i ··· H_(j+1) k_j (+ Σ log f with ``forget_gate``)
    (``PF.path_attention``). ``w_proj`` (C -> Hkv·D, no bias), ``beta_proj`` (C -> Hkv),
    ``gate`` (C -> n_heads, optional); a padding token's β is 0 and its gate 1. Terms: each
    key's w_t, β_t (and log f_t): (B, L, Hkv·D + Hkv (+ H)).

    Shapes: x (B, T, C) -> terms (B, T, E).
    Raises: ValueError (``attention_form``) for an attention of other heads, key heads or
    head dim than the module was built for."""

    config: configs.PaTHConfig

    def setup(self, rngs: nnx.Rngs) -> None:
        c = self.config
        Hkv, D = c.key_heads, c.head_dim
        self.w_proj = torch_linear(c.dim, Hkv * D, rngs, use_bias=False)  # W_w
        self.beta_proj = torch_linear(c.dim, Hkv, rngs)  # W_β, b_β
        self.gate = torch_linear(c.dim, c.n_heads, rngs) if c.forget_gate else None  # w_f, b_f

    def attention_terms(self, x: Array, valid: Array) -> Array:
        c = self.config
        B, T, _ = x.shape
        Hkv, D = c.key_heads, c.head_dim
        mask = valid[..., None].astype(x.dtype)  # (B, T, 1)
        w = self.w_proj(x).reshape(B, T, Hkv, D)
        norm = jnp.sqrt(jnp.sum(w * w, axis=-1, keepdims=True))
        w = (w / jnp.maximum(norm, 1e-12)).reshape(B, T, Hkv * D)  # as torch's F.normalize
        parts = [w, 2 * jax.nn.sigmoid(self.beta_proj(x)) * mask]  # (B, T, Hkv·D), (B, T, Hkv)
        if self.gate is not None:
            parts.append(jax.nn.log_sigmoid(self.gate(x)) * mask)  # (B, T, H)
        return jnp.concatenate(parts, axis=-1)  # (B, T, E)

    def attention_form(
        self, q: Array, k: Array, v: Array, terms: Array, segment_ids: Array, scale: float
    ) -> Array:
        c = self.config
        B, H, _, D = q.shape
        Hkv, L = k.shape[1], k.shape[2]
        if (Hkv, D, H) != (c.key_heads, c.head_dim, c.n_heads):
            raise ValueError(
                f"path was built for n_heads={c.n_heads}, n_kv_heads={c.key_heads}, "
                f"head_dim={c.head_dim}; attention has {H} heads, {Hkv} key heads of {D} "
                "(build it with the attention's n_kv_heads)"
            )
        terms = terms.astype(q.dtype)
        w = terms[..., : Hkv * D].reshape(B, L, Hkv, D).swapaxes(1, 2)  # (B, Hkv, L, D)
        beta = terms[..., Hkv * D : Hkv * D + Hkv].swapaxes(1, 2)  # (B, Hkv, L)
        log_f = None if self.gate is None else by_head(terms[..., Hkv * D + Hkv :], H)
        out: Array = PF.path_attention(
            q, k, v, w, beta, log_f, scale=scale, segment_ids=segment_ids
        )
        return out  # (B, H, T, D)
