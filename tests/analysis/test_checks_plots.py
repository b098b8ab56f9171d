"""Review of the property checks and the plots: false verdicts and plotted data that is not
what the axes say (scaled tables, wrapped encodings, partial rotary, training mode, inputs the
plot cannot draw). Expected values come from closed forms, never from posenc's helpers."""

from __future__ import annotations

import math
from collections.abc import Callable

import matplotlib
import numpy as np
import pytest

import posenc
from posenc.analysis import CHECKS, all_checks, applicable, run_checks
from posenc.plots import (
    attention_grid,
    bias_heatmaps,
    contamination,
    dimension_waveforms,
    dot_vs_distance,
    encoding_heatmap,
    position_features,
    qk_by_distance,
    qk_vs_distance,
    rotation_pair,
    shift_matrix_blocks,
)

matplotlib.use("Agg")
all_checks()  # fill CHECKS


def _failed(results: list) -> list:
    return [(r.name, r.error, r.detail) for r in results if not r.passed]


@pytest.mark.parametrize("scale", [2.0, 1e-4])
def test_table_checks_pass_a_scaled_sinusoidal_table(scale: float) -> None:
    # Sinusoidal adds scale·PE: the entries of PE itself stay in [-1, 1] and its rows stay
    # apart. table_bounded read scale·PE and failed at scale 2 (error 2.0); table_unique_rows
    # failed at a small scale (closest pair 1.3e-4 < 1e-3).
    pe = posenc.build("sinusoidal", dim=32, scale=scale)
    results = run_checks([pe])
    assert {"table_bounded", "table_unique_rows"} <= {r.name for r in results}
    assert not _failed(results), _failed(results)


def test_checks_see_the_geometry_of_a_randomized_rope() -> None:
    # Randomized keeps head_dim on its base encoding: the checks fed (B, 4, T, 8) q/k to a
    # head_dim-64 RoPE, every model check FAILed with "q/k must have head_dim=64 features"
    # and the rotary checks did not apply at all
    pe = posenc.build("randomized", max_len=256, head_dim=64).eval()
    names = {c.name for c in applicable(pe)}
    assert {"rotation_norm_preserved", "rotary_relative", "shift_invariant"} <= names
    results = run_checks([pe])
    assert not _failed(results), _failed(results)


def test_checks_see_the_geometry_of_a_randomized_sinusoidal() -> None:
    # with dim on the base encoding the additivity probe failed, so the table checks were
    # skipped and shift_invariant (blind to embed) passed an absolute encoding vacuously
    pe = posenc.build("randomized", max_len=256, base_encoding="sinusoidal", dim=64).eval()
    names = {c.name for c in applicable(pe)}
    assert {"table_bounded", "table_unique_rows"} <= names
    assert "shift_invariant" not in names
    results = run_checks([pe])
    assert not _failed(results), _failed(results)


def _partial_rope_features(n: int, layout: str) -> np.ndarray:
    """The unit (1, 0) in each of the 2 rotated pairs of head_dim 8, rotary_dim 4, turned to
    positions 0..n-1 with θ_i = 10000^(-2i/4); the 4 pass-through features stay 0."""
    out = np.zeros((n, 8))
    for i in range(2):
        angle = np.arange(n) * 10000.0 ** (-2 * i / 4)
        a, b = (i, i + 2) if layout == "half" else (2 * i, 2 * i + 1)
        out[:, a], out[:, b] = np.cos(angle), np.sin(angle)
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_partial_rope_features_are_a_rotated_unit_vector(layout: str) -> None:
    # "half" pairs feature i with i + rotary_dim/2, not i + head_dim/2: the unit vector had
    # (1, 1) in each rotated pair, so the heatmap showed cos - sin and cos + sin
    pe = posenc.build("rope", head_dim=8, partial=0.5, layout=layout)
    got = position_features(pe, 16)
    np.testing.assert_allclose(got, _partial_rope_features(16, layout), atol=1e-12)
    image = encoding_heatmap(pe, n_positions=16).axes[0].images[0].get_array()
    np.testing.assert_allclose(image, _partial_rope_features(16, layout), atol=1e-12)


def test_partial_rope_rotation_pair_walks_the_unit_circle() -> None:
    # pair 1 of a half-layout rope with rotary_dim 4 is (feature 1, feature 3); the plot
    # paired feature 1 with feature 5 (pass-through, always 0): points on a line, not a circle
    pe = posenc.build("rope", head_dim=8, partial=0.5)
    ax = rotation_pair(pe, pair=1, n_positions=16).axes[0]
    points = np.asarray(ax.collections[0].get_offsets())
    t = 10000.0 ** (-2 / 4)
    expected = np.stack([np.cos(np.arange(16) * t), np.sin(np.arange(16) * t)], 1)
    np.testing.assert_allclose(points, expected, atol=1e-12)
    with pytest.raises(ValueError, match=r"pair must lie in 0\.\.1"):
        rotation_pair(pe, pair=2)


def test_partial_rope_default_waveforms_are_rotating_features() -> None:
    pe = posenc.build("rope", head_dim=8, partial=0.5)
    ax = dimension_waveforms(pe, n_positions=16).axes[0]
    assert [line.get_label() for line in ax.lines] == ["dim 0", "dim 1"]  # pair 0, pair 1


