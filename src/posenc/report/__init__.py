"""posenc.report: one self-contained HTML page (no network, no scripts) per run.

``write_report(out_dir)`` writes ``index.html`` with a section per encoding (formula, paper,
parameters, check results, figures), context extension and a comparison.

Other parts of posenc (the lab) add their own pages or sections with the same blocks::

    from posenc.report import FigureBlock, Section, Table, figure_to_data_uri, render_page

    fig = my_plot()                                   # any matplotlib Figure
    section = Section(
        title="Length generalisation",
        paragraphs=["Accuracy by test length, 3 seeds."],
        tables=[Table(["encoding", "acc@2x"], [["rope", "0.91"]], caption="Results")],
        figures=[FigureBlock(figure_to_data_uri(fig, "svg"), "accuracy vs length")],
    )
    html = render_page("posenc lab", [section], intro="...")   # str; write it anywhere
    write_report("report/", extra=[section])        # or append it to the encoding report

Every string is escaped by the template (Jinja2 autoescape): pass plain text, never HTML.
Docstring text with reST literals (``x``) goes through ``inline_code``: escaped, then <code>.
Figures must be data URIs (``figure_to_data_uri``); ``FigureBlock`` rejects anything else.
"""

from .encodings import (
    build_report,
    check_matrix,
    check_table,
    checks_section,
    comparison_section,
    encoding_section,
    extension_section,
    write_report,
)
from .html import (
    FigureBlock,
    Section,
    Table,
    figure_to_data_uri,
    inline_code,
    render_page,
    slug,
)

__all__ = [
    "FigureBlock",
    "Section",
    "Table",
    "build_report",
    "check_matrix",
    "check_table",
    "checks_section",
    "comparison_section",
    "encoding_section",
    "extension_section",
    "figure_to_data_uri",
    "inline_code",
    "render_page",
    "slug",
    "write_report",
]
