"""Settings live in one place: every ``CHANGELAKE_*`` variable of the library is read in config.py, at use time;
the tuning table in docs/configuration.md is config.TUNING's."""

from __future__ import annotations

import ast
import re

import pytest

from changelake import config
from changelake.errors import ConfigError
from tests.helpers import REPO

#: The one other reader: the fault injection of the crash and retry tests.
ALLOWED = {"src/changelake/config.py", "src/changelake/faults.py"}


def environment_reads(source: str) -> list[tuple[int, str]]:
    """Every ``os.environ.get("CHANGELAKE_...")``, ``os.environ["CHANGELAKE_..."]`` (a read, not an assignment)
    and ``os.getenv("CHANGELAKE_...")`` of ``source``: (line, variable)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = ast.unparse(node.func)
            if func in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                name = node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if ast.unparse(node.value) in ("os.environ", "environ") and isinstance(node.slice, ast.Constant):
                name = node.slice.value
        if isinstance(name, str) and name.startswith("CHANGELAKE_"):
            found.append((node.lineno, name))
    return found


def test_the_checker_finds_reads():
    code = 'import os\nA = os.environ.get("CHANGELAKE_X", 1)\nB = os.environ["CHANGELAKE_Y"]\nos.environ["CHANGELAKE_Z"] = "1"\n'
    assert environment_reads(code) == [(2, "CHANGELAKE_X"), (3, "CHANGELAKE_Y")]


def test_only_config_reads_changelake_variables():
    offenders = {}
    for path in sorted((REPO / "src" / "changelake").rglob("*.py")):
        relative = str(path.relative_to(REPO))
        if relative not in ALLOWED and (reads := environment_reads(path.read_text())):
            offenders[relative] = reads
    assert offenders == {}, "read it through changelake.config (Settings, or TUNING and tuned())"


def test_the_docs_table_is_the_tuning_table():
    doc = (REPO / "docs" / "configuration.md").read_text()
    for variable, default, _ in config.TUNING.values():
        row = re.search(rf"^\| `{variable}` \| `([^`]+)`", doc, re.MULTILINE)
        assert row, f"{variable} is not in docs/configuration.md's tables"
        assert float(row.group(1)) == float(default), (variable, row.group(1), default)


def test_a_limit_is_read_when_used_and_checked(monkeypatch):
    monkeypatch.delenv("CHANGELAKE_LOCAL_APPLY_RECORDS", raising=False)
    assert config.tuned("local_apply_records") == 10_000
    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "0")
    assert config.tuned("local_apply_records") == 0  # no import-time copy: the new value at once
    monkeypatch.setenv("CHANGELAKE_SERVER_POLL_SECONDS", "0.25")
    assert config.tuned("server_poll_seconds") == 0.25
    for variable, bad in [
        ("CHANGELAKE_LOCAL_APPLY_RECORDS", "ten"),
        ("CHANGELAKE_SERVER_POLL_SECONDS", "nan"),
    ]:
        monkeypatch.setenv(variable, bad)
        with pytest.raises(ConfigError, match=variable):
            config.tuned("local_apply_records" if "APPLY" in variable else "server_poll_seconds")
