"""The warm endpoint's apply service (changelake.runtime.applyservice), without a JVM: the service runs in
this process on a ChangeLake without Spark (the test batches are small enough to apply in-process), and the
client is the real CLI in a subprocess whose ``CHANGELAKE_SPARK_REMOTE`` points nowhere, so falling back to
Spark Connect would fail the test. The endpoint with Spark is covered in test_server.py."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from changelake import ChangeLake
from changelake.config import load_settings
from changelake.errors import BadRecordError, BatchRefusedError, ChangelakeError
from changelake.runtime import applyservice
from tests.helpers import CLI
from tests.specs import FRUIT

SPEC = FRUIT
BATCHES = [
    '{"op": "+I", "data": {"k": 1, "price": 2.0, "name": "apple"}}\n',
    '{"op": "+I", "data": {"k": 1, "price": 4.0, "name": "banana"}}\n{"op": "+I", "data": {"k": 2}}\n',
]
NOWHERE = "sc://127.0.0.1:9"  # the discard port: a Spark Connect client would fail to reach it


class Recorder:
    """The service's ChangeLake factory: a Spark-less ChangeLake per request, and what was asked of it."""

    def __init__(self):
        self.requests: list[dict] = []

    def __call__(self, settings, progress):
        self.requests.append({"tables_dir": settings.tables_dir, "landing_dir": settings.landing_dir})
        return ChangeLake(settings=settings, progress=progress)


@pytest.fixture
def served(home, monkeypatch):
    """The service of ``home``, listening in this process; the Recorder of its requests."""
    for key in [k for k in os.environ if k.startswith("CHANGELAKE_")]:
        monkeypatch.delenv(key)
    (home / "tables" / "demo.fruit.yaml").write_text(SPEC)
    settings = load_settings(home=home)
    ChangeLake(settings=settings, progress=None).create_table(str(home / "tables" / "demo.fruit.yaml"))
    landing = home / "landing" / "demo.fruit"
    landing.mkdir(parents=True)
    for batch_id, lines in enumerate(BATCHES, start=1):
        (landing / f"{batch_id}.jsonl").write_text(lines)
    recorder = Recorder()
    service = applyservice.ApplyService(settings, recorder, log=lambda _m: None)
    service.start()
    yield service, recorder
    service.stop()


def warm_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
    env.update(CHANGELAKE_HOME=str(home), CHANGELAKE_SPARK_REMOTE=NOWHERE)
    return env


def rows(home: Path) -> list[dict]:
    lake = ChangeLake(home=home, progress=None)
    return sorted(lake.rows_arrow("demo.fruit").to_pylist(), key=lambda r: r["k"])


