"""Dynamic methods (dynamic NTK, LongRoPE) during prefill and token-by-token decoding.

transformers recomputes the frequencies from max(position_ids) + 1 on every call and keeps the
keys it already rotated (posenc's "reference" KV policy); "rerotate" rotates the cached,
unrotated keys with the current frequencies, so decoding equals a fresh forward.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import posenc
from posenc.attention import Attention
from posenc.models import KVCache
from tests.extension._hf import FACTORS, ORIGINAL


def _scaling(name: str) -> dict[str, Any]:
    if name == "dynamic":
        return {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": ORIGINAL}
    return {"rope_type": "longrope", "factor": 8.0,
            "original_max_position_embeddings": ORIGINAL, **FACTORS}  # fmt: skip


def _decode(attn: Attention, x: torch.Tensor, prefill: int) -> torch.Tensor:
    """Outputs (1, T, C): a prefill of ``prefill`` tokens, then one token per call."""
    cache = KVCache()
    outs = [attn(x[:, :prefill], cache=cache)]
    outs += [attn(x[:, t : t + 1], cache=cache) for t in range(prefill, x.shape[1])]
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("name", ["dynamic", "longrope"])
def test_kv_policies_differ_exactly_past_the_original_length(name: str) -> None:
    """Below the original length both policies equal a fresh forward; past it only "rerotate"
    does: "reference" keeps keys rotated with the frequencies of the step that cached them."""
    torch.manual_seed(0)
    x = torch.randn(1, 3 * ORIGINAL, 64, dtype=torch.float64)
    outs = {}
    for policy in ("reference", "rerotate"):
        pe = posenc.build("rope", head_dim=32, scaling=_scaling(name), kv_policy=policy)
        torch.manual_seed(1)
        attn = Attention(64, 2, pe=pe, causal=True).double()
        fresh = torch.cat([attn(x[:, : t + 1])[:, -1:] for t in range(x.shape[1])], dim=1)
        outs[policy] = (_decode(attn, x, prefill=4), fresh)
    ref_out, fresh = outs["reference"]
    rerotate_out, fresh2 = outs["rerotate"]
    torch.testing.assert_close(fresh, fresh2)  # same weights, same encoding without a cache
    torch.testing.assert_close(rerotate_out, fresh, atol=1e-10, rtol=1e-10)
    inside = slice(0, ORIGINAL)
    torch.testing.assert_close(ref_out[:, inside], fresh[:, inside], atol=1e-10, rtol=1e-10)
    gap = (ref_out - fresh).abs().amax(dim=(0, 2))  # (T,)
    assert bool((gap[ORIGINAL + 1 :] > 1e-6).all()), gap


def test_reference_policy_caches_keys_rotated_at_their_own_step() -> None:
    """The "reference" cache holds key t rotated with the frequencies of length t + 1."""
    pe = posenc.build("rope", head_dim=32, scaling=_scaling("dynamic"))
    torch.manual_seed(1)
    attn = Attention(64, 2, pe=pe, causal=True).double()
    x = torch.randn(1, 2 * ORIGINAL, 64, dtype=torch.float64)
    cache = KVCache()
    for t in range(x.shape[1]):
        attn(x[:, t : t + 1], cache=cache)
    assert cache._store is not None
    cached = cache._store.k[:, :, : len(cache)]  # (1, Hkv, T, D)
    k_raw = attn._project(x)[1]  # (1, Hkv, T, D) unrotated
    for t in (0, ORIGINAL - 1, ORIGINAL, 2 * ORIGINAL - 1):
        want = pe.rotate_one(k_raw[:, :, t : t + 1], torch.tensor([t]), seq_len=t + 1)
        torch.testing.assert_close(cached[:, :, t : t + 1], want)


@pytest.mark.parametrize("name", ["dynamic", "longrope"])
def test_model_decoding_rerotate_vs_reference(name: str) -> None:
    """TinyTransformer decoding token by token past the original length. One layer: "rerotate"
    gives the full forward's logits exactly. Two layers: closer than "reference", not exact,
    since layer 2's cached keys/values come from layer-1 states computed at earlier lengths
    (a fresh forward recomputes them with the new frequencies)."""
    idx = torch.randint(0, 50, (1, 2 * ORIGINAL + 4))
    gaps = {}
    for n_layers in (1, 2):
        for policy in ("reference", "rerotate"):
            torch.manual_seed(3)
            model = posenc.TinyTransformer(
                vocab_size=50, pe="rope", d_model=64, n_heads=2, n_layers=n_layers,
                max_len=4 * ORIGINAL, pe_config={"scaling": _scaling(name), "kv_policy": policy},
            ).double()  # fmt: skip
            cache = model.new_cache()
            steps = [model(idx[:, :4], cache=cache)]
            steps += [model(idx[:, t : t + 1], cache=cache) for t in range(4, idx.shape[1])]
            full = [model(idx[:, : t + 1])[:, -1:] for t in range(idx.shape[1])]
            gap = (torch.cat(steps, dim=1) - torch.cat(full, dim=1)).abs().amax(dim=(0, 2))  # (T,)
            assert gap[:ORIGINAL].max() < 1e-12  # frequencies unchanged inside the context
            gaps[n_layers, policy] = gap[ORIGINAL + 1 :].max().item()
    assert gaps[1, "rerotate"] < 1e-12 < 1e-6 < gaps[1, "reference"]
    assert gaps[2, "rerotate"] < gaps[2, "reference"] / 3
