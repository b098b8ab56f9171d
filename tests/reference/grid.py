"""Grid encodings written from their papers and released code, in float64 loops:

- axial RoPE and RoPE-Mixed: Heo et al. 2024, arXiv:2403.13298, eq. 12-14 and their code
  (``compute_axial_cis``, ``init_random_2d_freqs``, ``compute_mixed_cis``: complex pairs
  (2j, 2j + 1), the column x before the row y);
- M-RoPE: Wang et al. 2024, arXiv:2409.12191, sec. 2.1 (``mrope_section`` as Qwen2-VL's
  config; Qwen3-VL's interleaved sections as its modeling code describes them);
- MAE's 2-D sin-cos table: He et al. 2022, arXiv:2111.06377, ``get_2d_sincos_pos_embed``.
"""

from __future__ import annotations

import cmath
import math

import numpy as np


def _rotate_pair(v: np.ndarray, a: int, b: int, angle: float) -> None:
    """Turn the features (a, b) of v by ``angle`` in place (a 2x2 rotation)."""
    c, s = math.cos(angle), math.sin(angle)
    v[a], v[b] = v[a] * c - v[b] * s, v[a] * s + v[b] * c


def rotate_pairs(x: np.ndarray, angles: np.ndarray, layout: str) -> np.ndarray:
    """x (..., D) with angles broadcastable to (..., P): pair p is (p, p + P) ("half") or
    (2p, 2p + 1) ("interleaved")."""
    out = np.array(x, dtype=np.float64)
    P = angles.shape[-1]
    angles = np.broadcast_to(angles, (*out.shape[:-1], P))
    for idx in np.ndindex(*out.shape[:-1]):
        for p in range(P):
            a, b = (p, p + P) if layout == "half" else (2 * p, 2 * p + 1)
            _rotate_pair(out[idx], a, b, float(angles[idx][p]))
    return out


def axial_angles(pos: np.ndarray, sections: tuple[int, ...], base: float) -> np.ndarray:
    """Angles (T, P) at grid positions pos (T, A): axis a's s_a pairs turn by pos[a]·θ_j,
    θ_j = base^(-2j/(2 s_a)), the axes one after the other."""
    T = pos.shape[0]
    out = np.zeros((T, sum(sections)))
    for t in range(T):
        p = 0
        for a, s in enumerate(sections):
            for j in range(s):
                out[t, p] = float(pos[t, a]) * base ** (-2 * j / (2 * s))
                p += 1
    return out


def heo_axial(x: np.ndarray, t_x: np.ndarray, t_y: np.ndarray, theta: float = 100.0) -> np.ndarray:
    """Heo et al.'s RoPE-Axial on x (T, D): freqs θ_j = theta^(-4j/D), j < D/4; complex pair
    j (features 2j, 2j + 1) turns by t_x·θ_j for j < D/4, pair D/4 + j by t_y·θ_j."""
    T, D = x.shape
    freqs = [theta ** (-(4 * j) / D) for j in range(D // 4)]
    out = np.empty((T, D))
    for t in range(T):
        z = [complex(x[t, 2 * p], x[t, 2 * p + 1]) for p in range(D // 2)]
        phases = [t_x[t] * f for f in freqs] + [t_y[t] * f for f in freqs]
        for p in range(D // 2):
            w = z[p] * cmath.exp(1j * phases[p])
            out[t, 2 * p], out[t, 2 * p + 1] = w.real, w.imag
    return out


def heo_mixed_freqs(phases: np.ndarray, D: int, theta: float = 10.0) -> np.ndarray:
    """``init_random_2d_freqs`` with the given per-head phases: (2, H, D/2), [x freqs, y freqs],
    each head [mag·cos φ, mag·cos(φ + π/2)] (x) and [mag·sin φ, mag·sin(φ + π/2)] (y)."""
    mag = [1.0 / theta ** (4 * j / D) for j in range(D // 4)]
    fx, fy = [], []
    for phi in phases:
        fx.append([m * math.cos(phi) for m in mag] + [m * math.cos(math.pi / 2 + phi) for m in mag])
        fy.append([m * math.sin(phi) for m in mag] + [m * math.sin(math.pi / 2 + phi) for m in mag])
    return np.array([fx, fy])


def heo_mixed(x: np.ndarray, t_x: np.ndarray, t_y: np.ndarray, freqs: np.ndarray) -> np.ndarray:
    """RoPE-Mixed (eq. 14) on x (H, T, D) with freqs (2, H, D/2): complex pair p of head h turns
    by t_x·F_x[h, p] + t_y·F_y[h, p]."""
    H, T, D = x.shape
    out = np.empty((H, T, D))
    for h in range(H):
        for t in range(T):
            for p in range(D // 2):
                phase = t_x[t] * freqs[0, h, p] + t_y[t] * freqs[1, h, p]
                w = complex(x[h, t, 2 * p], x[h, t, 2 * p + 1]) * cmath.exp(1j * phase)
                out[h, t, 2 * p], out[h, t, 2 * p + 1] = w.real, w.imag
    return out


def mrope_angles(
    pos: np.ndarray, section: tuple[int, int, int], base: float, *, interleaved: bool = False
) -> np.ndarray:
    """M-RoPE angles (T, P) at positions pos (T, 3) = (t, h, w): θ_p = base^(-2p/D), D = 2P.
    Contiguous: the first s_t pairs read t, the next s_h read h, the last s_w read w.
    Interleaved (Qwen3-VL): pair p reads h when p % 3 == 1 and p < 3·s_h, w when p % 3 == 2
    and p < 3·s_w, else t."""
    P = sum(section)
    out = np.zeros((pos.shape[0], P))
    for p in range(P):
        if interleaved:
            axis = (
                1
                if p % 3 == 1 and p < 3 * section[1]
                else 2
                if p % 3 == 2 and p < 3 * section[2]
                else 0
            )
        else:
            axis = 0 if p < section[0] else 1 if p < section[0] + section[1] else 2
        for t in range(pos.shape[0]):
            out[t, p] = float(pos[t, axis]) * base ** (-2 * p / (2 * P))
    return out


def mae_sincos_2d(embed_dim: int, grid_size: int) -> np.ndarray:
    """MAE's ``get_2d_sincos_pos_embed(embed_dim, grid_size)`` (no cls token): patch n = i·W + j
    gets [sin(j ω), cos(j ω), sin(i ω), cos(i ω)], ω_k = 10000^(-k/(D/4)): its meshgrid puts the
    column j ("w goes first") in the first half."""
    out = np.zeros((grid_size * grid_size, embed_dim))
    quarter = embed_dim // 4
    for i in range(grid_size):
        for j in range(grid_size):
            row = []
            for coord in (j, i):
                omegas = [1.0 / 10000 ** (k / quarter) for k in range(quarter)]
                row += [math.sin(coord * w) for w in omegas] + [math.cos(coord * w) for w in omegas]
            out[i * grid_size + j] = row
    return out
