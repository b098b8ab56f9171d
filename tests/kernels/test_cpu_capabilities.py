"""Kernels and fused attention paths under every CPU capability this machine allows, and builds
that move between machines (issue: correct and fast on every CPU).

Each capability runs ``capability_check.py`` in a fresh process with ``ATEN_CPU_CAPABILITY``
set: ATen's own kernels (SDPA under the Toeplitz view) take that ISA, and posenc's C++ kernels
are built for it (``posenc.kernels.native.build_isa``), so the AVX2 and plain paths are tested
on an AVX-512 machine too. The machine's own capability runs by default; the lower ones
(a fresh C++ build each) are slow tests.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc.kernels import native

CHECK = Path(__file__).with_name("capability_check.py")


def _capabilities() -> list[tuple[str, bool]]:
    """(ATEN_CPU_CAPABILITY, is the machine's own) for each capability to test."""
    own = torch.backends.cpu.get_cpu_capability().lower()
    lower = ["default"]
    if platform.machine() in ("x86_64", "AMD64") and native.cpu_has("avx2"):
        lower.append("avx2")
    return [(own, True)] + [(c, False) for c in lower if c != own]


def _run_check(capability: str, *extra: str, env: dict[str, str] | None = None) -> None:
    env = {**os.environ, **(env or {}), "ATEN_CPU_CAPABILITY": capability}
    done = subprocess.run(
        [sys.executable, str(CHECK), *extra], env=env, capture_output=True, text=True, timeout=900
    )
    report = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, report
    assert f"capability {capability.upper()}" in done.stdout, report
    assert "0 failures" in done.stdout, report


def test_kernels_at_this_cpus_own_capability() -> None:
    own = _capabilities()[0][0]
    _run_check(own, "--inductor")


@pytest.mark.slow
@pytest.mark.parametrize("capability", [c for c, own in _capabilities() if not own])
def test_kernels_at_lower_capabilities(capability: str) -> None:
    """Inductor's generated C++ does not compile under ATEN_CPU_CAPABILITY=default in torch 2.13
    (it emits at::vec::Vectorized loads the DEFAULT headers lack): the Inductor RoPE backend is
    checked at the vector capabilities only."""
    _run_check(capability, *(() if capability == "default" else ("--inductor",)))


@pytest.mark.slow
@pytest.mark.skipif(len(_capabilities()) < 2, reason="no lower vector capability to switch to")
def test_inductor_kernels_are_not_shared_between_capabilities(tmp_path: Path) -> None:
    """One Inductor cache, the machine's own capability then a lower one and back: torch 2.13's
    cache key ignores ATEN_CPU_CAPABILITY, so without posenc pinning the vector width the second
    run loaded the first's kernel (NaN on AVX2 after AVX-512; heap corruption the other way)."""
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    own, lower = _capabilities()[0][0], _capabilities()[-1][0]
    for capability in (own, lower, own):
        _run_check(capability, "--inductor-only", env=cache)


def test_builds_are_named_by_isa_cpu_and_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A -march=native build made on one CPU is never loaded on another: the build name changes
    with the CPU's hash, the target ISA and the sources (headers included)."""
    source = tmp_path / "k.cpp"
    source.write_text("// kernel\n")
    (tmp_path / "v.h").write_text("// header\n")
    kernel = native.NativeKernel("posenc_named", source, "test kernel")
    name = kernel.build_name()
    monkeypatch.setattr(native, "cpu_tag", lambda: "0ther0cp")
    assert kernel.build_name() != name and "0ther0cp" in kernel.build_name()
    monkeypatch.undo()
    (tmp_path / "v.h").write_text("// header, changed\n")
    assert kernel.build_name() != name
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert native.build_isa() == "default" and native.isa_flags("default") == []
    assert "_default_" in kernel.build_name()


def test_isa_flags_never_exceed_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """ATEN_CPU_CAPABILITY=avx512 on a CPU without it: torch reports AVX512 anyway, and the
    kernels are built for the CPU itself (-march=native), never for AVX-512."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert native.isa_flags(native.build_isa()) in (["-march=native"], [])
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(native, "cpu_has", lambda flag: flag in ("avx2", "avx512f"))
    if platform.machine() in ("x86_64", "AMD64"):
        assert native.isa_flags(native.build_isa()) == ["-march=x86-64-v3"]


_NO_COMPILER = """
import warnings, torch, posenc
torch.manual_seed(0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fire = posenc.TinyTransformer(vocab_size=50, pe="fire", d_model=32, n_heads=4).eval()
    x = torch.randint(0, 50, (2, 40))
    with torch.no_grad():
        a, b = fire(x), fire(x)  # the fused FIRE kernel cannot be built: blocks, one notice
    rope = posenc.TinyTransformer(  # the C++ RoPE kernel cannot be built: eager, one notice
        vocab_size=50, pe="rope", d_model=32, n_heads=4, pe_config={"kernel": "auto"}
    ).eval()
    with torch.no_grad():
        c = rope(x)
notices = [str(w.message) for w in caught if "could not build" in str(w.message)]
print(len(notices), bool(torch.isfinite(a).all() and torch.equal(a, b) and torch.isfinite(c).all()))
for n in notices:
    print(n)
"""


def test_without_a_compiler_everything_runs_on_eager_paths_with_one_notice(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "CXX": str(tmp_path / "no-such-g++"),
        "TORCH_EXTENSIONS_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", _NO_COMPILER], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "2 True", done.stdout + done.stderr[-2000:]  # one per kernel, results fine
    assert "FIRE attention runs by query blocks" in done.stdout
    assert "kernel='auto' rotates RoPE on CPU with the eager kernel" in done.stdout
