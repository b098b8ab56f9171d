"""Running the extension lab: training and fine-tuning, the store, resuming after an
interruption or a kill, the report and the command."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from posenc.cli import app
from posenc.lab.extension import run as run_module
from posenc.lab.extension import run_extend
from posenc.lab.extension.methods import build_model
from posenc.lab.extension.pretrain import fine_tune, pretrain
from posenc.lab.extension.units import plan
from posenc.lab.findings import INCONCLUSIVE, NOT_EVALUATED, NOT_REPRODUCED, REPRODUCED
from posenc.lab.report import EXTEND_REPORT_NAME, extend_findings_of, write_extend_report
from posenc.lab.store import EXTEND_STORE_NAME, ExtendStore
from posenc.lab.sweep import sweep_lock

from .conftest import TINY

VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_EVALUATED)


def _sorted_rows(out: Path) -> list[tuple]:
    with ExtendStore(out / EXTEND_STORE_NAME, TINY) as store:
        return sorted(store.measures(), key=lambda r: tuple(str(x) for x in r[:7] + r[8:]))


def test_pretraining_is_seeded_and_a_fine_tune_step_runs() -> None:
    a, losses = pretrain(TINY, "rope", 0)
    b, _ = pretrain(TINY, "rope", 0)
    assert len(losses) == TINY.steps and all(np.isfinite(losses))
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    before = {k: v.clone() for k, v in a.state_dict().items()}
    ft = fine_tune(a, TINY, 2, 0)
    assert len(ft) == TINY.ft_steps == 2 and all(np.isfinite(ft))
    assert any(not torch.equal(v, before[k]) for k, v in a.state_dict().items())
    assert not a.training


def test_fire_learns_its_own_parameters_at_fire_lr_scale() -> None:
    """At a vanishing ``fire_lr_scale`` FIRE's MLP, c and threshold keep their initial values
    while the rest of the model trains."""
    cfg = replace(TINY, fire_lr_scale=1e-12)
    trained, _ = pretrain(cfg, "fire", 0)
    torch.manual_seed(0)
    initial = build_model(cfg, "fire").state_dict()
    for k, v in trained.state_dict().items():
        if k.startswith("pe."):
            torch.testing.assert_close(v, initial[k], rtol=0, atol=1e-8)
        elif k.startswith("blocks.0.attn.qkv"):
            assert not torch.equal(v, initial[k]), k
    with pytest.raises(ValueError, match="'fire_lr_scale' must be a finite number > 0"):
        replace(TINY, fire_lr_scale=0)


def test_a_run_stores_every_unit_and_its_numbers(tiny_run: Path) -> None:
    with ExtendStore(tiny_run / EXTEND_STORE_NAME, TINY) as store:
        assert store.finished_units() == {u.name for u in plan(TINY)}
        rows, units = store.measures(), store.units()
        last = json.loads(store.meta()["last_run"])
    assert last["units_run"] == len(plan(TINY)) and last["cpu_seconds"] > 0
    assert all(np.isfinite(r.value) for r in rows)
    methods = {(r.encoding, r.method, r.variant) for r in rows}
    assert {
        ("rope", "sinks", "free"),
        ("rope", "window", "free"),
        ("fire", "none", "free"),
    } <= methods
    assert {("rope", m, "tuned") for m in TINY.methods} <= methods
    info = {u["name"]: u["info"] for u in units}
    assert len(info["free/longrope/s0"]["long_factor"]["2"]) == TINY.head_dim // 2
    assert 0.0 <= info["pretrain/rope/s1"]["passkey_at_L"] <= 1.0


def test_an_interrupted_run_resumes_with_only_what_is_missing(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    stop_at = [5]  # the call that is interrupted (first run only)
    real = run_module.execute

    class Stop(BaseException):  # like KeyboardInterrupt: no unit catches it
        pass

    def stop_at_fifth(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[0].name)
        if len(calls) == stop_at[0]:
            raise Stop
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "execute", stop_at_fifth)
    with pytest.raises(Stop):
        run_extend(TINY, tmp_path, workers=1, log=lambda line: None)
    first = set(calls[:4])
    with ExtendStore(tmp_path / EXTEND_STORE_NAME, TINY) as store:
        assert store.finished_units() == first
    calls.clear()
    stop_at[0] = 0
    lines: list[str] = []
    outcome = run_extend(TINY, tmp_path, workers=1, log=lines.append)
    total = len(plan(TINY))
    assert lines[0].endswith(f"{total - 4} units to run, 4 in {tmp_path / EXTEND_STORE_NAME}")
    assert outcome.reused == 4 and len(outcome.ran) == len(calls) == total - 4
    assert first.isdisjoint(calls)  # nothing stored ran again
    assert _sorted_rows(tmp_path) == _sorted_rows(tiny_run)  # the same numbers as in one go


def test_a_second_run_on_the_same_folder_waits_for_the_first(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(tiny_run, tmp_path, dirs_exist_ok=True)
    outcomes = []
    second = threading.Thread(target=lambda: outcomes.append(run_extend(TINY, tmp_path)))
    with sweep_lock(tmp_path):  # as a first run would hold it
        second.start()
        time.sleep(0.5)
        assert second.is_alive() and outcomes == []
        assert f"writing to {tmp_path}; waiting" in capsys.readouterr().err
    second.join(timeout=60)
    assert outcomes[0].ran == [] and outcomes[0].reused == len(plan(TINY))


def test_a_store_of_another_configuration_or_none_is_refused(
    tiny_run: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=r"another configuration \(differs in \['steps'\]\)"):
        ExtendStore(tiny_run / EXTEND_STORE_NAME, replace(TINY, steps=5))
    junk = tmp_path / EXTEND_STORE_NAME
    junk.write_text("not a database " * 100)
    with pytest.raises(ValueError, match="not a posenc result store"):
        run_extend(TINY, tmp_path, workers=1)
    with pytest.raises(ValueError, match="workers must be"):
        run_extend(TINY, tmp_path / "x", workers=0)


def test_the_report_is_one_self_contained_page(tiny_run: Path) -> None:
    path = write_extend_report(tiny_run, TINY)
    assert path == tiny_run / EXTEND_REPORT_NAME
    html = path.read_text()
    for title in (
        "Published findings",
        "Loss by position",
        "Loss and passkey by length",
        "Below the training context",
        "Streaming past the window",
        "Passkey retrieval",
        "Passkey gate",
        "Time and configuration",
    ):
        assert f">{title}<" in html, title
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")
    assert html.count("data:image/png;base64,") == 3
    assert "Chen et al. 2023" in html and "StreamingLLM" in html
    assert "scaled-down search: 4 candidates per seed and factor" in html  # LongRoPE's
    assert "Best candidates: s0 x2: " in html
    verdicts = {f.key: f.verdict for f in extend_findings_of(tiny_run, TINY)}
    assert set(verdicts) == {"pi", "ntk", "yarn", "dynamic", "streaming", "alibi"}


def _tiny_sets() -> list[str]:
    return [f"--set={k}={json.dumps(v)}" for k, v in TINY.to_dict().items()]


@pytest.mark.parametrize("command", [["lab", "extend"], ["lab", "--preset", "extend"]])
def test_the_command_resumes_a_run_writes_the_report_and_prints_the_verdicts(
    command: list[str], tiny_run: Path, tmp_path: Path
) -> None:
    """Both spellings, ``posenc lab extend`` and ``posenc lab --preset extend`` (issue 24)."""
    shutil.copytree(tiny_run, tmp_path, dirs_exist_ok=True)
    (tmp_path / EXTEND_REPORT_NAME).unlink(missing_ok=True)
    args = [*command, "--workers", "1", "--out", str(tmp_path), *_tiny_sets()]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"0 units run, {len(plan(TINY))} reused" in result.stdout
    assert (tmp_path / EXTEND_REPORT_NAME).is_file()
    answer, paths = result.stdout.split("results: ")  # the answer first, then the paths
    assert "report:" in paths and "\x1b[" not in result.stdout  # plain text on a pipe
    assert "The answer beyond the training context L = 24" in answer
    tables = answer.strip().split("\n\n")
    loss = next(t for t in tables if t.startswith("loss over the window"))
    assert "setting" in loss and "48 (2x)" in loss and "winners at 2x: " in loss
    assert "RoPE YaRN, tuned" in loss and "ALiBi" in loss
    findings = next(t for t in tables if t.startswith("Published findings")).splitlines()[1:]
    verdicts = [line for line in findings if not line.startswith("    ")]  # wrapped: 4 spaces
    assert len(verdicts) == 6 and "Press et al. 2022 (ALiBi)" in " ".join(findings[-2:])
    assert all(
        line.split(":")[0].strip()
        in ("reproduced", "not reproduced", "inconclusive", "not evaluated")
        for line in verdicts
    )
    assert "pre-trained models" in tables[-1]  # how many learned the passkey


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["lab", "extend", "--set", "nosuch=1"], "error: unknown extend config key(s) ['nosuch']"),
        (["lab", "extend", "--set", "steps"], "error: --set takes key=value, got 'steps'"),
        (["lab", "--preset", "extend", "--set", "steps=0"], "error: extend config 'steps' must"),
        (["lab", "--preset", "extend", "--device", "cuda"], "error: the extend preset runs"),
    ],
)
def test_bad_settings_are_one_error_line(args: list[str], want: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(want), result.stderr
    assert not (tmp_path / EXTEND_STORE_NAME).exists()


@pytest.mark.slow
def test_the_quick_preset_survives_a_kill_and_resumes(tmp_path: Path) -> None:
    """``posenc lab extend --quick`` in 2 workers, killed (SIGKILL, the whole process group)
    once 3 units are stored, then run again: it reuses them and finishes; its workers do not
    outlive the kill."""
    cmd = [sys.executable, "-c", "from posenc.cli import main; main()", "lab", "extend"]
    cmd += ["--quick", "--workers", "2", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stderr=subprocess.PIPE)
    store = tmp_path / EXTEND_STORE_NAME
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if store.exists():
            with sqlite3.connect(store) as db:
                if db.execute("SELECT count(*) FROM units").fetchone()[0] >= 3:
                    break
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)  # the parent only: its workers must notice and stop
    proc.wait()
    with sqlite3.connect(store) as db:
        stored = db.execute("SELECT count(*) FROM units").fetchone()[0]
    assert stored >= 3
    for _ in range(100):  # workers check for their parent every 0.5 s
        alive = subprocess.run(["pgrep", "-a", "-s", str(proc.pid)], capture_output=True, text=True)
        if not alive.stdout.strip():
            break
        time.sleep(0.2)
    assert alive.stdout.strip() == "", f"outlived the killed run: {alive.stdout}"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"{stored} reused" in done.stdout
    lines = done.stdout.splitlines()
    # the answer's last part: "Published findings ...:" then one indented verdict per finding
    start = next(i for i, line in enumerate(lines) if line.startswith("Published findings"))
    verdicts = [line for line in lines[start + 1 :] if line.startswith("  ") and line.strip()]
    verdicts = [line for line in verdicts if line.strip().startswith(VERDICTS)]
    assert len(verdicts) == 6, done.stdout
