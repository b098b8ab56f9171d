"""Time ``posenc bench attention`` at this tree against another git revision's.

    python benchmarks/against_revision.py --base b1bc6fb --rounds 3 --out RESULT.json

Runs the attention suite in separate processes, alternating the two trees (base, this, base,
this, ...) so drift in the machine's load falls on both, each tree from its own ``src`` (the
base in a temporary ``git worktree``). Per encoding and mode it reports the median over
processes of posenc's layer time at each tree and ``new_over_base`` (below 1: this tree is
faster); where x-transformers times the same layer in the same process, also posenc's time
over x-transformers' at each tree, a ratio that cancels the machine's speed in that process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from posenc._files import atomic_write

ROOT = Path(__file__).resolve().parents[1]


#: The ``step`` suite: one process times a lab training step (``posenc.bench.lab.step_fn``:
#: TinyTransformer d_model 64, 2 layers, 4 heads, AdamW, one thread) per encoding, at the
#: quick preset's batch and about its longest sequence, as cases shaped like ``bench
#: attention``'s (``nope``: the same model without position, timed in the same rounds).
STEP_ENCODINGS = ("learned", "sinusoidal", "rope", "alibi", "t5", "kerple", "fire")
STEP_SCRIPT = """
import json, os, platform, sys, torch
from posenc.bench.harness import as_json, interleaved
from posenc.bench.lab import posenc_model, step_fn
torch.set_num_threads(1)
cases = []
for name in {encodings!r}:
    torch.manual_seed(0)
    steps = {{label: step_fn(posenc_model(pe, 24), 64, 24) for label, pe in
             (("nope", "nope"), ("posenc", name))}}
    fns = {{label: (lambda f=f: [f() for _ in range(20)]) for label, f in steps.items()}}
    timings = interleaved(fns, rounds={rounds}, warmup=1)
    us = {{k: {{"median": as_json(t)["median"] / 20}} for k, t in timings.items()}}
    cases.append({{"encoding": name, "mode": "train step (B 64, T 24)", "us": us}})
cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
            if line.startswith("model name")), platform.processor())
machine = {{"cpu": cpu, "torch": torch.__version__, "threads": torch.get_num_threads(),
           "loadavg": list(os.getloadavg())}}
open(sys.argv[1], "w").write(json.dumps({{"machine": machine, "cases": cases}}))
"""


def bench(src: Path, out: Path, suite: str, quick: bool) -> list[dict[str, Any]]:
    """One process importing posenc from ``src`` running ``suite``; its cases."""
    env = dict(os.environ, PYTHONPATH=str(src), OMP_WAIT_POLICY="PASSIVE")
    if suite == "attention":
        args = ["bench", "attention", "--out", str(out), *(["--quick"] if quick else [])]
        code = f"import sys; sys.argv = ['posenc', *{args!r}]; from posenc.cli import main; main()"
        argv = [sys.executable, "-c", code]
    else:
        names = STEP_ENCODINGS[:2] if quick else STEP_ENCODINGS
        code = STEP_SCRIPT.format(encodings=names, rounds=3 if quick else 7)
        argv = [sys.executable, "-c", code, str(out)]
    subprocess.run(argv, env=env, check=True, cwd=src.parent)
    return list(json.loads(out.read_text())["attention" if suite == "attention" else "cases"])


def summarise(runs: dict[str, list[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per (encoding, mode) in both trees: medians over processes and the ratios."""
    cases: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for tree, processes in runs.items():
        for process in processes:
            for case in process:
                key = (case["encoding"], case["mode"])
                cases.setdefault(key, {}).setdefault(tree, []).append(case)
    rows = []
    for (encoding, mode), by_tree in sorted(cases.items()):
        if set(by_tree) != {"base", "new"}:
            continue  # an encoding only one tree has
        row: dict[str, Any] = {"encoding": encoding, "mode": mode}
        for tree, found in by_tree.items():
            for impl in ("posenc", "nope"):  # the encoding's layer; the same layer without
                label = "us" if impl == "posenc" else "nope_us"
                row[f"{tree}_{label}"] = statistics.median(c["us"][impl]["median"] for c in found)
            if all("x_transformers" in c["us"] for c in found):
                row[f"{tree}_x_xt"] = statistics.median(
                    c["us"]["posenc"]["median"] / c["us"]["x_transformers"]["median"] for c in found
                )
        row["new_over_base"] = row["new_us"] / row["base_us"]
        if "new_x_xt" in row and "base_x_xt" in row:
            row["new_over_base_x_xt"] = row["new_x_xt"] / row["base_x_xt"]
        rows.append(row)
    return rows


def geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def by_mode(rows: list[dict[str, Any]], field: str) -> dict[str, float | None]:
    """The geometric mean of ``field`` over the rows of each mode (rows without it skipped)."""
    modes = dict.fromkeys(r["mode"] for r in rows)
    return {m: geomean([r[field] for r in rows if r["mode"] == m and field in r]) for m in modes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="b1bc6fb", help="git revision to compare against")
    parser.add_argument("--suite", choices=("attention", "step"), default="attention")
    parser.add_argument("--rounds", type=int, default=3, help="processes per tree")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    args = parser.parse_args()
    base_rev = subprocess.run(
        ["git", "rev-parse", "--short", args.base],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    new_rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    runs: dict[str, list[list[dict[str, Any]]]] = {"base": [], "new": []}
    machine: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(tree), args.base], cwd=ROOT, check=True
        )
        try:
            for i in range(args.rounds):
                for name, src in (("base", tree / "src"), ("new", ROOT / "src")):
                    out = Path(tmp) / f"{name}-{i}.json"
                    runs[name].append(bench(src, out, args.suite, args.quick))
                    machine = json.loads(out.read_text())["machine"]
                    print(f"round {i + 1}/{args.rounds}: {name} done", file=sys.stderr)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
            )
    rows = summarise(runs)
    result = {
        "base": base_rev,
        "new": new_rev,
        "suite": args.suite,
        "rounds": args.rounds,
        "quick": args.quick,
        "machine": machine,
        "cases": rows,
        "geomean_new_over_base": by_mode(rows, "new_over_base"),
        "geomean_new_over_base_x_xt": by_mode(rows, "new_over_base_x_xt"),
    }
    atomic_write(args.out, json.dumps(result, indent=1) + "\n")  # temp file, renamed
    for r in rows:
        print(
            f"{r['encoding']:16} {r['mode']:8} base {r['base_us']:10.0f} us  new "
            f"{r['new_us']:10.0f} us  new/base {r['new_over_base']:.3f}  (NoPE layer: base "
            f"{r['base_nope_us']:.0f}, new {r['new_nope_us']:.0f} us)"
        )
    print("geomean new/base:", result["geomean_new_over_base"])


if __name__ == "__main__":
    main()
