"""Dynamic NTK and LongRoPE decoding against transformers, step by step."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import posenc
from tests.extension._hf import FACTORS, ORIGINAL

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


SCHEDULE = [list(range(12))] + [[t] for t in range(12, 40)] + [list(range(8))]


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
