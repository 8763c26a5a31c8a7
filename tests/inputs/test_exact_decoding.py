"""Issue 33, exact decoding and input limits: nothing is lost quietly.

- An unknown CDC type (a lower-case Canal ``insert``, a made-up op) is a bad record in Flink's words, not a skip.
- One Kafka offset is one record, batch-wide: a redelivery (same content) is dropped once under
  ``dedup: kafka-offsets`` and a different record at the same offset is a bad record naming both, whatever the
  number of buckets, the ranges or the decode tasks.
- A line longer than CHANGELAKE_MAX_RECORD_BYTES is a bad record found without reading it whole.

Both decode paths are checked: the batch reader (``read_batch``) and the apply's decode tasks (a lake without
Spark, and the task functions run as Spark runs them). No Spark here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelake.bucketing import bucket_of
from changelake.config import DEFAULT_MAX_RECORD_BYTES, max_record_bytes
from changelake.engine.apply import _run_here
from changelake.errors import BadRecordError, ChangelakeError
from changelake.inputs import decode
from changelake.inputs.readers import read_batch
from changelake.spec import TableSpec
from changelake.storage.summary import WriterPosition
from tests.helpers import REPO, sparkless_lake

COLUMNS = [{"name": "id", "type": "BIGINT"}, {"name": "n", "type": "BIGINT"}, {"name": "s", "type": "STRING"}]


def table_spec(name: str, source: dict, options: dict | None = None) -> dict:
    return {
        "name": name,
        "columns": COLUMNS,
        "primary_key": ["id"],
        "source": source,
        "options": options or {},
    }


def land(path: Path, lines: list[dict | str | bytes]) -> Path:
    raw = [
        x if isinstance(x, bytes) else (x if isinstance(x, str) else json.dumps(x)).encode() for x in lines
    ]
    path.write_bytes(b"\n".join(raw) + b"\n")
    return path


@pytest.fixture
def lake(tmp_path):
    (tmp_path / "home").mkdir()
    return sparkless_lake(tmp_path / "home")


def rows(lake, table: str) -> list[tuple]:
    return sorted((r["id"], r["n"], r["s"]) for r in lake.rows_arrow(table).to_pylist())


# --- unknown CDC types --------------------------------------------------------------------------------------
CANAL_ROW = {"database": "db", "table": "t", "data": [{"id": "1", "n": "5", "s": "a"}]}


@pytest.mark.parametrize("kind", ["insert", "Insert", "UPSERT", "ALTER", ""])
def test_an_unknown_canal_type_is_a_bad_record_in_flinks_words(tmp_path, kind):
    path = land(tmp_path / "1.jsonl", [{**CANAL_ROW, "type": "INSERT"}, {**CANAL_ROW, "type": kind}])
    with pytest.raises(BadRecordError, match=f'Unknown "type" value "{kind}"') as e:
        read_batch([path], TableSpec.from_dict(table_spec("t.c", {"format": "canal-json"})))
    assert (e.value.file, e.value.line, e.value.field) == (str(path), 2, "type")


def test_canal_skips_only_ddl_events_and_decodes_rows_whatever_isddl_says(tmp_path):
    events = [
        {"type": "CREATE", "database": "db", "table": "t", "data": None, "sql": "create table t (id int)"},
        {
            "type": "ALTER",
            "isDdl": True,
            "database": "db",
            "table": "t",
            "data": None,
            "sql": "alter table t",
        },
        {"type": "ERASE", "isDdl": True, "database": "db", "table": "t", "data": None, "sql": "drop table t"},
        # Flink reads the type alone: an INSERT is rows even when a producer marks it a DDL event.
        {**CANAL_ROW, "type": "INSERT", "isDdl": True},
        # Filtered out before the type is read, as Flink filters.
        {**CANAL_ROW, "type": "insert", "database": "other"},
    ]
    s = TableSpec.from_dict(table_spec("t.c", {"format": "canal-json", "database.include": "db"}))
    batch = read_batch([land(tmp_path / "1.jsonl", events)], s)
    assert batch.records.select(["_op", "id", "n", "s"]).to_pylist() == [
        {"_op": "+I", "id": 1, "n": 5, "s": "a"}
    ]
    assert batch.skipped == 4


def test_an_unknown_canal_type_is_quarantined_by_the_apply_and_the_rest_applies(lake, tmp_path):
    lake.create_table(table_spec("t.canal", {"format": "canal-json", "on-bad-record": "quarantine"}))
    path = land(
        tmp_path / "1.jsonl",
        [{**CANAL_ROW, "type": "insert"}, {**CANAL_ROW, "type": "INSERT", "data": [{"id": "2", "n": "1"}]}],
    )
    result = lake.apply("t.canal", file=path, batch_id=1)
    assert rows(lake, "t.canal") == [(2, 1, None)]
    assert result.source["quarantined"] == 1
    [letter] = lake.dead_letters("t.canal")
    assert (letter["line"], letter["field"]) == (1, "type")
    assert letter["reason"].startswith('Unknown "type" value "insert".')


def test_an_unknown_canal_type_refuses_the_batch_in_the_apply(lake, tmp_path):
    lake.create_table(table_spec("t.canal2", {"format": "canal-json"}))
    path = land(tmp_path / "1.jsonl", [{**CANAL_ROW, "type": "INSERT"}, {**CANAL_ROW, "type": "delete"}])
    with pytest.raises(BadRecordError, match='1.jsonl:2 field \'type\': Unknown "type" value "delete"'):
        lake.apply("t.canal2", file=path, batch_id=1)
    assert rows(lake, "t.canal2") == []


@pytest.mark.parametrize(
    ("fmt", "event", "words"),
    [
        ("debezium-json", {"op": "t", "after": {"id": 1}}, 'Unknown "op" value "t"'),
        ("debezium-json", {"op": "C", "after": {"id": 1}}, 'Unknown "op" value "C"'),
        ("maxwell-json", {"type": "Insert", "data": {"id": 1}}, 'Unknown "type" value "Insert"'),
        (
            "maxwell-json",
            {"type": "database-rename", "data": {"id": 1}},
            'Unknown "type" value "database-rename"',
        ),
    ],
)
def test_debezium_and_maxwell_refuse_unknown_types_in_flinks_words(tmp_path, fmt, event, words):
    path = land(tmp_path / "1.jsonl", [event])
    with pytest.raises(BadRecordError, match=words) as e:
        read_batch([path], TableSpec.from_dict(table_spec("t.m", {"format": fmt})))
    assert e.value.line == 1


def test_maxwell_skips_its_schema_and_bootstrap_events(tmp_path):
    events = [{"database": "db", "table": "t", "type": kind, "ts": 1, "data": {}} for kind in (
        "database-create", "database-alter", "database-drop", "table-create", "table-alter", "table-drop",
        "bootstrap-start", "bootstrap-complete")]  # fmt: skip
    batch = read_batch(
        [land(tmp_path / "1.jsonl", events)],
        TableSpec.from_dict(table_spec("t.m", {"format": "maxwell-json"})),
    )
    assert (batch.num_records, batch.skipped) == (0, 8)


# --- one Kafka offset, one record -----------------------------------------------------------------------------
def kafka(key: int, n: int, offset: int, s: str | None = None, partition: int = 0) -> dict:
    value = {"id": key, "n": n, **({"s": s} if s is not None else {})}
    return {"key": {"id": key}, "value": value, "topic": "orders", "partition": partition, "offset": offset}


def kafka_table(lake, name: str, buckets: int, quarantine: bool = False, dedup: bool = True) -> str:
    source = {"format": "upsert-kafka", "dedup": "kafka-offsets" if dedup else "none"}
    if quarantine:
        source["on-bad-record"] = "quarantine"
    options = {"bucket.num": buckets, "table.merge-engine": "aggregation", "fields.n.agg": "sum"}
    lake.create_table(table_spec(name, source, options))
    return name


def two_keys_in_different_buckets() -> tuple[int, int]:
    """Two keys that 4 buckets separate (the bug needed them apart; one bucket holds both)."""
    s = TableSpec.from_dict(table_spec("t.k", {}, {"bucket.num": 4}))
    first = bucket_of(s, {"id": 1})
    other = next(k for k in range(2, 100) if bucket_of(s, {"id": k}) != first)
    return 1, other


@pytest.mark.parametrize("buckets", [1, 4])
@pytest.mark.parametrize("dedup", [True, False])
def test_a_different_record_at_an_applied_offset_is_a_bad_record_in_any_bucket_layout(
    lake, tmp_path, buckets, dedup
):
    a, b = two_keys_in_different_buckets()
    name = kafka_table(lake, f"k.conflict{buckets}{int(dedup)}", buckets, dedup=dedup)
    path = land(tmp_path / "1.jsonl", [kafka(a, 10, 5), kafka(a, 1, 6), kafka(b, 7, 5)])
    with pytest.raises(BadRecordError) as e:
        lake.apply(name, file=path, batch_id=1)
    assert (e.value.file, e.value.line, e.value.field) == (str(path), 3, "offset")
    assert e.value.reason.startswith(f"offset 5 of topic 'orders' partition 0 was read before at {path}:1 ")
    assert rows(lake, name) == []


@pytest.mark.parametrize("buckets", [1, 4])
def test_a_different_record_at_an_offset_is_quarantined_and_the_first_applies(lake, tmp_path, buckets):
    a, b = two_keys_in_different_buckets()
    name = kafka_table(lake, f"k.quarantine{buckets}", buckets, quarantine=True)
    lines = [kafka(a, 10, 5), kafka(b, 7, 5, s="other"), kafka(b, 2, 6), kafka(a, 10, 5)]
    result = lake.apply(name, file=land(tmp_path / "1.jsonl", lines), batch_id=1)
    assert rows(lake, name) == [(a, 10, None), (b, 2, None)]
    [letter] = lake.dead_letters(name)
    assert (letter["line"], letter["field"], json.loads(letter["raw"])) == (2, "offset", lines[1])
    assert (result.source["quarantined"], result.source["redelivered"], result.source["deduplicated"]) == (
        1,
        1,
        1,
    )


@pytest.mark.parametrize("buckets", [1, 4])
def test_an_identical_redelivery_is_dropped_once_in_any_bucket_layout(lake, tmp_path, buckets):
    a, b = two_keys_in_different_buckets()
    once = [kafka(a, 10, 5), kafka(b, 7, 6), kafka(a, 3, 7), kafka(b, 1, 0, partition=1)]
    delivered = [*once[:2], once[0], once[2], once[1], once[3], once[0]]  # at least once
    name = kafka_table(lake, f"k.redelivered{buckets}", buckets)
    result = lake.apply(name, file=land(tmp_path / "1.jsonl", delivered), batch_id=1)
    reference = kafka_table(lake, f"k.once{buckets}", buckets)
    lake.apply(reference, file=land(tmp_path / "2.jsonl", once), batch_id=1)
    assert rows(lake, name) == rows(lake, reference) == [(a, 13, None), (b, 8, None)]
    assert (result.source["redelivered"], result.source["deduplicated"]) == (3, 3)


def test_the_batch_reader_applies_the_same_offset_rule(tmp_path):
    lines = [kafka(1, 10, 5), kafka(1, 10, 5), kafka(2, 7, 5)]
    path = land(tmp_path / "1.jsonl", lines)
    s = table_spec("t.k", {"format": "upsert-kafka", "dedup": "kafka-offsets"})
    with pytest.raises(
        BadRecordError, match=re.escape(f"read before at {path}:1 with different content")
    ) as e:
        read_batch([path], TableSpec.from_dict(s))
    assert (e.value.line, e.value.field) == (3, "offset")
    s["source"]["on-bad-record"] = "quarantine"
    batch = read_batch([path], TableSpec.from_dict(s))
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == [(3, "offset")]
    assert (batch.num_records, batch.redelivered, batch.deduplicated) == (1, 1, 1)


def test_the_first_bad_record_in_arrival_order_is_reported_whichever_kind(tmp_path):
    """A conflict before a malformed line is the error; the quarantined batch lists it first."""
    lines = [kafka(1, 10, 5), kafka(2, 7, 5), "{not json"]
    path = land(tmp_path / "1.jsonl", lines)
    s = table_spec("t.k", {"format": "upsert-kafka"})
    with pytest.raises(BadRecordError) as e:
        read_batch([path], TableSpec.from_dict(s))
    assert (e.value.line, e.value.field) == (2, "offset")
    s["source"]["on-bad-record"] = "quarantine"
    batch = read_batch([path], TableSpec.from_dict(s))
    assert [(d["line"], d["field"]) for d in batch.dead_letters] == [(2, "offset"), (3, None)]


def test_offsets_are_one_record_across_the_files_of_a_batch(lake, tmp_path):
    name = kafka_table(lake, "k.files", 4)
    first = land(tmp_path / "a.jsonl", [kafka(1, 10, 5)])
    second = land(tmp_path / "b.jsonl", [kafka(1, 10, 5), kafka(2, 7, 5)])
    with pytest.raises(
        BadRecordError, match=f"b.jsonl:2 field 'offset': .* read before at {re.escape(str(first))}:1 "
    ):
        lake.applier.apply_files(lake._ensure(name), WriterPosition("api", 1), [first, second], None, None)


def decode_in_tasks(tmp_path, spec: TableSpec, path: Path, tasks: int):
    """The apply's decode of one file cut into many ranges, in ``tasks`` decode tasks, as Spark runs them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHANGELAKE_DECODE_RANGE_BYTES", "64")
        plan = decode.plan_batch([path], spec, None, None)
    ranges, groups = decode.plan_tasks(plan.ranges, tasks)
    assert len(groups) == tasks
    function = decode.decode_task(spec, str(tmp_path / "staging"), {}, ranges, groups)
    return decode.summarize(_run_here(function, len(groups)))


