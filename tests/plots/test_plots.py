"""Each plot draws the right data with readable labels, for every encoding it applies to.

Expected values come from tests/reference (float64, written from the papers) or from closed
forms (cos sums, 2π·base^(2i/d)), never from posenc's own plotting helpers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import posenc
from posenc import info
from posenc.analysis import subject
from posenc.analysis.subjects import HEAD_DIM, N_HEADS, subject_names
from posenc.plots import (
    PLOTS,
    alibi_slopes,
    attention_decay,
    attention_heatmap,
    bias_heatmaps,
    contamination,
    contamination_dims,
    contamination_stats,
    dimension_waveforms,
    dot_vs_distance,
    encoding_heatmap,
    extension_scales,
    model_attention,
    qk_vs_distance,
    rotation_pair,
    shift_matrix_blocks,
    similarity_matrix,
    wavelengths,
)
from tests.reference import absolute as ref_absolute
from tests.reference import bias as ref_bias

PAIRS = [
    (kind.name, name)
    for kind in PLOTS.values()
    if kind.applies is not None
    for name in subject_names()
    if kind.applies(subject(name))
]


def _labelled(fig: Figure) -> None:
    """Every axes and colorbar names what it shows; some axes names both x and y (panels
    in a row may share the y label, a twin axis shares x)."""
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            assert ax.get_ylabel() or ax.get_xlabel(), "colorbar without a label"
        elif ax.has_data():
            assert ax.get_xlabel() or ax.get_ylabel(), f"unlabelled axes {ax.get_title()!r}"
    assert any(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)


@pytest.mark.parametrize(("kind", "name"), PAIRS)
def test_every_kind_draws_every_applicable_encoding(kind: str, name: str) -> None:
    fig = PLOTS[kind]([name])
    assert isinstance(fig, Figure)
    _labelled(fig)
    data = [np.asarray(im.get_array()) for ax in fig.axes for im in ax.images]
    data += [np.asarray(line.get_ydata()) for ax in fig.axes for line in ax.lines]
    data += [np.asarray(c.get_offsets()) for ax in fig.axes for c in ax.collections]
    data += [np.asarray([b.get_height() for b in c]) for ax in fig.axes for c in ax.containers]
    assert data and all(np.isfinite(d).all() for d in data if d.dtype.kind == "f")
    assert any(np.ptp(d) > 0 for d in data if d.size > 1), "every plotted array is constant"


def test_kinds_cover_every_encoding_with_attention() -> None:
    covered = {name for kind, name in PAIRS if kind == "attention"}
    # but those computing attention from the data (FoX, stick-breaking, PaTH): no weights
    weighted = {n for n in subject_names() if not subject(n).capabilities.attention_form}
    assert covered == weighted


def test_sinusoidal_heatmap_is_the_reference_table() -> None:
    ax = encoding_heatmap("sinusoidal", n_positions=50).axes[0]
    np.testing.assert_allclose(
        ax.images[0].get_array(), ref_absolute.sinusoidal(50, 32), atol=1e-12
    )
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("dimension", "position")


def test_rope_heatmap_is_a_rotated_unit_vector() -> None:
    got = np.asarray(encoding_heatmap("rope", n_positions=20).axes[0].images[0].get_array())
    P = HEAD_DIM // 2
    theta = 10000.0 ** (-np.arange(P) * 2 / HEAD_DIM)
    angle = np.arange(20)[:, None] * theta
    np.testing.assert_allclose(got, np.concatenate([np.cos(angle), np.sin(angle)], 1), atol=1e-12)


def test_similarity_is_cosine_of_reference_rows() -> None:
    got = np.asarray(similarity_matrix("sinusoidal", n_positions=30).axes[0].images[0].get_array())
    table = ref_absolute.sinusoidal(30, 32)
    cos = np.array([[a @ b / np.linalg.norm(a) / np.linalg.norm(b) for b in table] for a in table])
    np.testing.assert_allclose(got, cos, atol=1e-12)
    np.testing.assert_allclose(np.diag(got), 1.0, atol=1e-12)


def test_waveforms_plot_the_chosen_columns() -> None:
    ax = dimension_waveforms("sinusoidal", dims=(0, 3), n_positions=40).axes[0]
    table = ref_absolute.sinusoidal(40, 32)
    assert [line.get_label() for line in ax.lines] == ["dim 0", "dim 3"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), table[:, 0], atol=1e-12)
    np.testing.assert_allclose(ax.lines[1].get_ydata(), table[:, 3], atol=1e-12)


def test_dot_product_is_a_cosine_sum() -> None:
    ax = dot_vs_distance("sinusoidal", n_positions=100).axes[0]
    theta = 10000.0 ** (-np.arange(16) * 2 / 32)
    expected = [sum(math.cos(d * t) for t in theta) for d in range(100)]  # sin·sin + cos·cos
    np.testing.assert_allclose(ax.lines[0].get_ydata(), expected, atol=1e-12)
    assert "distance" in ax.get_xlabel()


def test_contamination_norms_and_angle() -> None:
    fig = contamination("sinusoidal", n_positions=64)
    ax, twin = fig.axes[0], fig.axes[1]
    token, position, combined = (np.asarray(line.get_ydata()) for line in ax.lines)
    np.testing.assert_allclose(position, math.sqrt(16), atol=1e-12)  # sin² + cos² per pair
    table = ref_absolute.sinusoidal(64, 32)
    e_norm = token[0]
    assert np.all(combined <= e_norm + position + 1e-12)  # triangle inequality
    angle = np.asarray(twin.lines[0].get_ydata())
    assert np.all((angle > 0) & (angle < 180)) and twin.get_ylabel() == "angle (degrees)"
    # |e + PE|² = |e|² + |PE|² + 2 e·PE and cos(angle) = (|e|² + e·PE) / (|e| |e + PE|)
    e_dot_pe = (combined**2 - e_norm**2 - position**2) / 2
    np.testing.assert_allclose(
        np.cos(np.radians(angle)), (e_norm**2 + e_dot_pe) / (e_norm * combined), atol=1e-9
    )
    assert table.shape == (64, 32)


def test_wavelengths_follow_the_base() -> None:
    ax = wavelengths(["sinusoidal", "rope"], train_len=100).axes[0]
    sin_line, rope_line, train = ax.lines
    np.testing.assert_allclose(sin_line.get_ydata(), 2 * np.pi * 10000.0 ** (np.arange(16) / 16))
    np.testing.assert_allclose(
        rope_line.get_ydata(), 2 * np.pi * 10000.0 ** (np.arange(4) * 2 / HEAD_DIM)
    )
    assert ax.get_yscale() == "log" and list(train.get_ydata()) == [100, 100]


def test_shift_matrix_is_block_rotation() -> None:
    M = np.asarray(shift_matrix_blocks("sinusoidal", k=3, n_dims=8).axes[0].images[0].get_array())
    for i in range(4):
        t = 3 * 10000.0 ** (-2 * i / 32)
        np.testing.assert_allclose(
            M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2],
            [[math.cos(t), math.sin(t)], [-math.sin(t), math.cos(t)]],
            atol=1e-12,
        )
    mask = np.kron(np.eye(4), np.ones((2, 2))) == 0
    assert np.all(M[mask] == 0)
    table = ref_absolute.sinusoidal(20, 32)[:, :8]
    np.testing.assert_allclose(table[:-3] @ M.T, table[3:], atol=1e-12)  # PE[p+3] = M_3 PE[p]


def test_odd_width_tables_draw_wavelengths_and_the_shift_matrix() -> None:
    """Seed 000's table (width 9, base 100): five frequencies, the last the sine-only column's
    base^(-8/9); M_k spans the eight paired columns and shifts them (n_dims capped there)."""
    pe = subject("sinusoidal", dim=9, base=100.0)
    (line,) = wavelengths([pe], train_len=None).axes[0].lines
    np.testing.assert_allclose(line.get_ydata(), 2 * np.pi * 100.0 ** (np.arange(0, 9, 2) / 9))
    fig = shift_matrix_blocks(pe, k=2, n_dims=16)
    M = np.asarray(fig.axes[0].images[0].get_array())
    assert M.shape == (8, 8)
    table = ref_absolute.sinusoidal(15, 9, 100.0)
    np.testing.assert_allclose(table[:-2, :8] @ M.T, table[2:, :8], atol=1e-13)


def test_rotation_pair_walks_the_unit_circle() -> None:
    ax = rotation_pair("rope", pair=1, n_positions=16).axes[0]
    points = np.asarray(ax.collections[0].get_offsets())
    t = 10000.0 ** (-2 / HEAD_DIM)
    expected = np.stack([np.cos(np.arange(16) * t), np.sin(np.arange(16) * t)], 1)
    np.testing.assert_allclose(points, expected, atol=1e-12)


def test_qk_vs_distance_is_the_rope_cosine_sum() -> None:
    ax = qk_vs_distance(["rope"], n_distances=64).axes[0]
    theta = 10000.0 ** (-np.arange(4) * 2 / HEAD_DIM)
    expected = [2 * sum(math.cos(d * t) for t in theta) for d in range(64)]  # q = k = 1
    np.testing.assert_allclose(ax.lines[0].get_ydata(), expected, atol=1e-12)


def test_alibi_heatmaps_are_the_reference_bias() -> None:
    fig = bias_heatmaps("alibi", n_positions=12)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == N_HEADS
    pos = np.arange(12)
    expected = ref_bias.alibi(pos, pos, ref_bias.alibi_slopes(N_HEADS), False)  # (H, T, T)
    for h, ax in enumerate(panels):
        np.testing.assert_allclose(ax.images[0].get_array(), np.asarray(expected)[0, h], atol=1e-6)
        assert ax.get_title() == f"head {h}"


def test_alibi_slopes_plot() -> None:
    ax = alibi_slopes((8, 16)).axes[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), 2.0 ** (-np.arange(1, 9)))
    np.testing.assert_allclose(ax.lines[1].get_ydata(), 2.0 ** (-np.arange(1, 17) / 2))


def test_extension_scales_per_method() -> None:
    ax = extension_scales(("linear", "ntk"), dim=16).axes[0]
    linear, ntk = ax.lines[0].get_ydata(), ax.lines[1].get_ydata()
    np.testing.assert_allclose(linear, 0.25)
    np.testing.assert_allclose(ntk, 4.0 ** (-np.arange(8) / 7))  # base·s^(d/(d-2))
    np.testing.assert_allclose(ax.lines[0].get_xdata(), 2 * np.pi * 10000 ** (np.arange(8) / 8))


def test_attention_heatmap_rows_are_distributions() -> None:
    weights = np.asarray(attention_heatmap("alibi", n_positions=10).axes[0].images[0].get_array())
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-12)
    assert np.all(np.triu(weights, 1) == 0)


def test_same_token_attention_is_the_encodings_pattern() -> None:
    # identical tokens give identical content scores: NoPE is uniform over visible keys,
    # ALiBi is softmax_j(-m_h (i - j)) exactly
    T = 12
    nope = model_attention("nope", n_positions=T)
    i, j = np.indices((T, T))
    uniform = np.where(j <= i, 1.0 / (i + 1), 0.0)
    np.testing.assert_allclose(nope, np.broadcast_to(uniform, nope.shape), atol=1e-12)
    alibi = model_attention("alibi", n_positions=T)
    for h, m in enumerate(ref_bias.alibi_slopes(N_HEADS)):
        logits = np.where(j <= i, -m * (i - j), -np.inf)
        expected = np.exp(logits - logits.max(-1, keepdims=True))
        np.testing.assert_allclose(alibi[h], expected / expected.sum(-1, keepdims=True), atol=1e-12)


def _alibi_rows(T: int) -> np.ndarray:
    """Causal ALiBi attention on identical content, from the reference slopes: (H, T, T)."""
    i, j = np.indices((T, T))
    slopes = np.asarray(ref_bias.alibi_slopes(N_HEADS))[:, None, None]  # (H, 1, 1)
    logits = np.where(j <= i, -slopes * (i - j), -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


def test_attention_decay_by_distance_and_entropy() -> None:
    T, lengths = 16, (4, 8, 32)
    fig = attention_decay(["nope", "alibi"], n_positions=T, lengths=lengths)
    left, right = fig.axes
    ln_t, nope_h, alibi_h = right.lines
    # by distance: NoPE puts 1/(i + 1) on each visible key; the mean over queries i >= d
    nope_d = [np.mean([1.0 / (i + 1) for i in range(d, T)]) for d in range(T)]
    np.testing.assert_allclose(left.lines[0].get_ydata(), nope_d, atol=1e-12)
    alibi = _alibi_rows(T)
    alibi_d = [np.mean([alibi[:, i, i - d] for i in range(d, T)]) for d in range(T)]
    np.testing.assert_allclose(left.lines[1].get_ydata(), alibi_d, atol=1e-12)
    # entropy of the last query: ln T for uniform attention, below it for ALiBi
    np.testing.assert_allclose(ln_t.get_ydata(), np.log(lengths), atol=1e-12)
    np.testing.assert_allclose(nope_h.get_ydata(), np.log(lengths), atol=1e-12)
    expected = []
    for n in lengths:
        last = _alibi_rows(n)[:, -1]  # (H, T)
        expected.append(float(np.mean([-sum(p * math.log(p) for p in row) for row in last])))
    np.testing.assert_allclose(alibi_h.get_ydata(), expected, atol=1e-12)
    assert np.all(np.asarray(alibi_h.get_ydata()) < np.log(lengths))
    assert [line.get_label() for line in right.lines] == ["ln T (uniform)", "nope", "alibi"]
    assert left.get_yscale() == "log" and right.get_xlabel() == "length T"


def test_plot_draws_into_a_given_axes() -> None:
    fig = Figure()
    ax = fig.add_subplot()
    assert wavelengths(["rope"], ax=ax) is fig and ax.lines


def test_bad_requests_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="additive or rotary"):
        encoding_heatmap("alibi")
    with pytest.raises(ValueError, match="no score bias"):
        bias_heatmaps("rope")
    with pytest.raises(ValueError, match="dims must lie in"):
        dimension_waveforms("sinusoidal", dims=(99,))
    with pytest.raises(ValueError, match="pair must lie in"):
        rotation_pair("rope", pair=4)
    with pytest.raises(ValueError, match="head must lie in"):
        attention_heatmap("rope", head=9)
    with pytest.raises(ValueError, match="no frequencies"):
        wavelengths(["learned"])
    with pytest.raises(ValueError, match="method must be one of"):
        extension_scales(("bogus",))
    with pytest.raises(ValueError, match="exactly one encoding"):
        PLOTS["heatmap"](["rope", "sinusoidal"])
    with pytest.raises(ValueError, match="does not apply"):
        PLOTS["bias"](["rope"])
    with pytest.raises(ValueError, match="two Axes"):
        attention_decay(["nope"], axes=[Figure().add_subplot()])
    with pytest.raises(ValueError, match="one Axes per head"):
        bias_heatmaps("alibi", axes=[Figure().add_subplot()])


#: Every kind that draws a legend, with small arguments; attention-decay with every subject
#: (its legend of 20+ entries covered the data).
LEGENDS = {
    "waveforms": (["sinusoidal"], {"n_positions": 32}),
    "contamination": (["sinusoidal"], {"n_positions": 32}),
    "contamination-dims": (["sinusoidal"], {}),
    "wavelengths": (["rope", "xpos", "rope:yarn"], {}),
    "qk-distance": (["rope", "xpos", "rope:linear"], {"n_distances": 32}),
    "attention-decay": (
        [n for n in subject_names() if PLOTS["attention-decay"].applies(subject(n))],
        {"n_positions": 8, "lengths": (4, 8)},
    ),
    "sections": (["mrope"], {}),
    "extension": ([], {}),
    "alibi-slopes": ([], {}),
}


@pytest.mark.parametrize("kind", sorted(LEGENDS))
def test_legends_stay_outside_the_data(kind: str) -> None:
    """A legend covers no axes, nor a twin's tick labels and axis label on the right."""
    names, options = LEGENDS[kind]
    fig = PLOTS[kind](names, **options)
    canvas = FigureCanvasAgg(fig)  # a Figure alone has the base canvas, which draws nothing
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert len(legends) == 1
    boxes = [ax.get_window_extent() for ax in fig.axes]
    boxes += [ax.yaxis.get_tightbbox(renderer) for ax in fig.axes]
    legend = legends[0].get_window_extent()
    assert not [b for b in boxes if b is not None and legend.overlaps(b)]
    assert fig.bbox.contains(legend.x0, legend.y0) and fig.bbox.contains(legend.x1, legend.y1)


