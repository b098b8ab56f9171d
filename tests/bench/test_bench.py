"""`posenc bench --quick` as a smoke run: every suite runs and writes well-formed JSON.

No timing assertions (performance claims live in benchmarks/results, not in unit tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

import posenc
from posenc.cli import app


def test_bench_quick_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, ["bench", "all", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["machine"]["torch"] and data["quick"] is True and data["complete"] is True
    for line in (
        "rope: 1x8x512x64 fp32 fwd done (1/4)",
        "bias: fire T=256 fp32 bidirectional done (8/8)",
    ):
        assert line in result.stderr  # CliRunner is no terminal: a line per finished case
    assert "attention: " in result.stderr and "lab: " in result.stderr
    rope_modes = {(c["dtype"], c["mode"]) for c in data["rope"]}
    assert rope_modes == {
        ("fp32", "fwd"),
        ("fp32", "fwd+bwd"),
        ("bf16", "fwd"),
        ("bf16", "fwd+bwd"),
    }
    for case in data["rope"]:
        assert case["speedup_vs_hf"]["hf_apply_rotary_pos_emb"] == pytest.approx(1.0)
        assert all(t["median"] > 0 for t in case["us"].values())
    cache = data["rope_cache"]
    assert cache["positions"] == 4096 and cache["build_s"] > 0 and cache["hf_build_s"] > 0
    assert set(cache["decode_step_us"]) == {"16", "4095"}
    assert {c["encoding"] for c in data["bias"]} == {"alibi", "t5", "kerple", "fire"}
    for case in data["bias"]:
        assert case["x_sdpa_no_bias"]["sdpa_no_bias"] == pytest.approx(1.0)
        assert {"posenc_default", "posenc_blockwise"} <= set(case["x_sdpa_no_bias"])
    # seed 001's benchmark (sinusoidal, learned, relative): one encoding of each family
    quick = {"sinusoidal", "learned", "rope", "alibi", "shaw"}
    assert {(c["encoding"], c["mode"]) for c in data["attention"]} == {
        (name, mode) for name in quick for mode in ("fwd", "fwd+bwd")
    }
    for case in data["attention"]:
        assert case["x_nope"]["nope"] == pytest.approx(1.0)
        assert set(case["peak_MiB"]) >= {"nope", "posenc"}
        assert all(v >= 0 for v in case["peak_MiB"].values())
    shaw = next(c for c in data["attention"] if c["encoding"] == "shaw" and c["mode"] == "fwd")
    # Shaw's explicit path holds the (B, H, T, T) scores: 4·128·128 float32 = 0.25 MiB at least
    assert shaw["peak_MiB"]["posenc"] >= 0.25
    lab_rows = data["lab"]["results"]
    assert {r["encoding"] for r in lab_rows} == set(posenc.names(axes=1))
    assert all(r["posenc_tokens_per_s"] > 0 for r in lab_rows)
    (trainers,) = data["lab"]["trainers"]  # --quick: nope, one_by_one and batched
    assert trainers["encoding"] == "nope" and trainers["one_by_one"]["x_one_by_one"] == 1.0
    assert trainers["batched"]["runs_per_cpu_minute"] > 0
    families = {"fox", "stick_breaking", "path"}
    modes = {(c["family"], c["mode"]) for c in data["data_dependent"]}
    assert modes == {(f, m) for f in families for m in ("fwd", "fwd+bwd", "decode")}
    for case in data["data_dependent"]:
        assert all(t["median"] > 0 for t in case["us"].values())
        if case["mode"] != "decode":  # T = 128 < one block: no tensor beyond H·T·T
            assert case["largest_tensor_elements_fwd"]["posenc"] <= 8 * 128 * 128
    _assert_fields_documented(data)


def _assert_fields_documented(data: dict[str, Any]) -> None:
    """Every JSON field the suites write is named in benchmarks/README.md."""
    doc = (Path(__file__).resolve().parents[2] / "benchmarks" / "README.md").read_text()
    cases = [c for suite in ("rope", "bias", "attention", "data_dependent") for c in data[suite]]
    fields = {*data, *data["machine"], *data["rope_cache"], *data["lab"], *data["lab"]["meta"]}
    fields |= {k for c in cases for k in c} | {
        k for c in cases for t in c["us"].values() for k in t
    }
    fields |= {k for r in data["lab"]["results"] for k in r}
    trainers = data["lab"]["trainers"]
    fields |= {k for r in trainers for k in r}
    fields |= {k for r in trainers for v in r.values() if isinstance(v, dict) for k in v}
    assert not {f for f in fields if f"`{f}`" not in doc}


def test_bench_rejects_unknown_or_missing_device(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "rope", "--device", "tpu", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code != 0
    assert "cpu or cuda" in result.output
    if not torch.cuda.is_available():
        result = CliRunner().invoke(
            app, ["bench", "rope", "--device", "cuda", "--out", str(tmp_path / "x")]
        )
        assert result.exit_code != 0
        assert "no CUDA device" in result.output
    assert not (tmp_path / "x").exists()


def test_bench_rejects_an_unknown_heap_policy(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "rope", "--heap", "huge", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code != 0
    assert "steady or default" in result.output
    assert not (tmp_path / "x").exists()


def test_rope_targets_say_by_how_much_each_is_missed() -> None:
    """The issue's bounds on the fast path: at least 4x HF (out of place and in place), out of
    place at most 1.3x in place and 1.5x the clone; ``miss_factor`` above 1 says by how much."""
    from posenc.bench import rope

    med = {"posenc_cpp": 3.0, "posenc_inplace_cpp": 2.0, "floor_clone": 1.0}
    rows = rope.targets({**med, "hf_apply_rotary_pos_emb": 16.0}, "cpp")
    assert rows["speedup_vs_hf"] == {"value": 16 / 3, "min": 4.0, "met": True, "miss_factor": 0.75}
    assert rows["inplace_speedup_vs_hf"]["met"] and rows["inplace_speedup_vs_hf"]["value"] == 8
    own, clone = rows["x_own_inplace"], rows["x_clone_floor"]
    assert own["value"] == 1.5 and not own["met"] and own["miss_factor"] == pytest.approx(1.5 / 1.3)
    assert clone == {"value": 3.0, "max": 1.5, "met": False, "miss_factor": 2.0}
    assert set(rope.targets(med, "cpp")) == {"x_own_inplace", "x_clone_floor"}  # no HF


def test_rope_case_reports_bandwidth_and_copy_fractions() -> None:
    """Every implementation's GB/s (q and k read and written once per direction) and, forward,
    the share of the copy floor's bandwidth (the GPU target) come with the timings."""
    from posenc.bench import rope

    case = rope.run_case((1, 2, 8, 16), "fp32", False, rounds=1)
    assert case["device"] == "cpu" and case["fast_backend"] == "cpp"
    moved = 2 * 2 * (2 * 8 * 16) * 4  # q, k: read once, written once
    for name, gbps in case["GBps"].items():
        assert gbps == pytest.approx(moved / (case["us"][name]["median"] * 1e-6) / 1e9)
    fr = case["copy_bandwidth_fraction"]
    assert fr["posenc_cpp"] == pytest.approx(
        case["us"]["floor_copy_into"]["median"] / case["us"]["posenc_cpp"]["median"]
    )