def test_decode_tasks_check_offsets_across_tasks(tmp_path):
    """A conflict whose first record another task decoded refuses the batch, naming that record; a
    redelivery does not refuse it."""
    lines = [kafka(k, k, k) for k in range(12)]
    s = TableSpec.from_dict(table_spec("t.k", {"format": "upsert-kafka", "dedup": "kafka-offsets"}))
    redelivered = land(tmp_path / "1.jsonl", [*lines, lines[1]])
    assert decode_in_tasks(tmp_path, s, redelivered, 2).records == 13  # the bucket task drops the copy
    # The second task reads a redelivery of line 2 first: the conflict still names the batch's first record.
    conflict = land(tmp_path / "2.jsonl", [*lines, lines[1], kafka(99, 1, 1)])
    with pytest.raises(BadRecordError) as e:
        decode_in_tasks(tmp_path, s, conflict, 2)
    assert (e.value.line, e.value.field) == (14, "offset")
    assert f"read before at {conflict}:2 with different content" in e.value.reason


def test_quarantine_decodes_a_kafka_batch_in_one_task_and_leaves_the_conflict_out(tmp_path):
    lines = [kafka(k, k, k) for k in range(12)]
    s = TableSpec.from_dict(
        table_spec("t.k", {"format": "upsert-kafka", "dedup": "kafka-offsets", "on-bad-record": "quarantine"})
    )
    decoded = decode_in_tasks(tmp_path, s, land(tmp_path / "1.jsonl", [*lines, kafka(99, 1, 1)]), 2)
    assert decoded.records == 12
    assert [(d["line"], d["field"]) for d in decoded.dead_letters] == [(13, "offset")]