def test_every_kind_with_a_legend_is_checked() -> None:
    first = dict(reversed(PAIRS))  # kind -> one encoding it applies to
    for kind in sorted(set(PLOTS) - set(LEGENDS)):
        fig = PLOTS[kind]([first[kind]]) if kind in first else PLOTS[kind]()
        assert not fig.legends and not any(ax.get_legend() for ax in fig.axes), kind


def test_the_tutorials_annotated_table_is_the_cropped_reference() -> None:
    """Seed 003's 11 x 11 table of a 64-wide sinusoidal table: the values, each written in its
    cell with two decimals, and sin/cos named above the columns."""
    pe = subject("sinusoidal", dim=64)
    ax = encoding_heatmap(pe, n_positions=11, n_dims=11, annotate=True).axes[0]
    table = ref_absolute.sinusoidal(11, 64)[:, :11]
    np.testing.assert_allclose(ax.images[0].get_array(), table, atol=1e-12)
    written = {(round(t.get_position()[1]), round(t.get_position()[0])): t for t in ax.texts}
    assert len(written) == 121
    for (r, c), text in written.items():
        assert text.get_text() == f"{table[r, c]:.2f}"
    (top,) = ax.child_axes
    labels = [t.get_text() for t in top.get_xticklabels()]
    assert labels == ["sin", "cos"] * 5 + ["sin"]
    with pytest.raises(ValueError, match="annotate writes at most 1024 values"):
        encoding_heatmap(pe, n_positions=64, annotate=True)
    with pytest.raises(ValueError, match="n_dims - 1 must lie in"):
        encoding_heatmap(pe, n_dims=65)


