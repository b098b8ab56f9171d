"""``load_model``: a transformers directory with ``scaling`` gives the logits of the same model
built with that ``rope_parameters``; lab checkpoints load with their run config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc.eval import load_model, scaled_config
from tests.eval.conftest import tiny_llama

transformers = pytest.importorskip("transformers")

SCALINGS = [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128},
    {"type": "dynamic", "factor": 2.0},  # the older key name
]


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s.get("rope_type", s.get("type")))
def test_scaling_equals_the_model_built_with_it(llama_dir: Path, scaling: dict) -> None:
    plain, scaled = load_model(llama_dir), load_model(llama_dir, scaling=scaling)
    method = {("rope_type" if k == "type" else k): v for k, v in scaling.items()}
    built = tiny_llama(rope_parameters={"rope_theta": 10000.0, **method})
    built.load_state_dict(plain.model.state_dict())
    ids = torch.tensor([plain.tokenizer.encode("The grass is green. " * 30)])  # 601 > 512 tokens
    with torch.no_grad():
        want = built(ids).logits
    got = scaled.logits(ids)
    assert scaled.model.config.rope_parameters["rope_type"] == method["rope_type"]
    torch.testing.assert_close(got, want, atol=0.0, rtol=0.0)
    assert not torch.allclose(got, plain.logits(ids))


def test_scalings_a_model_cannot_take_are_refused() -> None:
    llama = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=4)
    cases = [
        (transformers.GPT2Config(), {"rope_type": "linear", "factor": 2.0}, "no rotary embed"),
        (transformers.Gemma3TextConfig(), {"rope_type": "linear", "factor": 2.0}, "per-layer"),
        (llama, {"rope_type": "nosuch", "factor": 2.0}, "must be one of"),
        (llama, {"rope_type": "linear", "factor": 0.5}, "'factor' must be a finite number >= 1"),
        (
            llama,
            {"rope_type": "linear", "factor": 2.0, "bogus": 1},
            r"unknown key\(s\) \['bogus'\]",
        ),
        (llama, {"rope_type": "yarn"}, r"needs key\(s\) \['factor'\]"),
        (llama, {"rope_type": "ntk", "factor": 2.0}, "transformers has no 'ntk'"),
        (llama, {"factor": 2.0}, "a dict with a 'rope_type'"),
    ]
    for config, scaling, match in cases:
        with pytest.raises(ValueError, match=match):
            scaled_config(config, scaling)
    assert llama.rope_parameters == {"rope_theta": 10000.0, "rope_type": "default"}  # a copy


def test_lab_checkpoints_load_with_their_run_and_take_rope_scaling(lab_checkpoint: Path) -> None:
    plain = load_model(lab_checkpoint)
    scaled = load_model(lab_checkpoint, scaling={"rope_type": "linear", "factor": 2.0})
    assert plain.name == "rope lm seed 0" and plain.tokenizer is not None
    assert scaled.model.net.pe.scaling.factor == 2.0
    ids = torch.tensor([plain.tokenizer.encode("The grass is green. " * 4)])
    assert not torch.allclose(scaled.logits(ids), plain.logits(ids))


def test_bad_paths_are_refused(tmp_path: Path, lab_checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="MODEL must be a transformers model directory"):
        load_model(tmp_path)
    lone = tmp_path / "checkpoints" / "x.pt"
    lone.parent.mkdir()
    lone.write_bytes(lab_checkpoint.read_bytes())
    with pytest.raises(ValueError, match="has no result store"):
        load_model(lone)
    with pytest.raises(ValueError, match="lab checkpoints load in float32"):
        load_model(lab_checkpoint, dtype="bfloat16")
