"""``posenc plot KIND [NAME...] --out DIR`` through the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from posenc.cli import app
from posenc.cli.plot import _figures, parse_settings
from posenc.plots import PLOTS

runner = CliRunner()
ENV = {"COLUMNS": "200"}


def test_plot_writes_one_png_per_encoding(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plot", "heatmap", "sinusoidal", "rope", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in ("heatmap-sinusoidal.png", "heatmap-rope.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_plot_defaults_to_every_applicable_encoding_and_svg(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plot", "bias", "--out", str(tmp_path), "--format", "svg"])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["bias-alibi.svg", "bias-fire.svg", "bias-kerple.svg", "bias-t5.svg"]
    assert b"<svg" in (tmp_path / "bias-alibi.svg").read_bytes()[:500]


def test_overlay_and_global_kinds_write_one_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plot", "wavelengths", "rope", "xpos", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["plot", "extension", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["extension.png", "wavelengths.png"]


def test_help_lists_every_plot_kind_with_its_description() -> None:
    """``posenc plot --help`` listed no kinds; now one list item each, generated from PLOTS."""
    result = runner.invoke(app, ["plot", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    for name, kind in PLOTS.items():
        plain = kind.description.replace("``", "")  # reST literals shown as Markdown code
        assert f"• {name}: {plain}" in lines, name
    assert "--set" in result.output and "--format" in result.output  # the usual help remains


def test_bad_kind_format_or_encoding_is_a_usage_error(tmp_path: Path) -> None:
    out = ["--out", str(tmp_path)]
    result = runner.invoke(app, ["plot", "spiral", *out], env=ENV)
    assert result.exit_code == 2 and "unknown plot kind" in result.output
    result = runner.invoke(app, ["plot", "heatmap", "rope", "--format", "gif", *out], env=ENV)
    assert result.exit_code == 2 and "png or svg" in result.output
    result = runner.invoke(app, ["plot", "bias", "rope", *out], env=ENV)
    assert result.exit_code == 2 and "does not apply" in result.output
    assert not list(tmp_path.iterdir())


def test_set_routes_drawing_options_and_encoding_parameters() -> None:
    # seed 004's figure: d_model 128, 100 positions, dims 0, 1, 10, 20, 50
    settings = parse_settings(["dim=128", "dims=(0, 1, 10, 20, 50)", "n_positions=100"])
    assert settings == {"dim": 128, "dims": (0, 1, 10, 20, 50), "n_positions": 100}
    (fig,) = _figures("waveforms", PLOTS["waveforms"], ["sinusoidal"], settings).values()
    ax = fig.axes[0]
    pos, pair = np.arange(100)[:, None], np.arange(64)
    angles = pos / 10000.0 ** (2 * pair / 128)
    table = np.zeros((100, 128))
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    assert [line.get_label() for line in ax.lines] == [f"dim {d}" for d in (0, 1, 10, 20, 50)]
    for line, d in zip(ax.lines, (0, 1, 10, 20, 50), strict=True):
        np.testing.assert_allclose(line.get_ydata(), table[:, d], atol=1e-12)


def test_set_head_dim_gives_the_rope_decay_of_a_real_head() -> None:
    settings = parse_settings(["head_dim=64", "n_distances=40"])
    (fig,) = _figures(
        "qk-distance", PLOTS["qk-distance"], ["rope", "rope:linear"], settings
    ).values()
    rope, linear = fig.axes[0].lines
    inv_freq = 10000.0 ** (-np.arange(32) * 2 / 64)
    d = np.arange(40)[:, None]
    np.testing.assert_allclose(rope.get_ydata(), 2 * np.cos(d * inv_freq).sum(1), atol=1e-10)
    np.testing.assert_allclose(linear.get_ydata(), 2 * np.cos(d * inv_freq / 4).sum(1), atol=1e-10)


def test_names_of_global_kinds_fill_their_argument() -> None:
    (fig,) = _figures("alibi-slopes", PLOTS["alibi-slopes"], ["12"], {}).values()
    (line,) = fig.axes[0].lines
    # H = 12: the 8-head series, then every other term of the 16-head one
    expected = [*(2.0 ** -np.arange(1, 9)), *(2.0 ** -(np.arange(1, 8, 2) / 2))]
    np.testing.assert_allclose(line.get_ydata(), expected)
    (fig,) = _figures("extension", PLOTS["extension"], ["linear", "yarn"], {"dim": 16}).values()
    assert [line.get_label() for line in fig.axes[0].lines[:2]] == ["linear", "yarn"]
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), 0.25)


def test_set_through_the_cli(tmp_path: Path) -> None:
    out = ["--out", str(tmp_path)]
    result = runner.invoke(app, ["plot", "heatmap", "sinusoidal", "--set", "dim=64", *out])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "heatmap-sinusoidal.png").read_bytes()[:4] == b"\x89PNG"
    result = runner.invoke(app, ["plot", "alibi-slopes", "8", "12", *out])
    assert result.exit_code == 0, result.output
    bad = [
        (["plot", "heatmap", "rope", "--set", "bogus=1"], "unknown config key"),
        (["plot", "extension", "--set", "n_heads=2"], "draws no encoding"),
        (["plot", "heatmap", "sinusoidal", "--set", "dim"], "KEY=VALUE"),
        (["plot", "extension", "bogus"], "method must be one of"),
        (["plot", "similarity", "rope", "yarn"], "unknown"),
    ]
    for args, message in bad:
        result = runner.invoke(app, [*args, *out], env=ENV)
        assert result.exit_code == 2 and message in result.output, (args, result.output)


def test_the_tutorials_figures_from_the_command_line(tmp_path: Path) -> None:
    """Seed 003's pictures through ``--set``: the annotated 11 x 11 table, sine and cosine
    columns apart, the contamination at its token scale (per position and per dimension), and
    ALiBi's bias without its causal mask."""
    table = ("dim=64", "n_positions=11", "n_dims=11", "annotate=True")
    commands = [
        ["heatmap", "sinusoidal", *(arg for item in table for arg in ("--set", item))],
        ["waveforms", "sinusoidal", "--set", "split=True"],
        ["contamination", "sinusoidal", "--set", "dim=128", "--set", "token_scale=0.5"],
        ["contamination-dims", "sinusoidal", "--set", "dim=128", "--set", "token_scale=0.5"],
        ["bias", "alibi", "--set", "causal=False"],
    ]
    for command in commands:
        result = runner.invoke(app, ["plot", *command, "--out", str(tmp_path)], env=ENV)
        assert result.exit_code == 0, result.output
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == [
        "bias-alibi.png",
        "contamination-dims-sinusoidal.png",
        "contamination-sinusoidal.png",
        "heatmap-sinusoidal.png",
        "waveforms-sinusoidal.png",
    ]
    settings = parse_settings(["dim=128", "token_scale=0.5"])
    fig = _figures("contamination-dims", PLOTS["contamination-dims"], ["sinusoidal"], settings)
    assert "angle(e, e + PE) = 52.1°" in next(iter(fig.values())).axes[0].get_title()