@pytest.mark.parametrize(("name", "dim"), [("sinusoidal", 32), ("sinusoidal", 9), ("rope", 0)])
def test_split_heatmap_puts_sine_and_cosine_columns_apart(name: str, dim: int) -> None:
    """Additive tables: sin at even columns (an odd width's last one too), cos at odd ones;
    rotary features R_p (1, 0) = (cos pθ_i, sin pθ_i) in each (i, i + P) pair."""
    pe = posenc.build(name, dim=dim) if dim else subject(name)
    fig = encoding_heatmap(pe, n_positions=20, split=True)
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["sin columns", "cos columns"]
    if name == "sinusoidal":
        table = ref_absolute.sinusoidal(20, dim)
        sin, cos = table[:, 0::2], table[:, 1::2]
    else:
        P = HEAD_DIM // 2
        angle = np.arange(20)[:, None] * 10000.0 ** (-np.arange(P) * 2 / HEAD_DIM)
        sin, cos = np.sin(angle), np.cos(angle)
    np.testing.assert_allclose(panels[0].images[0].get_array(), sin, atol=1e-12)
    np.testing.assert_allclose(panels[1].images[0].get_array(), cos, atol=1e-12)
    assert panels[0].images[0].get_clim() == panels[1].images[0].get_clim()  # one scale
    with pytest.raises(ValueError, match="split draws two panels"):
        encoding_heatmap(pe, split=True, ax=Figure().add_subplot())


