"""Dynamic methods (dynamic NTK, LongRoPE) during prefill and token-by-token decoding.

transformers recomputes the frequencies from max(position_ids) + 1 on every call and keeps the
keys it already rotated (posenc's "reference" KV policy); "rerotate" rotates the cached,
unrotated keys with the current frequencies, so decoding equals a fresh forward.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import posenc
from posenc.attention import Attention, KVCache

ORIGINAL = 16
_rng = np.random.default_rng(1)
FACTORS = {
    "short_factor": (1 + 0.2 * _rng.random(16)).tolist(),
    "long_factor": (1 + 8 * _rng.random(16)).tolist(),
}
CONFIGS: dict[str, dict[str, Any]] = {
    "dynamic": {
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 2,
        "intermediate_size": 32, "num_hidden_layers": 1, "max_position_embeddings": ORIGINAL,
        "rope_scaling": {"type": "dynamic", "factor": 4.0},
    },
    "longrope": {
        "model_type": "phi3", "hidden_size": 64, "num_attention_heads": 2,
        "intermediate_size": 32, "num_hidden_layers": 1, "max_position_embeddings": 8 * ORIGINAL,
        "original_max_position_embeddings": ORIGINAL,
        "rope_scaling": {"type": "longrope", **FACTORS},
    },
}  # fmt: skip
# Calls of one session: prefill inside the context, decode across it, then a new, shorter prompt.
SCHEDULE = [list(range(12))] + [[t] for t in range(12, 40)] + [list(range(8))]


def _scaling(name: str) -> dict[str, Any]:
    if name == "dynamic":
        return {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": ORIGINAL}
    return {"rope_type": "longrope", "factor": 8.0,
            "original_max_position_embeddings": ORIGINAL, **FACTORS}  # fmt: skip


@pytest.mark.anchor
@pytest.mark.parametrize("name", list(CONFIGS))
def test_decoding_equals_transformers_step_by_step(name: str) -> None:
    """Same rotated q/k, and the same logits against each side's own cache, at every step."""
    pytest.importorskip("transformers")
    from tests.extension._hf import hf_rotary, hf_rotate

    rotary, apply = hf_rotary(CONFIGS[name])  # one stateful module, as in a model
    pe = posenc.rope_from_hf(CONFIGS[name])
    g = torch.Generator().manual_seed(0)
    ours_cache: list[torch.Tensor] = []
    theirs_cache: list[torch.Tensor] = []
    for step, positions in enumerate(SCHEDULE):
        pos = torch.tensor(positions)
        if positions[0] == 0:  # a new prompt: both caches restart
            ours_cache, theirs_cache = [], []
        q, k = torch.randn(2, 1, 2, len(pos), 32, generator=g).unbind(0)
        oq, ok = pe.rotate(q, k, pos, pos)
        hq, hk = hf_rotate(rotary, apply, q, k, pos)
        torch.testing.assert_close(oq, hq, atol=2e-5, rtol=1e-5, msg=f"step {step}")
        torch.testing.assert_close(ok, hk, atol=2e-5, rtol=1e-5, msg=f"step {step}")
        ours_cache.append(ok)
        theirs_cache.append(hk)
        logits = oq @ torch.cat(ours_cache, dim=2).transpose(-1, -2)
        ref_logits = hq @ torch.cat(theirs_cache, dim=2).transpose(-1, -2)
        torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=1e-5)


@pytest.mark.anchor
def test_transformers_dynamic_ntk_keeps_its_longest_length_posenc_follows_the_current_one() -> None:
    """A second prompt shorter than the first but past the original length: transformers keeps
    the first prompt's frequencies (it only resets below the original length); posenc uses the
    current length, which is what a freshly loaded model computes."""
    pytest.importorskip("transformers")
    from tests.extension._hf import hf_rotary, hf_rotate

    cfg = CONFIGS["dynamic"]
    used, apply = hf_rotary(cfg)
    fresh, _ = hf_rotary(cfg)
    pe = posenc.rope_from_hf(cfg)
    q = torch.randn(1, 1, 3, 32)
    hf_rotate(used, apply, q, q, torch.tensor([0, 1, 39]))  # a first prompt of length 40
    pos = torch.tensor([0, 1, 29])  # length 30 < 40, but > ORIGINAL
    stale = hf_rotate(used, apply, q, q, pos)[0]
    current = hf_rotate(fresh, apply, q, q, pos)[0]
    ours = pe.rotate(q, q, pos, pos)[0]
    torch.testing.assert_close(ours, current, atol=2e-5, rtol=1e-5)
    assert (stale - current).abs().max() > 1e-3


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
