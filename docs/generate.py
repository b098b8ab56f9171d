"""The site's generated pages: results and speed, with their figures, from the committed stores.

Usage, from the repository root::

    python docs/generate.py           # (re)write docs/results.md, docs/speed.md, docs/figures/
    python docs/generate.py --check   # exit 1 naming every file that differs from its source

The prose of each page is its template (``docs/templates/*.md``, Jinja2); every table and
figure in it comes from a committed file: the lab's result stores
(``benchmarks/results/lab-*.sqlite``, through ``posenc lab table``'s ``results_markdown`` and
the lab report's ``curve_figure``) and ``posenc bench`` JSON (``benchmarks/results/*.json``),
each with the machine it ran on as the file records it. ``tests/docs/test_generated.py`` fails
when a committed page or figure differs from what this writes.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
TEMPLATES = DOCS / "templates"
FIGURES = "figures"  # under docs/
PAGES = ("results.md", "speed.md", "real-model.md")


class Page:
    """One page being rendered: the figures its template asked for, by path under docs/."""

    def __init__(self, *, figures: bool = True) -> None:
        self.draw = figures
        self.figures: dict[str, bytes] = {}

    def svg(self, name: str, draw: Callable[[], Any]) -> str:
        """Add ``draw()``'s figure as ``figures/<name>.svg`` (drawn only when the page draws
        figures); its path, relative to the page."""
        from matplotlib import rc_context

        path = f"{FIGURES}/{name}.svg"
        if not self.draw:
            return path
        with rc_context({"svg.hashsalt": "posenc-docs", "svg.fonttype": "none"}):
            fig = draw()
            buf = io.BytesIO()
            fig.savefig(buf, format="svg", metadata={"Date": None})
        self.figures[path] = buf.getvalue()
        return path


# --- the lab's stores -------------------------------------------------------------------------


def lab_table(store: str) -> str:
    """``posenc lab table --out benchmarks/results/STORE``'s Markdown block, as it prints it."""
    from posenc.lab.table import results_markdown

    command = f"posenc lab table --out benchmarks/results/{store}"
    return results_markdown(RESULTS / store, command=command).rstrip("\n")


def lab_curves(page: Page, store: str) -> str:
    """Each task config's curve (the lab report's figure) of ``store``, as Markdown images."""
    from posenc.lab.figures import curve_figure
    from posenc.lab.results import load_runs, panels
    from posenc.lab.store import ResultStore

    with ResultStore(RESULTS / store, readonly=True) as s:
        groups = panels(load_runs(s))
    stem = store.removesuffix(".sqlite")
    lines = []
    for i, p in enumerate(groups):
        path = page.svg(f"{stem}-{i}-{p.task}", lambda p=p: curve_figure(p, p.encodings))
        lines.append(f"![{p.label}: {p.metric} by evaluation length, {stem}]({path})")
    return "\n\n".join(lines)


# --- posenc bench JSON ------------------------------------------------------------------------


