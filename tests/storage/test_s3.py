"""Tables on object storage and behind a REST catalog, for real: the project's S3 endpoint (S3Proxy) and Iceberg
REST catalog server, started by infra/s3.sh and infra/rest_catalog.sh once per session (conftest.py).

Batches land as objects, apply in this process (small batches: no Spark, no JVM in the applier) into an s3://
warehouse, and are read back by pyiceberg (the independent reader) and by the reads without a JVM. Each test
keeps to a prefix (and, behind the REST catalog, a namespace) of its own.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from changelake import objectstore
from changelake.errors import BatchRefusedError
from tests.engine.test_exactly_once import race
from tests.helpers import land_batches, sparkless_lake, storage_options_of
from tests.specs import kv

pytestmark = pytest.mark.integration  # a JVM each for the S3 endpoint and the REST catalog

BATCHES = {
    1: [{"op": "+I", "data": {"k": k, "v": f"a{k}"}} for k in range(1, 9)],
    2: [
        {"op": "+U", "data": {"k": 1, "v": "b1"}},
        {"op": "-D", "data": {"k": 2}},
        {"op": "+I", "data": {"k": 9}},
    ],
    3: [{"op": "+U", "data": {"k": 9, "v": "c9"}}, {"op": "-D", "data": {"k": 3}}],
}


def _lines(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _lake(home: Path, table: str, prefix: str, options: dict[str, str], **settings):
    """A Spark-less ChangeLake whose warehouse and landing zone are under ``prefix`` on the S3 endpoint."""
    from changelake import ChangeLake
    from tests.helpers import NoSpark

    (home / "tables").mkdir(parents=True, exist_ok=True)
    (home / "tables" / f"{table}.yaml").write_text(kv(table))
    messages: list[str] = []
    lake = ChangeLake(
        home=home,
        tables_dir=home / "tables",
        spark=NoSpark(),
        progress=messages.append,
        warehouse=f"{prefix}/warehouse",
        landing_dir=f"{prefix}/landing",
        storage_options=options,
        **settings,
    )
    lake.messages = messages
    return lake


def _land(lake, table: str, batches: dict[int, list[dict]], ext: str = "jsonl") -> None:
    landing = lake.settings.landing_dir
    for batch_id, records in batches.items():
        landing.store.put(landing / table / f"{batch_id}.{ext}", _lines(records))


def _pyiceberg_state(lake, table: str) -> tuple[list[tuple], list[tuple]]:
    """Rows and changelog (batch, change, k, v) as pyiceberg reads them: an engine changelake did not write."""
    rows = lake.storage.catalog.load_table(table).scan().to_arrow()
    log = lake.storage.catalog.load_table(f"{table}__changelog").scan().to_arrow()
    return (
        sorted(zip(rows.column("k").to_pylist(), rows.column("v").to_pylist(), strict=True)),
        sorted(
            zip(*(log.column(c).to_pylist() for c in ("_batch_id", "_change_type", "k", "v")), strict=True),
            key=lambda r: (r[0], r[2], r[1]),
        ),
    )


def test_batches_landed_on_s3_apply_into_an_s3_warehouse_exactly_as_on_local_disk(
    s3_endpoint, s3_prefix, tmp_path
):
    options = storage_options_of(s3_endpoint)
    lake = _lake(tmp_path / "s3", "t.kv", s3_prefix, options)
    lake.create_all()
    _land(lake, "t.kv", BATCHES)
    results = lake.apply_pending("t.kv")
    assert [r.status for r in results] == ["applied"] * 3

    (tmp_path / "local").mkdir()
    local = sparkless_lake(tmp_path / "local")
    (tmp_path / "local" / "tables" / "t.kv.yaml").write_text(kv())
    local.create_all()
    land_batches(tmp_path / "local", "t.kv", BATCHES)
    local.apply_pending("t.kv")

    state = _pyiceberg_state(lake, "t.kv")
    assert state == _pyiceberg_state(local, "t.kv")
    assert state[0] == [(1, "b1"), (4, "a4"), (5, "a5"), (6, "a6"), (7, "a7"), (8, "a8"), (9, "c9")]
    # The table's files are objects under the prefix; nothing of the warehouse or landing zone is on local disk.
    store = lake.settings.landing_dir.store
    data = [
        i
        for i in store.list(f"{s3_prefix}/warehouse/t/kv", recursive=True)
        if i.path.name.endswith(".parquet")
    ]
    assert (
        data and not (tmp_path / "s3" / "warehouse").exists() and not (tmp_path / "s3" / "landing").exists()
    )
    # Reads without a JVM, the direct way (sqlite3 + the S3 endpoint, no pyiceberg), agree with pyiceberg.
    assert lake.reader.direct
    assert lake.lookup("t.kv", {"k": 9}) == [{"k": 9, "v": "c9"}]
    assert lake.lookup("t.kv", {"k": 3}) == []
    assert sorted((r["k"], r["v"]) for r in lake.rows_arrow("t.kv").to_pylist()) == state[0]
    # A replay of an applied batch is a no-op; nothing new is pending.
    assert lake.apply_pending("t.kv") == []
    # An object applied by name (apply --file s3://…) as another writer's batch, then replayed: a no-op.
    first = lake.apply("t.kv", file=f"{s3_prefix}/landing/t.kv/3.jsonl", batch_id=1, writer="backfill")
    again = lake.apply("t.kv", file=f"{s3_prefix}/landing/t.kv/3.jsonl", batch_id=1, writer="backfill")
    assert (first.status, again.status, again.batch_id) == ("applied", "already-applied", 4)


def test_an_object_put_again_after_its_batch_is_reported_by_its_etag(s3_endpoint, s3_prefix, tmp_path):
    lake = _lake(tmp_path, "t.kv", s3_prefix, storage_options_of(s3_endpoint))
    lake.create_all()
    _land(lake, "t.kv", {1: BATCHES[1]})
    lake.apply_pending("t.kv")
    _land(lake, "t.kv", {1: BATCHES[1]})  # the same bytes again: nothing changed
    _land(lake, "t.kv", {2: BATCHES[2]})
    assert [r.batch_id for r in lake.apply_pending("t.kv")] == [2]
    _land(lake, "t.kv", {1: BATCHES[1][:3]})  # a new PUT of batch 1, other bytes
    _land(lake, "t.kv", {3: BATCHES[3]})
    with pytest.raises(BatchRefusedError, match=r"t\.kv/1\.jsonl: changed after batch 1 was applied"):
        lake.apply_pending("t.kv")
    (row,) = [r for r in lake.status() if r["table"] == "t.kv"]
    assert "changed after batch 1" in row["problem"] and row["last_batch"] == 2


def test_landing_rules_on_s3_a_bad_name_blocks_its_table_from_that_batch_on(s3_endpoint, s3_prefix, tmp_path):
    lake = _lake(tmp_path, "t.kv", s3_prefix, storage_options_of(s3_endpoint))
    lake.create_all()
    _land(lake, "t.kv", {1: BATCHES[1], 2: BATCHES[2]})
    _land(lake, "t.kv", {2: BATCHES[2]}, ext="json")  # batch 2 twice
    _land(lake, "t.kv", {3: BATCHES[3]})
    landing = lake.settings.landing_dir
    landing.store.put(landing / "t.kv" / "notes.txt", b"not a batch\n")  # ignored
    with pytest.raises(Exception, match="batch 2 is landed twice"):
        lake.apply_pending("t.kv")
    assert _pyiceberg_state(lake, "t.kv")[0] == [(k, f"a{k}") for k in range(1, 9)]  # batch 1 applied


def test_the_orphan_sweep_on_s3_removes_strays_and_keeps_the_table(s3_endpoint, s3_prefix, tmp_path):
    lake = _lake(tmp_path, "t.kv", s3_prefix, storage_options_of(s3_endpoint))
    lake.create_all()
    _land(lake, "t.kv", BATCHES)
    lake.apply_pending("t.kv")
    store = lake.settings.landing_dir.store
    stray = store.path(f"{s3_prefix}/warehouse/t/kv/data/batch-000000000009-abc/stray.parquet")
    store.put(stray, b"PAR1")
    before = _pyiceberg_state(lake, "t.kv")
    (report,) = lake.maintain("t.kv", full=True, orphans_older_than_s=0)
    assert store.info(stray) is None
    assert sum(o.files_deleted for o in report.orphans) >= 1
    assert _pyiceberg_state(lake, "t.kv") == before
    # Every object left under the table's prefix is one the table reaches (none was taken for an orphan).
    assert lake.lookup("t.kv", {"k": 9}) == [{"k": 9, "v": "c9"}]


def test_wrong_keys_are_refused_and_the_secret_is_never_shown(s3_endpoint, s3_prefix, tmp_path):
    secret = "wrong-" + uuid.uuid4().hex
    options = {**storage_options_of(s3_endpoint), "AWS_SECRET_ACCESS_KEY": secret}
    lake = _lake(tmp_path, "t.kv", s3_prefix, options)
    with pytest.raises(Exception) as refused:
        lake.create_all()
    # The store refuses the first request: a read (403), or the first metadata file's PUT (its signature).
    assert (
        "ACCESS_DENIED" in str(refused.value)
        or "403" in str(refused.value)
        or "Forbidden" in str(refused.value)
        or "signature you provided" in str(refused.value)
    )
    shown = "\n".join([str(refused.value), repr(refused.value), *lake.messages, repr(lake.settings)])
    assert secret not in shown


class _OpenLog:
    """A pyarrow S3 file system that logs what it asks the store of an object: opens for reading (each a HEAD
    before its GETs), file infos (a HEAD, and a LIST when there is none) and deletes (a HEAD before, a marker
    PUT after)."""

    ASKING = ("open_input_file", "open_input_stream", "get_file_info", "delete_file", "delete_dir")

    def __init__(self, filesystem, opened: list[str]):
        self._filesystem, self._opened = filesystem, opened

    def __getattr__(self, name):
        if name in self.ASKING:
            return lambda path, *args, **kwargs: (
                self._opened.append(getattr(path, "base_dir", path)),  # a FileSelector lists its base_dir
                getattr(self._filesystem, name)(path, *args, **kwargs),
            )[1]
        return getattr(self._filesystem, name)


def _log_pyarrow_opens(monkeypatch) -> list[str]:
    """The objects pyarrow asks the store about (``bucket/key``) from here on, for every store."""
    from changelake import objectstore

    opened: list[str] = []
    plain, made = objectstore._filesystem, {}

    def logged(key):
        if key not in made:
            made[key] = _OpenLog(plain(key), opened)
        return made[key]

    monkeypatch.setattr(objectstore, "_filesystem", logged)
    return opened


@pytest.fixture()
def pyarrow_opens(monkeypatch) -> list[str]:
    return _log_pyarrow_opens(monkeypatch)


def test_objects_are_read_by_signed_gets_whole_by_ranges_or_by_their_tail(
    s3_endpoint, s3_prefix, pyarrow_opens
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from changelake import objectstore

    store = objectstore.Store(storage_options_of(s3_endpoint))
    rows = pa.table({"k": pa.array(range(300_000)), "v": pa.array([f"v{i}" for i in range(300_000)])})
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink, row_group_size=100_000)
    data = sink.getvalue().to_pybytes()
    assert len(data) > objectstore.TAIL_BYTES
    path = store.path(f"{s3_prefix}/direct/a file, ünïcode + spaces.parquet")  # encoded as S3 signs it
    store.put(path, data)
    assert store.read(path) == data
    # Size known: read whole up to the limit, by ranges above it; size not known: its tail tells it.
    for size, whole_up_to in [(len(data), len(data)), (len(data), 0), (None, 0), (None, len(data))]:
        opened = store.open_input(path, size, whole_up_to)
        assert opened.size() == len(data)
        assert isinstance(opened, pa.BufferReader) == (whole_up_to >= len(data))
        assert pq.ParquetFile(opened).read_row_group(1).equals(rows.slice(100_000, 100_000))
    small = store.path(f"{s3_prefix}/direct/small")
    store.put(small, b"0123456789")
    assert store.open_input(small).read() == b"0123456789"  # one GET of its "tail" is all of it
    opened = store.open_input(small, 10, 0)
    assert (opened.read_at(4, 3), opened.read_at(5, 8)) == (b"3456", b"89")
    empty = store.path(f"{s3_prefix}/direct/empty")
    store.put(empty, b"")
    assert store.open_input(empty).read() == b""
    with pytest.raises(FileNotFoundError, match="no such object"):
        store.read(store.path(f"{s3_prefix}/direct/missing"))
    with pytest.raises(FileNotFoundError, match="no such object"):
        store.open_input(store.path(f"{s3_prefix}/direct/missing"))
    secret = "wrong-" + uuid.uuid4().hex
    wrong = objectstore.Store({**storage_options_of(s3_endpoint), "AWS_SECRET_ACCESS_KEY": secret})
    with pytest.raises(PermissionError, match="403") as refused:
        wrong.read(f"{s3_prefix}/direct/small")
    assert secret not in str(refused.value)
    assert pyarrow_opens == []


def test_applies_lookups_and_scans_open_no_table_file_through_pyarrow(
    s3_endpoint, s3_prefix, tmp_path, direct_requests
):
    options = storage_options_of(s3_endpoint)
    lake = _lake(tmp_path, "t.kv", s3_prefix, options)
    lake.create_all()
    _land(lake, "t.kv", {1: BATCHES[1]})
    lake.apply_pending("t.kv")
    with pytest.MonkeyPatch.context() as patch:
        opened = _log_pyarrow_opens(patch)
        lake = _lake(tmp_path, "t.kv", s3_prefix, options)  # its catalog's FileIO made from here on
        _land(lake, "t.kv", {2: BATCHES[2], 3: BATCHES[3]})
        direct_requests.clear()
        assert [r.status for r in lake.apply_pending("t.kv")] == ["applied"] * 2  # merges and commits
        applying = list(direct_requests)
        assert lake.reader.direct
        found = lake.lookup("t.kv", {"k": 9})
        first = lake.reader.rows_arrow("t.kv", limit=3, by_key=True).to_pylist()  # scan --limit 3
        every = lake.rows_arrow("t.kv").to_pylist()
    # pyarrow asks only about the landed objects (their listing, a HEAD for their ETags): nothing about a file
    # of the table (a metadata file's existence, a manifest's or a written file's size) nor about the batch's
    # staged files as they are deleted.
    assert opened and not [p for p in opened if "/landing" not in p], opened
    store = lake.settings.landing_dir.store
    objects = [str(i.path) for i in store.list(f"{s3_prefix}/warehouse", recursive=True)]
    assert not [p for p in objects if "-staging" in p]
    # The applies read back none of the files they wrote: not the new rows', delete and changelog files'
    # footers (the commit describes them from what their writers kept), nor the changelog manifests.
    written = {p.split(":/", 1)[1] for p in objects if "batch-000000000002" in p or "batch-000000000003" in p}
    written |= {p.split(":/", 1)[1] for p in objects if p.endswith(".json") and "/metadata/" not in p}
    assert len(written) >= 6 and not [p for m, p in applying if m == "GET" and p in written], applying
    # Each of the batches' data, delete and changelog files written by one PUT of its own.
    assert {p for m, p in applying if m == "PUT"} >= {p for p in written if "/batch-" in p}
    expected = _pyiceberg_state(lake, "t.kv")[0]
    assert found == [{"k": 9, "v": "c9"}]
    assert [(r["k"], r["v"]) for r in first] == expected[:3]
    assert sorted((r["k"], r["v"]) for r in every) == expected


@pytest.fixture()
def direct_requests(monkeypatch) -> list[tuple[str, str]]:
    """The signed requests (:class:`changelake.objectstore._DirectReads`) from here on: (method, path)."""
    from changelake import objectstore

    made: list[tuple[str, str]] = []
    plain = objectstore._DirectReads._request

    def logged(self, method, path, *args, **kwargs):
        made.append((method, path))
        return plain(self, method, path, *args, **kwargs)

    monkeypatch.setattr(objectstore._DirectReads, "_request", logged)
    return made


def test_objects_are_deleted_many_in_one_request_and_leave_no_marker(
    s3_endpoint, s3_prefix, pyarrow_opens, direct_requests
):
    from changelake import objectstore

    store = objectstore.Store(storage_options_of(s3_endpoint))
    names = ["a b/x 1.txt", "a b/ü & <2>.txt", "a b/y", "c"]
    for name in names:
        store.put(f"{s3_prefix}/many/{name}", b"x")
    direct_requests.clear()
    store.delete_many([f"{s3_prefix}/many/{n}" for n in names[:3]] + [f"{s3_prefix}/many/missing"])
    assert [m for m, _ in direct_requests] == ["POST"]  # one DeleteObjects, no HEAD, no directory marker
    assert pyarrow_opens == []
    assert [str(i.path) for i in store.list(f"{s3_prefix}/many", recursive=True)] == [f"{s3_prefix}/many/c"]
    wrong = objectstore.Store({**storage_options_of(s3_endpoint), "AWS_SECRET_ACCESS_KEY": "wrong"})
    with pytest.raises(PermissionError, match="403"):
        wrong.delete_many([f"{s3_prefix}/many/c"])
    assert store.list(f"{s3_prefix}/many", recursive=True)


def test_objects_are_written_by_one_signed_put_and_a_failed_writer_writes_nothing(
    s3_endpoint, s3_prefix, direct_requests, monkeypatch
):
    from changelake import objectstore

    store = objectstore.Store(storage_options_of(s3_endpoint))
    data = os.urandom(3 << 20)
    chunks = [data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
    path = f"{s3_prefix}/put/whole"
    direct_requests.clear()
    with store.open_output(path) as out:
        for chunk in chunks:
            out.write(memoryview(chunk))
        assert out.tell() == len(data)
        assert store.info(path) is None  # nothing there before it is closed
    assert direct_requests[0] == ("PUT", path.replace("s3://", "/"))  # where pyarrow made a multipart upload
    assert [m for m, _ in direct_requests] == ["PUT"]
    assert store.read(path) == data
    with pytest.raises(RuntimeError, match="the writer failed"):
        with store.open_output(f"{s3_prefix}/put/failed") as out:
            out.write(b"half a file")
            raise RuntimeError("the writer failed")
    assert store.info(f"{s3_prefix}/put/failed") is None
    # The store checks the bytes against the signed SHA-256: bytes changed on the way are refused.
    plain = objectstore._DirectReads._signed
    monkeypatch.setattr(
        objectstore._DirectReads,
        "_signed",
        lambda self, path, method="GET", query="", body=b"": plain(self, path, method, query, body[::-1]),
    )
    with pytest.raises(OSError, match="PUT failed: HTTP 400"):
        store.put(f"{s3_prefix}/put/changed", b"some bytes")
    assert store.info(f"{s3_prefix}/put/changed") is None
    monkeypatch.setattr(objectstore._DirectReads, "_signed", plain)
    # Past PUT_WHOLE_BYTES the bytes go on as pyarrow's multipart upload, whole all the same.
    monkeypatch.setattr(objectstore, "PUT_WHOLE_BYTES", 1 << 20)
    direct_requests.clear()
    store.put(f"{s3_prefix}/put/large", chunks)
    assert direct_requests == []
    assert store.read(f"{s3_prefix}/put/large") == data
    wrong = objectstore.Store({**storage_options_of(s3_endpoint), "AWS_SECRET_ACCESS_KEY": "wrong"})
    with pytest.raises(PermissionError, match="403"):
        wrong.put(f"{s3_prefix}/put/refused", b"x")


def test_a_landed_objects_checksum_reads_it_in_chunks_of_a_get_each(s3_endpoint, s3_prefix, direct_requests):
    import hashlib

    from changelake import objectstore
    from changelake.inputs import landing

    store = objectstore.Store(storage_options_of(s3_endpoint))
    data = os.urandom((16 << 20) + objectstore.TAIL_BYTES + 1)
    path = store.path(f"{s3_prefix}/landing/t.kv/1.parquet")
    store.put(path, data)
    direct_requests.clear()
    expected = hashlib.sha256(json.dumps(["parquet", None]).encode())
    expected.update(data + b"\x00")
    assert landing.batch_checksum([path], "parquet", None) == expected.hexdigest()
    # Its tail (which gives its size), then one GET per chunk: 8 MiB, 8 MiB, then what precedes the tail.
    assert [m for m, _ in direct_requests] == ["GET"] * 4


def test_bucket_tasks_read_each_staged_object_once_with_the_size_its_decode_task_wrote(
    s3_endpoint, s3_prefix, tmp_path, direct_requests, monkeypatch
):
    """A Spark task's buckets share the batch's staged objects: the first reads one whole (its size from the
    decode task, so no request asks for it) and the others find it kept; not two GETs per bucket and object
    (what a large staged object cost, read by ranges as other files above a task's whole-read limit are)."""
    import pyarrow as pa

    from changelake import objectstore
    from changelake.engine import buckets
    from changelake.inputs import decode
    from changelake.spec import TableSpec
    from changelake.storage import taskio
    from changelake.storage.taskio import TaskIO

    monkeypatch.setattr(taskio, "SMALL_OBJECT_BYTES", 1024)  # these staged objects are larger

    spec = TableSpec.from_dict(
        {
            "name": "t.kv",
            "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
            "primary_key": ["k"],
            "options": {"bucket.num": 8},
        }
    )
    for i in range(2):
        (tmp_path / f"{i}.jsonl").write_text(
            "".join(
                f'{{"op": "+I", "data": {{"k": {k}, "v": "v{k}"}}}}\n' for k in range(i * 500, i * 500 + 500)
            )
        )
    plan = decode.plan_batch([tmp_path / "0.jsonl", tmp_path / "1.jsonl"], spec, None, None)
    properties = objectstore.fileio_properties(storage_options_of(s3_endpoint))
    staging = f"{s3_prefix}/staging"
    stats = [decode.decode_range(r, spec, staging, TaskIO(properties)) for r in plan.ranges]
    summary = decode.summarize([{**s, "error": None} for s in stats])
    store = objectstore.Store(storage_options_of(s3_endpoint))
    assert summary.staged_bytes == {str(i.path): i.size for i in store.list(staging)}
    assert len(summary.staged_bytes) == 2 and len(summary.groups) > 2
    assert min(summary.staged_bytes.values()) > taskio.SMALL_OBJECT_BYTES
    direct_requests.clear()
    io = TaskIO(properties)
    schema = decode.staged_schema(spec)
    read = [
        buckets.read_staged(tuple(g.parts), schema, io, tuple(summary.staged_bytes[p] for p, _ in g.parts))
        for g in summary.groups.values()
    ]
    assert sorted(pa.concat_tables(read).column("k").to_pylist()) == list(range(1000))
    assert sorted(direct_requests) == sorted(("GET", p.split(":/", 1)[1]) for p in summary.staged_bytes)


# --- behind the REST catalog -------------------------------------------------------------------------------


def _rest_env(rest_catalog: dict[str, str], home: Path, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHANGELAKE_", "AWS_", "PYICEBERG_"))}
    env.update(rest_catalog)
    env.update(
        CHANGELAKE_HOME=str(home),
        CHANGELAKE_TABLES=str(home / "tables"),
        CHANGELAKE_WAREHOUSE=f"{prefix}/warehouse",
        CHANGELAKE_LANDING=f"{prefix}/landing",
    )
    return env


def test_tables_behind_the_rest_catalog_apply_and_read(
    rest_catalog, s3_endpoint, s3_prefix, tmp_path, caplog
):
    table = f"r{uuid.uuid4().hex[:8]}.kv"  # the session's catalog is shared: a namespace of its own
    lake = _lake(
        tmp_path,
        table,
        s3_prefix,
        storage_options_of(s3_endpoint),
        catalog_type="rest",
        catalog_uri=rest_catalog["CHANGELAKE_CATALOG_URI"],
        # pyiceberg reads PYICEBERG_CATALOG__* once, at import: in this process the token goes in as a property
        catalog_properties={"token": rest_catalog["PYICEBERG_CATALOG__CHANGELAKE__TOKEN"]},
    )
    lake.create_all()
    # One metadata file kept besides the current one: the server deletes the rest as commits drop them from
    # the log, and pyiceberg no longer deletes them again (it found them gone and warned, a file at a time).
    with lake.storage.catalog.load_table(table).transaction() as tx:
        tx.set_properties({"write.metadata.previous-versions-max": "1"})
    _land(lake, table, BATCHES)
    with caplog.at_level(logging.WARNING, logger="pyiceberg"):
        assert [r.status for r in lake.apply_pending(table)] == ["applied"] * 3
    assert not [r.getMessage() for r in caplog.records if "Failed to delete" in r.getMessage()]
    metadata = lake.storage.catalog.load_table(table).metadata_location.rsplit("/", 1)[0]
    store = objectstore.Store(storage_options_of(s3_endpoint))
    assert len([o for o in store.list(metadata) if str(o.path).endswith(".metadata.json")]) == 2
    rows, log = _pyiceberg_state(lake, table)
    assert rows == [(1, "b1"), (4, "a4"), (5, "a5"), (6, "a6"), (7, "a7"), (8, "a8"), (9, "c9")]
    assert [r[:3] for r in log if r[2] == 1] == [(1, "+I", 1), (2, "+U", 1), (2, "-U", 1)]  # sorted
    assert lake.lookup(table, {"k": 1}) == [{"k": 1, "v": "b1"}]
    # Reads without pyiceberg ask the REST server for the table as the protocol says (loadTable) and agree
    # with the reads through pyiceberg.
    from changelake.storage.catalog import DirectSource
    from changelake.storage.fastread import FastReader

    namespace, name = table.split(".")
    assert isinstance(lake.reader._source(namespace, name), DirectSource)
    direct, through = (FastReader(lake.settings, direct=d, storage=lake.storage) for d in (True, False))
    assert direct.rows_arrow(table).to_pylist() == through.rows_arrow(table).to_pylist()
    assert sorted(r["k"] for r in direct.rows_arrow(table).to_pylist()) == [r[0] for r in rows]
    # The table's metadata is where the REST server wrote it: on the S3 endpoint.
    location = lake.storage.catalog.load_table(table).metadata_location
    assert location.startswith("s3://changelake/")


def test_the_rest_catalog_refuses_requests_without_its_token(rest_catalog):
    uri = rest_catalog["CHANGELAKE_CATALOG_URI"]
    for headers in ({}, {"Authorization": "Bearer " + "0" * 48}):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{uri}/v1/config", headers=headers), timeout=30)
        assert refused.value.code == 401
    token = rest_catalog["PYICEBERG_CATALOG__CHANGELAKE__TOKEN"]
    request = urllib.request.Request(f"{uri}/v1/config", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


@pytest.mark.slow
def test_two_appliers_racing_through_the_rest_catalog_apply_each_batch_once(
    rest_catalog, s3_prefix, tmp_path
):
    """Two CLI processes apply the same landed objects through the REST catalog: both reach the commit of
    batch 1 (a barrier holds the first until the second is there), the server's optimistic check lets one win,
    and the loser finds the batch applied: each batch exactly once."""
    table = f"r{uuid.uuid4().hex[:8]}.kv"
    env = _rest_env(rest_catalog, tmp_path, s3_prefix)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / f"{table}.yaml").write_text(kv(table))
    created = subprocess.run(
        [sys.executable, "-m", "changelake.cli", "create"], env=env, capture_output=True, text=True
    )
    assert created.returncode == 0, created.stderr[-2000:]
    from changelake import objectstore

    store = objectstore.Store(storage_options_of(rest_catalog))
    batches = {
        b: [{"op": "+I", "data": {"k": b, "v": f"v{b}"}}, {"op": "+U", "data": {"k": 0, "v": f"v{b}"}}]
        for b in range(1, 5)
    }
    for b, records in batches.items():
        store.put(f"{s3_prefix}/landing/{table}/{b}.jsonl", _lines(records))
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    outs = race(barrier, env, "apply", table)
    assert sorted(m.read_text() for m in barrier.glob("*.reached")) == ["1", "1"]
    lost = [err for _out, err in outs if "batch 1: another writer committed first; re-checking" in err]
    assert len(lost) == 1, "\n---\n".join(o[1][-2500:] for o in outs)
    # Read back with pyiceberg through the REST catalog: each batch once, the changelog gapless per bucket.
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(
        "check",
        type="rest",
        uri=rest_catalog["CHANGELAKE_CATALOG_URI"],
        token=rest_catalog["PYICEBERG_CATALOG__CHANGELAKE__TOKEN"],
        **objectstore.fileio_properties(storage_options_of(rest_catalog)),
    )
    rows = catalog.load_table(table).scan().to_arrow()
    assert sorted(zip(rows.column("k").to_pylist(), rows.column("v").to_pylist(), strict=True)) == [
        (0, "v4"),
        (1, "v1"),
        (2, "v2"),
        (3, "v3"),
        (4, "v4"),
    ]
    log = catalog.load_table(f"{table}__changelog").scan().to_arrow()
    key0 = sorted(
        (b, c)
        for b, c, k in zip(
            *(log.column(n).to_pylist() for n in ("_batch_id", "_change_type", "k")), strict=True
        )
        if k == 0
    )
    assert key0 == [(1, "+I"), (2, "+U"), (2, "-U"), (3, "+U"), (3, "-U"), (4, "+U"), (4, "-U")]


def test_spark_tasks_decode_and_merge_through_the_object_store(
    spark, s3_endpoint, s3_prefix, tmp_path, monkeypatch
):
    """CHANGELAKE_LOCAL_APPLY_RECORDS=0: every batch is decoded and merged in Spark tasks, which read the landed
    objects and the table's files and write theirs through the object store (no local path), with the same
    result as in this process; quarantined records go to a dead-letter object the commit names."""
    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "0")
    lake = _lake(tmp_path, "t.kv", s3_prefix, storage_options_of(s3_endpoint))
    lake._spark = spark
    spec = kv("t.kv").replace(
        "options:", "source: {format: changelog-json, on-bad-record: quarantine}\noptions:"
    )
    (tmp_path / "tables" / "t.kv.yaml").write_text(spec)
    lake.create_all()
    _land(lake, "t.kv", BATCHES)
    landing = lake.settings.landing_dir
    landing.store.put(
        landing / "t.kv" / "4.jsonl", _lines([{"op": "+I", "data": {"k": 10, "v": "x"}}]) + b"{oops\n"
    )
    assert [r.status for r in lake.apply_pending("t.kv")] == ["applied"] * 4
    assert not any("in this process" in m for m in lake.messages), lake.messages[-5:]  # Spark did it
    rows, _log = _pyiceberg_state(lake, "t.kv")
    assert rows == [(1, "b1"), (4, "a4"), (5, "a5"), (6, "a6"), (7, "a7"), (8, "a8"), (9, "c9"), (10, "x")]
    (dead,) = lake.dead_letters("t.kv")
    assert dead["batch_id"] == 4 and dead["line"] == 2 and "oops" in dead["raw"]
    store = landing.store
    assert any(
        "/dead-letter/" in str(i.path)
        for i in store.list(f"{s3_prefix}/warehouse/t/.changelake/kv", recursive=True)  # the side location
    )


@pytest.mark.parametrize("catalog", ["sqlite", "rest"])
def test_spark_reads_s3_tables_through_icebergs_s3fileio(
    catalog, spark, s3_endpoint, rest_catalog, s3_prefix, tmp_path
):
    """Spark's ``changelake`` catalog (Iceberg's Spark runtime) reads an s3:// table through Iceberg's S3FileIO
    with the storage options, over the SQLite catalog and over the REST catalog: the rows with their position
    deletes applied, the changelog, a past batch, as pyiceberg reads them."""
    table = f"r{uuid.uuid4().hex[:8]}.kv"
    settings = {}
    if catalog == "rest":
        settings = dict(
            catalog_type="rest",
            catalog_uri=rest_catalog["CHANGELAKE_CATALOG_URI"],
            catalog_properties={"token": rest_catalog["PYICEBERG_CATALOG__CHANGELAKE__TOKEN"]},
        )
    lake = _lake(tmp_path, table, s3_prefix, storage_options_of(s3_endpoint), **settings)
    lake._spark = spark
    lake.create_all()
    _land(lake, table, BATCHES)
    assert [r.status for r in lake.apply_pending(table)] == ["applied"] * 3
    rows, log = _pyiceberg_state(lake, table)
    assert len(rows) == 7
    assert sorted((r["k"], r["v"]) for r in lake.rows(table).collect()) == rows
    assert sorted((r["k"], r["v"]) for r in lake.rows(table, at_batch=1).collect()) == [
        (k, f"a{k}") for k in range(1, 9)
    ]
    spark_log = lake.changelog(table).collect()
    assert (
        sorted(
            ((r["_batch_id"], r["_change_type"], r["k"], r["v"]) for r in spark_log),
            key=lambda r: (r[0], r[2], r[1]),
        )
        == log
    )
    # The catalog's settings in this session say how to reach the store; its secret is not on show.
    name = lake.iceberg_table(table).split(".")[0].strip("`")
    assert spark.conf.get(f"spark.sql.catalog.{name}.io-impl") == "org.apache.iceberg.aws.s3.S3FileIO"
    secret = s3_endpoint["AWS_SECRET_ACCESS_KEY"]
    shown = spark.sql("SET -v").collect() + spark.sql("SET").collect()
    assert not any(secret in str(r) for r in shown)
    if catalog == "rest":
        _fresh_jvm_reads_without_credentials_on_its_command_line(rest_catalog, tmp_path, s3_prefix, table)


@pytest.mark.parametrize(
    "wrong",
    [
        {"io-impl": "org.apache.iceberg.hadoop.HadoopFileIO"},  # Hadoop's, with no file system for s3://
        {"s3.endpoint": "http://127.0.0.1:9"},  # nothing listens there
    ],
    ids=["io-impl", "endpoint"],
)
def test_a_spark_catalog_whose_fileio_cannot_read_the_warehouse_fails_its_first_query_saying_so(
    wrong, spark, s3_endpoint, s3_prefix, tmp_path
):
    """Iceberg retries a table's metadata read 20 times, for minutes, whatever failed: the catalog tries its
    FileIO on the warehouse once when it is built and names what it could not do."""
    from changelake.runtime import jvm

    table = f"w{uuid.uuid4().hex[:8]}.kv"
    lake = _lake(tmp_path, table, s3_prefix, storage_options_of(s3_endpoint))
    lake.create_all()
    name = f"wrong_{uuid.uuid4().hex[:8]}"
    for key, value in {
        **jvm.catalog_conf(lake.settings, name),
        **{f"spark.sql.catalog.{name}.{k}": v for k, v in wrong.items()},
    }.items():
        spark.conf.set(key, value)
    with pytest.raises(Exception, match=r"cannot read the warehouse s3://") as failed:
        spark.table(f"{name}.{table}").count()
    assert f"catalog {name}" in str(failed.value)
    assert s3_endpoint["AWS_SECRET_ACCESS_KEY"] not in str(failed.value)


#: A process that builds its own SparkSession from the environment (as the apps, the endpoint and dbt do),
#: reads a table through the ``changelake`` catalog and waits for the test to look at the process list.
_FRESH_SPARK_READS = """
import sys
from changelake.config import load_settings
from changelake.runtime.session import get_spark

spark = get_spark(load_settings(), app_name="changelake-s3-reader")
print(spark.table("changelake." + sys.argv[1]).count(), flush=True)
sys.stdin.readline()
"""


def _fresh_jvm_reads_without_credentials_on_its_command_line(
    rest_catalog, home: Path, prefix: str, table: str
):
    """A JVM started by the session builder with the store's keys and the catalog's token in its settings reads
    the table (so both reached Iceberg), while neither is on any process's command line, which every local user
    can read (``ps``), nor in what it logs."""
    env = _rest_env(rest_catalog, home, prefix)
    secrets = ("AWS_SECRET_ACCESS_KEY", "PYICEBERG_CATALOG__CHANGELAKE__TOKEN")
    reader = subprocess.Popen(
        [sys.executable, "-c", _FRESH_SPARK_READS, table],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        count = reader.stdout.readline()
        processes = subprocess.run(
            ["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=True
        ).stdout
    finally:
        out, err = reader.communicate("\n", timeout=120)
    assert reader.returncode == 0 and count.strip() == "7", err[-3000:]
    # The list shows the JVM with its other settings (the S3 endpoint it reads), so it would show the keys.
    launched = [p for p in processes.splitlines() if "changelake-s3-reader" in p and "SparkSubmit" in p]
    assert launched and f"s3.endpoint={env['AWS_ENDPOINT_URL']}" in launched[0], (
        "the reader's JVM is not listed"
    )
    # By name: a failure must not print the secret it found.
    assert [s for s in secrets if env[s] in processes] == [], "on a command line"
    assert [s for s in secrets if env[s] in out + err] == [], "in the reader's output"


@pytest.mark.slow
def test_dbt_and_the_quality_checks_read_s3_tables_through_the_spark_catalog(
    spark, s3_endpoint, s3_prefix, tmp_path, monkeypatch
):
    """What the pipeline runs after an apply, over the demo's tables on S3: dbt's session target and the GX
    checks read them through the Spark catalog's S3FileIO, and the marts agree with the rows read without Spark."""
    from changelake.quality.runner import run_quality
    from changelake.runtime.dbt_runner import run_dbt
    from tests.helpers import land_and_apply_demo

    schema = f"analytics_{uuid.uuid4().hex[:8]}"  # the session is shared: marts of its own
    monkeypatch.setenv("CHANGELAKE_DBT_SCHEMA", schema)
    lake = _lake(tmp_path, "shop.orders", s3_prefix, storage_options_of(s3_endpoint))
    lake._spark = spark
    land_and_apply_demo(lake)
    try:
        assert run_dbt(["build"], lake.settings, progress=lambda m: None) == 0
        orders = lake.rows_arrow("shop.orders").column("shop_id").to_pylist()
        per_shop = {
            r["shop_id"]: r["order_count"] for r in spark.table(f"{schema}.orders_per_shop").collect()
        }
        assert per_shop == {shop: orders.count(shop) for shop in set(orders)} and per_shop
        messages: list[str] = []
        assert run_quality(lake.settings, spark=spark, progress=messages.append) == 0, messages[-5:]
        summary = json.loads((tmp_path / "quality" / "quality_summary.json").read_text())
        assert summary["success"] and summary["suites"]["pk_uniqueness"]["validations"] >= 7
    finally:
        spark.sql(f"drop database if exists {schema} cascade")
