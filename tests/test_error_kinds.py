"""Each kind of error has its own exit code (docs/cli.md, "Exit codes"), so a scheduler can tell a refusal that
will never succeed from a lost race that will: each kind is produced here the way a user meets it, through
``changelake.cli.main`` in this process (no JVM: the batches are small enough to apply locally)."""

from __future__ import annotations

import os
import re
from pathlib import Path

# Imported before any read command runs in this process (as in test_cli.py): the CLI's light pyarrow import
# would otherwise leave pyarrow without numpy for the rest of the session.
import pyarrow  # noqa: F401
import pytest

from changelake import errors
from tests.helpers import REPO
from tests.specs import kv

SPEC = kv("demo.fruit", **{"table.delete.behavior": "disable"})


@pytest.fixture
def run(home, monkeypatch, capfd):
    """``changelake <args>`` in this process against the test's home: (exit code, stderr)."""
    from changelake.cli import main
    from changelake.runtime import session

    def refuse(*args, **kwargs):
        raise AssertionError("this command started a SparkSession")

    monkeypatch.setattr(session, "get_spark", refuse)
    for key in [k for k in os.environ if k.startswith("CHANGELAKE_")]:
        monkeypatch.delenv(key)
    (home / "tables" / "demo.fruit.yaml").write_text(SPEC)

    def run(*args: str) -> tuple[int, str]:
        capfd.readouterr()
        code = main(["--home", str(home), "--tables", str(home / "tables"), *args])
        return code, capfd.readouterr().err

    return run


def land(home: Path, batch_id: int, text: str) -> None:
    landing = home / "landing" / "demo.fruit"
    landing.mkdir(parents=True, exist_ok=True)
    (landing / f"{batch_id}.jsonl").write_text(text)


def test_every_kind_has_its_own_code_and_only_a_conflict_is_retryable():
    codes = [k.exit_code for k in errors.KINDS]
    assert len(set(codes)) == len(codes) and 0 not in codes and 1 not in codes
    assert [k.__name__ for k in errors.KINDS if k.retryable] == ["CommitConflict"]
    for refusal in (errors.BadRecordError, errors.BatchRefusedError, errors.WriteRefusedError):
        assert issubclass(refusal, errors.BadInput)


def test_unknown_table_exits_4(run):
    code, err = run("scan", "demo.nope")
    assert (code, err.count("Unknown table demo.nope")) == (4, 1), err
    assert run("create", "demo.nope")[0] == 4


def test_table_with_a_spec_not_created_yet_exits_4(run):
    code, err = run("scan", "demo.fruit")
    assert code == 4 and "does not exist; create it first" in err, err


def test_bad_spec_exits_3(run, home):
    (home / "tables" / "demo.fruit.yaml").write_text(SPEC.replace("primary_key: [k]", "primary_key: [nope]"))
    code, err = run("create", "demo.fruit")
    assert code == 3 and "nope" in err, err


def test_bad_config_exits_5(run, home, monkeypatch):
    monkeypatch.setenv("CHANGELAKE_CONFIG", str(home / "missing.yaml"))
    code, err = run("status")
    assert code == 5 and "missing.yaml" in err, err


def test_bad_input_and_refused_batches_exit_2(run, home):
    assert run("create")[0] == 0
    land(home, 1, '{"op": "+I", "data": {"k": "not a number", "v": "a"}}\n')
    code, err = run("apply", "demo.fruit")
    assert code == 2 and "1.jsonl:1" in err, err
    land(home, 1, '{"op": "+I", "data": {"k": 1, "v": "a"}}\n')
    land(home, 2, '{"op": "-D", "data": {"k": 1, "v": "a"}}\n')  # deletes are disabled on this table
    code, err = run("apply", "demo.fruit")
    assert code == 2 and "batch 2" in err, err


def test_lost_commit_races_exit_75_and_leave_the_table_as_it_was(run, home, monkeypatch):
    """Every commit loses to "another writer" (pyiceberg's CommitFailedException, as a racing applier gives):
    the apply retries, gives up with CommitConflict, and nothing is committed; unblocked, the same command
    applies the batch once."""
    from pyiceberg.exceptions import CommitFailedException

    from changelake.engine.apply import MAX_COMMIT_ATTEMPTS, Applier

    assert run("create")[0] == 0
    land(home, 1, '{"op": "+I", "data": {"k": 1, "v": "a"}}\n')
    calls = []

    def lose(self, *args, **kwargs):
        calls.append(1)
        raise CommitFailedException("Requirement failed: branch main has changed")

    with monkeypatch.context() as patch:
        patch.setattr(Applier, "_commit", lose)
        code, err = run("apply", "demo.fruit")
    assert code == 75 and "lost" in err and "retry later" in err, err
    assert len(calls) >= MAX_COMMIT_ATTEMPTS
    assert run("scan", "demo.fruit")[0] == 0
    code, err = run("apply", "demo.fruit")
    assert code == 0 and re.search(r"landing batch 1 \(table batch 1\) committed", err), err


def test_the_dags_retry_rule_uses_the_library_codes():
    """The Airflow env cannot import changelake: its copy of the retryable code must stay the library's."""
    common = (REPO / "dags" / "changelake_dags" / "common.py").read_text()
    (code,) = re.findall(r"^RETRYABLE_EXIT_CODES = \{(\d+)\}", common, re.MULTILINE)
    assert int(code) == errors.CommitConflict.exit_code
