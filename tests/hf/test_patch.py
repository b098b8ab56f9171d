"""posenc.hf.patch on tiny transformers models of each family (no downloads): unchanged
settings give the model's logits (forward, generate with its cache, left padding), a scaling
gives the logits of the same model built with that rope_scaling, posenc's kernels run inside,
and unpatch restores the model exactly."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from posenc.hf import is_patched, patch, rotate, unpatch
from posenc.hf.rotary import RotaryEmbedding
from posenc.kernels import rope_cpp, rope_eager
from posenc.kernels.rope import rotate_pair
from tests.hf import _tiny

pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor

#: Float32 rounding of transformers' angles (posenc's are float64), through 2 tiny layers.
ATOL = 1e-4


def _logits(model: Any, ids: torch.Tensor, **kw: Any) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, **kw).logits


def _rotaries(model: Any) -> list[Any]:
    return [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]


@pytest.mark.parametrize("model_type", list(_tiny.FAMILIES))
def test_unchanged_settings_keep_the_logits_and_unpatch_restores_exactly(model_type: str) -> None:
    model = _tiny.model(model_type)
    ids = _tiny.tokens()
    before = _logits(model, ids)
    originals = _rotaries(model)
    assert patch(model, kernel="eager") is model and is_patched(model)
    if model_type not in ("gptj", "codegen"):  # they keep their angles in a table
        assert all(isinstance(m, RotaryEmbedding) for m in _rotaries(model))
    assert any("forward" in vars(m) for m in model.modules())  # posenc rotates q and k
    torch.testing.assert_close(_logits(model, ids), before, atol=ATOL, rtol=0)
    unpatch(model)
    assert not is_patched(model) and _rotaries(model) == originals
    assert not any("forward" in vars(m) for m in model.modules())
    assert torch.equal(_logits(model, ids), before)


KERNEL_CASES = ["llama", "gpt_neox", "cohere", "glm", "gpt_oss", "deepseek_v2", "deepseek_v3"]


@pytest.mark.parametrize(
    ("model_type", "kernel"),
    [(t, "cpp") for t in [*KERNEL_CASES, "llama4_text"]]
    + [("llama", "eager"), ("cohere", "eager")],
)
def test_posenc_kernel_rotates_inside_the_model(
    model_type: str, kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every layout and embedding form reaches the kernel asked for, once per layer with
    positions (Llama 4's second layer has none), and no other kernel."""
    calls = {"cpp": 0, "eager": 0}

    def counting(name: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kw: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kw)

        return wrapped

    monkeypatch.setattr(rope_cpp, "rope_pair", counting("cpp", rope_cpp.rope_pair))
    monkeypatch.setattr(rope_eager, "rope_pair", counting("eager", rope_eager.rope_pair))
    model = _tiny.model(model_type)
    ids = _tiny.tokens()
    before = _logits(model, ids)
    patch(model, kernel=kernel)  # type: ignore[arg-type]
    calls.update(cpp=0, eager=0)  # patch checked its rotation once
    torch.testing.assert_close(_logits(model, ids), before, atol=ATOL, rtol=0)
    layers = model.config.num_hidden_layers - (model_type == "llama4_text")
    assert calls == {"cpp": 0, "eager": 0} | {kernel: layers}


def test_bfloat16_model() -> None:
    """A model cast to bfloat16 (transformers' frequencies rounded to 8 bits with it; posenc
    keeps float64 ones): patched, its logits stay as close to the float32 model's."""
    model = _tiny.model("llama")
    ids = _tiny.tokens()
    exact = _logits(model, ids)
    model.to(torch.bfloat16)
    theirs = (_logits(model, ids).float() - exact).abs().max()
    patch(model)
    ours = (_logits(model, ids).float() - exact).abs().max()
    assert ours <= 1.5 * theirs


_LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0 + 0.1 * i for i in range(8)],
    "long_factor": [1.0 + 2.0 * i for i in range(8)],
}
GENERATE = {
    "llama": {},
    "gemma3_text": {},
    "phi3-longrope": {"rope_scaling": _LONGROPE, "original_max_position_embeddings": 16},
    "llama-dynamic": {
        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
        "max_position_embeddings": 16,
    },
    "deepseek_v2": {},
    "llama4_text": {},
    "gptj": {},
}


