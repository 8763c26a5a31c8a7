"""The CLI end to end (real subprocesses): the docs/semantics.md §2.2 walkthrough, and scan == pyiceberg alone;
and in this process, without a JVM: the JSON documents of ``--json`` / ``--format json`` that the DAGs read."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# Imported here, before any read command runs in this process: the CLI's _light_pyarrow would otherwise load
# pyarrow without numpy and pandas for the rest of the test session.
import pyarrow  # noqa: F401
import pytest

from tests.helpers import REPO
from tests.specs import FRUIT

SPEC = FRUIT


def cli(env, *args):
    result = subprocess.run(
        [sys.executable, "-m", "changelake.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.integration
@pytest.mark.slow
def test_walkthrough_spec_2_2_through_the_cli(home, cli_env):
    (home / "tables" / "demo.fruit.yaml").write_text(SPEC)
    landing = home / "landing" / "demo.fruit"
    landing.mkdir(parents=True)
    (landing / "001.jsonl").write_text('{"op": "+I", "data": {"k": 1, "price": 2.0, "name": "apple"}}\n')
    (landing / "002.jsonl").write_text('{"op": "+I", "data": {"k": 1, "price": 4.0, "name": "banana"}}\n')
    (landing / "003.jsonl").write_text('{"rowkind": "-D", "fields": [1, null, null]}\n')
    (landing / "004.jsonl").write_text('{"op": "+I", "data": {"k": 2, "price": 1.5, "name": "cherry"}}\n')

    applied = cli(cli_env, "apply", "demo.fruit", "--up-to", "3")
    assert "3 batch(es) applied" in applied.stdout
    assert (
        "[demo.fruit] landing batch 2: 1 records (+I 1, -U 0, +U 0, -D 0)" in applied.stderr
    )  # progress names the batch

    log = [
        json.loads(line)
        for line in cli(cli_env, "changelog", "demo.fruit", "--format", "jsonl").stdout.splitlines()
    ]
    assert [(r["_log_offset"], r["_change_type"], r["k"], r["price"], r["name"]) for r in log] == [
        (0, "+I", 1, 2.0, "apple"),
        (1, "-U", 1, 2.0, "apple"),
        (2, "+U", 1, 4.0, "banana"),
        (3, "-D", 1, 4.0, "banana"),
    ]

    cli(cli_env, "apply")  # the rest of the pending batches, every table
    scan = [
        json.loads(line)
        for line in cli(cli_env, "scan", "demo.fruit", "--format", "jsonl").stdout.splitlines()
    ]
    from changelake.config import load_settings
    from changelake.storage.iceberg import Storage

    arrow = Storage(load_settings(home=home)).catalog.load_table("demo.fruit").scan().to_arrow()
    assert scan == [{"k": 2, "price": 1.5, "name": "cherry"}]
    assert arrow.drop_columns(["_bucket"]).to_pylist() == scan

    status = json.loads(cli(cli_env, "status", "--format", "jsonl").stdout)
    assert status["last_batch"] == 4 and status["rows"] == 1 and status["changelog_records"] == 5


@pytest.mark.integration
@pytest.mark.slow
def test_cli_reports_bad_input_with_file_line_and_field(home, cli_env):
    (home / "tables" / "demo.fruit.yaml").write_text(SPEC)
    bad = home / "bad.jsonl"
    bad.write_text('{"op": "+I", "data": {"k": 1, "price": 2.0}}\n{"op": "+X", "data": {"k": 2}}\n')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "changelake.cli",
            "apply",
            "demo.fruit",
            "--file",
            str(bad),
            "--batch-id",
            "1",
        ],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert f"error: {bad}:2 field 'op': unknown op '+X'" in result.stderr


def test_spark_submit_entrypoints_drop_the_empty_arguments_templates_render():
    from changelake.cli import without_empty_args

    rendered = ["shop.orders", "--from-batch", "", "--up-to", "None", "--format", "x"]
    assert without_empty_args(rendered, empty=("", "None")) == ["shop.orders", "--format", "x"]
    assert without_empty_args(["build", "--select", "", ""]) == ["build"]
    assert without_empty_args(["build", "--select", "marts", "--full-refresh"]) == [
        "build", "--select", "marts", "--full-refresh",
    ]  # fmt: skip


# Runs the CLI in a fresh interpreter and reports which heavy modules the command imported.
_PROBE = (
    "import sys; from changelake.cli import main; rc = main(sys.argv[1:]); "
    "heavy = [m for m in ('pyspark', 'py4j', 'great_expectations', 'dbt', 'pyiceberg', 'pandas', 'numpy') "
    "if m in sys.modules]; sys.stderr.write(f'HEAVY={heavy}\\n'); sys.exit(rc)"
)


@pytest.mark.integration
@pytest.mark.slow
def test_read_commands_start_no_jvm_and_equal_the_spark_reads(lake, home, cli_env):
    from changelake.storage.fastread import json_default

    (home / "tables" / "demo.fruit.yaml").write_text(SPEC)
    lake.apply(
        "demo.fruit", [{"op": "+I", "data": {"k": k, "price": k / 2, "name": f"n{k}"}} for k in range(6)]
    )
    lake.apply(
        "demo.fruit",
        [{"op": "-D", "data": {"k": 1}}, {"op": "+U", "data": {"k": 2, "price": 9.0, "name": "x"}}],
    )

    def read(*args: str) -> list[dict]:
        result = subprocess.run(
            [sys.executable, "-c", _PROBE, *args, "--format", "jsonl"],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert "HEAVY=[]" in result.stderr  # no pyspark (so no JVM), GX, dbt, pyiceberg, pandas or numpy
        return [json.loads(line) for line in result.stdout.splitlines()]

    def spark_rows(df) -> list[dict]:
        return [json.loads(json.dumps(r.asDict(), default=json_default)) for r in df.collect()]

    assert read("lookup", "demo.fruit", "k=2") == [{"k": 2, "price": 9.0, "name": "x"}]
    assert read("lookup", "demo.fruit", "k=1") == []
    assert read("scan", "demo.fruit", "--limit", "3") == spark_rows(
        lake.rows("demo.fruit").orderBy("k").limit(3)
    )
    assert read("scan", "demo.fruit", "--at-batch", "1") == spark_rows(
        lake.rows("demo.fruit", 1).orderBy("k")
    )
    log = read("changelog", "demo.fruit", "--from-batch", "2")
    spark_log = spark_rows(lake.changelog("demo.fruit", from_batch=2))
    assert [r.pop("_commit_timestamp")[:19] for r in log] == [
        r.pop("_commit_timestamp")[:19] for r in spark_log
    ]
    assert log == spark_log and sorted(r["_change_type"] for r in log) == ["+U", "-D", "-U"]
    (status,) = read("status")
    assert (status["last_batch"], status["rows"], status["snapshots"]) == (2, 5, 2)
    assert read("dead-letters", "demo.fruit") == []


# --- JSON output: one document on stdout, everything else on stderr (in this process, no JVM) -----------------


@pytest.fixture
def no_jvm(monkeypatch):
    """A test of the CLI's JSON output that would start Spark fails instead (and stays out of the JVM)."""
    from changelake.runtime import session

    def refuse(*args, **kwargs):
        raise AssertionError("this CLI command started a SparkSession")

    monkeypatch.setattr(session, "get_spark", refuse)
    for key in [k for k in os.environ if k.startswith("CHANGELAKE_")]:
        monkeypatch.delenv(key)