def test_split_waveforms_draw_sine_columns_above_cosine_columns() -> None:
    """Seed 003, section 5: dims 0, 1, 2, 3, 10, 11 of a 64-wide table, sines in the upper
    panel and cosines in the lower."""
    pe = subject("sinusoidal", dim=64)
    fig = dimension_waveforms(pe, dims=(0, 1, 2, 3, 10, 11), n_positions=50, split=True)
    upper, lower = fig.axes
    table = ref_absolute.sinusoidal(50, 64)
    for ax, dims in ((upper, (0, 2, 10)), (lower, (1, 3, 11))):
        assert [line.get_label() for line in ax.lines] == [f"dim {d}" for d in dims]
        for line, d in zip(ax.lines, dims, strict=True):
            np.testing.assert_allclose(line.get_ydata(), table[:, d], atol=1e-12)
    assert "sin" in upper.get_title() and "cos" in lower.get_title()
    default = dimension_waveforms("sinusoidal", split=True)  # both features of four pairs
    assert [len(ax.lines) for ax in default.axes if ax.lines] == [4, 4]


def test_token_scale_and_the_tutorials_52_degrees() -> None:
    """Seed 003, section 10: e = 0.5·N(0, I) of width 128 plus the sinusoidal row 0 (norm 8).
    The tutorial printed 52.12° for its draw; seed 0 gives 52°, and over draws the angle
    centres on arctan(|PE[0]| / (0.5·sqrt(128))) = 54.7°."""
    pe = subject("sinusoidal", dim=128)
    stats = contamination_stats(pe, 1, seed=0, token_scale=0.5)
    assert round(float(stats["angle"][0])) == 52
    np.testing.assert_allclose(stats["position"][0], 8.0, atol=1e-12)
    unit = contamination_stats(pe, 1, seed=0)
    np.testing.assert_allclose(stats["token"], 0.5 * unit["token"], rtol=1e-12)
    angles = [contamination_stats(pe, 1, seed=s, token_scale=0.5)["angle"][0] for s in range(300)]
    expected = math.degrees(math.atan(8.0 / (0.5 * math.sqrt(128))))
    assert abs(float(np.median(angles)) - expected) < 0.5
    assert np.percentile(angles, 10) < 52.12 < np.percentile(angles, 90)
    with pytest.raises(ValueError, match="token_scale must be a finite number > 0"):
        contamination_stats(pe, 4, token_scale=0.0)


