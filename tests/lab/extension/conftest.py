"""A tiny extension-lab configuration (every unit in about a tenth of a second) and one run of
it shared by the tests that read results."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.lab.extension import ExtendConfig, run_extend

TINY = ExtendConfig(
    name="tiny",
    context=24,
    factors=(2,),
    seeds=(0, 1),
    d_model=16,
    n_layers=1,
    n_heads=2,
    steps=4,
    batch=4,
    warmup=1,
    ft_fraction=0.5,
    eval_tokens=96,
    bucket=8,
    depths=(0.0, 1.0),
    trials=1,
    window=8,
    sinks=2,
    stream_rows=1,
    search_generations=1,
    search_children=1,
    search_windows=2,
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of one in-process run of ``TINY``."""
    out = tmp_path_factory.mktemp("extend")
    outcome = run_extend(TINY, out, workers=1, log=lambda line: None)
    assert outcome.failed == {}
    return out