def _bench(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return data


def machine(name: str) -> str:
    """Where a ``posenc bench`` run ran, as its JSON records it."""
    m = _bench(name)["machine"]
    isa = m.get("aten_cpu_capability", "ISA not recorded")
    load = ", ".join(f"{x:.2f}" for x in m.get("loadavg", []))
    threads = f", {m['threads']} threads" if "threads" in m else ""
    return f"{m['cpu']} ({isa}{threads}); torch {m['torch']}; {m['time']}; load {load}"


def rope_table(*names: str) -> str:
    """``benchmarks/rope_table.py``'s per-ISA RoPE table of these runs."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from rope_table import table
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return str(table([_bench(n) for n in names]))


def rope_figure(page: Page, *names: str) -> str:
    """Speed-up of the fast (C++) path over HF per case, one bar per run."""
    from matplotlib.figure import Figure

    runs = [_bench(n) for n in names]

    def draw() -> Figure:
        fig = Figure(figsize=(11.0, 4.0), layout="constrained")
        ax = fig.add_subplot()
        cases = [
            f"{'x'.join(map(str, c['shape']))}\n{c['dtype']} {c['mode']}" for c in runs[0]["rope"]
        ]
        width = 0.8 / len(runs)
        for i, run in enumerate(runs):
            values = [c["speedup_vs_hf"]["posenc_cpp"] for c in run["rope"]]
            xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(values))]
            ax.bar(
                xs,
                values,
                width,
                label=f"[{i + 1}] {run['machine']['cpu']}, "
                f"{run['machine'].get('aten_cpu_capability', '?')}",
            )
        ax.axhline(1.0, color="0.3", linewidth=1)
        ax.set_xticks(range(len(cases)), cases, fontsize=7)
        ax.set(ylabel="speed-up over HF apply_rotary_pos_emb", title="RoPE on q and k: fast path")
        ax.legend(loc="upper left", fontsize=8)
        return fig

    path = page.svg("speed-rope", draw)
    return f"![RoPE fast path speed-up over Hugging Face per case and run]({path})"


def _x(value: float | None, suffix: str = "x") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


def bias_table(name: str) -> str:
    """The score-bias suite: time over SDPA without a bias, and peak extra memory."""
    impls = ("posenc_default", "posenc_blockwise", "posenc_flex", "dense_bias")
    head = ["encoding", "T", "dtype", "causal", "default", "blockwise", "flex", "dense"]
    head += ["MiB default", "MiB blockwise", "MiB flex", "MiB dense", "MiB SDPA"]
    rows = []
    for c in _bench(name)["bias"]:
        ratio, mib = c["x_sdpa_no_bias"], c.get("peak_extra_MiB", {})
        row = [c["encoding"], str(c["T"]), c["dtype"], "yes" if c["causal"] else "no"]
        row += [_x(ratio.get(i)) for i in impls]
        if mib:
            row += [f"{mib[i]:.0f}" if i in mib else "-" for i in impls[:3]]
            dense = mib.get("dense_bias")
            row.append(f"{dense:.0f}" if dense else f"({c['dense_bias_MiB']:.0f} bias alone)")
            row.append(f"{mib['sdpa_no_bias']:.0f}")
        else:
            row += ["-"] * 5
        rows.append(row)
    return _markdown(head, rows)


def attention_table(name: str) -> str:
    """The attention-layer suite: time over the same layer without position, and x-transformers'."""
    head = ["encoding", "mode", "posenc / NoPE", "x-transformers / NoPE"]
    head.append("posenc speed-up over x-transformers")
    rows = []
    for c in sorted(_bench(name)["attention"], key=lambda c: (c["encoding"], c["mode"])):
        ratio = c["x_nope"]
        xt = c.get("speedup_vs_x_transformers")
        rows.append(
            [c["encoding"], c["mode"], f"{ratio['posenc']:.2f}",
             "-" if "x_transformers" not in ratio else f"{ratio['x_transformers']:.2f}", _x(xt)]
        )  # fmt: skip
    return _markdown(head, rows)


def lab_step_table(name: str) -> str:
    """``posenc bench lab``: training tokens per second, posenc against x-transformers."""
    lab = _bench(name)["lab"]
    head = ["encoding", "batch x length", "posenc tokens/s", "x-transformers tokens/s"]
    head += ["x-transformers flash tokens/s", "posenc / faster x-transformers"]

    def count(r: dict[str, Any], key: str) -> str:
        return f"{r[key]:,}" if key in r else "-"

    rows = [
        [r["encoding"], f"{r['batch']} x {r['length']}", count(r, "posenc_tokens_per_s"),
         count(r, "xt_tokens_per_s"), count(r, "xt_flash_tokens_per_s"),
         _x(r.get("ratio_vs_best_xt"))]
        for r in lab["results"]
    ]  # fmt: skip
    meta = lab["meta"]
    note = (
        f"\n\nModel d_model {meta['model']['d_model']}, {meta['model']['n_layers']} layers, "
        f"{meta['model']['n_heads']} heads; {meta['threads']} thread; torch {meta['torch']}, "
        f"x-transformers {meta['x_transformers']}; {meta['time']}."
    )
    return _markdown(head, rows) + note


def smollm2_table(kind: str, name: str) -> str:
    """``benchmarks/smollm2_table.py``'s extension or speed table of one run."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import smollm2_table
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    make = smollm2_table.extension_table if kind == "extension" else smollm2_table.speed_table
    return str(make(_bench(name)))


def _markdown(head: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# --- rendering --------------------------------------------------------------------------------


def render(*, figures: bool = True) -> dict[Path, bytes]:
    """Every generated file: path -> content (the pages alone without ``figures``)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=False,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    out: dict[Path, bytes] = {}
    for name in PAGES:
        page = Page(figures=figures)
        functions: dict[str, Callable[..., str]] = {
            "lab_table": lab_table,
            "lab_curves": lambda store, page=page: lab_curves(page, store),
            "machine": machine,
            "rope_table": rope_table,
            "rope_figure": lambda *names, page=page: rope_figure(page, *names),
            "bias_table": bias_table,
            "attention_table": attention_table,
            "lab_step_table": lab_step_table,
            "smollm2_extension_table": lambda name: smollm2_table("extension", name),
            "smollm2_speed_table": lambda name: smollm2_table("speed", name),
        }
        text = env.get_template(name).render(**functions)
        header = (
            f"<!-- generated by `python docs/generate.py` from docs/templates/{name} and "
            "benchmarks/results/; do not edit by hand -->\n\n"
        )
        out[DOCS / name] = (header + text).encode()
        out |= {DOCS / path: data for path, data in page.figures.items()}
    return out


def stale(files: dict[Path, bytes]) -> list[Path]:
    """The generated files whose committed copy is missing or different; figures no template
    makes any more are stale too."""
    found = [p for p, data in files.items() if not p.is_file() or p.read_bytes() != data]
    extra = [p for p in sorted((DOCS / FIGURES).glob("*.svg")) if p not in files]
    return found + extra


def main(argv: list[str]) -> int:
    files = render()
    if argv == ["--check"]:
        bad = stale(files)
        for path in bad:
            print(f"stale: {path.relative_to(ROOT)} (run python docs/generate.py)")
        return 1 if bad else 0
    if argv:
        print(__doc__.split("Usage, from the repository root::")[1].split("\n\n")[1])
        return 2
    (DOCS / FIGURES).mkdir(exist_ok=True)
    for path in stale(files):
        if path not in files:
            path.unlink()
            continue
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(files[path])
        tmp.replace(path)  # written beside, then renamed
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