def test_randomized_rope_features_follow_the_base_layout() -> None:
    pe = posenc.build(
        "randomized", max_len=256, head_dim=8, base_config={"layout": "interleaved"}
    ).eval()
    angle = np.arange(6)[:, None] * 10000.0 ** (-2 * np.arange(4) / 8)  # (T, P)
    expected = np.stack([np.cos(angle), np.sin(angle)], -1).reshape(6, 8)  # interleaved
    np.testing.assert_allclose(position_features(pe, 6), expected, atol=1e-12)


def test_plots_draw_a_training_mode_encoding_at_the_stated_positions() -> None:
    # posenc.build returns training mode, where Randomized samples random positions: the
    # heatmap row 0 was not the unit vector and q·k at distance 0 came out 0.93, not D = 8
    pe = posenc.build("randomized", max_len=256, head_dim=8)
    assert pe.training
    angle = np.arange(5)[:, None] * 10000.0 ** (-2 * np.arange(4) / 8)  # (T, P)
    expected = np.concatenate([np.cos(angle), np.sin(angle)], 1)  # half layout
    np.testing.assert_allclose(position_features(pe, 5), expected, atol=1e-12)
    qk = [2 * sum(math.cos(d * 10000.0 ** (-2 * i / 8)) for i in range(4)) for d in range(5)]
    np.testing.assert_allclose(qk_by_distance(pe, 5), qk, atol=1e-12)
    assert pe.training  # restored
    table = posenc.build("randomized", max_len=256, base_encoding="sinusoidal", dim=8)
    ax = dot_vs_distance(table, n_positions=5).axes[0]
    dots = [sum(math.cos(d * 10000.0 ** (-2 * i / 8)) for i in range(4)) for d in range(5)]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), dots, atol=1e-12)
    assert table.training


def test_plots_refuse_encodings_they_cannot_draw() -> None:
    # each drew a flat line of zeros (or the identity's constant) labelled as the property
    with pytest.raises(ValueError, match="additive"):
        contamination("rope")
    with pytest.raises(ValueError, match="additive"):
        contamination("alibi")
    with pytest.raises(ValueError, match="rotary"):
        qk_vs_distance(["alibi"])
    with pytest.raises(ValueError, match="rotary"):
        qk_vs_distance(["sinusoidal"])
    with pytest.raises(ValueError, match="sinusoidal"):
        shift_matrix_blocks("rope")


@pytest.mark.parametrize(
    "draw",
    [
        lambda: encoding_heatmap("rope", n_positions=0),
        lambda: encoding_heatmap("sinusoidal", n_positions=-3),
        lambda: dot_vs_distance("sinusoidal", n_positions=0),
        lambda: contamination("sinusoidal", n_positions=0),
        lambda: rotation_pair("rope", n_positions=0),
        lambda: qk_vs_distance(["rope"], n_distances=0),
        lambda: bias_heatmaps("alibi", n_positions=0),
        lambda: shift_matrix_blocks("sinusoidal", n_dims=0),
        lambda: attention_grid(["rope"], head=9),
        lambda: attention_grid(["rope"], head=-1),
    ],
)
def test_plot_sizes_are_validated(draw: Callable[[], object]) -> None:
    # numpy's "zero-size array to reduction operation", torch's "Dimension size must be
    # non-negative", an IndexError, or a figure of nothing / of the last head
    with pytest.raises(ValueError, match=r"must be|must lie in"):
        draw()


@pytest.mark.parametrize(("dim", "base"), [(512, 1000.0), (64, 100.0), (128, 10.0), (32, 5e5)])
def test_dot_decay_check_passes_sinusoids_of_other_bases(dim: int, base: float) -> None:
    # Σ_i cos(d·θ_i) falls until the slowest pair's quarter turn, then swings back towards 0:
    # over 4096 positions the check failed these tables (dim 512, base 1000: error 0.05)
    result = CHECKS["table_dot_decays"](posenc.build("sinusoidal", dim=dim, base=base))
    assert result.passed, (result.error, result.detail)


def test_dot_decay_check_skips_tables_too_coarse_to_average() -> None:
    # 4 pairs a decade apart: the sum ripples (octave means 0.57 -> 0.80), by construction
    assert "table_dot_decays" not in {c.name for c in applicable(posenc.build("sinusoidal", dim=8))}


@pytest.mark.parametrize("dim", [2, 6, 30])
def test_model_checks_run_on_a_width_not_divisible_by_four_heads(dim: int) -> None:
    # the model checks built 4 heads of width dim/4: "d_model must be divisible by n_heads"
    results = run_checks([posenc.build("sinusoidal", dim=dim)], only=["order_sensitive"])
    assert len(results) == 1 and results[0].passed, results[0].detail


def test_check_cli_refuses_to_pass_when_no_check_ran() -> None:
    # printed an empty table "0 passed, 0 failed" and exited 0: a CI gate on a check that
    # does not apply to the encoding passed without checking anything
    from typer.testing import CliRunner

    from posenc.cli import app

    result = CliRunner().invoke(
        app, ["check", "rope", "--only", "table_bounded"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2 and "applies to" in result.output
