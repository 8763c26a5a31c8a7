"""The CLI end to end (real subprocesses): the docs/semantics.md §2.2 walkthrough, and scan == pyiceberg alone."""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = """name: demo.fruit
columns:
  - {name: k, type: INT}
  - {name: price, type: DOUBLE}
  - {name: name, type: STRING}
primary_key: [k]
options: {bucket.num: 2}
"""


def cli(env, *args):
    result = subprocess.run(
        [sys.executable, "-m", "changelake.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


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
        "[demo.fruit] batch 2: 1 records (+I 1, -U 0, +U 0, -D 0)" in applied.stderr
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
