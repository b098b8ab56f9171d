"""Every family encoding in TinyTransformer: cached decoding, gradients, torch.compile."""

from __future__ import annotations

import pytest
import torch

import posenc

CONFIGS: dict[str, tuple[str, dict]] = {
    "shaw": ("shaw", {"max_distance": 3}),
    "shaw_keys_only": ("shaw", {"max_distance": 3, "values": False}),
    "transformer_xl": ("transformer_xl", {}),
    "xpos": ("xpos", {"scale_base": 16.0}),
    "pope": ("pope", {}),
    "cope": ("cope", {"n_positions": 6}),
    "randomized_rope": ("randomized", {}),
    "randomized_learned": ("randomized", {"base_encoding": "learned"}),
    "randomized_sinusoidal": ("randomized", {"base_encoding": "sinusoidal"}),
}


def _model(key: str, n_kv_heads: int | None = None) -> posenc.TinyTransformer:
    name, config = CONFIGS[key]
    torch.manual_seed(0)
    model = posenc.TinyTransformer(
        vocab_size=17,
        pe=name,
        d_model=32,
        n_heads=4,
        n_layers=2,
        n_kv_heads=n_kv_heads,
        max_len=40,
        pe_config=config,
    )
    with torch.no_grad():  # move learned position parameters off their near-zero init
        for p in model.pe.parameters():
            p.normal_(std=0.5)
    return model.double().eval()


def _tokens(T: int = 11) -> torch.Tensor:
    return torch.randint(0, 17, (2, T), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("n_kv_heads", [None, 2])
@pytest.mark.parametrize("key", CONFIGS)
def test_kv_cache_decoding_equals_full_forward(key: str, n_kv_heads: int | None) -> None:
    model, idx = _model(key, n_kv_heads), _tokens()
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        steps = [model(idx[:, :4], cache=cache)]  # prefill, then one token at a time
        steps += [model(idx[:, t : t + 1], cache=cache) for t in range(4, idx.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("key", CONFIGS)
def test_gradients_reach_every_encoding_parameter(key: str) -> None:
    model, idx = _model(key), _tokens()
    model.train()
    model.loss(idx[:, :-1], idx[:, 1:]).backward()
    for name, p in model.pe.named_parameters():
        assert p.grad is not None, f"{key}: {name} got no gradient"
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, f"{key}: {name} grad zero"


def test_gradients_at_default_init() -> None:
    """Zero phase bias (PoPE) sits on its clamp boundary and still learns."""
    torch.manual_seed(0)
    model = posenc.TinyTransformer(vocab_size=17, pe="pope", d_model=32, n_heads=4).double()
    idx = _tokens()
    model.loss(idx[:, :-1], idx[:, 1:]).backward()
    assert model.pe.delta.grad is not None and model.pe.delta.grad.abs().sum() > 0


@pytest.mark.slow
def test_torch_compile_runs_and_matches_eager() -> None:
    for key in CONFIGS:
        torch._dynamo.reset()
        model, idx = _model(key).float(), _tokens()
        compiled = torch.compile(model)
        with torch.no_grad():
            torch.testing.assert_close(compiled(idx), model(idx), rtol=1e-4, atol=1e-4, msg=key)


@pytest.mark.parametrize("key", CONFIGS)
def test_bfloat16_model_tracks_float32(key: str) -> None:
    """Frequencies stay float64 under .to(bf16); outputs stay near the float32 model's."""
    model, idx = _model(key).float(), _tokens()
    with torch.no_grad():
        want = model(idx)
        model.to(torch.bfloat16)
        got = model(idx).float()
    for name, buf in model.pe.named_buffers():
        if "inv_freq" in name:
            assert buf.dtype == torch.float64, f"{key}: {name} cast to {buf.dtype}"
    err = (got - want).abs().max() / want.abs().max()
    assert err < 0.1, f"{key}: bf16 relative error {err:.3f}"
