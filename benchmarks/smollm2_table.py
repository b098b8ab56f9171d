"""The docs' real-model tables, from ``smollm2_extension.py`` and ``smollm2_speed.py`` JSON.

Usage: ``python benchmarks/smollm2_table.py extension|speed RUN.json`` prints the Markdown
table (docs/generate.py renders the same into docs/real-model.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

NAMES = {"none": "none", "pi": "PI", "ntk": "NTK", "dynamic": "dynamic NTK", "yarn": "YaRN"}


def _ppl(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "not run"
    interval = cell["ppl_interval"]
    spread = f" [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else ""
    derived = " (= none)" if cell["from"] != "measured" else ""
    return f"{cell['ppl']:.3g}{spread}{derived} ({cell['windows']} w)"


def _machine(m: dict[str, Any], load: Any) -> str:
    loads = ", ".join(f"{x:.1f}" for x in load) if load else "?"
    return f"{m['cpu']}, {m['threads']} threads, torch {m['torch']}, {m['time']}, load {loads}"


def extension_table(data: dict[str, Any]) -> str:
    """Perplexity per method at 1x and 2x (mean over windows, bootstrap interval, windows),
    the verdict by the run's rule, the seconds per window and the machine."""
    cells = {(c["method"], c["length"]): c for c in data["table"]}
    lengths = sorted({c["length"] for c in data["table"]} | {data["original_context"]})
    head = ["method", *(f"ppl at {n:,} tokens" for n in lengths)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method in data["methods"]:
        row = [NAMES.get(method, method)] + [_ppl(cells.get((method, n))) for n in lengths]
        lines.append("| " + " | ".join(row) + " |")
    verdict = data.get("verdict")
    if verdict is None:
        said = "YaRN's training-free claim: not decided (PI, NTK and YaRN share no window yet)."
    else:
        pairs = verdict["yarn_minus"]
        parts = [
            f"YaRN - {NAMES[o]} {p['mean']:+.4f} nats"
            + (f" [{p['interval'][0]:+.4f}, {p['interval'][1]:+.4f}]" if p["interval"] else "")
            + (", separated" if p["separated"] else ", not separated")
            for o, p in pairs.items()
        ]
        holds = "holds" if verdict["holds"] else "does not hold"
        said = (
            f"YaRN's training-free claim at {verdict['length']:,} tokens {holds} on "
            f"{len(verdict['windows'])} window(s) ({'; '.join(parts)})."
        )
    seconds = [s for v in data["seconds_per_window"].values() for s in v]
    timing = (
        f"{len(seconds)} window(s) of {max(lengths):,} tokens, "
        f"{min(seconds):.0f}-{max(seconds):.0f} s each"
        if seconds
        else "no window finished"
    )
    planned = data.get("windows_planned")
    plan = f" of the {planned} planned per method" if planned else ""
    return (
        "\n".join(lines)
        + f"\n\n{said}\n\nRule (stated before the run): {data['rule']['holds']}; separated: "
        f"{data['rule']['separated']}. Intervals: {data['rule']['interval']}; (n w): windows"
        f"{plan}. {timing}; {_machine(data['machine'], data['machine'].get('loadavg'))}."
    )


def speed_table(data: dict[str, Any]) -> str:
    """Each phase's median seconds of the unpatched model and each patched variant's time
    over it, the min-max over rounds, and the machine."""
    variants = list(dict.fromkeys(r["variant"] for r in data["rows"]))
    keys = list(dict.fromkeys((r["phase"], r["T"]) for r in data["rows"]))
    names = (f"{v} (s)" if v == "unpatched" else f"{v} / unpatched" for v in variants)
    head = ["phase", "T", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for phase, T in keys:
        rows = {r["variant"]: r for r in data["rows"] if (r["phase"], r["T"]) == (phase, T)}
        row = [phase, str(T)]
        for v in variants:
            r = rows.get(v)
            if r is None:
                row.append("-")
                continue
            spread = f"{r['low'] / 1e6:.2f}-{r['high'] / 1e6:.2f} s"
            if v == "unpatched":
                row.append(f"{r['median'] / 1e6:.2f} ({spread})")
            else:
                row.append(f"{r['over_unpatched']:.2f} ({spread})")
        lines.append("| " + " | ".join(row) + " |")
    done = "" if data.get("complete") else " The run was stopped before it finished."
    loads = data["machine"].get("loadavg"), data.get("load_end")
    load = " to ".join(", ".join(f"{x:.1f}" for x in lv) for lv in loads if lv)
    return (
        "\n".join(lines)
        + f"\n\nMedians of {data['rounds']} interleaved rounds ({data['warmup']} warm-up),"
        f" decode: {data['decode_tokens']} tokens after a 512-token prompt.{done} "
        f"{_machine(data['machine'], None).removesuffix(', load ?')}, load {load}."
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("extension", "speed"):
        print("usage: python benchmarks/smollm2_table.py extension|speed RUN.json")
        return 2
    data = json.loads(Path(argv[1]).read_text())
    print(extension_table(data) if argv[0] == "extension" else speed_table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
