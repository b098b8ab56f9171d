"""Does this tree train the lab's runs bit for bit as another git revision does, on this machine?

    python benchmarks/lab_against_revision.py --base a3336d8 --out RESULT.json

Runs the ``quick`` preset with the given seeds (default seed 0: its 27 runs, about 5 CPU-minutes
per tree) once from the base revision's ``src`` (a temporary ``git worktree``) and once from
this tree's, each into its own store, then compares every run's final loss, steps trained and
gate metric and every evaluation metric for exact equality. Training is deterministic on one
machine, so any difference is a change of behaviour; across machines (another CPU vendor or
ATEN_CPU_CAPABILITY) floats differ and ``posenc lab compare`` is the comparison to use instead.
Exit status 0 when every value is identical, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from posenc._files import atomic_write

ROOT = Path(__file__).resolve().parents[1]

RunKey = tuple[str, str, int]
MetricKey = tuple[str, str, int, int, str]


def revision(rev: str) -> str:
    """The short hash of ``rev``."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def run_lab(src: Path, out: Path, seeds: list[int]) -> None:
    """``posenc lab --out OUT`` (the quick preset at ``seeds``) importing posenc from ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src), OMP_WAIT_POLICY="PASSIVE")
    cmd = [sys.executable, "-m", "posenc", "lab", "--out", str(out), "--set", f"seeds={seeds}"]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)


def load(store: Path) -> tuple[dict[RunKey, list[float | None]], dict[MetricKey, float]]:
    """Per run (encoding, task, seed): [final loss, steps, gate metric]; every metric value."""
    with sqlite3.connect(store / "results.sqlite") as db:
        runs: dict[RunKey, list[float | None]] = {
            (e, t, s): [loss, steps, gate]
            for e, t, s, loss, steps, gate in db.execute(
                "select encoding, task, seed, final_loss, steps_trained, gate_metric from runs"
            )
        }
        metrics = {
            (e, t, s, length, name): value
            for e, t, s, length, name, value in db.execute(
                "select r.encoding, r.task, r.seed, m.length, m.name, m.value "
                "from metrics m join runs r on r.key = m.run_key"
            )
        }
    return runs, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="git revision to compare against")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    base, new = revision(args.base), revision("HEAD")
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(tree), args.base], cwd=ROOT, check=True
        )
        try:
            for name, src in (("base", tree / "src"), ("new", ROOT / "src")):
                run_lab(src, Path(tmp) / f"store-{name}", seeds)
                print(f"{name} ({base if name == 'base' else new}) done", file=sys.stderr)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
            )
        base_runs, base_metrics = load(Path(tmp) / "store-base")
        new_runs, new_metrics = load(Path(tmp) / "store-new")
    differing_runs = [k for k in base_runs if new_runs.get(k) != base_runs[k]]
    differing_metrics = [k for k in base_metrics if new_metrics.get(k) != base_metrics[k]]
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = [
        ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")
    ]
    cpu = models[0] if models else platform.processor()
    result = {
        "base": base,
        "new": new,
        "preset": "quick",
        "seeds": seeds,
        "machine": {"cpu": cpu, "loadavg": list(os.getloadavg())},
        "runs": len(base_runs),
        "runs_in_new": len(new_runs),
        "metrics": len(base_metrics),
        "runs_differing": [list(k) for k in differing_runs],
        "metrics_differing": len(differing_metrics),
        "identical": not differing_runs
        and not differing_metrics
        and base_runs.keys() == new_runs.keys(),
    }
    atomic_write(args.out, json.dumps(result, indent=1) + "\n")  # temp file, renamed
    print(
        f"{base} -> {new}: {len(base_runs) - len(differing_runs)}/{len(base_runs)} runs and "
        f"{len(base_metrics) - len(differing_metrics)}/{len(base_metrics)} metrics identical"
    )
    sys.exit(0 if result["identical"] else 1)


if __name__ == "__main__":
    main()
