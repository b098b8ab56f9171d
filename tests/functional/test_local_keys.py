"""``functional.masks.local_keys`` (sliding windows and chunks) and ``allowed_keys`` with it:
against loops written from the rule and against transformers' mask overlays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.functional.masks import allowed_keys, local_keys


def _loops(q_pos: np.ndarray, k_pos: np.ndarray, window: int | None, chunk: int | None):
    """The rule, one entry at a time: |p_i - p_j| < W and p_i // C == p_j // C."""
    B, T = q_pos.shape
    out = np.zeros((B, 1, T, k_pos.shape[1]), dtype=bool)
    for b in range(B):
        for i in range(T):
            for j in range(k_pos.shape[1]):
                p, r = int(q_pos[b, i]), int(k_pos[b, j])
                ok = window is None or abs(p - r) < window
                out[b, 0, i, j] = ok and (chunk is None or p // chunk == r // chunk)
    return out


@pytest.mark.parametrize(("window", "chunk"), [(3, None), (None, 4), (5, 3), (1, None)])
def test_local_keys_equal_the_rule(window: int | None, chunk: int | None) -> None:
    rng = np.random.default_rng(0)
    q_pos, k_pos = rng.integers(0, 20, (2, 6)), rng.integers(0, 20, (2, 9))
    got = local_keys(torch.tensor(q_pos), torch.tensor(k_pos), window=window, chunk=chunk)
    np.testing.assert_array_equal(got.numpy(), _loops(q_pos, k_pos, window, chunk))
    jnp = pytest.importorskip("jax.numpy")
    got_jax = local_keys(jnp.asarray(q_pos), jnp.asarray(k_pos), window=window, chunk=chunk)
    np.testing.assert_array_equal(np.asarray(got_jax), _loops(q_pos, k_pos, window, chunk))


def test_causal_masks_equal_transformers_overlays() -> None:
    """transformers' sliding-window and chunked causal masks (cache indices; chunks less each
    row's left padding) equal ``allowed_keys`` with ``local_keys`` at posenc's positions."""
    mu = pytest.importorskip("transformers.masking_utils")
    T, W, C = 11, 4, 3
    pad = torch.tensor([0, 3])  # row 1 left-padded by 3
    valid = torch.arange(T)[None, :] >= pad[:, None]  # (B, T)
    pos = (valid.long().cumsum(-1) - 1).clamp(min=0)  # posenc.positions_from_padding
    seg = torch.zeros(2, T, dtype=torch.long)
    b, q, kv = torch.arange(2)[:, None, None], torch.arange(T)[None, :, None], torch.arange(T)
    for window, chunk, hf in (
        (W, None, mu.sliding_window_causal_mask_function(W)),
        (None, C, mu.chunked_causal_mask_function(C, pad)),
    ):
        local = local_keys(pos, pos, window=window, chunk=chunk)
        ours = allowed_keys(valid, seg, seg, causal=True, local=local)[:, 0]  # (B, T, T)
        theirs = hf(b, 0, q, kv[None, None, :]) & valid[:, None, :]
        real = valid[:, :, None].expand(-1, -1, T)  # padding queries see every key in posenc
        assert torch.equal(ours[real], theirs.expand(2, T, T)[real])


def test_local_keys_refuse_grid_positions() -> None:
    with pytest.raises(ValueError, match="one axis"):
        local_keys(
            torch.zeros(1, 3, 2, dtype=torch.long), torch.zeros(1, 3, 2), window=2, chunk=None
        )
