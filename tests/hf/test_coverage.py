"""docs/hf-coverage.md is what ``tests/hf/_coverage.py`` computes: rows recomputed here must
equal the committed page's, and the page lists every rotary model type of the pinned
transformers (slow: importing every modeling module takes ~35 s)."""

from __future__ import annotations

import re

import pytest

from tests.hf import _coverage

pytest.importorskip("transformers")
pytestmark = pytest.mark.anchor


def _detail_without_numbers(detail: str) -> str:
    """Float digits vary with the BLAS and the thread count: compare the words only."""
    return re.sub(r"[0-9.e+-]+", "#", detail)


@pytest.mark.parametrize("model_type", ["llama", "qwen3", "granite_swa"])
def test_page_rows_are_what_the_harness_computes(model_type: str) -> None:
    rows = _coverage.page_rows()
    if model_type not in rows:
        pytest.skip(f"{model_type} is not on the (partial) page yet")
    got = _coverage.status(model_type)
    assert got.status == rows[model_type].status
    assert _detail_without_numbers(got.detail) == _detail_without_numbers(rows[model_type].detail)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model_type",
    [
        "bamba",  # hybrid: one attention layer kept among the Mamba ones
        "glm4v_vision",  # a vision tower's 4 x 4 patch grid
        "glmasr_encoder",  # an audio signal
        "cosmos3_edge_vision",  # no *RotaryEmbedding
        "deepseek_v4",  # the trailing rope slice of one tensor at a time
        "glm4v_text",  # M-RoPE sections wider than the default head: the harness's width
        "ernie4_5_vl_moe",  # ERNIE's M-RoPE arrangement
        "mistral_large4",  # Pixtral's axial 2-D RoPE in its vision tower
        "mlcd",  # a vision tower's 4 x 4 patch image (pixel_values)
        "t5gemma",  # an encoder-decoder: decoder ids
        "dia",  # past the tolerance, within its own float32 error against float64
        "dbrx",  # a config fix (attn_config.rope_theta); RoPE sized by d_model / n_heads
        "evolla",  # the mapped class (no auto class resolves it); a protein besides the text
        "qwen4_exp_text",  # QSA indexer sizes; q rotated alone (k=None) in the indexer
        "muse_glimmer_assistant",  # a draft block: q shorter than k, at the last positions
        "cohere_compass_text",  # M-RoPE sections per layer type
        "hunyuan_vl_text",  # 4-axis M-RoPE: refused
        "mimi_encoder",  # 16 frames of a waveform; its output is latents
    ],
)
def test_page_rows_of_towers_and_hybrids(model_type: str) -> None:
    test_page_rows_are_what_the_harness_computes(model_type)


@pytest.mark.slow
def test_page_lists_only_rotary_model_types() -> None:
    types = set(_coverage.rotary_model_types())
    assert set(_coverage.page_rows()) <= types
