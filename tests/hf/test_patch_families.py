"""``patch`` on the transformers 5.23 families that crashed it: Granite-SWA (its model reads
``rotary_emb.config``), Gemma 3n and Qwen4-Exp (their ``apply_rotary_pos_emb`` rotates one
tensor at a time, or q alone when k is None), Evolla's SaProt rotary (a ``layer_type`` argument
without layer types). The M-RoPE models whose rotary embedding carries its own default
``mrope_section`` (GLM-4V, Qwen3.5, ERNIE 4.5 VL, ...) are in test_patch_grid.py."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from torch import nn

from posenc.hf import patch, unpatch
from posenc.hf.rotate import signature_kind, verified
from tests.hf._tiny import SMALL

pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor


def _model(model_type: str, **extra: Any) -> Any:
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(CONFIG_MAPPING[model_type](**(SMALL | extra))).eval()


def _modeling(name: str) -> Any:
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


GEMMA3N = {
    "hidden_size_per_layer_input": 8,
    "laurel_rank": 4,
    "altup_num_inputs": 2,
    "num_kv_shared_layers": 0,
    "activation_sparsity_pattern": [0.0, 0.0],
    "vocab_size_per_layer_input": 97,
    "layer_types": ["sliding_attention", "full_attention"],
    "sliding_window": 4,
}


@pytest.mark.parametrize(
    ("model_type", "extra"),
    [
        ("granite_swa", {}),
        ("granitemoe_swa", {"num_local_experts": 2, "num_experts_per_tok": 1}),
        ("gemma3n_text", GEMMA3N),
    ],
)
def test_patched_logits_equal_unpatched(model_type: str, extra: dict[str, Any]) -> None:
    model = _model(model_type, **extra)
    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(ids).logits
        patch(model)
        patched = model(ids).logits
        unpatch(model)
        after = model(ids).logits
    assert before.abs().max() > 1.0  # positions move the logits well above the tolerance
    torch.testing.assert_close(patched, before, rtol=0, atol=5e-5)
    assert torch.equal(after, before)


def test_one_tensor_rotations_are_reproduced() -> None:
    """Gemma 3n's ``apply_rotary_pos_emb(x, cos, sin)`` and Qwen4-Exp's ``(q, k=None, ...)``."""
    angles = torch.randn(1, 5, 4, generator=torch.Generator().manual_seed(0))
    embeddings = (torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1))
    for module, kind in (("gemma3n", "one"), ("qwen4_exp", "optional_k")):
        original = _modeling(module).apply_rotary_pos_emb
        assert signature_kind(original) == kind
        ours = verified("apply_rotary_pos_emb", original, embeddings, "cat", "half", "eager")
        x = torch.randn(1, 3, 5, 8)
        torch.testing.assert_close(
            ours(x, cos=embeddings[0], sin=embeddings[1], unsqueeze_dim=1),
            original(x, cos=embeddings[0], sin=embeddings[1], unsqueeze_dim=1),
        )


def test_a_layer_type_argument_without_layer_types_gets_one_rope() -> None:
    """Evolla's SaProt rotary: ``forward(x, position_ids, layer_type=None)``, no layer types."""
    from transformers.models.evolla.configuration_evolla import SaProtConfig

    holder = nn.Module()
    config = SaProtConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1)
    holder.rotary_emb = _modeling("evolla").EvollaSaProtRotaryEmbedding(config)
    pos = torch.arange(50)[None]
    x = torch.zeros(1, 50, 64)
    want = holder.rotary_emb(x, pos)
    patch(holder, kernel=None)
    got = holder.rotary_emb(x, pos)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-5)


