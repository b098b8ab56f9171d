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


# --- the extension lab's store ---------------------------------------------------------------


class ExtendFacts:
    """``posenc lab extend``'s committed store, read through the lab's ``extend`` suite as the
    report and the terminal's answer read it (from a copy, so the committed file is never
    opened for writing)."""

    def __init__(self, store: str) -> None:
        import shutil
        import tempfile

        from posenc.lab.config import ExtendConfig
        from posenc.lab.report import read_extend
        from posenc.lab.store import EXTEND_CONFIG, EXTEND_STORE_NAME, ResultStore
        from posenc.lab.summary import extend_answer_text

        with ResultStore(RESULTS / store, readonly=True) as s:
            meta = s.meta()
        self.cfg = ExtendConfig(**json.loads(meta[EXTEND_CONFIG]))
        with tempfile.TemporaryDirectory() as out:
            shutil.copyfile(RESULTS / store, Path(out) / EXTEND_STORE_NAME)
            self.results, self.units, self.gated = read_extend(out, self.cfg)
            self.answer = extend_answer_text(out, self.cfg).rstrip("\n")
        self.run: dict[str, Any] = json.loads(meta["last_run"])

    @property
    def machine(self) -> str:
        r = self.run
        load = ", ".join(f"{x:.2f}" for x in r["load_average"])
        return f"{r['cpu_model']} ({r['cpus']} CPUs), Python {r['python']}, load {load} at the end"

    @property
    def minutes(self) -> str:
        m, sec = divmod(round(self.run["seconds"]), 60)
        return f"{m} min {sec} s"

    def cpu(self, kind: str | None = None) -> str:
        """CPU-seconds of the units of ``kind`` (pretrain, tune, free, stream; all: None)."""
        found = [u for u in self.units if kind is None or u["name"].split("/")[0] == kind]
        return f"{sum(u['cpu_seconds'] for u in found):,.0f}"

    @property
    def pretrained(self) -> list[dict[str, Any]]:
        return [u for u in self.units if u["name"].startswith("pretrain/")]

    def passed(self, encoding: str) -> str:
        """How many seeds of ``encoding``'s model passed the passkey gate at L."""
        found = [u for u in self.pretrained if u["name"].split("/")[1] == encoding]
        return f"{sum(bool(u['info'].get('passed_gate')) for u in found)} of {len(found)}"

    def findings(self) -> list[Any]:
        from posenc.lab.findings import check_extend_findings

        return check_extend_findings(self.results, self.cfg, self.gated)

    def _mean(self, values: dict[int, float], digits: int) -> str:
        return f"{sum(values.values()) / len(values):.{digits}f}" if values else "—"

    def loss(self, encoding: str, method: str, variant: str, factor: int) -> str:
        """Mean over seeds of the window's loss at factor·L (factor 1: at L)."""
        key = (encoding, method, variant, factor, factor * self.cfg.context)
        return self._mean(self.results.loss(key), 2)

    def passkey(self, encoding: str, method: str, variant: str, factor: int) -> str:
        """Mean over seeds of the passkey accuracy at factor·L (as the terminal's answer)."""
        key = (encoding, method, variant, factor, factor * self.cfg.context)
        return self._mean(self.results.passkey(key), 2)

    def table(self, factor: int) -> str:
        """Loss and passkey at factor·L, training-free / fine-tuned, per method and baseline."""
        from posenc.lab.figures import EXTEND_LABELS

        head = [
            "setting",
            "loss at L",
            f"loss at {factor}x: free / tuned",
            f"passkey at {factor}x: free / tuned",
        ]
        rows = []
        for m in self.cfg.methods:
            rows.append([
                f"RoPE, {EXTEND_LABELS[m]}",
                self.loss("rope", "none", "free", 1) if m == "none" else "",
                f"{self.loss('rope', m, 'free', factor)} / {self.loss('rope', m, 'tuned', factor)}",
                f"{self.passkey('rope', m, 'free', factor)} / "
                f"{self.passkey('rope', m, 'tuned', factor)}",
            ])  # fmt: skip
        for enc in self.cfg.baselines:
            rows.append([
                EXTEND_LABELS[enc], self.loss(enc, "none", "free", 1),
                f"{self.loss(enc, 'none', 'free', factor)} / —",
                f"{self.passkey(enc, 'none', 'free', factor)} / —",
            ])  # fmt: skip
        return _markdown(head, rows)

    def findings_table(self) -> str:
        head = ["finding", "source", "here", "numbers (d: paired mean [95% interval])"]
        rows = [
            [f.claim, f.source, f.verdict, "; ".join(p.text() for p in f.parts)]
            for f in self.findings()
        ]
        return _markdown(head, rows)


