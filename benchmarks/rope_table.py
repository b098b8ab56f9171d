"""The README's per-ISA RoPE table, from `posenc bench rope` JSON files (one per CPU/ISA).

Usage: ``python benchmarks/rope_table.py RUN.json [RUN.json ...]`` prints a Markdown table:
for each case (shape, dtype, mode) and each run, the eager and fast (C++) paths' speed-up over
Hugging Face's ``apply_rotary_pos_emb`` and, for the forward, the fast path's time over the
``clone`` floor; then one line per run naming its CPU, ISA, torch, time and load.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def label(machine: dict[str, Any]) -> str:
    """``Intel(R) Xeon(R) Processor, AVX512 (kernel avx512)`` from a run's machine record."""
    isa = machine.get("aten_cpu_capability", "ISA not recorded")
    return f"{machine['cpu']}, {isa} (kernel {machine.get('kernel_isa', '?')})"


def case_key(case: dict[str, Any]) -> tuple[str, str, str]:
    return "x".join(map(str, case["shape"])), case["dtype"], case["mode"]


def cells(case: dict[str, Any] | None, fast: str = "posenc_cpp") -> list[str]:
    """eager / fast speed-ups over HF and the fast path's clone-floor ratio ("-" when absent)."""
    if case is None:
        return ["-", "-", "-"]
    speedup, floor = case["speedup_vs_hf"], case.get("x_clone_floor", {})
    clone = f"{floor[fast]:.2f}" if fast in floor else "-"
    return [f"{speedup['posenc_eager']:.2f}x", f"{speedup[fast]:.2f}x", clone]


def table(runs: list[dict[str, Any]]) -> str:
    by_run = [{case_key(c): c for c in run["rope"]} for run in runs]
    keys = list(dict.fromkeys(k for cases in by_run for k in cases))
    head = ["(B, H, T, D)", "dtype", "mode"]
    for i in range(len(runs)):
        head += [f"eager [{i + 1}]", f"fast [{i + 1}]", f"fast / clone [{i + 1}]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in keys:
        row = list(key)
        for cases in by_run:
            row += cells(cases.get(key))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for i, run in enumerate(runs, 1):
        m = run["machine"]
        load = ", ".join(f"{x:.2f}" for x in m.get("loadavg", []))
        lines.append(f"[{i}] {label(m)}; torch {m['torch']}; {m['time']}; load {load}")
    return "\n".join(lines)


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    print(table([json.loads(Path(p).read_text()) for p in paths]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