@pytest.mark.parametrize("name", ["alibi", "fire"])
def test_bias_case_in_bfloat16(name: str) -> None:
    """The bf16 bias cases (``bench bias`` times them at T = 4096) run every implementation
    in bfloat16 and say so."""
    from posenc.bench import bias

    impls = bias._impls(name, 64, 2, 16, True, "bf16")
    with torch.no_grad():  # as the bench runs them: the fused and Toeplitz paths apply
        for fn in impls.values():
            out = fn()
            assert out.dtype == torch.bfloat16 and out.isfinite().all()
    case = bias.run_case(name, 64, True, H=2, D=16, rounds=1, memory=False, dtype="bf16")
    assert case["dtype"] == "bf16" and case["peak_extra_MiB"] == {}


def test_bias_memory_probe_builds_the_case_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU case with peak memory measures its own dtype: run_case hands it to the probe and
    the probe's process builds the implementations in it (it built float32 whatever the case)."""
    from posenc.bench import bias

    probed: list[tuple[Any, ...]] = []

    def probe(*a: Any) -> int:
        probed.append(a)
        return 0

    monkeypatch.setattr(bias, "peak_extra_bytes", probe)
    bias.run_case("fire", 32, True, H=2, D=16, rounds=1, memory=True, dtype="bf16")
    assert probed and all("bf16" in a for a in probed)

    built: list[str] = []
    real_impls = bias._impls

    def impls(*a: Any, **kw: Any) -> Any:
        built.append(a[5] if len(a) > 5 else kw.get("dtype", "fp32"))
        return real_impls(*a, **kw)

    class Box:
        def put(self, value: int) -> None:
            self.value = value

    monkeypatch.setattr(bias, "_impls", impls)
    threads = torch.get_num_threads()
    try:
        bias._peak_child(("fire", 32, 2, 16, True, "sdpa_no_bias", "bf16"), Box())
    finally:
        torch.set_num_threads(threads)
    assert built == ["bf16"]


