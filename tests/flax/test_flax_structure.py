"""The Flax twins are explicit: at most 3 posenc classes in any registered encoding's MRO, and
no module of ``posenc.flax`` imports the framework-neutral flows (``encodings/flows.py``,
``encodings/context.py``, ``attention/flow.py``) or ``posenc._models``' flow classes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")

import posenc.flax as pfx

FLAX = Path(pfx.__file__).parent
FLOWS = {"posenc.encodings.flows", "posenc.encodings.context", "posenc.attention.flow"}
MODEL_FLOWS = {"BlockFlow", "DecoderBlockFlow", "TransformerFlow", "EncoderDecoderFlow"}


@pytest.mark.parametrize("name", sorted(pfx.ENCODINGS))
def test_at_most_three_posenc_classes_in_an_encodings_mro(name: str) -> None:
    mro = [c for c in pfx.ENCODINGS[name].__mro__ if c.__module__.startswith("posenc")]
    assert len(mro) <= 3, " > ".join(c.__name__ for c in mro)


def imports(path: Path) -> set[tuple[str, str]]:
    """(module, name) of every ``from ... import name`` in ``path``, relative ones resolved
    against ``posenc.flax``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            parts = ["posenc", "flax"][: 2 - (node.level - 1)] if node.level else []
            module = ".".join([*parts, *(node.module or "").split(".")]).strip(".")
            found |= {(module, alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {(alias.name, "") for alias in node.names}
    return found


@pytest.mark.parametrize("path", sorted(FLAX.glob("*.py")), ids=lambda p: p.name)
def test_no_flax_module_imports_the_shared_flows(path: Path) -> None:
    found = imports(path)
    modules = {m for m, _ in found} | {f"{m}.{n}" for m, n in found}
    assert not modules & FLOWS, sorted(modules & FLOWS)
    flows = {n for m, n in found if m == "posenc._models"} & MODEL_FLOWS
    assert not flows, sorted(flows)
