"""Page building blocks: data URIs, escaping, sections; the encoding report's content."""

from __future__ import annotations

import base64

import pytest
from matplotlib.figure import Figure

from posenc.encodings.nope import NoPE
from posenc.report import (
    FigureBlock,
    Section,
    Table,
    build_report,
    figure_to_data_uri,
    inline_code,
    render_page,
    slug,
)

EVIL = "<script>alert(1)</script>"


class EvilNoPE(NoPE):
    """NoPE whose name and docstring try to inject markup: <script>alert(2)</script>."""


def evil_encoding() -> NoPE:
    pe = EvilNoPE()
    pe.name = EVIL  # type: ignore[misc]
    return pe


def _tiny_figure() -> Figure:
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    return fig


def test_figure_to_data_uri_png_and_svg() -> None:
    png = figure_to_data_uri(_tiny_figure(), "png")
    assert png.startswith("data:image/png;base64,")
    assert base64.b64decode(png.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    svg = figure_to_data_uri(_tiny_figure(), "svg")
    assert b"<svg" in base64.b64decode(svg.split(",", 1)[1])
    with pytest.raises(ValueError, match="fmt must be one of"):
        figure_to_data_uri(_tiny_figure(), "jpg")  # type: ignore[arg-type]


def test_figure_block_only_takes_inline_images() -> None:
    with pytest.raises(ValueError, match="inline base64"):
        FigureBlock("https://example.com/x.png", "remote")


def test_render_page_escapes_every_text() -> None:
    section = Section(
        title=EVIL,
        paragraphs=[EVIL],
        formula=EVIL,
        facts={EVIL: EVIL},
        tables=[Table([EVIL], [[EVIL]], caption=EVIL)],
        figures=[FigureBlock(figure_to_data_uri(_tiny_figure()), EVIL)],
    )
    html = render_page(EVIL, [section], intro=EVIL)
    assert "<script" not in html.lower()
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 9
    assert section.id == "script-alert-1-script"


def test_inline_code_escapes_then_marks_up_literals() -> None:
    text = "``<b>`` & ``a\nb`` stays `x`" + EVIL
    marked = inline_code(text)
    assert marked == (
        "<code>&lt;b&gt;</code> &amp; <code>a\nb</code> stays `x`"
        "&lt;script&gt;alert(1)&lt;/script&gt;"
    )
    figure = FigureBlock(figure_to_data_uri(_tiny_figure()), inline_code("``x`` < y"))
    html = render_page("t", [Section("s", formula=marked, figures=[figure])])
    assert '<pre class="formula"><code>&lt;b&gt;</code>' in html and "<script" not in html
    assert 'alt="x &lt; y"' in html and "<figcaption><code>x</code> &lt; y</figcaption>" in html


def test_render_page_rejects_duplicate_ids() -> None:
    with pytest.raises(ValueError, match="unique"):
        render_page("t", [Section("a"), Section("A")])


def test_table_cell_classes_are_rendered_and_checked() -> None:
    table = Table(["a", "b"], [["1", "PASS"], ["2", "3"]], classes=[["win", ""], ["num dnl", ""]])
    html = render_page("t", [Section("s", tables=[table])])
    assert '<td class="win">1</td><td>PASS</td>' in html  # classes replace the PASS/FAIL rule
    assert '<td class="num dnl">2</td>' in html
    plain = render_page("t", [Section("s", tables=[Table(["a"], [["PASS"]])])])
    assert '<td class="PASS">PASS</td>' in plain
    with pytest.raises(ValueError, match="shape of rows"):
        Table(["a"], [["1"], ["2"]], classes=[["win"]])


def test_slug() -> None:
    assert slug("rope:yarn") == "rope-yarn" and slug("<>") == "section"


def test_report_has_a_section_per_encoding_extension_and_comparison() -> None:
    lab = Section("Lab results", paragraphs=["accuracy by length"], id="lab")
    html = build_report(
        ["sinusoidal", "alibi", "rope:linear", evil_encoding()], fmt="svg", extra=[lab]
    )
    assert html.index('id="comparison"') < html.index('id="lab"')
    for anchor in (
        'id="enc-sinusoidal"',
        'id="enc-alibi"',
        'id="context-extension"',
        'id="comparison"',
    ):
        assert anchor in html
    assert "Vaswani et al., arXiv:1706.03762" in html and "table_shift_is_rotation" in html
    assert "PE[p, 2i] = sin(p / base^(2i/C))" in html  # the formula from the docstring
    assert "data:image/svg+xml;base64," in html and "FAIL</td>" not in html
    assert "<script" not in html.lower() and "&lt;script&gt;alert(2)" in html
    assert "http://" not in html and "https://" not in html


def test_a_failing_figure_becomes_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc.plots import PLOTS

    def explode(*_: object, **__: object) -> Figure:
        raise RuntimeError("no ink")

    monkeypatch.setitem(
        PLOTS, "heatmap", type(PLOTS["heatmap"])("heatmap", explode, PLOTS["heatmap"].applies)
    )
    html = build_report(["sinusoidal"])
    assert "Figure &#39;heatmap&#39; failed: RuntimeError: no ink" in html
    assert html.count("<img") >= 5  # the other figures are still there