def test_interleaved_rounds_rotate_the_order_and_keep_settings() -> None:
    from contextlib import contextmanager

    from posenc.bench.harness import interleaved

    calls: list[str] = []
    active: list[str] = []

    @contextmanager
    def switch(name: str):  # type: ignore[no-untyped-def]
        active.append(name)
        yield
        active.pop()

    def impl(name: str):  # type: ignore[no-untyped-def]
        def run() -> None:
            assert active == [name]  # its own setting, entered around each sample
            calls.append(name)

        return run

    names = ["a", "b", "c"]
    timings = interleaved(
        {n: impl(n) for n in names},
        rounds=3,
        warmup=1,
        target=0.0,  # one call per sample
        settings={n: (lambda n=n: switch(n)) for n in names},
    )
    timed = calls[2 * len(names) :]  # after warm-up and the calls-per-sample probe
    assert [timed[i : i + 3] for i in (0, 3, 6)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
    ]
    assert all(len(t.samples) == 3 for t in timings.values())


def test_eager_passes_script_runs_and_writes_every_pass(tmp_path: Path) -> None:
    """``benchmarks/eager_passes.py`` (the eager bf16 analysis): one fresh process, tiny shape."""
    import subprocess
    import sys

    out = tmp_path / "passes.json"
    script = Path(__file__).parents[2] / "benchmarks" / "eager_passes.py"
    cmd = [sys.executable, str(script), "--out", str(out), "--processes", "1", "--shape", "1x2x8x8"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    result = json.loads(out.read_text())
    assert result["shape"] == [1, 2, 8, 8] and len(result["processes"]) == 1
    us = result["processes"][0]["us"]
    assert {"copy_", "mul", "half_mul_strided", "qk_hf", "qk_swap", "qk_halves"} <= set(us)
    assert all(t["low"] <= t["median"] <= t["high"] for t in us.values())


def test_rope_profile_script_writes_faults_and_cpu_time(tmp_path: Path) -> None:
    """``benchmarks/rope_profile.py`` (issue 40's profile): the quick shape, one round."""
    import subprocess
    import sys

    out = tmp_path / "profile.json"
    script = Path(__file__).parents[2] / "benchmarks" / "rope_profile.py"
    cmd = [sys.executable, str(script), "--out", str(out), "--quick", "--rounds", "1"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    result = json.loads(out.read_text())
    assert result["machine"]["heap_policy"] == "default" and result["machine"]["heap"] == {}
    assert [(c["shape"], c["dtype"]) for c in result["faults"]] == [
        ([1, 8, 512, 64], "fp32"),
        ([1, 8, 512, 64], "bf16"),
    ]
    for case in result["faults"]:
        assert set(case["per_call"]) == {"cpp", "cpp_inplace", "clone"}
        assert all(v["wall_ms"] > 0 and v["minflt"] >= 0 for v in case["per_call"].values())
    assert len(result["cpu_per_element"]) == 4  # the L2 shape and the quick one, both dtypes
    for case in result["cpu_per_element"]:
        ns = case["ns_per_element"]
        assert case["inplace_x_copy"] == pytest.approx(ns["cpp_inplace"] / ns["copy_"])


def _bias_case(name: str, T: int, causal: bool, **kw: Any) -> dict[str, Any]:
    """A canned bias case with the fields the table shows (no timing: a table test)."""
    impls = ("sdpa_no_bias", "posenc_default", "posenc_blockwise", "dense_bias")
    return {
        "encoding": name,
        "T": T,
        "dtype": kw.get("dtype", "fp32"),
        "causal": causal,
        "x_sdpa_no_bias": dict.fromkeys(impls, 1.0),
        "peak_extra_MiB": {},
    }


def test_bench_tables_keep_their_headers_off_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Output to a file (CliRunner is no terminal) gets the tables at their natural width:
    every header whole (they were cut to 80 columns, "en…", "MiB de…")."""
    from posenc.bench import bias

    monkeypatch.setattr(bias, "run_case", _bias_case)
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, ["bench", "bias", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    headers = ["encoding", "dtype", "causal", "blockwise", "MiB default", "MiB dense", "MiB sdpa"]
    for header in headers:
        assert header in result.stdout
    assert "…" not in result.stdout
    assert "Bias attention: time / SDPA without bias; peak extra MiB" in result.stdout


def test_bench_reports_each_case_and_keeps_them_when_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal every finished case is a line on stderr, and the JSON is rewritten after
    each: a run stopped after its first case leaves valid JSON holding it, ``complete`` false."""
    from posenc.bench import bias

    real_case = bias.run_case
    calls: list[str] = []

    def case(*a: Any, **kw: Any) -> dict[str, Any]:
        calls.append(a[0])
        if len(calls) > 1:
            raise KeyboardInterrupt  # as Ctrl-C during the second case
        return real_case(*a, **kw)

    monkeypatch.setattr(bias, "run_case", case)
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, ["bench", "bias", "--quick", "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert "bias: alibi T=256 fp32 causal done (1/8)" in result.stderr
    assert "interrupted" in result.stderr
    data = json.loads(out.read_text())
    assert data["complete"] is False and data["quick"] is True
    assert [(c["encoding"], c["T"], c["causal"]) for c in data["bias"]] == [("alibi", 256, True)]
    assert data["bias"][0]["x_sdpa_no_bias"]["sdpa_no_bias"] == pytest.approx(1.0)
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # no temporary file left


def test_benchmarks_readme_indexes_every_benchmark() -> None:
    """One home: benchmarks/README.md's index names every ``posenc bench`` suite with its
    module and every script in benchmarks/, so a reader finds each benchmark in one place."""
    import re

    from posenc.cli.bench import Suite

    root = Path(__file__).resolve().parents[2]
    text = (root / "benchmarks" / "README.md").read_text()
    found = re.search(r"<!-- index -->\n(.*?)<!-- /index -->", text, flags=re.S)
    assert found is not None, "benchmarks/README.md has no <!-- index --> table"
    index = found.group(1)
    suites = [s.value for s in Suite if s is not Suite.all]
    for suite in suites:
        assert f"`posenc bench {suite}` | `src/posenc/bench/{suite}.py`" in index, suite
    modules = {p.stem for p in (root / "src" / "posenc" / "bench").glob("*.py")}
    assert modules - {"__init__", "harness"} == set(suites)  # every module is a suite's
    for script in sorted((root / "benchmarks").glob("*.py")):
        assert f"`python benchmarks/{script.name}" in index, script.name