@pytest.mark.parametrize("case", list(GENERATE))
def test_generate_with_cache_and_left_padding(case: str) -> None:
    """Greedy decoding past the original context (LongRoPE switches short -> long, dynamic
    NTK grows with the length) gives the same tokens and scores; row 0 is left-padded."""
    model = _tiny.model(case.split("-")[0], **GENERATE[case])
    ids = _tiny.tokens(T=10)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    kw = {"max_new_tokens": 14, "do_sample": False, "pad_token_id": 0}
    kw |= {"output_scores": True, "return_dict_in_generate": True}
    theirs = model.generate(ids, attention_mask=mask, **kw)
    patch(model, kernel="cpp")
    ours = model.generate(ids, attention_mask=mask, **kw)
    assert torch.equal(ours.sequences, theirs.sequences)
    for a, b in zip(ours.scores, theirs.scores, strict=True):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
_YARN_MSCALE = _YARN | {"factor": 8.0, "mscale": 0.707, "mscale_all_dim": 1.0}
SCALINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-linear": ("llama", {"rope_type": "linear", "factor": 4.0}),
    "llama-dynamic": ("llama", {"rope_type": "dynamic", "factor": 2.0}),
    "llama-yarn": ("llama", _YARN),
    "llama-llama3": (
        "llama",
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
    "phi3-longrope": ("phi3", _LONGROPE | {"original_max_position_embeddings": 32}),
    "gpt_neox-dynamic": ("gpt_neox", {"rope_type": "dynamic", "factor": 3.0}),
    "phi-yarn": ("phi", _YARN),
    "gemma3_text-linear": ("gemma3_text", {"rope_type": "linear", "factor": 8.0}),
    "cohere-yarn": ("cohere", _YARN),
    "glm-llama3": (
        "glm",
        {
            "rope_type": "llama3",
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 2.0,
            "original_max_position_embeddings": 32,
        },
    ),
    "deepseek_v2-yarn": ("deepseek_v2", _YARN_MSCALE),
    "deepseek_v3-yarn": ("deepseek_v3", _YARN_MSCALE),
    "llama4_text-yarn": ("llama4_text", _YARN),
}


@pytest.mark.parametrize("case", list(SCALINGS))
def test_scaling_equals_the_model_built_with_it(case: str) -> None:
    """patch(model, scaling=S) == the same weights in a model whose config has rope_scaling S,
    at positions past the original context (DeepSeek: the softmax scale follows mscale_all_dim;
    Gemma 3: the full-attention layers are scaled, the sliding ones are not)."""
    model_type, scaling = SCALINGS[case]
    model = _tiny.model(model_type)
    reference = _tiny.twin(model, model_type, rope_scaling=dict(scaling))
    ids = _tiny.tokens()
    pos = torch.arange(12)[None].expand(2, -1) + 100
    plain = _logits(model, ids, position_ids=pos)
    patch(model, scaling=dict(scaling), kernel="eager")
    ours, theirs = _logits(model, ids, position_ids=pos), _logits(reference, ids, position_ids=pos)
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)
    assert (ours - plain).abs().max() > 100 * ATOL  # the scaling changed the model
    if model_type.startswith("deepseek"):
        attn = model.model.layers[0].self_attn
        assert attn.scaling == pytest.approx(reference.model.layers[0].self_attn.scaling)
        unpatch(model)
        assert attn.scaling == 16**-0.5  # qk_head_dim = nope 8 + rope 8, unscaled
    else:
        unpatch(model)
    assert torch.equal(_logits(model, ids, position_ids=pos), plain)


def test_ministral3_yarn_with_its_query_temperature() -> None:
    """Ministral 3's rope_parameters (yarn + llama_4_scaling_beta) under a new yarn factor: the
    model built with it, past the original length where the query temperature is > 1 (the
    attention reads beta and the original length from its config: patch keeps them)."""
    model = _tiny.model("ministral3")
    original = model.config.rope_parameters["original_max_position_embeddings"]
    scaling = _YARN | {"factor": 4.0, "original_max_position_embeddings": original}
    params = {"rope_theta": 1e6, "llama_4_scaling_beta": 0.1}
    reference = _tiny.twin(model, "ministral3", rope_parameters=scaling | params)
    ids, pos = _tiny.tokens(), torch.arange(12)[None].expand(2, -1) + 100
    patch(model, scaling=scaling)
    ours, theirs = _logits(model, ids, position_ids=pos), _logits(reference, ids, position_ids=pos)
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


def test_kernel_none_keeps_the_model_rotation_and_replaces_the_angles() -> None:
    model = _tiny.model("llama")
    reference = _tiny.twin(model, "llama", rope_scaling={"rope_type": "linear", "factor": 2.0})
    ids = _tiny.tokens()
    patch(model, scaling={"rope_type": "linear", "factor": 2.0}, kernel=None)
    assert not any("forward" in vars(m) for m in model.modules())
    torch.testing.assert_close(_logits(model, ids), _logits(reference, ids), atol=ATOL, rtol=0)


