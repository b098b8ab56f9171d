"""The import graph of ``src/posenc`` follows its layers: each module imports only its own layer
and the layers below it, never a layer above (read with ``ast``: every import statement,
including those inside functions and under ``TYPE_CHECKING``).

The layers are README's "How it fits together" list (between ``<!-- layers -->`` and
``<!-- /layers -->``), read here, so the list a reader sees is the rule the code follows. Each
line is one layer, from the top: its groups before the first ": ", comma-separated; a group is
a subpackage of posenc (or ``posenc``, the facade, or ``helpers``), with the top-level modules
that belong to it in parentheses (``encodings (with registry)``), or a subpackage of one
(``lab.extension``), which is then a group of its own.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
README = Path(__file__).resolve().parents[1] / "README.md"


def read_layers(text: str) -> tuple[list[tuple[str, ...]], dict[str, str]]:
    """(layers from the top, each a tuple of groups; top-level module -> its group) from the
    marked list in ``text``.

    Raises:
        ValueError: no marked list, or a line that names no group.
    """
    found = re.search(r"<!-- layers -->\n(.*?)<!-- /layers -->", text, flags=re.S)
    if found is None:
        raise ValueError("README has no <!-- layers --> ... <!-- /layers --> list")
    layers: list[tuple[str, ...]] = []
    top_level: dict[str, str] = {}
    for line in found.group(1).splitlines():
        if not line.startswith("- "):
            continue  # a wrapped description
        head = line[2:].split(": ", 1)[0]
        groups = []
        for item in re.findall(r"`[^`]+`(?:\s*\([^)]*\))?", head):
            name, *members = re.findall(r"`([^`]+)`", item)
            groups.append(name)
            top_level.update(dict.fromkeys(members, name))
        if not groups:
            raise ValueError(f"a layer line names no group: {line!r}")
        layers.append(tuple(groups))
    return layers, top_level


#: Layers from the top (README's list). A module may import modules of its own group and of any
#: group in a lower layer; groups sharing a layer are independent of each other.
LAYERS, TOP_LEVEL = read_layers(README.read_text())
#: (importer, imported) pairs that break the layers on purpose, each with the reason. Empty:
#: add an entry only with a comment naming why the redesign it needs is not done yet.
ALLOWED: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    """Dotted name -> file for every module under src/posenc."""
    found = {}
    for path in sorted((SRC / "posenc").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """posenc modules that ``name`` imports anywhere in its file (``from pkg import sub`` counts
    as importing ``pkg.sub`` when that is a module, else ``pkg``)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            named = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        for target in named:
            if target == "posenc" or target.startswith("posenc."):
                while target not in modules and "." in target:  # an attribute: its module
                    target = target.rsplit(".", 1)[0]
                targets.add(target)
    return targets


#: Groups that are a subpackage of a subpackage (``lab.extension``): a layer of their own.
NESTED = {g for layer in LAYERS for g in layer if "." in g}


def group(module: str) -> str:
    """The group of a dotted module name (its subpackage, or a nested group of ``NESTED``, or
    ``TOP_LEVEL``'s entry)."""
    parts = module.split(".")
    if len(parts) > 2 and f"{parts[1]}.{parts[2]}" in NESTED:
        return f"{parts[1]}.{parts[2]}"
    return "posenc" if len(parts) == 1 else TOP_LEVEL.get(parts[1], parts[1])


def rank(name: str) -> int:
    """The layer of a group, 0 at the top. Raises KeyError for a group in no layer."""
    for i, layer in enumerate(LAYERS):
        if name in layer:
            return i
    raise KeyError(name)


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Each edge importer -> imported that goes up a layer or across to a sibling group, unless
    ``ALLOWED`` names it."""
    found = []
    for importer, imported in sorted((a, b) for a, targets in graph.items() for b in targets):
        ga, gb = group(importer), group(imported)
        if ga == gb or (importer, imported) in ALLOWED:
            continue
        if rank(gb) <= rank(ga):
            found.append(f"{importer} ({ga}) imports {imported} ({gb})")
    return found


def test_every_module_belongs_to_a_layer() -> None:
    unplaced = sorted({group(m) for m in _modules()} - {g for layer in LAYERS for g in layer})
    assert unplaced == [], f"add these packages or modules to LAYERS or TOP_LEVEL: {unplaced}"


def test_imports_go_down_the_layers() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert violations(graph) == []
    assert ALLOWED.keys() <= {(a, b) for a, targets in graph.items() for b in targets}, (
        "an ALLOWED pair no longer occurs: remove it"
    )


@pytest.mark.parametrize(
    ("importer", "imported", "breaks"),
    [
        ("posenc.functional.rotary", "posenc.kernels.rope", True),  # kernels -> functional only
        ("posenc.kernels.rope", "posenc.functional.rotary", False),
        ("posenc.flax.model", "posenc.lab.train", True),
        ("posenc.lab.backend_flax", "posenc.flax.model", False),
        ("posenc.encodings.rotary", "posenc.attention.attention", True),
        ("posenc.attention.attention", "posenc.flax.attention", True),  # siblings
        ("posenc.encodings.rotary", "posenc.registry", False),  # one group
        ("posenc.lab.train", "posenc.cli.lab", True),
        ("posenc.bench.lab", "posenc", True),  # the facade: only cli uses it
        ("posenc.lab.extension.measure", "posenc.eval.perplexity", False),  # a nested group
        ("posenc.lab.extension.units", "posenc.lab.train", False),  # above the rest of lab
        ("posenc.lab.report", "posenc.lab.extension.units", True),
        ("posenc.eval.models", "posenc.lab.extension.corpus", True),
    ],
)
def test_the_rule_flags_what_it_should(importer: str, imported: str, breaks: bool) -> None:
    assert bool(violations({importer: {imported}})) is breaks


def test_relative_imports_inside_functions_are_read(tmp_path: Path) -> None:
    """An import inside a function (lazy) and ``from .. import name`` resolve like top-level
    ones."""
    source = tmp_path / "posenc" / "functional" / "lazy.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "def f():\n    from ..kernels import rope\n    from .. import encodings\n    return rope\n"
    )
    modules = {
        "posenc.functional.lazy": source,
        "posenc.kernels": source,
        "posenc.kernels.rope": source,
        "posenc.encodings": source,
    }
    found = _imports("posenc.functional.lazy", source, modules)
    assert found == {"posenc.kernels.rope", "posenc.encodings"}
    assert len(violations({"posenc.functional.lazy": found})) == 2


def test_the_layers_are_read_from_readme() -> None:
    """README's list gives the layers in order and the top-level modules' groups; a list that
    is missing or names nothing is an error, not an empty rule."""
    assert LAYERS[0] == ("cli",) and LAYERS[-1] == ("helpers",)
    assert ("models", "hf") in LAYERS and ("extension", "kernels") in LAYERS
    assert LAYERS.index(("attention",)) < LAYERS.index(("encodings",))
    assert TOP_LEVEL["registry"] == "encodings" and TOP_LEVEL["convert"] == "functional"
    assert TOP_LEVEL["__main__"] == "cli" and TOP_LEVEL["_validate"] == "helpers"
    with pytest.raises(ValueError, match="no <!-- layers -->"):
        read_layers("# posenc\n")
    with pytest.raises(ValueError, match="names no group"):
        read_layers("<!-- layers -->\n- the app\n<!-- /layers -->")
    layers, _ = read_layers("<!-- layers -->\n- `a`, `b`: x: `c`\n  more\n- `d`\n<!-- /layers -->")
    assert layers == [("a", "b"), ("d",)]
