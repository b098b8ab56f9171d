"""``posenc check`` through the CLI: table, JSON, exit status."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from posenc.analysis import CHECKS
from posenc.cli import app

runner = CliRunner()
ENV = {"COLUMNS": "200"}


def test_check_prints_pass_table_and_exits_zero() -> None:
    result = runner.invoke(app, ["check", "rope", "sinusoidal"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "rotary_relative" in result.output and "table_shift_is_rotation" in result.output
    assert "PASS" in result.output and "FAIL" not in result.output
    assert "0 failed" in result.output


def test_check_json_lists_every_result() -> None:
    result = runner.invoke(app, ["check", "nope", "alibi", "--json"], env=ENV)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {r["encoding"] for r in rows} == {"nope", "alibi"}
    assert all(r["passed"] for r in rows)
    assert {"name", "error", "tolerance", "comparison", "detail"} <= set(rows[0])


def test_check_only_one_property() -> None:
    result = runner.invoke(app, ["check", "rope", "alibi", "--only", "kv_cache_decode", "--json"])
    assert result.exit_code == 0, result.output
    assert [r["name"] for r in json.loads(result.output)] == ["kv_cache_decode"] * 2


def test_a_failing_check_exits_one(monkeypatch: pytest.MonkeyPatch) -> None:
    strict = CHECKS["kv_cache_decode"]
    monkeypatch.setitem(
        CHECKS,
        "kv_cache_decode",
        type(strict)(strict.name, strict.description, strict.applies, strict.measure, -1.0, "<="),
    )
    result = runner.invoke(app, ["check", "rope", "--only", "kv_cache_decode"], env=ENV)
    assert result.exit_code == 1
    assert "FAIL" in result.output and "1 failed" in result.output


def test_unknown_names_are_usage_errors() -> None:
    result = runner.invoke(app, ["check", "no_such_encoding"], env=ENV)
    assert result.exit_code == 2 and "unknown positional encoding" in result.output
    result = runner.invoke(app, ["check", "rope", "--only", "nope_check"], env=ENV)
    assert result.exit_code == 2 and "unknown check" in result.output


def test_check_list_describes_every_check() -> None:
    result = runner.invoke(app, ["check", "--list"], env=ENV)
    assert result.exit_code == 0, result.output
    assert all(name in result.output for name in CHECKS)
    assert "permutation-equivariant" in result.output


def test_brackets_in_descriptions_and_details_are_printed_as_text() -> None:
    # rich reads "[p]" as markup and silently dropped it: "PE[p + k] = M_k PE[p]" showed as
    # "PE = M_k PE"
    listing = runner.invoke(app, ["check", "--list"], env=ENV)
    assert "PE[p + k] = M_k PE[p]" in listing.output
    assert "min ||PE[p] - PE[q]||" in listing.output
    result = runner.invoke(
        app, ["check", "sinusoidal", "--only", "table_shift_is_rotation"], env=ENV
    )
    assert result.exit_code == 0, result.output
    assert "max |M_k PE[p] - PE[p+k]|" in result.output


def test_check_set_builds_the_seed_table_of_odd_width() -> None:
    """Seed 000's table (width 9, base 100) from the command line: every check passes, the
    shift check on the 8 paired columns, saying the ninth is a sine alone."""
    args = ["check", "sinusoidal", "--set", "dim=9", "--set", "base=100.0", "--json"]
    result = runner.invoke(app, args, env=ENV)
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert all(r["passed"] for r in rows.values()), rows
    shift = rows["table_shift_is_rotation"]
    assert shift["error"] < 1e-12 and "column 8 is a sine alone" in shift["detail"]


def test_check_set_rejects_a_key_no_encoding_takes() -> None:
    result = runner.invoke(app, ["check", "--set", "frobnicate=3"], env=ENV)
    assert result.exit_code == 2
    assert "no encoding takes ['frobnicate']" in result.output