def run_json(capfd, home: Path, *args: str) -> tuple[dict | list, str]:
    """``changelake <args>`` through ``main`` in this process: the one JSON document on stdout, and stderr."""
    from changelake.cli import main

    capfd.readouterr()
    code = main(["--home", str(home), "--tables", str(home / "tables"), *args])
    out, err = capfd.readouterr()
    assert code == 0, err[-3000:]
    assert out.endswith("\n") and out.count("\n") == 1, out  # one line: one document, nothing else
    return json.loads(out), err


def test_datagen_json_lists_every_landed_batch(home, capfd, no_jvm):
    shutil.copy(REPO / "examples" / "tables" / "shop.orders.yaml", home / "tables")
    doc, err = run_json(capfd, home, "datagen", "--batches", "2", "--records", "7", "--json")
    assert list(doc) == ["landed"]
    assert [(b["table"], b["batch_id"]) for b in doc["landed"]] == [("shop.orders", 1), ("shop.orders", 2)]
    for batch in doc["landed"]:
        assert set(batch) == {"table", "batch_id", "path", "messages", "changes"}
        path = Path(batch["path"])
        assert path == home / "landing" / "shop.orders" / f"{batch['batch_id']}.jsonl"
        assert batch["messages"] == len(path.read_text().splitlines()) == 7
        assert sum(batch["changes"][k] for k in ("insert", "update", "delete")) == 7
        # The text report of each batch is progress on stderr now.
        assert f"[shop.orders] batch {batch['batch_id']}: 7 messages" in err
    again, _ = run_json(capfd, home, "datagen", "--records", "3", "--json")
    assert [b["batch_id"] for b in again["landed"]] == [3]  # after the last landed batch


FRUIT = [
    '{"op": "+I", "data": {"k": 1, "price": 2.0, "name": "apple"}}\n',
    '{"op": "+I", "data": {"k": 1, "price": 4.0, "name": "banana"}}\n{"op": "+I", "data": {"k": 2}}\n',
]


