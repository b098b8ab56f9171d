"""``posenc.hf.conform`` / ``posenc conform``: ggml's rope formulas (float64, written from
llama.cpp's source) against transformers where the two runtimes mean the same thing, and the
disagreements the runtimes' bug reports are about: YaRN's attention factor dropped or recomputed,
mscale / mscale_all_dim, ``truncate``, dynamic NTK served static, LongRoPE's short/long switch,
a GGUF file's scaling dropped by transformers' loader."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from posenc.cli import app
from posenc.hf.conform import (
    LlamaCppRope,
    conform,
    llamacpp_cos_sin,
    rope_yarn,
    rope_yarn_corr_dims,
    rope_yarn_ramp,
)

SIZES = {
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "vocab_size": 100,
    "max_position_embeddings": 4096,
}


def _write(tmp_path: Path, model_type: str, **config: Any) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type, **SIZES, **config}))
    return path


def _yarn(**extra: Any) -> dict[str, Any]:
    spec = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    return {"rope_theta": 1e6, "rope_scaling": spec | extra}


# -- ggml's formulas ---------------------------------------------------------------------------


def test_corr_dims_are_the_pairs_turning_beta_times() -> None:
    # pair i turns L·base^(-2i/d)/2π times over L: solve for β = 32 and 1, floor / ceil
    d, L, base = 64, 4096, 10000.0

    def pair(beta: float) -> float:
        return math.log(L / (2 * math.pi * beta)) / (2 * math.log(base) / d)

    assert rope_yarn_corr_dims(d, L, base, 32.0, 1.0) == (
        math.floor(pair(32.0)),
        math.ceil(pair(1.0)),
    )
    assert rope_yarn_corr_dims(d, L, base, 32.0, 1.0) == (10.0, 23.0)
    # only low is clamped below (0) and only high above (d - 1), as in ggml and transformers
    assert rope_yarn_corr_dims(8, 10**12, base, 32.0, 1.0) == (9.0, 7.0)
    assert rope_yarn_corr_dims(8, 10, base, 32.0, 1.0) == (0.0, 1.0)  # floor(-5.3) -> 0


def test_ramp_is_one_below_low_zero_above_high_and_linear_between() -> None:
    assert [rope_yarn_ramp(2.0, 6.0, 2 * i) for i in range(8)] == [
        1.0,
        1.0,
        1.0,
        0.75,
        0.5,
        0.25,
        0.0,
        0.0,
    ]
    assert rope_yarn_ramp(3.0, 3.0, 6) == 1.0 and rope_yarn_ramp(3.0, 3.0, 8) == 0.0


def test_rope_yarn_without_ramp_is_plain_interpolation() -> None:
    c, s = rope_yarn(2.0, 0.5, (0.0, 1.0), 0, 0.0, 1.0)
    assert (c, s) == (math.cos(1.0), math.sin(1.0))
    # ramp fully on at pair 0: θ kept, magnitude times 1 + 0.1 ln(1/freq_scale)
    c, s = rope_yarn(2.0, 0.5, (4.0, 8.0), 0, 1.0, 1.0)
    assert c == pytest.approx(math.cos(2.0) * (1 + 0.1 * math.log(2.0)), rel=1e-15)


def test_plain_rope_is_base_powers() -> None:
    freqs, cos, sin = llamacpp_cos_sin(LlamaCppRope(8, 100.0), [0, 3])
    np.testing.assert_allclose(freqs, 100.0 ** (-np.arange(0, 8, 2) / 8), rtol=1e-14)
    np.testing.assert_allclose(cos[1], np.cos(3 * freqs), rtol=1e-14)
    np.testing.assert_allclose(sin[0], 0.0, atol=0)


# -- three runtimes that agree --------------------------------------------------------------------


@pytest.mark.anchor
@pytest.mark.parametrize(
    ("model_type", "config"),
    [
        ("llama", {"rope_theta": 10000.0}),
        ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
        ("qwen2", _yarn()),
        ("qwen2", _yarn(beta_fast=16.0, beta_slow=2.0)),
        (
            "llama",
            {
                "rope_theta": 500000.0,
                "max_position_embeddings": 131072,
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
            },
        ),
    ],
    ids=["default", "linear", "yarn", "yarn-betas", "llama3"],
)
def test_llama_cpp_reference_equals_transformers(
    tmp_path: Path, model_type: str, config: dict[str, Any]
) -> None:
    result = conform(_write(tmp_path, model_type, **config), (0, 1, 100, 3000))
    assert result.agree, result.render()
    assert [c.name for c in result.columns] == ["transformers", "posenc", "llama.cpp"]


def test_deepseek_mscale_equal_to_mscale_all_dim_agrees(tmp_path: Path) -> None:
    mla = {
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "kv_lora_rank": 16,
        "q_lora_rank": 16,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "n_group": 1,
        "topk_group": 1,
        "max_position_embeddings": 4000,
    }
    rope = _yarn(factor=40.0, original_max_position_embeddings=100, mscale=0.707)
    rope["rope_scaling"]["mscale_all_dim"] = 0.707
    result = conform(_write(tmp_path, "deepseek_v3", **mla, **rope), (0, 1, 2000))
    assert result.agree, result.render()
    assert all(c.attention_factor == pytest.approx(1.0) for c in result.columns)


@pytest.mark.parametrize("length", [1024, 3001])
def test_longrope_switches_short_to_long_in_all_three(tmp_path: Path, length: int) -> None:
    spec = {
        "type": "longrope",
        "short_factor": [1.0 + 0.1 * i for i in range(32)],
        "long_factor": [2.0 + 0.5 * i for i in range(32)],
    }
    path = _write(tmp_path, "phi3", original_max_position_embeddings=1024, rope_scaling=spec)
    result = conform(path, (0, 1, 1000), seq_len=length)
    assert result.agree, result.render()
    factors = np.array(spec["long_factor" if length > 1024 else "short_factor"])
    base = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    np.testing.assert_allclose(result.columns[2].inv_freq, base / factors, rtol=1e-12)


# -- what the bug reports are about ---------------------------------------------------------------


def _disagreement(result: Any, who: str) -> list[str]:
    return [d for d in result.differences if d.startswith(who)]


def test_yarn_attention_factor_is_recomputed_by_llama_cpp(tmp_path: Path) -> None:
    """vLLM #46280, exllamav3 #259: a config's YaRN ``attention_factor`` is not what every
    runtime uses; llama.cpp recomputes 0.1·ln(s) + 1."""
    result = conform(_write(tmp_path, "qwen2", **_yarn(attention_factor=0.8)), (0, 100))
    assert not _disagreement(result, "posenc")
    assert result.columns[0].attention_factor == pytest.approx(0.8)
    assert result.columns[2].attention_factor == pytest.approx(0.1 * math.log(4.0) + 1)
    assert any("attention factor" in d for d in _disagreement(result, "llama.cpp"))
    assert "attention_factor" in " ".join(result.columns[2].notes)


def test_mscale_ratio_outside_deepseek_is_not_llama_cpps(tmp_path: Path) -> None:
    """transformers takes mscale/mscale_all_dim for any model; llama.cpp reads it (as
    yarn_log_multiplier) for DeepSeek-V2/V3 only."""
    path = _write(tmp_path, "qwen2", **_yarn(mscale=1.0, mscale_all_dim=0.5))
    result = conform(path, (0, 100))
    ratio = (0.1 * math.log(4.0) + 1) / (0.05 * math.log(4.0) + 1)
    assert result.columns[0].attention_factor == pytest.approx(ratio)
    assert result.columns[1].attention_factor == pytest.approx(ratio)
    assert any("attention factor" in d for d in _disagreement(result, "llama.cpp"))


def test_yarn_without_truncation_is_not_llama_cpps(tmp_path: Path) -> None:
    result = conform(_write(tmp_path, "llama", **_yarn(truncate=False)), (0, 1, 100))
    assert not _disagreement(result, "posenc")
    assert any("inv_freq differs" in d for d in _disagreement(result, "llama.cpp"))


def test_dynamic_ntk_is_static_in_llama_cpp(tmp_path: Path) -> None:
    """vLLM #41236: dynamic NTK served as plain RoPE. Within the trained length they agree;
    past it transformers' base grows and llama.cpp's does not."""
    path = _write(tmp_path, "llama", rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    assert conform(path, (0, 100), seq_len=4096).agree
    result = conform(path, (0, 100, 6000))
    assert not _disagreement(result, "posenc")
    assert any("inv_freq differs" in d for d in _disagreement(result, "llama.cpp"))
    assert "no dynamic NTK" in " ".join(result.columns[2].notes)


def test_a_gguf_files_scaling_is_dropped_by_transformers_loader(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from tests.hf import _gguf

    path = tmp_path / "yarn.gguf"
    meta = {
        "rope.scaling.type": "yarn",
        "rope.scaling.factor": 4.0,
        "rope.scaling.original_context_length": 16,
        "rope.scaling.yarn_attn_factor": 0.5,
    }
    _gguf.write_tiny(path, "llama", metadata=meta)
    result = conform(path, (0, 1, 40))
    assert result.columns[0].attention_factor == 1.0  # transformers: plain RoPE
    assert _disagreement(result, "posenc") and _disagreement(result, "llama.cpp")
    posenc, llama = result.columns[1], result.columns[2]
    np.testing.assert_allclose(posenc.inv_freq, llama.inv_freq, rtol=1e-12)
    assert posenc.attention_factor == pytest.approx(llama.attention_factor, rel=1e-12)
    np.testing.assert_allclose(posenc.cos, llama.cos, atol=1e-12)
    assert "yarn_attn_factor" in " ".join(llama.notes)


# -- the command ---------------------------------------------------------------------------------


def test_command_exits_0_on_agreement_and_1_on_disagreement(tmp_path: Path) -> None:
    runner = CliRunner()
    good = _write(tmp_path, "qwen2", **_yarn())
    out = tmp_path / "conform.json"
    result = runner.invoke(app, ["conform", str(good), "--positions", "0,7", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "agree" in result.stdout and "inv_freq[0]" in result.stdout
    data = json.loads(out.read_text())
    assert data["agree"] and set(data["columns"]) == {"transformers", "posenc", "llama.cpp"}
    bad = tmp_path / "bad"
    bad.mkdir()
    result = runner.invoke(
        app, ["conform", str(_write(bad, "qwen2", **_yarn(attention_factor=0.8)))]
    )
    assert result.exit_code == 1
    assert "!= llama.cpp attention factor" in result.stdout


def test_command_errors_are_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["conform", str(tmp_path / "none.json")])
    assert result.exit_code != 0
    assert result.output.strip().startswith("error: expected a config.json or a .gguf file")
    path = _write(tmp_path, "llama")
    result = runner.invoke(app, ["conform", str(path), "--positions", "a"])
    assert result.exit_code == 2 and "error: --positions: expected comma" in result.output


@pytest.mark.parametrize("layer_type", ["sliding_attention", "full_attention"])
def test_per_layer_parameters_are_compared_per_layer_type(tmp_path: Path, layer_type: str) -> None:
    rope = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
    }
    path = _write(
        tmp_path,
        "gemma3_text",
        head_dim=64,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters=rope,
    )
    result = conform(path, (0, 1, 3000), layer_type=layer_type)
    assert result.agree, result.render()
    theta = rope[layer_type]["rope_theta"] ** (-2 / 64) / (
        8.0 if layer_type == "full_attention" else 1.0
    )
    assert result.columns[2].inv_freq[1] == pytest.approx(theta, rel=1e-12)