def test_per_dimension_contamination_bars() -> None:
    """Bars of e, PE[p] and e + PE[p] over the first dimensions, the angle in the title: the e of
    ``contamination_stats`` for the same seed and scale."""
    pe = subject("sinusoidal", dim=128)
    ax = contamination_dims(pe, position=3, n_dims=12, token_scale=0.5, seed=2).axes[0]
    token, table_row, mixed = ([b.get_height() for b in c] for c in ax.containers)
    expected_row = ref_absolute.sinusoidal(4, 128)[3, :12]
    np.testing.assert_allclose(table_row, expected_row, atol=1e-12)
    np.testing.assert_allclose(np.asarray(mixed), np.asarray(token) + expected_row, atol=1e-12)
    stats = contamination_stats(pe, 4, seed=2, token_scale=0.5)
    assert f"{stats['angle'][3]:.1f}°" in ax.get_title()
    e_norm = float(stats["token"][0])
    assert np.linalg.norm(token) <= e_norm  # the first 12 of its 128 features
    with pytest.raises(ValueError, match="n_dims - 1 must lie in"):
        contamination_dims(pe, n_dims=129)


def test_causal_bias_is_drawn_with_its_mask() -> None:
    """ALiBi's -m·(i - j) is positive for keys after the query, which causal attention never
    sees: they are masked (drawn grey), the colour scale spans the visible entries, and none of
    them is a reward. Encoder forms (bidirectional T5, symmetric ALiBi) show every pair."""
    fig = bias_heatmaps("alibi", n_positions=10)
    future = np.triu(np.ones((10, 10), dtype=bool), k=1)
    pos = np.arange(10)
    expected = np.asarray(ref_bias.alibi(pos, pos, ref_bias.alibi_slopes(N_HEADS), False))[0]
    images = [ax.images[0] for ax in fig.axes if ax.images]
    for h, image in enumerate(images):
        shown = image.get_array()
        assert np.array_equal(np.ma.getmaskarray(shown), future)
        np.testing.assert_allclose(shown[~future], expected[h][~future], atol=1e-6)
        assert (shown[~future] <= 0).all()
        assert image.get_clim()[1] == pytest.approx(np.abs(expected[:, ~future]).max(), rel=1e-6)
    assert fig.get_suptitle().startswith("alibi: score bias per head (causal")
    alibi_key = next(k for k in ("bidirectional", "symmetric") if k in info("alibi").parameters)
    for name, config in (("t5", {"bidirectional": True}), ("alibi", {alibi_key: True})):
        open_fig = bias_heatmaps(subject(name, **config), n_positions=6)
        shown = next(ax.images[0] for ax in open_fig.axes if ax.images).get_array()
        assert not np.ma.getmaskarray(shown).any(), name
    forced = bias_heatmaps("alibi", n_positions=6, causal=False)
    shown = next(ax.images[0] for ax in forced.axes if ax.images).get_array()
    assert not np.ma.getmaskarray(shown).any()


