"""Shaw et al. 2018 and Transformer-XL against float64 loops written from the papers, through
the attention layer (causal/bidirectional, GQA, query blocks, per-row positions, KV cache),
against Hugging Face XLNet's relative attention core, and the attention call's shared rows."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc import Attention
from posenc import functional as PF
from posenc.models.kv_cache import KVCache

C, H = 24, 4
D = C // H


def _sinusoid(p: int, width: int, base: float = 10000.0) -> np.ndarray:
    """R_p of Vaswani et al.: sin(p / base^(2i/C)) at feature 2i, cos at 2i + 1."""
    row = np.zeros(width)
    for i in range(width // 2):
        row[2 * i] = math.sin(p / base ** (2 * i / width))
        row[2 * i + 1] = math.cos(p / base ** (2 * i / width))
    return row


def _attend(
    v: np.ndarray,
    allowed: np.ndarray,
    logit: Callable[[int, int, int, int], float],
    value: Callable[[int, int, int], np.ndarray] | None = None,
) -> np.ndarray:
    """z_bhi = Σ_j α_bhij (v_bhj + value(b, i, j)), α = softmax over allowed j of logit(b, h, i, j).

    v (B, H, Tk, D); allowed (B, Tq, Tk) bool -> (B, H, Tq, D)."""
    B, Hh, _, Dd = v.shape
    Tq, Tk = allowed.shape[1:]
    out = np.zeros((B, Hh, Tq, Dd))
    for b in range(B):
        for h in range(Hh):
            for i in range(Tq):
                row = [logit(b, h, i, j) if allowed[b, i, j] else -math.inf for j in range(Tk)]
                top = max(row)
                w = [math.exp(z - top) if z != -math.inf else 0.0 for z in row]
                for j in range(Tk):
                    extra = 0.0 if value is None else value(b, i, j)
                    out[b, h, i] += w[j] / sum(w) * (v[b, h, j] + extra)
    return out


def _shaw_reference(q, k, v, q_pos, k_pos, allowed, key_table, value_table, K):  # type: ignore[no-untyped-def]
    """Shaw et al. eq. 3-4: e_ij = q_i·(k_j + a^K_ij)/√d, z_i = Σ_j α_ij (v_j + a^V_ij),
    a_ij = w[clip(j - i, -K, K)] (stored at row clip + K)."""

    def row(b: int, i: int, j: int) -> int:
        return max(-K, min(K, int(k_pos[b, j]) - int(q_pos[b, i]))) + K

    def logit(b: int, h: int, i: int, j: int) -> float:
        return float(q[b, h, i] @ (k[b, h, j] + key_table[row(b, i, j)])) / math.sqrt(D)

    def value(b: int, i: int, j: int) -> np.ndarray:
        return value_table[row(b, i, j)]

    return _attend(v, allowed, logit, None if value_table is None else value)


def _txl_reference(q, k, v, q_pos, k_pos, allowed, r_proj, u, bias_v):  # type: ignore[no-untyped-def]
    """Dai et al. sec. 3.3: A_ij = q_i·k_j + q_i·W_R R_(i-j) + u·k_j + v·W_R R_(i-j), over √d."""

    def logit(b: int, h: int, i: int, j: int) -> float:
        r = r_proj[h * D : (h + 1) * D] @ _sinusoid(int(q_pos[b, i]) - int(k_pos[b, j]), C)
        qi, kj = q[b, h, i], k[b, h, j]
        return float(qi @ kj + qi @ r + u[h] @ kj + bias_v[h] @ r) / math.sqrt(D)

    return _attend(v, allowed, logit)


def _encoding(name: str) -> posenc.PositionalEncoding:
    configs = {
        "shaw": ("shaw", {"head_dim": D, "max_distance": 2}),
        "shaw_keys": ("shaw", {"head_dim": D, "max_distance": 3, "values": False}),
        "transformer_xl": ("transformer_xl", {"dim": C, "n_heads": H}),
    }
    kind, config = configs[name]
    pe = posenc.build(kind, **config).double()
    with torch.no_grad():
        for p in pe.parameters():
            p.normal_(std=0.5, generator=torch.Generator().manual_seed(5))
    return pe


POSITIONS = {
    "default": None,
    "per_row_offsets": torch.tensor([[3, 4, 5, 6, 7, 8, 9], [100, 101, 102, 103, 104, 105, 106]]),
    "arbitrary": torch.tensor([[0, 2, 4, 9, 11, 12, 30], [5, 3, 1, 0, 7, 7, 2]]),
}


@pytest.mark.parametrize("name", ["shaw", "shaw_keys", "transformer_xl"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("n_kv", "block", "positions", "prefill"),
    [
        (None, None, "default", None),
        (2, 2, "per_row_offsets", None),  # GQA, query blocks, per-row offsets
        (4, 3, "arbitrary", None),  # positions in any order: offsets come from the ids
        (2, None, "per_row_offsets", 3),  # prefill 3, then T = 1 decode steps (Tq != Tk)
        (None, 2, "arbitrary", 4),
    ],
)
def test_layer_equals_the_papers_formulas(
    name: str,
    causal: bool,
    n_kv: int | None,
    block: int | None,
    positions: str,
    prefill: int | None,
) -> None:
    torch.manual_seed(0)
    pe = _encoding(name)
    attn = Attention(C, H, pe=pe, causal=causal, n_kv_heads=n_kv, block_size=block).double()
    B, T = 2, 7
    x = torch.randn(B, T, C, dtype=torch.float64)
    pos = POSITIONS[positions]
    with torch.no_grad():
        if prefill is None:
            got = attn(x, pos)
        else:
            cache = KVCache()
            steps = [attn(x[:, :prefill], None if pos is None else pos[:, :prefill], cache=cache)]
            for t in range(prefill, T):
                step_pos = None if pos is None else pos[:, t : t + 1]
                steps.append(attn(x[:, t : t + 1], step_pos, cache=cache))
            got = torch.cat(steps, dim=1)
        q, k, v = attn._project(x)
    groups = H // k.shape[1]
    q, k, v = (
        q.numpy(),
        k.repeat_interleave(groups, 1).numpy(),
        v.repeat_interleave(groups, 1).numpy(),
    )
    p = (torch.arange(T).expand(B, T) if pos is None else pos).numpy()
    order = np.arange(T)
    if causal:  # by order in the sequence/cache
        allowed = order[None, :] <= order[:, None]
    elif prefill is not None:  # a decode step sees the cache so far
        allowed = order[None, :] <= np.maximum(order[:, None], prefill - 1)
    else:
        allowed = np.ones((T, T), dtype=bool)
    allowed = np.broadcast_to(allowed, (B, T, T))
    if name == "transformer_xl":
        params = (p_.detach().numpy() for p_ in (pe.r_proj, pe.u, pe.v))
        heads = _txl_reference(q, k, v, p, p, allowed, *params)
    else:
        table_v = None if pe.value_table is None else pe.value_table.detach().numpy()
        K = pe.max_distance
        heads = _shaw_reference(q, k, v, p, p, allowed, pe.key_table.detach().numpy(), table_v, K)
    want = heads.transpose(0, 2, 1, 3).reshape(B, T, C) @ attn.proj.weight.detach().numpy().T
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize(
    ("attn_type", "qlen", "mlen"), [("bi", 5, 0), ("uni", 5, 0), ("bi", 3, 4), ("uni", 1, 6)]
)
def test_transformer_xl_equals_xlnet_relative_attention(
    attn_type: str, qlen: int, mlen: int
) -> None:
    """Hugging Face XLNet's ``rel_attn_core`` (Transformer-XL's terms (a)-(d) with its relative
    shift, u = r_w_bias, v = r_r_bias, memory of ``mlen`` keys before the queries) gives the
    same attention weights; its [sin | cos] position columns are posenc's interleaved ones."""
    xlnet = pytest.importorskip("transformers.models.xlnet.modeling_xlnet")
    from transformers import XLNetConfig

    B, Hh, Dd, width = 2, 3, 4, 12
    klen = qlen + mlen
    config = XLNetConfig(d_model=width, n_head=Hh, d_inner=16, attn_type=attn_type, dropout=0.0)
    config.d_head = Dd
    layer = xlnet.XLNetRelativeAttention(config).double().eval()
    g = torch.Generator().manual_seed(0)
    r_proj = torch.randn(Hh * Dd, width, generator=g, dtype=torch.float64)  # posenc W_R
    u, v = (torch.randn(Hh, Dd, generator=g, dtype=torch.float64) for _ in range(2))
    q = torch.randn(qlen, B, Hh, Dd, generator=g, dtype=torch.float64)  # XLNet: (T, B, H, D)
    k = torch.randn(klen, B, Hh, Dd, generator=g, dtype=torch.float64)
    # XLNet's R: offsets klen, klen - 1, ..., down to -qlen + 1 ("bi") or 0 ("uni"), in float64
    end = -qlen if attn_type == "bi" else -1
    inv_freq = 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)
    pos_emb = xlnet.XLNetModel.positional_embedding(
        torch.arange(klen, end, -1, dtype=torch.float64), inv_freq
    )  # (R, 1, C)
    w_x = torch.cat([r_proj[:, 0::2], r_proj[:, 1::2]], dim=1).T.reshape(width, Hh, Dd)
    k_r = torch.einsum("ibc,cnd->ibnd", pos_emb, w_x)
    mask = None
    if attn_type == "uni":  # 1 = masked
        mask = torch.ones(qlen, klen, dtype=torch.float64).triu(1 + mlen)[:, :, None, None]
    with torch.no_grad():
        layer.r_w_bias.copy_(u)
        layer.r_r_bias.copy_(v)
        _, want = layer.rel_attn_core(q, k, k, k_r, attn_mask=mask, output_attentions=True)
    want = want.permute(2, 3, 0, 1)  # (B, H, Tq, Tk)

    pe = posenc.build("transformer_xl", dim=width, n_heads=Hh, head_dim=Dd).double()
    with torch.no_grad():
        pe.r_proj.copy_(r_proj)
        pe.u.copy_(u)
        pe.v.copy_(v)
    qb, kb = q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3)  # (B, H, T, D)
    scores = qb @ kb.transpose(-2, -1) / math.sqrt(Dd)
    if mask is not None:
        scores = scores.masked_fill(mask[:, :, 0, 0].bool(), float("-inf"))
    logits = pe.relative_logits(scores, qb, kb, torch.arange(mlen, klen), torch.arange(klen))
    torch.testing.assert_close(torch.softmax(logits, dim=-1), want, rtol=1e-12, atol=1e-13)