@pytest.mark.spark
def test_spark_decode_tasks_hold_one_record_per_offset(spark, tmp_path, monkeypatch):
    """Through Spark's decode tasks (a batch too large for the applying process, cut into a share per core):
    a conflict across tasks refuses the batch; under quarantine one task leaves the later record out."""
    from changelake import ChangeLake

    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "0")
    monkeypatch.setenv("CHANGELAKE_DECODE_RANGE_BYTES", "64")
    lake = ChangeLake(home=tmp_path / "home", tables_dir=tmp_path / "tables", spark=spark, progress=None)
    lines = [kafka(k, k, k) for k in range(1, 13)]
    conflict = land(tmp_path / "1.jsonl", [*lines, lines[0], kafka(99, 1, 1)])
    name = kafka_table(lake, "k.spark", 4)
    with pytest.raises(BadRecordError) as e:
        lake.apply(name, file=conflict, batch_id=1)
    assert (e.value.line, e.value.field) == (14, "offset")
    assert f"read before at {conflict}:1 with different content" in e.value.reason
    quarantined = kafka_table(lake, "k.spark_q", 4, quarantine=True)
    result = lake.apply(quarantined, file=conflict, batch_id=1)
    assert rows(lake, quarantined) == [(k, k, None) for k in range(1, 13)]
    assert [(d["line"], d["field"]) for d in lake.dead_letters(quarantined)] == [(14, "offset")]
    assert (result.source["redelivered"], result.source["deduplicated"]) == (1, 1)