def test_create_and_apply_json_report_tables_and_batch_results(home, capfd, no_jvm):
    from changelake.engine.apply import BatchResult

    (home / "tables" / "demo.fruit.yaml").write_text(SPEC)
    created, _ = run_json(capfd, home, "create", "--json")
    fruit = {"table": "demo.fruit", "changelog": "demo.fruit__changelog", "buckets": 2}
    assert created == {"created": [{**fruit, "outcome": "created"}]}
    again, _ = run_json(capfd, home, "create", "--json")
    assert again == {"created": [{**fruit, "outcome": "exists"}]}, "a second create must not claim it created"
    from changelake.cli import main

    assert main(["--home", str(home), "--tables", str(home / "tables"), "create"]) == 0
    out = capfd.readouterr().out
    assert "exists, unchanged: demo.fruit" in out and "created demo.fruit" not in out

    landing = home / "landing" / "demo.fruit"
    landing.mkdir(parents=True)
    for batch_id, lines in enumerate(FRUIT, start=1):
        (landing / f"{batch_id}.jsonl").write_text(lines)
    summary = home / "summary.json"
    doc, err = run_json(capfd, home, "apply", "demo.fruit", "--json", "--summary", str(summary))
    assert (doc["applied"], doc["already_applied"]) == (2, 0)
    fields = {f.name for f in dataclasses.fields(BatchResult)}
    assert all(set(b) == fields for b in doc["batches"])
    first, second = doc["batches"]
    assert (first["table"], first["batch_id"], first["status"]) == ("demo.fruit", 1, "applied")
    assert (first["counts"]["inserted"], second["counts"]["inserted"], second["counts"]["updated"]) == (
        1,
        1,
        1,
    )
    assert second["log_start_offset"] == first["log_end_offset"] == 1 and second["log_end_offset"] == 4
    assert json.loads(summary.read_text()) == doc["batches"]
    assert "2 batch(es) applied, 0 already applied" in err  # the text report went to stderr

    replay, _ = run_json(capfd, home, "apply", "--from-batch", "1", "--json")
    assert (replay["applied"], replay["already_applied"]) == (0, 2)
    assert [b["status"] for b in replay["batches"]] == ["already-applied", "already-applied"]


def test_read_commands_json_is_one_array_of_the_jsonl_rows(home, capfd, no_jvm):
    from changelake.cli import main

    (home / "tables" / "demo.fruit.yaml").write_text(SPEC)
    landing = home / "landing" / "demo.fruit"
    landing.mkdir(parents=True)
    for batch_id, lines in enumerate(FRUIT, start=1):
        (landing / f"{batch_id}.jsonl").write_text(lines)
    run_json(capfd, home, "apply", "--json")
    (landing / "3.jsonl").write_text(FRUIT[0])  # landed, not applied: status counts it as pending

    for command in (
        ["scan", "demo.fruit"],
        ["changelog", "demo.fruit"],
        ["lookup", "demo.fruit", "k=1"],
        ["dead-letters", "demo.fruit"],
        ["status"],
    ):
        capfd.readouterr()
        assert (
            main(["--home", str(home), "--tables", str(home / "tables"), *command, "--format", "jsonl"]) == 0
        )
        lines = [json.loads(line) for line in capfd.readouterr().out.splitlines()]
        doc, _ = run_json(capfd, home, *command, "--format", "json")
        assert isinstance(doc, list) and doc == lines, command
    (status,) = doc
    assert (status["table"], status["last_batch"], status["rows"], status["pending_batches"]) == (
        "demo.fruit", 2, 2, 1,
    )  # fmt: skip


def test_json_output_moves_any_other_stdout_to_stderr(home, capfd, no_jvm, monkeypatch):
    """A library's print or a child process's output (Spark's JVM inherits fd 1) must not break the
    document: while the command works, stdout is stderr, down to the file descriptor."""
    from changelake.inputs import datagen

    generate = datagen.generate

    def noisy(*args, **kwargs):
        print("noise from python")
        subprocess.run(["echo", "noise from a child process"], check=True)
        return generate(*args, **kwargs)

    monkeypatch.setattr(datagen, "generate", noisy)
    shutil.copy(REPO / "examples" / "tables" / "shop.orders.yaml", home / "tables")
    doc, err = run_json(capfd, home, "datagen", "--records", "2", "--json")
    assert [b["batch_id"] for b in doc["landed"]] == [1]
    assert "noise from python" in err and "noise from a child process" in err


def test_a_failed_json_command_prints_no_document(home, capfd, no_jvm):
    from changelake.cli import main

    (home / "tables" / "demo.fruit.yaml").write_text(SPEC)
    capfd.readouterr()
    assert main(["--home", str(home), "--tables", str(home / "tables"), "apply", "demo.nope", "--json"]) == 4
    out, err = capfd.readouterr()
    assert out == "" and "error: Unknown table demo.nope" in err


@pytest.mark.unit
@pytest.mark.parametrize(("command", "shut_down"), [("status", False), ("datagen", True)])
def test_a_read_command_ends_without_the_interpreters_shutdown(tmp_path, command, shut_down):
    """The console script: a read command (no JVM) ends once its output is flushed, without the shutdown in
    which an Arrow thread freeing a Python-owned buffer aborts the process (cli.main's docstring); its output
    and exit code are as before. Any other command shuts down as usual (an exit handler runs)."""
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('shut down', flush=True))\n"
        "from changelake.cli import entry\n"
        f"sys.argv = ['changelake', '--home', {str(tmp_path)!r}, {command!r}]\n"
        "entry()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}  # `make test` sets some
    env.update(CHANGELAKE_HOME=str(tmp_path), CHANGELAKE_TABLES=str(tmp_path / "tables"))
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert ("shut down" in result.stdout) is shut_down
    if not shut_down:  # the command's output was flushed before the end
        assert "no table specs" in result.stdout
