"""The Flax TinyTransformer takes torch's per-layer schedules: with converted weights its logits
equal torch's for a schedule of two RoPE bases, sliding windows and a chunked NoPE layer, in
the full forward, with left padding, and in cached decoding (a Flax cache keeps every key; the
mask limits each local layer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.models import LayerSchedule, TinyTransformer

nnx = pytest.importorskip("flax.nnx")
pfx = pytest.importorskip("posenc.flax")

SCHEDULE = LayerSchedule(
    pe=(("rope", {"base": 100.0}), ("rope", {"base": 1e6}), "nope"),
    window=(3, None),
    chunk=(None, None, 4),
)


def test_flax_schedule_equals_torch_full_padded_and_cached() -> None:
    torch.manual_seed(0)
    kw = {"vocab_size": 30, "pe": SCHEDULE, "d_model": 16, "n_layers": 3, "n_heads": 2}
    tm = TinyTransformer(**kw).eval()
    fm = pfx.TinyTransformer(**kw, rngs=nnx.Rngs(0))
    fm.eval()
    pfx.load_torch_state_dict(fm, tm.state_dict())
    assert [b.attn.window for b in fm.blocks] == [b.attn.window for b in tm.blocks]
    assert [b.attn.chunk for b in fm.blocks] == [None, None, 4]
    idx = np.random.default_rng(0).integers(0, 30, (2, 11))
    mask = np.ones((2, 11), dtype=bool)
    mask[1, :2] = False
    pos = np.maximum(np.cumsum(mask, -1) - 1, 0)
    with torch.no_grad():
        full = tm(torch.tensor(idx)).numpy()
        padded = tm(torch.tensor(idx), torch.tensor(pos), padding_mask=torch.tensor(mask)).numpy()
    np.testing.assert_allclose(np.asarray(fm(idx)), full, rtol=1e-4, atol=3e-5)
    got = np.asarray(fm(idx, pos, padding_mask=mask))
    np.testing.assert_allclose(got[mask], padded[mask], rtol=1e-4, atol=3e-5)
    cache = fm.new_cache()
    steps = [fm(idx[:, :8], cache=cache)] + [fm(idx[:, t : t + 1], cache=cache) for t in (8, 9)]
    decoded = np.concatenate([np.asarray(s) for s in steps], 1)
    np.testing.assert_allclose(decoded, full[:, :10], rtol=1e-4, atol=3e-5)


@pytest.mark.slow
def test_preallocated_cache_under_jit_decodes_a_sliding_schedule_as_torch() -> None:
    """The window mask on a preallocated cache (traced offset, unwritten slots invalid)."""
    from posenc.models import rnope_swa

    torch.manual_seed(0)
    kw = {"vocab_size": 30, "pe": rnope_swa(window=3, interval=2), "d_model": 16}
    tm = TinyTransformer(**kw, n_layers=2, n_heads=2).eval()
    fm = pfx.TinyTransformer(**kw, n_layers=2, n_heads=2, rngs=nnx.Rngs(0))
    fm.eval()
    pfx.load_torch_state_dict(fm, tm.state_dict())
    idx = np.random.default_rng(0).integers(0, 30, (2, 9))
    with torch.no_grad():
        full = tm(torch.tensor(idx)).numpy()
    cache = fm.new_cache(capacity=12)
    step = nnx.jit(lambda m, t, c: m(t, cache=c))
    outs = [np.asarray(step(fm, idx[:, t : t + 1], cache)) for t in range(9)]
    np.testing.assert_allclose(np.concatenate(outs, 1), full, rtol=1e-4, atol=3e-5)
