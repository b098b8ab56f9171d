"""The library's public docstrings follow the developers' guide: one summary line, the formula,
the citation, Shapes, Raises.

What is checked mechanically, on every name the packages below export (``__all__``) and every
registered encoding class:

- a docstring whose summary (first paragraph) is one line; every public method of an exported
  class has a docstring (its own or the one it overrides);
- in ``posenc.functional``, every formula (an exported function) cites its paper (an arXiv id,
  or "Author et al. YEAR") and has a Shapes section (``Shapes:``, or ``Shapes as`` another's);
  so does every registered encoding class (``posenc.registry``);
- a function or method that raises (a ``raise`` in its own body, or a call to one of
  posenc's ``check_*`` validators) has a ``Raises`` section.

Whether the formula is written is not mechanical (a human reads it); the allow-lists below name
the few exports where a section does not apply, each with why.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from posenc import registry

PACKAGES = (
    "posenc.functional",
    "posenc.encodings",
    "posenc.attention",
    "posenc.models",
    "posenc.hf",
    "posenc.extension",
)

#: An arXiv id, or a paper named by its authors and year ("Su et al. 2021", "Press et al.,
#: 2022", "Chen and Li 2020").
CITATION = re.compile(
    r"arXiv:\s?\d{4}\.\d{4,5}"
    r"|\b[A-Z][\w-]+(?: et al\.| and [A-Z][\w-]+),? \(?(?:19|20)\d\d\b"
)
SHAPES = re.compile(r"\bShapes(?::|\s+as\s)")
RAISES = re.compile(r"\bRaises?\b")  # "Raises: ..." or "Raise ValueError when ..."

#: posenc.functional exports that are not a paper's formula: no citation or Shapes section
#: applies (array-namespace helpers and argument validators).
NOT_FORMULAS = {
    "namespace": "returns the array namespace of its arguments",
    "check_kerple": "validates Kerple's arguments",
    "check_grid": "validates a grid size",
    "check_sections": "validates an axial split of the pairs",
    "check_t5_buckets": "validates T5's bucket arguments",
    "check_xpos_range": "validates a position range against XPos's overflow limit",
    "rotary_dim": "the rotated width of a head: an int from ints",
    "softplus": "log(1 + e^x), an elementwise function PoPE's magnitudes use, no paper's own",
}
#: Formulas of scalars alone: no Shapes section applies (the citation still does).
SCALAR_FORMULAS = {"xpos_max_position": "the largest safe position: an int from ints and floats"}


def _exports() -> list[tuple[str, str, Any]]:
    """(package, name, object) for every exported function and class, each object once."""
    found: list[tuple[str, str, Any]] = []
    seen: set[int] = set()
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and id(obj) not in seen:
                seen.add(id(obj))
                found.append((package, name, obj))
    for name in registry.names():  # the encoding classes, exported by name (posenc.build)
        cls = registry.info(name).cls
        if id(cls) not in seen:
            seen.add(id(cls))
            found.append(("posenc.encodings", name, cls))
    return found


EXPORTS = _exports()
FORMULAS = [
    (name, obj)
    for package, name, obj in EXPORTS
    if package == "posenc.functional" and inspect.isfunction(obj) and name not in NOT_FORMULAS
]


def _methods() -> Iterator[tuple[str, Callable[..., Any], str | None]]:
    """(Class.name, function, its docstring or the one it overrides) for every public method
    and property an exported class defines itself."""
    for _, _, cls in EXPORTS:
        if not inspect.isclass(cls):
            continue
        for name, value in vars(cls).items():
            if name.startswith("_"):
                continue
            func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if inspect.isfunction(func):
                yield f"{cls.__qualname__}.{name}", func, inspect.getdoc(getattr(cls, name))


METHODS = list(_methods())


def _id(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def raises(func: Callable[..., Any]) -> bool:
    """Whether ``func``'s own body (not a function nested in it) raises: a ``raise`` with an
    exception, or a call to a ``check_*`` validator."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    stack: list[ast.AST] = list(ast.iter_child_nodes(tree.body[0]))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue  # its own contract
        if isinstance(node, ast.Raise) and node.exc is not None:
            return True
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
            if name.startswith(("check_", "_check_")):  # not torch._check (an assertion)
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def test_the_audit_sees_the_library() -> None:
    """The lists are the library's, not empty by mistake (an import or ``__all__`` gone)."""
    assert len(EXPORTS) >= 80
    assert len(FORMULAS) >= 40
    assert len(METHODS) >= 30
    assert len(registry.names()) >= 21
    functional = {n for p, n, _ in EXPORTS if p == "posenc.functional"}
    assert set(NOT_FORMULAS) | set(SCALAR_FORMULAS) <= functional