# --- the longest line ------------------------------------------------------------------------------------------
def test_the_record_limit_setting(monkeypatch):
    monkeypatch.delenv("CHANGELAKE_MAX_RECORD_BYTES", raising=False)
    assert max_record_bytes() == DEFAULT_MAX_RECORD_BYTES == 16 << 20
    monkeypatch.setenv("CHANGELAKE_MAX_RECORD_BYTES", "1048576")
    assert max_record_bytes() == 1 << 20
    for bad in ("0", "-5", "1e6", "16MiB", "٣"):
        monkeypatch.setenv("CHANGELAKE_MAX_RECORD_BYTES", bad)
        with pytest.raises(
            ChangelakeError, match="CHANGELAKE_MAX_RECORD_BYTES must be a whole number of at least 1"
        ):
            max_record_bytes()


def test_a_line_over_the_limit_is_a_bad_record_in_both_decode_paths(lake, tmp_path, monkeypatch):
    monkeypatch.setenv("CHANGELAKE_MAX_RECORD_BYTES", "60")
    fits = {"op": "+I", "data": {"id": 1, "s": "x" * 20}}
    exact = '{"op": "+I", "data": {"id": 3, "s": "' + "y" * 20 + '"}}'  # 60 bytes: the limit
    long = {"op": "+I", "data": {"id": 2, "s": "z" * 100}}
    assert len(exact) == 60
    path = land(tmp_path / "1.jsonl", [fits, exact, long, fits | {"data": {"id": 4}}, json.dumps(long)[:61]])
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # the last line, 61 bytes, ends the file
    s = table_spec("t.long", {"on-bad-record": "quarantine"})
    reason = "the line is longer than 60 bytes, the most one record may take (CHANGELAKE_MAX_RECORD_BYTES)"
    batch = read_batch([path], TableSpec.from_dict(s))
    assert batch.records.column("id").to_pylist() == [1, 3, 4]
    assert [(d["line"], d["reason"].startswith(reason), d["raw"]) for d in batch.dead_letters] == [
        (3, True, json.dumps(long)[:61]),
        (5, True, json.dumps(long)[:61]),
    ]
    lake.create_table(s)
    result = lake.apply("t.long", file=path, batch_id=1)
    assert [r[0] for r in rows(lake, "t.long")] == [1, 3, 4]
    assert [(d["line"], d["raw"]) for d in lake.dead_letters("t.long")] == [
        (d["line"], d["raw"]) for d in batch.dead_letters
    ]
    assert result.source["quarantined"] == 2
    del s["source"]["on-bad-record"]
    with pytest.raises(BadRecordError, match=re.escape(f"1.jsonl:3: {reason}")):
        read_batch([path], TableSpec.from_dict(s))
    lake.create_table({**s, "name": "t.long_fail"})
    with pytest.raises(BadRecordError, match=re.escape(f"1.jsonl:3: {reason}")):
        lake.apply("t.long_fail", file=path, batch_id=1)


