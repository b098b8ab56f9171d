"""MkDocs hooks of the posenc site (``hooks:`` in mkdocs.yml).

- The gallery: every picture on the encoding pages is drawn by ``posenc plot`` at build time
  (``GALLERY``: one command per picture set, run in this process so torch and matplotlib load
  once) and added to the site as ``gallery/<set>/<file>.png``; nothing is committed or
  downloaded. ``python docs/hooks.py OUT`` writes the same files into OUT.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

#: Picture set -> the ``posenc plot`` arguments that draw it (without --out).
GALLERY: dict[str, list[str]] = {
    "sinusoidal-heatmap": ["heatmap", "sinusoidal", "--set", "n_positions=64", "--set", "dim=64"],
    "sinusoidal-similarity": ["similarity", "sinusoidal", "--set", "n_positions=64"],
    "sinusoidal-waveforms": ["waveforms", "sinusoidal", "--set", "dim=64"],
    "sinusoidal-shift": ["shift-matrix", "sinusoidal"],
    "additive-dot": ["dot-distance", "sinusoidal", "learned"],
    "contamination": ["contamination", "sinusoidal", "--set", "dim=128"],
    "rotary-wavelengths": ["wavelengths", "rope", "xpos", "pope"],
    "rotary-rotation": ["rotation", "rope"],
    "rotary-qk": ["qk-distance", "rope", "xpos", "pope"],
    "bias": ["bias", "alibi", "t5", "kerple", "fire"],
    "alibi-slopes": ["alibi-slopes", "8", "12"],
    "attention-decay": ["attention-decay", "nope", "rope", "alibi"],
    "relative-attention": ["attention", "shaw", "transformer_xl", "cope", "randomized"],
    "grid-similarity": ["grid-similarity", "rope_2d", "rope_mixed", "sincos_2d", "learned_2d"],
    "grid-sections": ["sections", "rope_2d", "mrope"],
    "extension": ["extension", "linear", "ntk", "yarn", "llama3"],
    "extension-qk": ["qk-distance", "rope", "rope:linear", "rope:yarn", "--set", "head_dim=128"],
}


def draw(out: Path) -> dict[str, list[Path]]:
    """Run every ``GALLERY`` command into ``out/<set>/``; set -> the files it wrote."""
    from typer.testing import CliRunner

    from posenc.cli import app

    runner, found = CliRunner(), {}
    for name, args in GALLERY.items():
        folder = out / name
        result = runner.invoke(app, ["plot", *args, "--out", str(folder)])
        if result.exit_code != 0:
            raise RuntimeError(f"posenc plot {' '.join(args)} failed: {result.output}")
        found[name] = sorted(folder.iterdir())
    return found


_DRAWN: dict[str, Any] = {}


def on_files(files: Any, config: Any) -> Any:
    """Draw the gallery once per build process and add its files to the site."""
    from mkdocs.structure.files import File

    if "dir" not in _DRAWN:
        _DRAWN["tmp"] = tempfile.TemporaryDirectory(prefix="posenc-gallery-")
        _DRAWN["dir"] = Path(_DRAWN["tmp"].name)
        _DRAWN["files"] = draw(_DRAWN["dir"])
    root: Path = _DRAWN["dir"]
    for paths in _DRAWN["files"].values():
        for path in paths:
            uri = "gallery/" + path.relative_to(root).as_posix()
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "posenc-gallery")
    for name, paths in draw(target).items():
        print(name, *(p.name for p in paths))