def test_transformer_xl_call_rows_span_each_rows_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Query blocks share W_R R over the forward's offsets (built once); rows at far-apart
    positions (two documents continued at 0 and 200000) need offsets -7..7, not the 400015
    between them."""
    spans: list[tuple[int, int]] = []
    rows = PF.transformer_xl_position_rows

    def spy(lo: int, hi: int, **kwargs: object) -> torch.Tensor:
        spans.append((lo, hi))
        return rows(lo, hi, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PF, "transformer_xl_position_rows", spy)
    torch.manual_seed(0)
    pe = _encoding("transformer_xl")
    attn = Attention(C, H, pe=pe, causal=False, block_size=4).double()
    x = torch.randn(2, 8, C, dtype=torch.float64)
    pos = torch.arange(8).expand(2, 8) + torch.tensor([[0], [200_000]])
    with torch.no_grad():
        got = attn(x, pos)
        attn.block_size = None  # one block
        want = attn(x, pos)
    assert spans == [(-7, 7), (-7, 7)]  # once per forward
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["shaw", "transformer_xl"])
def test_relative_values_use_the_dropped_weights(name: str) -> None:
    """With attention dropout, Shaw's a^V term is weighted by the same dropped α as v_j."""
    torch.manual_seed(0)
    pe = _encoding(name)
    attn = Attention(C, H, pe=pe, causal=True, dropout=0.5).double().train()
    x = torch.randn(2, 6, C, dtype=torch.float64)
    pos = torch.arange(6)
    torch.manual_seed(7)
    got = attn(x, pos)
    q, k, v = attn._project(x)
    scores = (q / math.sqrt(D)) @ k.transpose(-2, -1)
    scores = scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
    probs = torch.softmax(pe.relative_logits(scores, q, k, pos, pos), dim=-1)
    torch.manual_seed(7)
    dropped = F.dropout(probs, 0.5, True)
    extra = pe.relative_values(dropped, pos, pos)
    heads = dropped @ v + (0 if extra is None else extra)
    want = attn.proj(heads.transpose(1, 2).reshape(2, 6, C))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert (dropped == 0).any()  # dropout did act
