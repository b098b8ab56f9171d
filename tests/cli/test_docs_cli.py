"""What users read and type: README and docs claims and ``posenc list`` rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import posenc
from posenc.cli import app
from posenc.lab.config import expand, load_sweep

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
LAB_PAGE = (ROOT / "docs" / "lab.md").read_text()  # the lab's sweep file lives here now
EXTENSION_PAGE = (ROOT / "docs" / "extension.md").read_text()


def _prose(text: str) -> str:
    return " ".join(text.split())


def test_readme_sweep_file_is_accepted_with_its_overrides(tmp_path: Path) -> None:
    (block,) = re.findall(r"```toml\n(.*?)```", LAB_PAGE, flags=re.S)
    path = tmp_path / "my_sweep.toml"
    path.write_text(block)
    # `posenc lab sweep my_sweep.toml --set model.n_layers=4 --set train.steps=2000`
    sweep = load_sweep(path, ["model.n_layers=4", "train.steps=2000"])
    assert (sweep.model.n_layers, sweep.train.steps) == (4, 2000)
    runs = expand(sweep)  # the task checks run here: sort at 4x the longest training length
    # (copy_rep: 3 encodings; sort: the 2 of task_encodings) x seeds x train_max_lens
    assert len(runs) == (3 + 2) * 3 * 2
    assert {r.encoding for r in runs if r.task.name == "sort"} == {"nope", "rope"}
    assert {r.task.train_len for r in runs} == {(1, 8), (1, 16)}
    with pytest.raises(ValueError, match=r"lab config: model\.n_layerz: unknown key"):
        load_sweep(path, ["model.n_layerz=4"])


def test_readme_llama3_band_rule_matches_the_validation() -> None:
    assert "`low_freq_factor > high_freq_factor`" in _prose(EXTENSION_PAGE)
    config = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    # equal factors: no band between (Llama 4 Scout), accepted
    posenc.build(
        "rope", head_dim=64, scaling={**config, "low_freq_factor": 1.0, "high_freq_factor": 1.0}
    )
    with pytest.raises(ValueError, match="low_freq_factor"):
        posenc.build(
            "rope",
            head_dim=64,
            scaling={**config, "low_freq_factor": 4.0, "high_freq_factor": 1.0},
        )


def test_readme_encodings_table_matches_the_registry() -> None:
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| (.+?) \| (\d{4}) \|$", README, flags=re.M)
    assert sorted(name for name, *_ in rows) == posenc.names()
    for name, family, paper, year in rows:
        entry = posenc.info(name)
        assert (family, int(year)) == (entry.family, entry.year), name
        assert paper.split(",")[0] == entry.paper.split(",")[0], name  # first author


def test_list_prints_each_encoding_on_one_row_with_its_family() -> None:
    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    cells = {
        parts[0]: parts[1]
        for line in result.output.splitlines()
        if len(parts := [c.strip() for c in line.strip("│ ").split("│")]) == 4
    }
    for name in posenc.names():
        assert cells.get(name) == posenc.info(name).family, name


@pytest.mark.parametrize("module", ["extension", "analysis", "plots", "lab"])
def test_submodules_are_attributes_in_a_fresh_process(module: str) -> None:
    """``posenc.extension`` (where the README says the scalings live) used to raise
    AttributeError until something else had imported it."""
    import subprocess
    import sys

    code = f"import posenc; print(posenc.{module}.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"posenc.{module}"


def test_lab_backend_help_names_the_jax_extra() -> None:
    """rich read ``[jax]`` as markup and dropped it: the help said "needs posenc)"."""
    from typer.testing import CliRunner

    from posenc.cli import app

    result = CliRunner().invoke(app, ["lab", "sweep", "--help"], env={"COLUMNS": "200"})
    assert "needs posenc[jax])" in result.output


def test_list_scaling_with_a_family_without_rope_is_a_usage_error() -> None:
    """``--scaling --family bias`` used to print RoPE's methods, ignoring the family."""
    result = CliRunner().invoke(app, ["list", "--scaling", "--family", "bias"])
    assert result.exit_code == 2
    assert "RoPE" in result.output
    assert CliRunner().invoke(app, ["list", "--scaling", "--family", "rotary"]).exit_code == 0


def test_plot_help_shows_no_rest_literals() -> None:
    """The kinds' descriptions come from docstrings: ``split`` printed with its backticks;
    now a Markdown code span, shown without them."""
    result = CliRunner().invoke(app, ["plot", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "slow). split: sine columns" in _prose(result.output)
    assert "`" not in result.output
