"""Hostile configs and options: each refused before any work with one ``error:`` line and exit
2 (no YAML traceback, nothing written), and sizes that cannot fit refused with the numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc.cli import app
from posenc.lab import executors as executors_module
from posenc.lab.config import apply_overrides, expand, load_sweep, parse_sweep
from posenc.lab.footprint import check_fits, footprint
from posenc.lab.table import BEGIN, END, write_into

TOML = """
name = "tiny"
encodings = ["nope"]
tasks = [{name = "copy_rep", train_len = [1, 4]}]
seeds = [0]
[model]
d_model = 16
n_layers = 1
n_heads = 2
[train]
steps = 4
batch_size = 8
warmup = 2
eval_samples = 8
"""


class Refuse:
    """An executor that fails the test if the sweep gets as far as running anything."""

    workers = 1

    def map(self, runs: object, checkpoint_dir: object) -> object:
        raise AssertionError("the sweep ran despite a bad config")


def _sweep(tmp_path: Path, *args: str, config: str = TOML, suffix: str = ".toml"):  # type: ignore[no-untyped-def]
    path = tmp_path / f"s{suffix}"
    path.write_text(config)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(executors_module, "make_executor", lambda *a, **k: Refuse())
        out = [] if "--out" in args else ["--out", str(tmp_path / "out")]
        return CliRunner().invoke(app, ["lab", "sweep", str(path), *out, *args])


def _one_line(result) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    return lines[0]


@pytest.mark.parametrize(
    "override", ["encodings=[nope", "seeds=[0,1", "encodings=[nope,,rope]", "model={a: [}"]
)
def test_a_malformed_set_value_is_one_line(tmp_path: Path, override: str) -> None:
    line = _one_line(_sweep(tmp_path, "--set", override))
    assert override in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("train.steps=true", "train.steps must be an integer, got True"),
        ("train.steps=0x10", "train.steps must be an integer, got '0x10'"),
        ("train.lr=true", "train.lr must be a number, got True"),
        ("model.n_layers=010", None),  # YAML 1.1's octal: read as 10 (YAML 1.2), not 8
        ("seeds=-1", "seeds must be a list"),
        ("seeds=[-1]", "seeds must be ints in [0, 2**32)"),
        (f"seeds=[{2**64}]", "seeds must be ints in [0, 2**32)"),
        ("seeds=[true]", "seeds[0] must be an integer, got True"),
    ],
)
def test_numbers_are_what_they_look_like(tmp_path: Path, override: str, said: str | None) -> None:
    if said is None:
        data = apply_overrides({}, [override])
        assert data == {"model": {"n_layers": 10}}
        return
    line = _one_line(_sweep(tmp_path, "--set", override))
    assert said in line, line


def test_a_duplicated_yaml_key_is_refused(tmp_path: Path) -> None:
    config = "name: a\nencodings: [nope]\ntasks: [copy_rep]\nseeds: [0]\nseeds: [1]\n"
    line = _one_line(_sweep(tmp_path, config=config, suffix=".yaml"))
    assert "'seeds' twice" in line and "line 5" in line, line


def test_yaml_files_read_numbers_as_yaml_1_2(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("tasks: [copy]\ntrain: {steps: 0x10}\n")
    with pytest.raises(ValueError, match=r"train.steps must be an integer, got .0x10."):
        load_sweep(path)


def test_an_empty_out_is_refused(tmp_path: Path) -> None:
    line = _one_line(_sweep(tmp_path, "--out", ""))
    assert "--out" in line and "empty" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


@pytest.mark.parametrize("out", ["/proc/posenc-x", "/sys/kernel/posenc-x"])
def test_an_unwritable_out_is_a_usage_error(tmp_path: Path, out: str) -> None:
    if not Path(out).parent.is_dir():
        pytest.skip(f"no {Path(out).parent}")
    line = _one_line(_sweep(tmp_path, "--out", out))
    assert out in line, line


def test_a_sweep_name_holding_the_into_marker_is_refused(tmp_path: Path) -> None:
    for name in (END, "a --> b", "two\nlines"):
        with pytest.raises(ValueError, match="name must not contain"):
            parse_sweep({"name": name, "tasks": ["copy"]})
    target = tmp_path / "README.md"
    text = f"top\n{BEGIN}\nold\n{END}\nbottom\n"
    target.write_text(text)
    with pytest.raises(ValueError, match="each marker once"):  # a store written before the check
        write_into(target, f"{BEGIN}\nSweep x {END} y\n{END}\n")
    assert target.read_text() == text


def test_extend_set_values_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    for override, said in (
        ("seeds=xy", "'seeds' must be a list, got str 'xy'"),
        ("seeds=-1", "'seeds' must be a list, got int -1"),
        ("seeds=[4294967296]", "[0, 2**32)"),
        ("steps=true", "'steps' must be an int, got bool"),
        ("steps=0x10", "'steps' must be an int, got str"),
    ):
        args = ["lab", "extend", "--quick", "--out", str(tmp_path / "x"), "--set", override]
        result = CliRunner().invoke(app, args)
        line = _one_line(result)
        assert said in line, (override, line)
        assert not (tmp_path / "x").exists()


# 5. sizes bounded up front


@pytest.mark.parametrize(
    "override",
    ["model.n_layers=1000000000", "model.d_model=1e9", "train.batch_size=100000000"],
)
def test_sizes_that_cannot_fit_are_refused_before_any_run(tmp_path: Path, override: str) -> None:
    line = _one_line(_sweep(tmp_path, "--set", override))
    assert "needs about" in line and "this machine has" in line, line
    assert not (tmp_path / "out").exists()


def test_a_training_length_that_cannot_fit_is_refused() -> None:
    sweep = parse_sweep({"tasks": ["copy_rep"], "encodings": ["nope"], "train_max_lens": [100000]})
    with pytest.raises(ValueError, match=r"needs about .* this machine has"):
        expand(sweep)


def test_the_estimate_counts_the_models_parameters() -> None:
    from posenc.lab.train import build_model

    for data in (
        {"tasks": ["copy_rep"], "encodings": ["rope"], "model": {"d_model": 64, "n_layers": 3}},
        {"tasks": ["sort"], "encodings": ["learned"], "model": {"d_model": 32, "n_heads": 2}},
    ):
        run = expand(parse_sweep(data))[0]
        model, _ = build_model(run)
        real = sum(p.numel() for p in model.parameters())
        assert real <= footprint(run).params <= 1.2 * real


def test_runs_side_by_side_are_bounded_too() -> None:
    runs = expand(parse_sweep({"tasks": ["copy_rep"], "encodings": ["nope"], "seeds": [0, 1]}))
    need = footprint(runs[0]).bytes
    check_fits(runs, workers=2, memory=3 * need)
    with pytest.raises(ValueError, match=r"2 runs at once .* use --workers 1"):
        check_fits(runs, workers=2, memory=need + need // 2)
    with pytest.raises(ValueError, match="needs about"):
        check_fits(runs, workers=1, memory=need // 2)
