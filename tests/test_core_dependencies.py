"""The library apart from the app: ``pip install posenc`` needs only torch, numpy and what they
need, and using the library (encodings, attention, models, kernels, transformers patching)
imports none of the app's packages (the extra ``posenc[lab]``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

from posenc.cli import APP_PACKAGES

ROOT = Path(__file__).resolve().parents[1]
#: The distributions the extra ``posenc[lab]`` brings, by their PyPI names.
APP_DISTRIBUTIONS = ("typer", "rich", "matplotlib", "jinja2", "pydantic", "pyyaml")


def _requirement_name(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()


def test_core_dependencies_exclude_the_app() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_requirement_name(r) for r in project["dependencies"]}
    assert core.isdisjoint(APP_DISTRIBUTIONS), core & set(APP_DISTRIBUTIONS)
    lab = {_requirement_name(r) for r in project["optional-dependencies"]["lab"]}
    assert set(APP_DISTRIBUTIONS) <= lab


def test_using_the_library_loads_no_app_package() -> None:
    code = (
        "import sys, torch, posenc\n"
        "from posenc import functional as PF\n"
        "import posenc.attention, posenc.models, posenc.extension, posenc.convert, posenc.hf\n"
        "rope = posenc.build('rope', head_dim=16)\n"
        "q = torch.randn(1, 2, 5, 16)\n"
        "rope.rotate(q, q, torch.arange(5), torch.arange(5))\n"
        "model = posenc.TinyTransformer(vocab_size=11, pe='alibi', d_model=16, n_heads=2)\n"
        "model(torch.zeros(1, 4, dtype=torch.long))\n"
        "model.generate(torch.zeros(1, 2, dtype=torch.long), 3)\n"
        "PF.sinusoidal_table(8, 4)\n"
        f"print(sorted(n for n in {APP_PACKAGES!r} if n in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_command_without_the_app_says_what_to_install(tmp_path: Path) -> None:
    # A site-less interpreter (``-S``) sees the standard library and posenc's sources only: as
    # after ``pip install posenc`` without the extra.
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'src')!r}); import posenc.cli as c; c.main()"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: the posenc command needs the extra posenc[lab]")
    assert "pip install 'posenc[lab]'" in lines[0]