def _default_with_layer_types(model_type: str, layer_types: list[str]) -> tuple[Any, Any]:
    """The coverage page's model of ``model_type`` (default config shrunk, weights at range
    0.2) with these layer types, and token ids (1, 16)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.hf._coverage import _shrink

    cfg = AutoConfig.for_model(model_type)
    _shrink(cfg)
    cfg.layer_types, cfg.num_hidden_layers = layer_types, len(layer_types)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    return model, torch.randint(3, 100, (1, 16), generator=torch.Generator().manual_seed(0))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model_type", "layer_types"),
    [
        ("gemma4_text", ["sliding_attention", "full_attention"]),
        ("lfm3", ["conv", "full_attention", "sliding_attention"]),
    ],
)
def test_proportional_layers_equal_transformers(model_type: str, layer_types: list[str]) -> None:
    """Gemma 4 and LFM3 rotate their full-attention layers by the ``proportional`` rope type
    (posenc's p-RoPE). The coverage page's two-layer default models keep only the first two
    layer types (sliding or conv layers), so a full-attention layer is put in here: the
    default config otherwise (weights at range 0.2), patched logits within 1e-4 of max |logit|."""
    model, ids = _default_with_layer_types(model_type, layer_types)
    with torch.no_grad():
        before = model(input_ids=ids).logits
        patch(model)
        kinds = {t: r.name for t, r in model.model.rotary_emb.ropes.items()}
        patched = model(input_ids=ids).logits
        unpatch(model)
    assert kinds == {"full_attention": "p_rope", "sliding_attention": "rope"}
    scale = float(before.abs().max())
    assert float((patched - before).abs().max()) <= 1e-4 * max(1.0, scale)


@pytest.mark.slow
def test_layer_types_without_rope_parameters_get_no_rope() -> None:
    """Beam's full-attention layers take no position embeddings (``rope_parameters`` None for
    their type; the model hands them None): patch replaces the sliding layers' RoPE only, and
    the logits of a model with both layer types equal the unpatched ones."""
    model, ids = _default_with_layer_types("beam", ["sliding_attention", "full_attention"])
    assert model.config.rope_parameters["full_attention"] is None
    with torch.no_grad():
        before = model(input_ids=ids).logits
        patch(model)
        rotary = model.model.rotary_emb
        patched = model(input_ids=ids).logits
        with pytest.raises(ValueError, match="layer_type must be one of"):
            rotary(torch.zeros(1, 4, 1), torch.arange(4)[None], "full_attention")
        unpatch(model)
    assert rotary.layer_types == ("sliding_attention",)
    assert float((patched - before).abs().max()) <= 1e-4 * max(1.0, float(before.abs().max()))


@pytest.mark.slow
def test_dia_gap_is_its_own_float32_angle_rounding() -> None:
    """Dia's attention has softmax scale 1 (no 1/sqrt(d)): its scores are d^0.5 times larger
    than usual, so the rounding of transformers' float32 angles moves its logits more than the
    coverage page's 1e-4 of max |logit| here (one thread, as the suite runs; the page, run on
    two threads of an Intel Xeon, found 7.4e-5 of 3.57 there, a match: Dia's outputs move
    with the BLAS's summation order as much as with the angles). Cause, measured: the unpatched
    model with float64 angles in transformers' own rotary differs from itself as much as the
    patched one does (0.0046 and 0.0024 of max |logit| 3.58 here), and with the usual softmax
    scale patched and unpatched agree within the page's tolerance."""
    from transformers.models.dia import modeling_dia

    from tests.hf import _coverage

    model = _coverage._build("dia")
    ids = torch.randint(3, 100, (1, 16), generator=torch.Generator().manual_seed(0))

    def logits() -> torch.Tensor:
        with torch.no_grad():
            return _coverage._logits(model, {"input_ids": ids})

    def float64_angles(self: Any, x: torch.Tensor, position_ids: torch.Tensor) -> Any:
        freqs = position_ids[..., None].double() * self.inv_freq.double()  # (B, T, P)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    before = logits()
    patch(model)
    patched = logits()
    unpatch(model)
    rotary = modeling_dia.DiaRotaryEmbedding
    original = rotary.forward
    rotary.forward = float64_angles  # type: ignore[method-assign]
    try:
        own_float64 = logits()
    finally:
        rotary.forward = original  # type: ignore[method-assign]
    scale = float(before.abs().max())
    gap, own = float((patched - before).abs().max()), float((own_float64 - before).abs().max())
    assert gap > 1e-4 * scale  # the page's mismatch
    assert gap <= 2 * own  # no more than transformers' own angles moved by float64
    attentions = (modeling_dia.DiaSelfAttention, modeling_dia.DiaCrossAttention)
    for m in model.modules():
        if isinstance(m, attentions):
            m.scaling = m.head_dim**-0.5
    before = logits()
    patch(model)
    patched = logits()
    unpatch(model)
    assert float((patched - before).abs().max()) <= 1e-4 * float(before.abs().max())