def test_cli_apply_runs_in_the_endpoint_without_pyspark_or_pyiceberg(served, home):
    _, recorder = served
    probe = (
        "import sys; from changelake.cli import main; code = main(['apply', 'demo.fruit', '--json']); "
        "print(sorted(m for m in ('pyspark', 'pyiceberg', 'changelake.api') if m in sys.modules), "
        "file=sys.stderr); sys.exit(code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], env=warm_env(home), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert [(b["batch_id"], b["status"]) for b in document["batches"]] == [(1, "applied"), (2, "applied")]
    assert document["batches"][1]["counts"]["updated"] == 1
    assert "[apply] on the warm endpoint" in result.stderr
    # the endpoint's progress, relayed as it came
    assert "[demo.fruit] landing batch 2 (table batch 2) committed" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "[]"  # nothing heavy was imported by the client
    assert len(recorder.requests) == 1
    assert rows(home) == [
        {"k": 1, "price": 4.0, "name": "banana"},
        {"k": 2, "price": None, "name": None},
    ]


def test_cli_apply_of_a_file_relative_to_the_client_and_its_replay(served, home, tmp_path):
    _, recorder = served
    batch = tmp_path / "client-side" / "b1.jsonl"
    batch.parent.mkdir()
    batch.write_text(BATCHES[0])
    command = [*CLI, "apply", "demo.fruit", "--file", "b1.jsonl", "--batch-id", "1"]
    for status in ("1 batch(es) applied, 0 already applied", "0 batch(es) applied, 1 already applied"):
        result = subprocess.run(
            command, env=warm_env(home), cwd=batch.parent, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert status in result.stdout
        assert "[apply] on the warm endpoint" in result.stderr
    assert len(recorder.requests) == 2
    assert rows(home) == [{"k": 1, "price": 2.0, "name": "apple"}]


def test_bad_input_reaches_the_cli_as_the_same_error_and_the_table_is_unchanged(served, home):
    (home / "landing" / "demo.fruit" / "3.jsonl").write_text('{"op": "+I", "data": {"k": "x"}}\n')
    result = subprocess.run(
        [*CLI, "apply", "demo.fruit"], env=warm_env(home), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "3.jsonl:1 field 'k'" in result.stderr
    assert "Traceback" not in result.stderr
    assert "[apply] on the warm endpoint" in result.stderr
    # Batches 1 and 2 applied before the bad batch 3, which changed nothing.
    assert rows(home) == [{"k": 1, "price": 4.0, "name": "banana"}, {"k": 2, "price": None, "name": None}]
    status = subprocess.run(
        [*CLI, "status", "--format", "json"], env=warm_env(home), capture_output=True, text=True, timeout=60
    )
    assert [(t["table"], t["last_batch"]) for t in json.loads(status.stdout)] == [("demo.fruit", 2)]


def test_errors_keep_their_type_through_the_socket(served, home):
    settings = load_settings(home=home)
    request = {
        "settings": {k: str(getattr(settings, k)) for k in applyservice.SHARED_SETTINGS},
        "table": "demo.fruit",
        "file": str(home / "landing" / "demo.fruit" / "2.jsonl"),
        "batch_id": 5,
    }
    with pytest.raises(BatchRefusedError, match="skips ahead"):
        applyservice.request_apply(applyservice.connect(home), request, lambda _m: None)
    bad = home / "bad.jsonl"
    bad.write_text(BATCHES[0] + '{"op": "+X", "data": {"k": 3}}\n')
    with pytest.raises(BadRecordError) as caught:
        applyservice.request_apply(
            applyservice.connect(home), {**request, "file": str(bad), "batch_id": 1}, lambda _m: None
        )
    assert (caught.value.file, caught.value.line) == (str(bad), 2)
    with pytest.raises(ChangelakeError, match="batch_id must be an integer"):
        applyservice.request_apply(applyservice.connect(home), {**request, "batch_id": "1"}, lambda _m: None)


def test_a_client_of_another_catalog_is_refused(served, home, tmp_path):
    settings = load_settings(home=home)
    other = {k: str(getattr(settings, k)) for k in applyservice.SHARED_SETTINGS}
    other["catalog_uri"] = f"sqlite:///{tmp_path / 'other.db'}"
    with pytest.raises(ChangelakeError, match="catalog_uri is"):
        applyservice.request_apply(
            applyservice.connect(home), {"settings": other, "table": "demo.fruit"}, lambda _m: None
        )
    assert rows(home) == []


def test_the_socket_is_owner_only(served):
    service, _ = served
    assert stat.S_IMODE(os.stat(service.path).st_mode) == 0o600


def test_a_batch_whose_client_went_away_is_still_applied(served, home):
    settings = load_settings(home=home)
    sock = applyservice.connect(home)
    request = {
        "version": applyservice.PROTOCOL_VERSION,
        "command": "apply",
        "settings": {k: str(getattr(settings, k)) for k in applyservice.SHARED_SETTINGS},
        "table": "demo.fruit",
    }
    sock.sendall(json.dumps(request).encode() + b"\n")
    sock.close()  # gone before the first progress line
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(rows(home)) < 2:
        time.sleep(0.2)
    assert rows(home) == [{"k": 1, "price": 4.0, "name": "banana"}, {"k": 2, "price": None, "name": None}]


def test_no_listener_means_apply_in_this_process(home):
    path = applyservice.socket_path(home)
    assert applyservice.connect(home) is None  # no socket file
    path.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file of a dead endpoint: nothing listens
    assert applyservice.connect(home) is None


def test_a_home_too_deep_for_a_socket_path_gets_one_in_the_temp_dir(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    path = applyservice.socket_path(deep)
    assert len(os.fsencode(path)) <= 100 and path != deep / "spark-server" / applyservice.SOCKET_NAME
    assert path == applyservice.socket_path(deep)  # the client finds what the service made
    assert applyservice.socket_path(tmp_path) == tmp_path / "spark-server" / applyservice.SOCKET_NAME


def test_cli_sql_runs_in_the_endpoint_and_a_refusal_keeps_its_words(served, home):
    _, recorder = served
    probe = (
        "import sys; from changelake.cli import main; code = main(['sql', sys.argv[1], '--json', "
        "'--idempotency-key', 'fix-1']); print(sorted(m for m in ('pyspark', 'pyiceberg', 'changelake.api') "
        "if m in sys.modules), file=sys.stderr); sys.exit(code)"
    )
    statement = (
        "INSERT INTO demo.fruit VALUES (7, 1.5, 'kiwi'); UPDATE demo.fruit SET name = 'gold kiwi' WHERE k = 7"
    )
    for status in ("applied", "already-applied"):
        result = subprocess.run(
            [sys.executable, "-c", probe, statement],
            env=warm_env(home),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        document = json.loads(result.stdout)
        assert [(s["kind"], s["status"], s["batch_id"]) for s in document["statements"]] == [
            ("insert", status, 1),
            ("update", status, 2),
        ]
        assert "[sql] on the warm endpoint" in result.stderr
        assert result.stderr.strip().splitlines()[-1] == "[]"  # nothing heavy was imported by the client
    assert len(recorder.requests) == 2
    assert rows(home) == [{"k": 7, "price": 1.5, "name": "gold kiwi"}]
    refused = subprocess.run(
        [*CLI, "sql", "DELETE FROM demo.fruit WHERE price = 1.5"],
        env=warm_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert (
        "Currently, Fluss table only supports DELETE statement with conditions on primary key."
        in refused.stderr
    )
    assert "Traceback" not in refused.stderr