def extend(store: str) -> ExtendFacts:
    """The facts of the extension lab's store ``benchmarks/results/STORE``."""
    return ExtendFacts(store)


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


def data_dependent_table(*names: str) -> str:
    """``posenc bench data_dependent``'s forward and forward+backward cases of the first run:
    posenc's forms against fla's naive references, the layer against a NoPE layer (each
    ratio from every run, in order), and their memory."""
    head = ["family", "T", "mode", "posenc ms", "fla naive ms", "posenc / fla"]
    head += ["layer / NoPE layer", "largest tensor posenc / fla", "saved for bwd MiB posenc / fla"]
    runs = [[c for c in _bench(n)["data_dependent"] if c["mode"] != "decode"] for n in names]

    def ms(c: dict[str, Any], impl: str) -> str:
        return f"{c['us'][impl]['median'] / 1e3:.1f}" if impl in c["us"] else "-"

    def pair(d: dict[str, float] | None, spec: str) -> str:
        if not d:
            return "-"
        fla = d.get("fla_naive")
        return f"{d['posenc']:{spec}} / " + ("-" if fla is None else f"{fla:{spec}}")

    def each_run(i: int, key: str) -> str:
        values = [run[i][key] for run in runs]
        return "-" if values[0] is None else ", ".join(f"{v:.2f}x" for v in values)

    rows = []
    for i, c in enumerate(runs[0]):
        fla = ms(c, "fla_naive") if c["fla_naive"] == "timed" else c["fla_naive"]
        rows.append(
            [c["family"], str(c["T"]), c["mode"], ms(c, "posenc"), fla,
             each_run(i, "posenc_over_fla"), each_run(i, "layer_over_nope"),
             pair(c["largest_tensor_elements_fwd"], ","),
             pair(c.get("saved_for_backward_MiB"), ".0f")]
        )  # fmt: skip
    return _markdown(head, rows)