def _layer() -> tuple[posenc.Attention, torch.Tensor]:
    torch.manual_seed(0)
    layer = posenc.Attention(32, 8, pe=posenc.build("alibi", n_heads=8), causal=True).double()
    return layer, torch.randn(2, 20, 32, dtype=torch.float64)


def test_attention_weights_draws_a_users_own_layer_head_by_head() -> None:
    """Seed 001's 2 x 2 heads of one's own layer, on one colour scale; ``average``: seed 003's
    one map, the mean over heads (nn.MultiheadAttention's). The panels are the layer's
    ``return_weights``."""
    from posenc.plots import attention_weights, weights_of

    layer, x = _layer()
    with torch.no_grad():
        _, want = layer(x, return_weights=True)
    fig = attention_weights(layer, x)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 4
    for h, image in enumerate(images):
        np.testing.assert_allclose(np.asarray(image.get_array()), want[0, h].numpy())
        assert image.get_clim() == images[0].get_clim() and image.get_clim()[0] == 0.0
    (mean,) = [ax.images[0] for ax in attention_weights(layer, x, average=True).axes if ax.images]
    np.testing.assert_allclose(np.asarray(mean.get_array()), want[0].mean(0).numpy())
    np.testing.assert_allclose(weights_of(layer, x), want.numpy())
    with pytest.raises(ValueError, match=r"head must lie in 0\.\.7"):
        attention_weights(layer, x, heads=[8])
    with pytest.raises(TypeError, match="expected a posenc Attention layer"):
        attention_weights(torch.nn.Linear(2, 2), x)  # type: ignore[arg-type]