def test_the_planner_gives_a_line_over_the_limit_a_range_of_its_own(tmp_path, monkeypatch):
    text = b"a" * 10 + b"\n" + b"b" * 3000 + b"\n" + b"c" * 10 + b"\n" + b"d" * 2000
    path = tmp_path / "1.jsonl"
    path.write_bytes(text)
    monkeypatch.setattr(decode, "PLAN_CHUNK_BYTES", 256)  # the long lines span many reads
    ranges, total, newlines = decode._line_ranges(path, 0, "changelog-json", limit=100)
    assert (total, newlines) == (len(text), 3)
    assert [(r.start, r.end, r.first_line, r.too_long) for r in ranges] == [
        (0, 11, 1, 0),
        (11, 3012, 2, 100),
        (3012, 3023, 3, 0),
        (3023, len(text), 4, 100),
    ]


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 50), max_size=30),
    newline_at_end=st.booleans(),
    limit=st.integers(1, 30),
    chunk=st.integers(1, 64),
    size=st.integers(1, 64),
)
def test_every_line_over_the_limit_and_only_those_get_a_range_of_their_own(
    tmp_path_factory, lengths, newline_at_end, limit, chunk, size
):
    text = b"\n".join(b"x" * n for n in lengths) + (b"\n" if newline_at_end and lengths else b"")
    path = tmp_path_factory.mktemp("long") / "1.jsonl"
    path.write_bytes(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode, "PLAN_CHUNK_BYTES", chunk)
        patch.setenv("CHANGELAKE_DECODE_RANGE_BYTES", str(size))
        ranges, total, newlines = decode._line_ranges(path, 0, "changelog-json", limit=limit)
    assert (total, newlines) == (len(text), text.count(b"\n"))
    assert ranges[0].start == 0 and ranges[-1].end == len(text)
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:], strict=False))
    assert [r.first_line for r in ranges] == [text.count(b"\n", 0, r.start) + 1 for r in ranges]
    long, at = [], 0
    for line, n in enumerate(lengths, start=1):
        end = min(at + n + 1, len(text))
        if n > limit:
            long.append((at, end, line))
        at = end
    assert [(r.start, r.end, r.first_line) for r in ranges if r.too_long] == long
    assert all(r.too_long in (0, limit) for r in ranges)