def test_posenc_static_ntk_and_gptj_table_scaling() -> None:
    """posenc's static NTK (no transformers rope type) equals plain RoPE at the enlarged base;
    GPT-J's table is rebuilt at the scaled length."""
    model = _tiny.model("llama")
    reference = _tiny.twin(model, "llama", rope_theta=10000.0 * 4.0 ** (16 / 14))
    ids = _tiny.tokens()
    patch(model, scaling={"rope_type": "ntk", "factor": 4.0})
    torch.testing.assert_close(_logits(model, ids), _logits(reference, ids), atol=ATOL, rtol=0)
    gptj = _tiny.model("gptj")
    patch(gptj, scaling={"rope_type": "linear", "factor": 2.0})
    table = gptj.transformer.h[0].attn.embed_positions  # (L, 2P): [sin | cos]
    angle = torch.arange(table.shape[0], dtype=torch.float64)[:, None] / 2.0
    inv_freq = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    assert table.shape[0] == 2 * 2048
    torch.testing.assert_close(
        table[:, 4:].double(), torch.cos(angle * inv_freq), atol=1e-6, rtol=0
    )


def test_errors_name_the_problem() -> None:
    model = _tiny.model("llama")
    with pytest.raises(ValueError, match="kernel must be one of"):
        patch(model, kernel="fast")
    with pytest.raises(TypeError, match="scaling must be a dict"):
        patch(model, scaling=4.0)  # type: ignore[arg-type]
    assert not is_patched(model)  # a failed patch leaves the model as it was
    assert not any(isinstance(m, RotaryEmbedding) for m in model.modules())
    with pytest.raises(ValueError, match="not patched"):
        unpatch(model)
    patch(model)
    with pytest.raises(ValueError, match="already patched"):
        patch(model)
    with pytest.raises(ValueError, match="fixed table: dynamic scaling"):
        patch(_tiny.model("gptj"), scaling={"rope_type": "dynamic", "factor": 2.0})
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=50))
    with pytest.raises(ValueError, match="no rotary embedding posenc can replace"):
        patch(gpt2)


@pytest.mark.parametrize("kernel", ["eager", "cpp"])
def test_gradients_through_the_patched_model(kernel: str) -> None:
    """Fine-tuning a patched model (e.g. at an extended length): posenc's kernels give the
    weights the gradients transformers' rotation gives."""
    model = _tiny.model("qwen3")
    ids = _tiny.tokens()

    def grads() -> torch.Tensor:
        model.zero_grad()
        model(ids, labels=ids).loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    theirs = grads()
    patch(model, kernel=kernel)  # type: ignore[arg-type]
    torch.testing.assert_close(grads(), theirs, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("kernel", ["cpp", "eager"])
@pytest.mark.parametrize("model_type", ["llama", "phi", "llama4_text"])
def test_inference_rotates_the_projections_in_place(
    model_type: str, kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without autograd the patched layers rotate q and k in place, with the logits of the
    out-of-place rotation (autograd on) bit for bit; a partial rotary (Phi) and complex
    embeddings over (B, T, H, D) (Llama 4) too."""
    model = _tiny.model(model_type)
    ids = _tiny.tokens()
    patch(model, kernel=kernel)  # type: ignore[arg-type]
    seen: list[bool] = []

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(kw["inplace"])
        return rotate_pair(*args, **kw)

    monkeypatch.setattr(rotate, "rotate_pair", spy)
    out_of_place = model(ids).logits
    layers = model.config.num_hidden_layers - (model_type == "llama4_text")
    assert seen == [False] * layers
    seen.clear()
    in_place = _logits(model, ids)
    assert seen == [True] * layers
    assert torch.equal(in_place, out_of_place)


def test_fresh_refuses_what_in_place_would_corrupt() -> None:
    """Expanded views and q, k in one storage stay out of place; autograd on too."""
    x = torch.randn(1, 2, 5, 8)
    with torch.no_grad():
        assert rotate.fresh(x, x.clone())
        assert not rotate.fresh(x[:, :1].expand(1, 2, 5, 8), x.clone())
        fused = torch.randn(1, 5, 16)
        assert not rotate.fresh(fused[..., :8], fused[..., 8:])
    assert not rotate.fresh(x, x.clone())