def test_attention_weights_of_a_model_layer_are_its_layers_own() -> None:
    from posenc.plots import attention_weights, weights_of

    torch.manual_seed(0)
    model = posenc.TinyTransformer(vocab_size=11, pe="sinusoidal", d_model=32, n_layers=2)
    model = model.train()  # drawn in eval mode, the mode restored
    idx = torch.randint(0, 11, (1, 12), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():  # layer 1's input by hand: embed, block 0, norm
        x = model.pe.embed(model.tok(idx), torch.arange(12))
        x = model.blocks[0](x, model.new_context(model.pe, None, 1, 12, None, x), None)
        _, want = model.blocks[1].attn(model.blocks[1].norm1(x), return_weights=True)
    model.train()
    np.testing.assert_allclose(weights_of(model, idx, layer=1), want.numpy(), atol=1e-6)
    assert model.training
    labels = [f"t{i}" for i in range(12)]
    fig = attention_weights(model, idx, layer=1, heads=[0, 3], labels=labels)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == labels
    with pytest.raises(ValueError, match=r"layer must lie in 0\.\.1"):
        weights_of(model, idx, layer=2)


def test_heatmaps_of_few_positions_get_integer_ticks() -> None:
    fig = encoding_heatmap("sinusoidal", n_positions=20, n_dims=20)
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    for ticks in (ax.get_xticks(), ax.get_yticks()):
        assert len(ticks) and all(float(t).is_integer() for t in ticks), ticks


def test_compare_puts_encodings_side_by_side_on_one_scale() -> None:
    """Seed 001: sinusoidal and learned heatmaps (20 x 20) in one figure, one colour range;
    seed 004: heatmap, similarity, waveforms of one encoding in a row."""
    from posenc.plots import compare

    fig = compare(["sinusoidal", "learned"], n_positions=20, n_dims=20)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 2 and images[0].get_clim() == images[1].get_clim()
    assert np.asarray(images[1].get_array()).shape == (20, 20)
    lo, hi = images[0].get_clim()
    assert lo == -hi and hi >= 1.0  # symmetric, covering both tables
    row = compare(["sinusoidal"], ["heatmap", "similarity", "waveforms"], n_positions=50)
    titles = [ax.get_title() for ax in row.axes if ax.get_title()]
    assert titles == [
        "sinusoidal: features per position",
        "sinusoidal: cosine similarity",
        "sinusoidal: selected dimensions",
    ]
    waves = compare(["sinusoidal", "rope"], ["waveforms"])
    limits = [ax.get_ylim() for ax in waves.axes if ax.lines]
    assert len(limits) == 2 and limits[0] == limits[1]
    with pytest.raises(ValueError, match="cannot be a panel"):
        compare(["rope"], ["wavelengths"])
    with pytest.raises(ValueError, match=r"no plot among \[.heatmap.\] takes \[.frob.\]"):
        compare(["rope"], ["heatmap"], frob=1)