@pytest.mark.parametrize(("name", "obj"), [(_id(o), o) for _, _, o in EXPORTS])
def test_every_export_has_a_one_line_summary(name: str, obj: Any) -> None:
    doc = inspect.getdoc(obj)
    assert doc, f"{name} has no docstring"
    summary = doc.split("\n\n")[0]
    assert "\n" not in summary, f"{name}'s summary is more than one line:\n{summary}"


@pytest.mark.parametrize(("name", "func", "doc"), METHODS, ids=[m[0] for m in METHODS])
def test_every_public_method_has_a_docstring(name: str, func: Any, doc: str | None) -> None:
    assert doc and doc.strip(), f"{name} has no docstring"


@pytest.mark.parametrize(("name", "obj"), FORMULAS, ids=[n for n, _ in FORMULAS])
def test_every_formula_cites_its_paper_and_gives_shapes(name: str, obj: Any) -> None:
    doc = inspect.getdoc(obj) or ""
    assert CITATION.search(doc), f"posenc.functional.{name} cites no paper (arXiv id, author year)"
    if name not in SCALAR_FORMULAS:
        assert SHAPES.search(doc), f"posenc.functional.{name} has no 'Shapes:' section"


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_encoding_cites_its_paper_and_gives_shapes(name: str) -> None:
    cls = registry.info(name).cls
    doc = inspect.getdoc(cls) or ""
    assert CITATION.search(doc), f"{_id(cls)} ({name!r}) cites no paper (arXiv id or author year)"
    assert SHAPES.search(doc), f"{_id(cls)} ({name!r}) has no 'Shapes:' section"


RAISING = [(_id(o), o, inspect.getdoc(o)) for _, _, o in EXPORTS if inspect.isfunction(o)]
RAISING = [r for r in RAISING if raises(r[1])] + [m for m in METHODS if raises(m[1])]


@pytest.mark.parametrize(("name", "func", "doc"), RAISING, ids=[r[0] for r in RAISING])
def test_what_raises_says_so(name: str, func: Any, doc: str | None) -> None:
    assert doc and RAISES.search(doc), f"{name} raises, but its docstring has no 'Raises'"


def test_the_raise_detector_looks_at_the_functions_own_body() -> None:
    def direct() -> None:
        raise ValueError("x")

    def validated(n: int) -> None:
        check_positive_int(n, "n")  # noqa: F821 (never called: parsed only)

    def nested_only() -> Callable[[], None]:
        def inner() -> None:
            raise ValueError("x")

        return inner

    def reraise() -> None:
        try:
            pass
        except ValueError:
            raise

    assert raises(direct) and raises(validated)
    assert not raises(nested_only) and not raises(reraise)


def test_the_citation_pattern() -> None:
    for cited in ("Su et al. 2021", "(Press et al., 2022)", "arXiv:2104.09864", "Chen and Li 2020"):
        assert CITATION.search(cited), cited
    for plain in ("rotates q and k", "base 10000", "in 2021 tokens", "Table 2"):
        assert not CITATION.search(plain), plain