def test_plot_sets_an_odd_width_without_naming_heads(tmp_path: Path) -> None:
    """Seed 000's table: ``--set dim=9 --set base=100.0`` (and dim=10) with no n_heads."""
    for dim in (9, 10):
        for kind in ("heatmap", "shift-matrix", "wavelengths"):
            args = ["plot", kind, "sinusoidal", "--set", f"dim={dim}", "--set", "base=100.0"]
            result = runner.invoke(app, [*args, "--out", str(tmp_path / str(dim))])
            assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "9").iterdir())) == 3


def test_compare_writes_one_figure_of_several_encodings_and_kinds(tmp_path: Path) -> None:
    args = ["plot", "heatmap", "sinusoidal", "learned", "--compare"]
    args += ["--set", "n_positions=20", "--set", "n_dims=20", "--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    args = ["plot", "heatmap,similarity,waveforms", "sinusoidal", "--compare"]
    args += ["--set", "dim=128", "--set", "n_positions=50", "--set", "dims=(0, 1, 10, 20, 50)"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["compare-heatmap-similarity-waveforms.png", "compare-heatmap.png"]
    bad = runner.invoke(app, ["plot", "heatmap,bias", "rope", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "unknown plot kind 'heatmap,bias'" in bad.output


def test_plot_attention_draws_a_lab_checkpoint(tmp_path: Path) -> None:
    """``posenc plot attention --checkpoint OUT/checkpoints/KEY.pt``: the trained model's own
    layers, rebuilt from the run's configuration in OUT/results.sqlite."""
    from posenc.lab.attention_maps import checkpoint_input
    from posenc.lab.config import parse_sweep
    from posenc.lab.executors import LocalExecutor
    from posenc.lab.sweep import run_sweep

    sweep = parse_sweep(
        {
            "name": "plot",
            "encodings": ["rope"],
            "tasks": [{"name": "copy", "train_len": [1, 6], "eval_lens": [6]}],
            "model": {"d_model": 16, "n_layers": 2, "n_heads": 2},
            "train": {"steps": 2, "batch_size": 4, "warmup": 1, "eval_samples": 4},
        }
    )
    run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    (checkpoint,) = (tmp_path / "checkpoints").glob("*.pt")
    _, tokens, _, cfg = checkpoint_input(checkpoint)
    assert cfg.key() == checkpoint.stem and tokens.shape[0] == 1
    args = ["plot", "attention", "--checkpoint", str(checkpoint), "--set", "layer=1"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "figs")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "figs" / f"attention-{checkpoint.stem}.png").read_bytes()[:4] == b"\x89PNG"
    missing = runner.invoke(app, ["plot", "attention", "--checkpoint", str(tmp_path / "x.pt")])
    assert missing.exit_code == 2 and "is not a file" in missing.output
    other = runner.invoke(app, [*args[:4], "--store", str(tmp_path / "none.sqlite")])
    assert other.exit_code == 2 and "no results store" in other.output
