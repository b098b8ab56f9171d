"""Building blocks of a self-contained HTML page: sections of text, tables and figures, a
matplotlib figure as a data URI, and ``render_page`` (Jinja2, every value escaped)."""

from __future__ import annotations

import base64
import io
import re
from dataclasses import dataclass, field
from typing import Literal

import jinja2
from markupsafe import Markup, escape
from matplotlib.figure import Figure

FigureFormat = Literal["png", "svg"]
_MIME = {"png": "image/png", "svg": "image/svg+xml"}


def figure_to_data_uri(fig: Figure, fmt: FigureFormat = "png", *, dpi: int = 96) -> str:
    """``data:image/...;base64,...`` of ``fig`` rendered as PNG or SVG (no file, no network).

    Raises: ValueError for a format other than "png"/"svg".
    """
    if fmt not in _MIME:
        raise ValueError(f"fmt must be one of {sorted(_MIME)}, got {fmt!r}")
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=dpi, bbox_inches=None)  # one draw: layout is constrained
    return f"data:{_MIME[fmt]};base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}"


#: A reST inline literal in escaped text: ``x``.
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)


def inline_code(text: str) -> Markup:
    """Docstring text for the page: escaped first, then each reST inline literal ``x`` marked
    up as <code>x</code> (only those tags are added, so the result is safe to render as is)."""
    return Markup(_LITERAL.sub(r"<code>\1</code>", str(escape(text))))


@dataclass
class Table:
    """Rows of cells (text). Cells equal to PASS/FAIL get coloured. ``classes``, if given, has
    the shape of ``rows``: each cell's CSS classes ("" for none), e.g. "win" (bold, a winner),
    "dnl" (greyed: did not learn), "reproduced", "not-reproduced", "inconclusive"."""

    columns: list[str]
    rows: list[list[str]]
    caption: str = ""
    classes: list[list[str]] | None = None

    def __post_init__(self) -> None:
        if self.classes is not None and [len(r) for r in self.classes] != [
            len(r) for r in self.rows
        ]:
            raise ValueError(
                f"classes must have the shape of rows, got {[len(r) for r in self.classes]} "
                f"for rows of {[len(r) for r in self.rows]}"
            )

    def cell_class(self, i: int, j: int) -> str:
        """CSS classes of cell (i, j): its ``classes`` entry, else PASS/FAIL for those cells."""
        if self.classes is not None:
            return self.classes[i][j]
        cell = self.rows[i][j]
        return cell if cell in ("PASS", "FAIL") else ""


@dataclass
class FigureBlock:
    """One image, usually from ``figure_to_data_uri``, with its caption; ``wide`` figures
    (e.g. one panel per head) take a whole row of the page."""

    uri: str
    caption: str
    wide: bool = False

    @property
    def alt(self) -> str:
        """The caption as plain text (a ``Markup`` caption without its tags) for ``alt``."""
        return self.caption.striptags() if isinstance(self.caption, Markup) else self.caption

    def __post_init__(self) -> None:
        if not self.uri.startswith(("data:image/png;base64,", "data:image/svg+xml;base64,")):
            raise ValueError(
                f"uri must be an inline base64 PNG/SVG data URI (the page never fetches), "
                f"got {self.uri[:40]!r}"
            )


@dataclass
class Section:
    """A titled part of the page: paragraphs, an optional preformatted formula, key/value
    facts, tables and figures, in that order. ``id`` is derived from ``title`` if empty."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    formula: str = ""
    facts: dict[str, str] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    figures: list[FigureBlock] = field(default_factory=list)
    id: str = ""

    def __post_init__(self) -> None:
        self.id = self.id or slug(self.title)


def slug(text: str) -> str:
    """An HTML id from any text: lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("posenc.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_page(title: str, sections: list[Section], *, intro: str = "") -> str:
    """The whole page as one HTML string: inline CSS, a table of contents, no scripts, and a
    Content-Security-Policy that forbids every network fetch. All text is escaped, except
    ``Markup`` (such as ``inline_code``'s), which is taken as the HTML it is."""
    ids = [s.id for s in sections]
    if len(set(ids)) != len(ids):
        raise ValueError(f"section ids must be unique, got {ids}")
    template = _environment().get_template("page.html.j2")
    return template.render(title=title, intro=intro, sections=sections)
