"""Registry: names, build, config validation."""

from __future__ import annotations

import pytest

import posenc
from posenc.encodings.absolute import Learned, Sinusoidal
from posenc.encodings.rotary import RoPE


def test_names_lists_the_foundation_encodings() -> None:
    names = posenc.names()
    assert {"nope", "sinusoidal", "learned", "rope"} <= set(names)
    assert names == sorted(names)


def test_build_returns_configured_modules() -> None:
    rope = posenc.build("rope", head_dim=64, base=10000.0)
    assert isinstance(rope, RoPE) and rope.head_dim == 64 and rope.name == "rope"
    learned = posenc.build("learned", dim=256, max_len=512)
    assert isinstance(learned, Learned) and learned.weight.shape == (512, 256)
    assert isinstance(posenc.build("sinusoidal", dim=8, base=100.0), Sinusoidal)
    assert isinstance(posenc.build("nope"), posenc.PositionalEncoding)


def test_unknown_name_lists_choices() -> None:
    with pytest.raises(
        ValueError, match=r"unknown positional encoding 'ropee'; choose one of .*'rope'"
    ):
        posenc.build("ropee")


def test_unknown_config_key_lists_valid_keys() -> None:
    with pytest.raises(
        ValueError, match=r"unknown config key\(s\) \['theta'\] for 'rope'; valid keys: head_dim"
    ):
        posenc.build("rope", head_dim=64, theta=10000.0)


def test_missing_required_key_is_named() -> None:
    with pytest.raises(ValueError, match=r"'learned' needs config key\(s\) \['dim'\]"):
        posenc.build("learned", max_len=8)


def test_build_for_model_passes_only_accepted_shared_keys() -> None:
    rope = posenc.build_for_model("rope", dim=64, n_heads=4, max_len=128)
    assert isinstance(rope, RoPE) and rope.head_dim == 16
    learned = posenc.build_for_model("learned", dim=64, n_heads=4, max_len=128)
    assert isinstance(learned, Learned) and learned.max_len == 128
    assert posenc.build_for_model("rope", dim=64, n_heads=4, max_len=8, base=50.0).base == 50.0


def test_registry_info_describes_each_encoding() -> None:
    for name in posenc.names():
        entry = posenc.info(name)
        assert entry.family and entry.paper and 2010 < entry.year < 2030
