"""Relative, rotary-variant and contextual encodings written from their papers, in float64 loops.

Shaw et al. 2018 (arXiv:1803.02155) eq. 3-6; Dai et al. 2019 (arXiv:1901.02860) sec. 3.3;
Sun et al. 2022 (arXiv:2212.10554) eq. 11; Gopalakrishnan et al. 2025 (arXiv:2509.10534) sec. 3;
Golovneva et al. 2024 (arXiv:2405.18719) eq. 3-5. Nothing here imports posenc.
"""

from __future__ import annotations

import math

import numpy as np


def _softmax(row: list[float]) -> list[float]:
    top = max(row)
    ex = [math.exp(z - top) if z != -math.inf else 0.0 for z in row]
    total = sum(ex)
    return [e / total for e in ex]


def shaw_attention(q, k, v, q_pos, k_pos, key_table, value_table, max_distance, causal=True):
    """z_i = Σ_j α_ij (v_j + a^V_ij), α = softmax_j(q_i·(k_j + a^K_ij)/sqrt(d)) per (b, h).

    a_ij = table[clip(j - i, -K, K) + K]; ``value_table`` None drops a^V. q, k, v (B, H, T, D);
    positions (B, T). Causal masks keys later in the sequence (by index).
    """
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    out = np.zeros((B, H, Tq, D))
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                rows, logits = [], []
                for j in range(Tk):
                    rel = int(k_pos[b, j]) - int(q_pos[b, i])
                    r = max(-max_distance, min(max_distance, rel)) + max_distance
                    rows.append(r)
                    visible = (not causal) or j <= i + (Tk - Tq)
                    dot = sum(q[b, h, i, d] * (k[b, h, j, d] + key_table[r, d]) for d in range(D))
                    logits.append(dot / math.sqrt(D) if visible else -math.inf)
                alpha = _softmax(logits)
                for j in range(Tk):
                    extra = 0.0 if value_table is None else value_table[rows[j]]
                    out[b, h, i] += alpha[j] * (v[b, h, j] + extra)
    return out


def sinusoid(p: float, dim: int, base: float = 10000.0) -> np.ndarray:
    """Vaswani's row for (relative) position p: sin at even features, cos at odd."""
    row = np.zeros(dim)
    for i in range(dim // 2):
        row[2 * i] = math.sin(p / base ** (2 * i / dim))
        row[2 * i + 1] = math.cos(p / base ** (2 * i / dim))
    return row


def transformer_xl_logits(q, k, q_pos, k_pos, r_proj, u, v, base=10000.0):
    """A_ij / sqrt(D), A_ij = q_i·k_j + q_i·W_R R_(i-j) + u·k_j + v·W_R R_(i-j), per (b, h).

    r_proj (H*D, C) maps the C-wide sinusoid R to the heads; u, v (H, D). Unmasked.
    """
    B, H, Tq, D = q.shape
    Tk, C = k.shape[2], r_proj.shape[1]
    out = np.zeros((B, H, Tq, Tk))
    for b in range(B):
        for h in range(H):
            w = r_proj[h * D : (h + 1) * D]  # (D, C)
            for i in range(Tq):
                for j in range(Tk):
                    r = w @ sinusoid(int(q_pos[b, i]) - int(k_pos[b, j]), C, base)  # (D,)
                    a = q[b, h, i] @ k[b, h, j] + q[b, h, i] @ r + u[h] @ k[b, h, j] + v[h] @ r
                    out[b, h, i, j] = a / math.sqrt(D)
    return out


def xpos_vector(x, position, sign, *, base=10000.0, scale_base=512.0, gamma=0.4, layout="half"):
    """Rotate x (D,) by RoPE at ``position``; scale pair i by ζ_i^(sign·position/scale_base)."""
    D = x.shape[0]
    out = np.array(x, dtype=np.float64)
    for i in range(D // 2):
        angle = position * base ** (-2 * i / D)
        zeta = (2 * i / D + gamma) / (1 + gamma)
        s = zeta ** (sign * position / scale_base)
        a, b = (i, i + D // 2) if layout == "half" else (2 * i, 2 * i + 1)
        out[a] = s * (x[a] * math.cos(angle) - x[b] * math.sin(angle))
        out[b] = s * (x[a] * math.sin(angle) + x[b] * math.cos(angle))
    return out


def pope_score(q, k, t, s, delta=None, base=10000.0):
    """Re[q̃_t^H k̃_s] = Σ_c softplus(q_c) softplus(k_c) cos((s - t) θ_c + δ_c), θ_c = base^(-c/D).

    q, k (D,) one query/key; ``delta`` (D,) or None.
    """
    D = q.shape[0]
    total = 0.0
    for c in range(D):
        mu_q, mu_k = math.log1p(math.exp(q[c])), math.log1p(math.exp(k[c]))
        d = 0.0 if delta is None else float(delta[c])
        total += mu_q * mu_k * math.cos((s - t) * base ** (-c / D) + d)
    return total


def cope_logits(q, logits, pos_emb):
    """z_ij + interpolated q_i·e[p_ij], p_ij = min(Σ_(t >= j) σ(z_it), P - 1), per (b, h).

    logits (B, H, Tq, Tk) with -inf for masked keys (their gate is 0); pos_emb (P, D).
    """
    B, H, Tq, Tk = logits.shape
    P = pos_emb.shape[0]
    out = np.array(logits, dtype=np.float64)
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                gates = [0.0 if z == -math.inf else 1 / (1 + math.exp(-z)) for z in logits[b, h, i]]
                for j in range(Tk):
                    p = min(sum(gates[j:]), P - 1)
                    lo, hi = math.floor(p), math.ceil(p)
                    w = p - lo
                    e = (1 - w) * (q[b, h, i] @ pos_emb[lo]) + w * (q[b, h, i] @ pos_emb[hi])
                    out[b, h, i, j] = logits[b, h, i, j] + e
    return out