MEMORY_PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from changelake.inputs.readers import read_batch
    from changelake.spec import TableSpec
    from tests.helpers import sparkless_lake

    home, path = Path(sys.argv[1]), Path(sys.argv[2])
    home.mkdir()
    spec = {"name": "t.big", "columns": [{"name": "id", "type": "BIGINT"}, {"name": "s", "type": "STRING"}],
             "primary_key": ["id"], "source": {"on-bad-record": "quarantine"}}
    lake = sparkless_lake(home)
    lake.create_table(spec)
    lake.apply("t.big", [{"op": "+I", "data": {"id": 0}}], batch_id=1)  # every module loaded, every cache warm
    warm = home / "warm.jsonl"
    warm.write_text('{"op": "+I", "data": {"id": 9}}\\n')
    read_batch([warm], TableSpec.from_dict(spec))
    rss = lambda: int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1])
    before = rss()
    result = lake.apply("t.big", file=path, batch_id=2)
    batch = read_batch([path], TableSpec.from_dict(spec))
    # VmHWM: this process's own high-water mark. (ru_maxrss would not do: Linux carries it over from the
    # forking parent across exec, so a test run in a large pytest process measured the parent.)
    peak = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])  # KiB
    print(json.dumps({"before": before, "peak": peak, "quarantined": result.source["quarantined"],
                      "rows": sorted(r["id"] for r in lake.rows_arrow("t.big").to_pylist()),
                      "read": batch.records.column("id").to_pylist(),
                      "lines": [d["line"] for d in batch.dead_letters]}))
    """
)


def test_a_200_mb_line_costs_no_more_memory_than_the_limit(tmp_path):
    """Before the limit, a 150 MB line took 2.7 GB. Over a 1 MiB limit, a 200 MB line (its text never read)
    leaves the peak resident set of the apply and the batch reader where a short line would (7 MB above the
    warm process for a 0, 50 or 200 MB line, measured; the old code held the line three times over)."""
    path = tmp_path / "2.jsonl"
    with open(path, "wb") as fh:
        fh.write(b'{"op": "+I", "data": {"id": 1}}\n{"op": "+I", "data": {"id": 2, "s": "')
        block = b"x" * (1 << 20)
        for _ in range(200):
            fh.write(block)
        fh.write(b'"}}\n{"op": "+I", "data": {"id": 3}}\n')
    env = {**os.environ, "CHANGELAKE_MAX_RECORD_BYTES": str(1 << 20)}
    probe = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(tmp_path / "home"), str(path)],
        capture_output=True, text=True, env=env, timeout=300, check=False, cwd=REPO,  # tests.helpers from here
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    got = json.loads(probe.stdout.strip().splitlines()[-1])
    assert (got["quarantined"], got["rows"], got["read"], got["lines"]) == (1, [0, 1, 3], [1, 3], [2])
    grown_mb = (got["peak"] - got["before"]) / 1024
    assert grown_mb < 64, f"the peak resident set grew {grown_mb:.0f} MB reading a 200 MB line"