def data_dependent_decode_table(*names: str) -> str:
    """``posenc bench data_dependent``'s decode steps of the first run: µs per step over a
    cache of L keys (µs per key from every run, in order)."""
    head = ["family", "L", "posenc µs", "posenc µs per key", "PaTH recomputed µs", "SDPA NoPE µs"]
    runs = [[c for c in _bench(n)["data_dependent"] if c["mode"] == "decode"] for n in names]
    rows = []
    for i, c in enumerate(runs[0]):
        us = {n: t["median"] for n, t in c["us"].items()}
        recompute = us.get("path_recompute")
        per_key = ", ".join(f"{run[i]['us_per_key']['posenc']:.2f}" for run in runs)
        rows.append(
            [c["family"], str(c["T"]), f"{us['posenc']:.0f}", per_key,
             "-" if recompute is None else f"{recompute:.0f}", f"{us['sdpa_nope']:.0f}"]
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


# --- numbers the prose quotes ----------------------------------------------------------------
# Every number in a template's sentences comes from one of these, read from the same files.


def span(values: Iterable[float], digits: int = 2, suffix: str = "") -> str:
    """``lo-hi`` of ``values`` at ``digits`` (one number when both ends print the same)."""
    found = sorted(values)
    lo, hi = f"{found[0]:.{digits}f}", f"{found[-1]:.{digits}f}"
    return f"{lo}{suffix}" if lo == hi else f"{lo}-{hi}{suffix}"


def _commit(env: dict[str, str]) -> str:
    return env.get("posenc", "").rsplit("commit ", 1)[-1][:7] or "(no commit recorded)"


class LabRun:
    """One finished run of a lab store, as the prose counts it."""

    def __init__(self, row: dict[str, Any]) -> None:
        config = json.loads(row["config"])
        self.encoding: str = row["encoding"]
        self.task: str = row["task"]
        self.seed: int = row["seed"]
        self.architecture: str = config["model"].get("architecture", "decoder")
        self.cpu: float = row["cpu_seconds"]
        self.steps: int = row["steps_trained"] or 0
        self.gate: float = row["gate_metric"] if row["gate_metric"] is not None else float("nan")
        self.passed = bool(row["passed_gate"])
        self.decay: int = config["train"].get("decay_steps") or config["train"]["steps"]
        self.budget: int = config["train"]["steps"]


class LabFacts:
    """The runs of a lab store (or a subset: ``where``), and where they were made."""

    def __init__(self, runs: list[LabRun], env: list[dict[str, str]]) -> None:
        self.runs, self.env = runs, env

    @classmethod
    def load(cls, store: str) -> LabFacts:
        import sqlite3

        db = sqlite3.connect(f"file:{RESULTS / store}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        try:
            rows = [dict(r) for r in db.execute("SELECT * FROM runs ORDER BY task, encoding, seed")]
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        finally:
            db.close()
        return cls([LabRun(r) for r in rows], json.loads(meta.get("environment", "[]")))

    def where(self, **match: Any) -> LabFacts:
        """The runs whose attributes equal ``match`` (a value may be a tuple: any of them)."""

        def keep(r: LabRun) -> bool:
            return all(
                getattr(r, k) in v if isinstance(v, tuple) else getattr(r, k) == v
                for k, v in match.items()
            )

        return LabFacts([r for r in self.runs if keep(r)], self.env)

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.runs)

    @property
    def failed(self) -> list[LabRun]:
        return [r for r in self.runs if not r.passed]

    @property
    def cpu(self) -> str:
        """CPU-seconds of the runs (training and evaluation, as the store times them)."""
        return f"{sum(r.cpu for r in self.runs):,.0f}"

    @property
    def steps(self) -> str:
        return span([r.steps for r in self.runs], 0)

    @property
    def passed_steps(self) -> str:
        return span([r.steps for r in self.runs if r.passed], 0)

    @property
    def mean_steps(self) -> str:
        return f"{sum(r.steps for r in self.runs) / len(self.runs):.0f}"

    @property
    def total_steps(self) -> str:
        return f"{sum(r.steps for r in self.runs):,}"

    @property
    def ms_per_step(self) -> str:
        return f"{1000 * sum(r.cpu for r in self.runs) / sum(r.steps for r in self.runs):.0f}"

    @property
    def past_decay(self) -> int:
        """Runs that trained past the end of the learning-rate decay."""
        return sum(r.steps > r.decay for r in self.runs)

    @property
    def gates(self) -> str:
        """The gate scores of the runs (their worst training length)."""
        return span([r.gate for r in self.runs])

    def values(self, name: str) -> list[Any]:
        """The distinct values of attribute ``name``, in order."""
        return sorted({getattr(r, name) for r in self.runs})

    @property
    def commits(self) -> str:
        return " and ".join(dict.fromkeys(_commit(e) for e in self.env))

    @property
    def machine(self) -> str:
        """The CPU, vector ISA and torch each invocation recorded (once when all agree)."""
        seen = dict.fromkeys(
            f"{e.get('cpu', '?')}, {e.get('aten cpu capability', '?')} kernels, "
            f"torch {e.get('torch', '?')}"
            for e in self.env
        )
        return "; ".join(seen)


def lab(store: str) -> LabFacts:
    """The facts of ``benchmarks/results/STORE`` (``LabFacts``)."""
    return LabFacts.load(store)


def lab_runs_table(store: str) -> str:
    """Per task, architecture and encoding: runs that passed the gate, their steps, and the
    gate score of each run that did not."""
    facts = lab(store)
    head = ["task", "architecture", "encoding", "passed the gate", "steps (passed)"]
    head.append("gate score of those that did not")
    rows = []
    for task in facts.values("task"):
        for arch in facts.where(task=task).values("architecture"):
            for enc in facts.where(task=task, architecture=arch).values("encoding"):
                f = facts.where(task=task, architecture=arch, encoding=enc)
                steps = f.passed_steps if f.passed else "-"
                missed = ", ".join(f"{r.gate:.2f} (seed {r.seed})" for r in f.failed) or "-"
                rows.append([task, arch, enc, f"{f.passed} of {f.n}", steps, missed])
    return _markdown(head, rows)


def lab_compare(a: str, b: str) -> Any:
    """``posenc lab compare`` of two committed stores (``posenc.lab.agreement.Agreement``)."""
    from posenc.lab.agreement import compare_stores

    return compare_stores(RESULTS / a, RESULTS / b)


def lab_step_span(name: str, encodings: Iterable[str]) -> str:
    """posenc's speed over the faster x-transformers trainer (``posenc bench lab``), lo-hi."""
    wanted = set(encodings)
    rows = [r for r in _bench(name)["lab"]["results"] if r["encoding"] in wanted]
    return span([r["ratio_vs_best_xt"] for r in rows], 2, "x")


def lab_step_shapes(name: str) -> str:
    """The batch x length shapes ``posenc bench lab`` timed."""
    shapes = dict.fromkeys(f"{r['batch']} x {r['length']}" for r in _bench(name)["lab"]["results"])
    return " and ".join(shapes)


def trainers_span(name: str, trainer: str, *, encodings: Iterable[str] | None = None) -> str:
    """``posenc bench lab``'s trainers: runs per CPU-minute of ``trainer`` over one by one
    (``x_one_by_one``), lo-hi over the encodings it ran for."""
    rows = [r[trainer] | {"encoding": r["encoding"]} for r in _bench(name)["lab"]["trainers"]]
    rows = [r for r in rows if "x_one_by_one" in r]
    if encodings is not None:
        rows = [r for r in rows if r["encoding"] in set(encodings)]
    return span([r["x_one_by_one"] for r in rows], 2, "x")


def trainers_failed(name: str, trainer: str) -> str:
    """The encodings ``trainer`` could not train (an error in the JSON), by name."""
    rows = _bench(name)["lab"]["trainers"]
    return ", ".join(r["encoding"] for r in rows if "error" in r.get(trainer, {})) or "none"


# --- posenc bench rope: ranges over cases and runs --------------------------------------------


def rope_cases(names: Iterable[str], **where: Any) -> list[dict[str, Any]]:
    """The ``rope`` cases of these runs whose fields equal ``where`` (shape as "1x8x8192x64")."""
    found = []
    for name in names:
        for case in _bench(name)["rope"]:
            fields = case | {"shape": "x".join(map(str, case["shape"]))}
            if all(fields.get(k) == v for k, v in where.items()):
                found.append(case)
    return found


def rope_span(names: Iterable[str], impl: str, field: str = "speedup_vs_hf", **where: Any) -> str:
    """lo-hi of ``field`` of ``impl`` over the cases of ``names`` matching ``where``."""
    cases = rope_cases(names, **where)
    return span([c[field][impl] for c in cases if impl in c.get(field, {})], 2, "x")


def rope_cache_span(names: Iterable[str], field: str, scale: float = 1.0, digits: int = 2) -> str:
    """lo-hi of a ``rope_cache`` field (times ``scale``) over runs; a dict field's values all."""
    values: list[float] = []
    for name in names:
        v = _bench(name)["rope_cache"][field]
        values += [x * scale for x in v.values()] if isinstance(v, dict) else [v * scale]
    return span(values, digits)


def rope_isa_ratio(*pairs: tuple[str, str]) -> dict[str, Any]:
    """Median time of each case (posenc_cpp) under the second run's ISA over the first's, for
    the cases both ran, over ``pairs`` of runs: lo-hi, how many were longer, and the others."""
    ratios = []
    for native, forced in pairs:
        a = {(tuple(c["shape"]), c["dtype"], c["mode"]): c for c in _bench(native)["rope"]}
        for c in _bench(forced)["rope"]:
            key = (tuple(c["shape"]), c["dtype"], c["mode"])
            if key in a:
                us, ref = c["us"]["posenc_cpp"]["median"], a[key]["us"]["posenc_cpp"]["median"]
                ratios.append(us / ref)
    return {"span": span(ratios, 2, "x"), "n": len(ratios),
            "longer": sum(r > 1.0 for r in ratios),
            "others": ", ".join(f"{r:.2f}x" for r in sorted(ratios) if r <= 1.0)}  # fmt: skip


def cases_span(
    names: str | Iterable[str],
    section: str,
    field: str,
    impl: str,
    *,
    over: str | None = None,
    digits: int = 2,
    suffix: str = "x",
    scale: float = 1.0,
    largest: bool = False,
    **where: Any,
) -> str:
    """lo-hi over the ``section`` cases of one or more JSON files matching ``where``: the value
    ``case[field][impl]`` (times ``scale``), or its ratio to ``case[field][over]`` (only the
    largest with ``largest``). Shapes in ``where`` as "1x8x8192x64"."""
    values = []
    for name in [names] if isinstance(names, str) else names:
        for case in _bench(name)[section]:
            fields = case | {"shape": "x".join(map(str, case.get("shape", [])))}
            if not all(fields.get(k) == v for k, v in where.items()):
                continue
            got = case.get(field, {})
            if impl not in got or (over is not None and over not in got):
                continue
            value = got[impl] if over is None else got[impl] / got[over]
            values.append(value * scale)
    return span([max(values)] if largest else values, digits, suffix)


def against(name: str) -> dict[str, Any]:
    """``benchmarks/against_revision.py``'s JSON with, per mode, the new/old ratio of each
    encoding's time over the same tree's NoPE layer (``x_nope``: its geometric mean and lo-hi),
    NoPE's own new/old lo-hi and the x-transformers-normalised ratios' lo-hi (``x_xt_span``)."""
    import math

    data = _bench(name)
    modes: dict[str, dict[str, Any]] = {}
    for mode in dict.fromkeys(c["mode"] for c in data["cases"]):
        cases = [c for c in data["cases"] if c["mode"] == mode]
        ratios = [(c["new_us"] / c["new_nope_us"]) / (c["base_us"] / c["base_nope_us"])
                  for c in cases]  # fmt: skip
        nope = [c["new_nope_us"] / c["base_nope_us"] for c in cases]
        per = [c["new_over_base"] for c in cases]
        x_xt = [c["new_over_base_x_xt"] for c in cases if c.get("new_over_base_x_xt") is not None]
        modes[mode] = {
            "geomean": f"{data['geomean_new_over_base'][mode]:.2f}",
            "geomean_x_xt": "-"
            if data["geomean_new_over_base_x_xt"][mode] is None
            else f"{data['geomean_new_over_base_x_xt'][mode]:.2f}",
            "x_nope": f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}",
            "x_nope_span": span(ratios),
            "nope_span": span(nope, 1),
            "per_encoding": span(per),
            "x_xt_span": span(x_xt) if x_xt else "-",
            "x_xt_encodings": len(x_xt),
            "encodings": len(cases),
        }
    return data | {"modes": modes}


def bench_field(name: str, *path: str | int) -> Any:
    """One value of a benchmark JSON, by its path of keys."""
    value: Any = _bench(name)
    for key in path:
        value = value[key]
    return value


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
            "data_dependent_table": data_dependent_table,
            "data_dependent_decode_table": data_dependent_decode_table,
            "lab_step_table": lab_step_table,
            "span": span,
            "lab": lab,
            "lab_runs_table": lab_runs_table,
            "lab_compare": lab_compare,
            "lab_step_span": lab_step_span,
            "lab_step_shapes": lab_step_shapes,
            "trainers_span": trainers_span,
            "trainers_failed": trainers_failed,
            "rope_span": rope_span,
            "rope_cases": rope_cases,
            "rope_cache_span": rope_cache_span,
            "rope_isa_ratio": rope_isa_ratio,
            "bench_field": bench_field,
            "cases_span": cases_span,
            "against": against,
            "extend": extend,
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
