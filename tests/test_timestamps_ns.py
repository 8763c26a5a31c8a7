"""TIMESTAMP(7..9) and TIMESTAMP_LTZ(7..9) keep every nanosecond: decoding from every input format, the
merges that compare or fold them, lookups by keys holding them, the fast reads, the Spark view and the rules
for evolving and opening tables.

Expected values come from numpy's own ISO parser (``datetime64[ns]``), not from changelake's.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelake import evolution
from changelake.errors import BadRecordError, ChangelakeError, SpecError
from changelake.inputs.readers import read_batch
from changelake.spec import TableSpec
from changelake.types import parse_type


def ns(text: str, offset_minutes: int = 0) -> int:
    """Nanoseconds since the epoch of a zone-less ISO text (numpy's parser), shifted to UTC by an offset."""
    return int(np.datetime64(text, "ns").astype(np.int64)) - offset_minutes * 60 * 1_000_000_000


TS = "2026-01-01T12:00:00.123456789"
TS_NS = ns(TS)
T7_NS = TS_NS - 89  # TS in a TIMESTAMP(7) column: cut to seven fraction digits
COLUMNS = [
    {"name": "id", "type": "BIGINT"},
    {"name": "ts", "type": "TIMESTAMP(9)"},
    {"name": "at", "type": "TIMESTAMP_LTZ(9)"},
    {"name": "t7", "type": "TIMESTAMP(7)"},
]


def spec(source: dict | None = None, columns=COLUMNS, pk=("id",), **extra) -> TableSpec:
    return TableSpec.from_dict(
        {"name": "t.ns", "columns": columns, "primary_key": list(pk), "source": source or {}, **extra}
    )


def lines(tmp_path, items, name="1.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(i if isinstance(i, str) else json.dumps(i) for i in items) + "\n")
    return path


def decoded(batch) -> list[tuple]:
    """(op, id, ts, at, t7) of a decoded batch, the timestamps as their stored nanosecond counts."""
    return [(r["_op"], r["id"], r["ts"], r["at"], r["t7"]) for r in batch.records.to_pylist()]


# --- text -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("type_text", "value", "expected"),
    [
        ("TIMESTAMP(9)", "2026-01-01 12:00:00.123456789", TS_NS),
        ("TIMESTAMP(9)", "2026-01-01T12:00:00.123456789", TS_NS),
        ("TIMESTAMP(9)", "2026-01-01T12:00:00,123456789", TS_NS),
        ("TIMESTAMP(9)", "20260101T120000.123456789", TS_NS),
        ("TIMESTAMP(9)", "2026-01-01T12:00:00.1", ns("2026-01-01T12:00:00.1")),
        ("TIMESTAMP(9)", "2026-01-01T12:00:00", ns("2026-01-01T12:00:00")),
        ("TIMESTAMP(9)", "2026-01-01", ns("2026-01-01T00:00:00")),
        ("TIMESTAMP(9)", "1969-12-31 23:59:59.999999999", -1),
        ("TIMESTAMP(8)", "1900-02-28 01:02:03.000000007", ns("1900-02-28T01:02:03.000000007")),
        ("TIMESTAMP(9)", "1677-09-21 00:12:43.145224192", -(2**63)),
        ("TIMESTAMP(9)", "2262-04-11 23:47:16.854775807", 2**63 - 1),
        ("TIMESTAMP_LTZ(9)", "2026-01-01T12:00:00.123456789Z", TS_NS),
        ("TIMESTAMP_LTZ(9)", "2026-01-01 12:00:00.123456789", TS_NS),  # zone-less: UTC
        ("TIMESTAMP_LTZ(9)", "2026-01-01T17:30:00.123456789+05:30", TS_NS),
        ("TIMESTAMP_LTZ(9)", "2026-01-01T04:00:00.123456789-08:00", TS_NS),
        ("TIMESTAMP_LTZ(9)", "2026-01-02T01:00:00.123456789+1300", TS_NS),
        ("TIMESTAMP_LTZ(7)", "2262-04-12T00:47:16.854775807+01:00", 2**63 - 8),  # cut to 7 digits
    ],
)
def test_text_decodes_to_exact_nanoseconds(type_text, value, expected):
    assert parse_type(type_text).decode_json(value) == expected


@settings(max_examples=300, deadline=None)
@given(
    nanos=st.integers(-(2**63) + 1, 2**63 - 1),  # numpy's NaT is the smallest int64
    offset=st.integers(-18 * 60, 18 * 60),
    sep=st.sampled_from(["T", " "]),
)
def test_any_nanosecond_value_round_trips_through_text(nanos, offset, sep):
    """numpy writes the text; every instant in range decodes to itself, at any UTC offset for LTZ."""
    text = np.datetime_as_string(np.datetime64(nanos, "ns"), unit="ns").replace("T", sep)
    assert parse_type("TIMESTAMP(9)").decode_json(text) == nanos
    local = nanos + offset * 60_000_000_000  # the wall time at that offset
    hours, minutes = divmod(abs(offset), 60)
    if -(2**63) < local < 2**63:  # numpy can write it
        zoned = np.datetime_as_string(np.datetime64(local, "ns"), unit="ns")
        zoned += f"{'-' if offset < 0 else '+'}{hours:02d}:{minutes:02d}"
        assert parse_type("TIMESTAMP_LTZ(9)").decode_json(zoned) == nanos


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789-:T .,+Z", max_size=40))
def test_any_text_decodes_or_is_refused_with_a_reason(text):
    for type_text in ("TIMESTAMP(9)", "TIMESTAMP_LTZ(7)"):
        try:
            value = parse_type(type_text).decode_json(text)
        except ValueError as e:
            assert str(e)
        else:
            assert isinstance(value, int) and -(2**63) <= value < 2**63


def test_fraction_digits_beyond_the_precision_are_cut_as_flinks_cast_cuts_them():
    """A value enters a TIMESTAMP(p) column as Flink's cast to TIMESTAMP(p) leaves it (DateTimeUtils.truncate):
    digits after the p-th are dropped, never rounded; Flink's formats read at most 9 fraction digits."""
    assert parse_type("TIMESTAMP(7)").decode_json("2026-01-01 12:00:00.123456789") == T7_NS
    assert parse_type("TIMESTAMP_LTZ(8)").decode_json(TS + "Z") == TS_NS - 9
    assert parse_type("TIMESTAMP(9)").decode_json(TS) == TS_NS
    with pytest.raises(ValueError, match=r"has 10 fraction digits; TIMESTAMP\(9\) holds at most 9"):
        parse_type("TIMESTAMP(9)").decode_json("2026-01-01 12:00:00.1234567891")
    assert parse_type("TIMESTAMP(6)").decode_json(TS) == dt.datetime(2026, 1, 1, 12, 0, 0, 123456)
    assert parse_type("TIMESTAMP(3)").decode_json(TS) == dt.datetime(2026, 1, 1, 12, 0, 0, 123000)
    assert parse_type("TIMESTAMP(0)").decode_json(TS) == dt.datetime(2026, 1, 1, 12, 0, 0)


@pytest.mark.parametrize(
    ("type_text", "value", "reason"),
    [
        ("TIMESTAMP(9)", "2262-04-11 23:47:16.854775808", r"out of range for TIMESTAMP\(9\) \(1677-09-21"),
        ("TIMESTAMP(9)", "1677-09-21 00:12:43.145224191", r"out of range for TIMESTAMP\(9\)"),
        ("TIMESTAMP_LTZ(9)", "2262-04-11T23:47:16.854775807-00:01", r"2262-04-11 23:47:16.854775807 UTC"),
        ("TIMESTAMP(9)", "2026-01-01T12:00:00.123456789Z", "TIMESTAMP is zone-less"),
        ("TIMESTAMP(9)", "12:00:00.123456789", "is not an ISO-8601 timestamp"),
        ("TIMESTAMP(9)", 1767268800123456789, "expected an ISO-8601 string"),
    ],
)
def test_values_a_nanosecond_timestamp_cannot_hold_are_refused(type_text, value, reason):
    with pytest.raises(ValueError, match=reason):
        parse_type(type_text).decode_json(value)


# --- every input format -----------------------------------------------------------------------------------
ROW = {"id": 1, "ts": "2026-01-01 12:00:00.123456789", "at": "2026-01-01T14:00:00.123456789+02:00", "t7": TS}
EXPECTED = [("+I", 1, TS_NS, TS_NS, T7_NS)]
_NANO_SCHEMA = {
    "fields": [
        {
            "field": "after",
            "fields": [
                {"field": "ts", "name": "io.debezium.time.NanoTimestamp"},
                {"field": "at", "name": "io.debezium.time.ZonedTimestamp"},
                {"field": "t7", "name": "io.debezium.time.NanoTimestamp"},
            ],
        }
    ]
}


@pytest.mark.parametrize(
    ("source", "message", "expected"),
    [
        ({}, {"op": "+I", "data": ROW}, EXPECTED),
        ({}, {"rowkind": "+I", "fields": [ROW[c["name"]] for c in COLUMNS]}, EXPECTED),
        (
            {"format": "upsert-kafka"},
            {"key": {"id": 1}, "value": {k: v for k, v in ROW.items() if k != "id"}},
            [("+U", *EXPECTED[0][1:])],
        ),
        (
            {"format": "debezium-json"},
            {
                "schema": _NANO_SCHEMA,
                "payload": {"op": "c", "after": {"id": 1, "ts": TS_NS, "at": TS + "Z", "t7": TS_NS}},
            },
            EXPECTED,
        ),
        (  # no envelope: the epoch unit comes from the source settings
            {"format": "debezium-json", "timestamp-epoch-unit": "ns"},
            {"op": "r", "after": {"id": 1, "ts": TS_NS, "at": TS_NS, "t7": TS_NS}},
            EXPECTED,
        ),
        (  # a microsecond epoch is exact too, with zeros below the microsecond
            {"format": "debezium-json", "timestamp-epoch-unit": "us"},
            {"op": "c", "after": {"id": 1, "ts": TS_NS // 1000, "at": -1, "t7": -1}},
            [("+I", 1, TS_NS - 789, -1000, -1000)],
        ),
        (
            {"format": "canal-json"},
            {"type": "INSERT", "database": "d", "table": "t", "data": [{**ROW, "id": "1"}]},
            EXPECTED,
        ),
        (
            {"format": "maxwell-json"},
            {"type": "insert", "database": "d", "table": "t", "data": ROW},
            EXPECTED,
        ),
    ],
)
def test_json_formats_round_trip_nine_digits(tmp_path, source, message, expected):
    assert decoded(read_batch([lines(tmp_path, [message])], spec(source))) == expected


def test_debezium_updates_keep_nanoseconds_in_both_images(tmp_path):
    event = {
        "op": "u",
        "before": {"id": 1, "ts": TS_NS - 1, "at": None, "t7": None},
        "after": {"id": 1, "ts": TS_NS, "at": None, "t7": None},
    }
    batch = read_batch(
        [lines(tmp_path, [event])], spec({"format": "debezium-json", "timestamp-epoch-unit": "ns"})
    )
    assert decoded(batch) == [("-U", 1, TS_NS - 1, None, None), ("+U", 1, TS_NS, None, None)]


def test_parquet_landing_converts_every_timestamp_unit_exactly(tmp_path):
    table = pa.table(
        {
            "op": ["+I", "+I", "+I"],
            "id": pa.array([1, 2, 3], pa.int64()),
            "ts": pa.array([TS_NS, -1, None], pa.timestamp("ns")),
            "at": pa.array([TS_NS, 0, 86_400], pa.timestamp("ns", tz="Asia/Tokyo")),  # instants, kept in UTC
            "t7": pa.array([TS, "1969-12-31 23:59:59.999999999", None], pa.string()),
        }
    )
    path = tmp_path / "1.parquet"
    pq.write_table(table, path)
    assert decoded(read_batch([path], spec())) == [
        ("+I", 1, TS_NS, TS_NS, T7_NS),
        ("+I", 2, -1, 0, -100),  # 23:59:59.999999999 cut to seven digits (below the millisecond: floored)
        ("+I", 3, None, 86_400, None),
    ]
    seconds = tmp_path / "2.parquet"
    pq.write_table(
        pa.table(
            {
                "op": ["+I"],
                "id": pa.array([4], pa.int64()),
                "ts": pa.array([1_767_268_800], pa.timestamp("s")),
                "at": pa.array([dt.date(2026, 1, 1)], pa.date32()),
            }
        ),
        seconds,
    )
    assert decoded(read_batch([seconds], spec())) == [
        ("+I", 4, ns("2026-01-01T12:00:00"), ns("2026-01-01T00:00:00"), None)
    ]


def test_ltz_values_with_any_offset_name_one_instant(tmp_path):
    forms = [
        "2026-01-01T12:00:00.123456789Z",
        "2026-01-01T12:00:00.123456789+00:00",
        "2026-01-01T13:00:00.123456789+01:00",
        "2026-01-01T06:45:00.123456789-05:15",
        "2026-01-01 12:00:00.123456789",
    ]
    records = [{"op": "+I", "data": {"id": i, "at": f}} for i, f in enumerate(forms)]
    assert {r[3] for r in decoded(read_batch([lines(tmp_path, records)], spec()))} == {TS_NS}
    shifted = ns("2026-01-01T12:00:00.123456789", offset_minutes=90)
    assert parse_type("TIMESTAMP_LTZ(9)").decode_json(TS + "+01:30") == shifted


# --- bad records name file, line and field ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "record", "field", "reason"),
    [
        ({}, {"op": "+I", "data": {"id": 2, "ts": "2300-01-01 00:00:00.000000001"}}, "ts", "out of range"),
        ({}, {"op": "+I", "data": {"id": 2, "at": "1600-01-01T00:00:00Z"}}, "at", "out of range"),
        ({}, {"op": "+I", "data": {"id": 2, "t7": TS + "0"}}, "t7", "has 10 fraction digits"),
        (
            {"format": "debezium-json"},  # epoch milliseconds of the year 2300: beyond 64-bit nanoseconds
            {"op": "c", "after": {"id": 2, "ts": 10_413_792_000_000}},
            "ts",
            "out of range for TIMESTAMP\\(9\\)",
        ),
        (
            {"format": "debezium-json", "timestamp-epoch-unit": "ns"},
            {"op": "c", "after": {"id": 2, "ts": 2**63}},
            "ts",
            "out of range",
        ),
        (
            {"format": "debezium-json", "timestamp-epoch-unit": "ms"},
            {"op": "c", "after": {"id": 2, "at": 10**30}},
            "at",
            "out of range for TIMESTAMP_LTZ\\(9\\)",
        ),
        (
            {"format": "canal-json"},
            {"type": "INSERT", "data": [{"id": "2", "ts": "2262-04-12 00:00:00"}]},
            "ts",
            "out of range",
        ),
    ],
)
def test_out_of_range_values_are_bad_records_naming_file_line_and_field(
    tmp_path, source, record, field, reason
):
    good = {
        "": {"op": "+I", "data": {"id": 1, "ts": TS}},
        "debezium-json": {"op": "c", "after": {"id": 1}},
        "canal-json": {"type": "INSERT", "data": [{"id": "1"}]},
    }[source.get("format", "")]
    path = lines(tmp_path, [good, record])
    with pytest.raises(BadRecordError, match=rf"1\.jsonl:2 field '{field}': .*{reason}") as caught:
        read_batch([path], spec(source))
    assert (caught.value.file, caught.value.line, caught.value.field) == (str(path), 2, field)
    quarantined = read_batch([path], spec({**source, "on-bad-record": "quarantine"}))
    assert [(d["line"], d["field"]) for d in quarantined.dead_letters] == [(2, field)]
    assert [r[1] for r in decoded(quarantined)] == [1]


def test_out_of_range_parquet_values_are_bad_records_naming_row_and_field(tmp_path):
    path = tmp_path / "1.parquet"
    pq.write_table(
        pa.table(
            {
                "op": ["+I", "+I", "+I"],
                "id": pa.array([1, 2, 3], pa.int64()),
                "ts": pa.array([0, 10_413_792_000_000_000, 0], pa.timestamp("us")),  # row 2: year 2300
                "at": pa.array([None, None, -(10**12)], pa.timestamp("s", tz="UTC")),  # row 3: before 1677
            }
        ),
        path,
    )
    with pytest.raises(
        BadRecordError, match=r"1\.parquet:2 field 'ts': '2300-01-01 00:00:00' is out of range"
    ):
        read_batch([path], spec())
    quarantined = read_batch([path], spec({"on-bad-record": "quarantine"}))
    assert [(d["line"], d["field"]) for d in quarantined.dead_letters] == [(2, "ts"), (3, "at")]
    assert "out of range for TIMESTAMP_LTZ(9)" in quarantined.dead_letters[1]["reason"]
    numbers = tmp_path / "2.parquet"  # JSON's rule: a timestamp is text, never a number
    pq.write_table(pa.table({"op": ["+I"], "id": [1], "ts": pa.array([1], pa.int64())}), numbers)
    with pytest.raises(BadRecordError, match=r"field 'ts': a Parquet column of type int64 cannot hold"):
        read_batch([numbers], spec())


# --- schema evolution and stored types --------------------------------------------------------------------
def test_widening_a_timestamp_precision_is_refused_as_fluss_does():
    """Fluss's SchemaUpdate refuses every ModifyColumn ("Not support modify column now."), precision too."""
    stored = spec(columns=[{"name": "id", "type": "BIGINT"}, {"name": "ts", "type": "TIMESTAMP(3)"}])
    for wider in ("TIMESTAMP(9)", "TIMESTAMP(6)"):
        wanted = spec(columns=[{"name": "id", "type": "BIGINT"}, {"name": "ts", "type": wider}])
        expected = (
            rf"column 'ts' type TIMESTAMP\(3\) -> {re.escape(wider)} \(Not support modify column now.\)"
        )
        with pytest.raises(SpecError, match=expected):
            evolution.plan(stored, wanted)
    narrower = spec(columns=[{"name": "id", "type": "BIGINT"}, {"name": "ts", "type": "TIMESTAMP(7)"}])
    with pytest.raises(SpecError, match=r"Not support modify column now"):
        evolution.plan(
            spec(columns=[{"name": "id", "type": "BIGINT"}, {"name": "ts", "type": "TIMESTAMP(9)"}]), narrower
        )


def _storage(home):
    from changelake.config import load_settings
    from changelake.storage.iceberg import Storage

    return Storage(load_settings(home=home, tables_dir=home / "tables"))


def test_nanosecond_columns_are_stored_as_documented_longs_and_may_be_added(home):
    from pyiceberg.types import LongType, TimestampType

    storage = _storage(home)
    base = [{"name": "id", "type": "BIGINT"}, {"name": "t6", "type": "TIMESTAMP(6)"}]
    storage.create(spec(columns=base))
    grown = spec(
        columns=[*base, {"name": "ts", "type": "TIMESTAMP(9)"}, {"name": "at", "type": "TIMESTAMP_LTZ(8)"}]
    )
    assert [c.name for c in storage.create(grown).columns] == ["id", "t6", "ts", "at"]
    for table in (storage.pk_table(grown), storage.changelog_table(grown)):
        fields = {f.name: f for f in table.schema().fields}
        assert fields["t6"].field_type == TimestampType()  # precision <= 6: unchanged
        assert fields["ts"].field_type == LongType() and fields["at"].field_type == LongType()
        assert fields["ts"].doc == "TIMESTAMP(9): nanoseconds since 1970-01-01 00:00:00 (changelake)"
        assert fields["at"].doc == "TIMESTAMP_LTZ(8): nanoseconds since 1970-01-01 00:00:00 UTC (changelake)"


def test_a_table_storing_a_nanosecond_column_as_microseconds_is_refused(home):
    """A TIMESTAMP(9) column made before nanoseconds were kept is a microsecond ``timestamp``: reading it as
    nanoseconds would be 1000 times off and hash lookups to other buckets."""
    from changelake.config import load_settings
    from changelake.storage.fastread import FastReader
    from changelake.storage.summary import SPEC

    storage = _storage(home)
    old = spec(columns=[{"name": "id", "type": "BIGINT"}, {"name": "ts", "type": "TIMESTAMP(6)"}])
    storage.create(old)
    new = spec(columns=[{"name": "id", "type": "BIGINT"}, {"name": "ts", "type": "TIMESTAMP(9)"}])
    for name in ("ns", "ns__changelog"):  # what an older changelake stored for a TIMESTAMP(9) column
        table = storage.catalog.load_table(("t", name))
        with table.transaction() as tx:
            tx.set_properties({SPEC: json.dumps(new.to_dict(), sort_keys=True)})
    message = r"column 'ts' is TIMESTAMP\(9\) but stored as timestamp \(microseconds\).*Recreate the table"
    with pytest.raises(ChangelakeError, match=message):
        storage.pk_table(new)
    with pytest.raises(ChangelakeError, match=message):
        storage.create(new)
    settings = load_settings(home=home, tables_dir=home / "tables")
    for direct in (True, False):
        with pytest.raises(ChangelakeError, match=message):
            FastReader(settings, direct=direct).rows_arrow("t.ns")


# --- through the engine (Spark) ---------------------------------------------------------------------------
VERSIONED = {
    "name": "t.versions",
    "columns": [
        {"name": "id", "type": "BIGINT"},
        {"name": "ver", "type": "TIMESTAMP(9)"},
        {"name": "note", "type": "STRING"},
    ],
    "primary_key": ["id"],
    "options": {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ver"},
}


def _values(table: pa.Table, column: str) -> list:
    """A column of a fast read as nanosecond counts (the exact values, whatever the Arrow type)."""
    return table.column(column).cast(pa.int64()).to_pylist()


@pytest.mark.integration
def test_versioned_keeps_the_newer_of_two_versions_one_nanosecond_apart(lake):
    lake.create_table(VERSIONED)
    t, older = "2026-01-01 12:00:00.123456789", "2026-01-01 12:00:00.123456788"
    first = lake.apply(
        "t.versions",
        [
            {"op": "+I", "data": {"id": 1, "ver": t, "note": "newer"}},
            {"op": "+I", "data": {"id": 1, "ver": older, "note": "older"}},  # 1 ns older: ignored
            {"op": "+I", "data": {"id": 2, "ver": older, "note": "first"}},
            {"op": "+I", "data": {"id": 2, "ver": t, "note": "second"}},  # 1 ns newer: replaces
        ],
        batch_id=1,
    )
    assert (first.counts["inserted"], first.counts["updated"], first.counts["ignored"]) == (2, 1, 1)
    second = lake.apply(
        "t.versions",
        [
            {"op": "+U", "data": {"id": 1, "ver": older, "note": "stale"}},  # older than stored by 1 ns
            {"op": "+U", "data": {"id": 2, "ver": t, "note": "tie"}},  # the same version: ties replace
        ],
        batch_id=2,
    )
    assert (second.counts["updated"], second.counts["ignored"]) == (1, 1)
    rows = lake.rows_arrow("t.versions").sort_by("id")
    assert rows.column("note").to_pylist() == ["newer", "tie"]
    assert _values(rows, "ver") == [TS_NS, TS_NS]
    assert rows.schema.field("ver").type == pa.timestamp("ns")
    log = lake.changelog_arrow("t.versions")
    changes = [
        (r["id"], r["_change_type"], r["note"], v)
        for r, v in zip(log.to_pylist(), _values(log, "ver"), strict=True)
    ]
    assert [c[1:] for c in changes if c[0] == 1] == [("+I", "newer", TS_NS)]
    assert [c[1:] for c in changes if c[0] == 2] == [
        ("+I", "first", TS_NS - 1),
        ("-U", "first", TS_NS - 1),
        ("+U", "second", TS_NS),
        ("-U", "second", TS_NS),
        ("+U", "tie", TS_NS),
    ]


@pytest.mark.integration
def test_lookup_by_keys_holding_nanosecond_timestamps(lake, cli_env):
    """Keys 1 ns apart land in buckets the engine (Spark's xxhash64) picks; every lookup (fastread's hash)
    finds exactly its row, by ISO text with any offset or by the value a read returned."""
    lake.create_table(
        {
            "name": "t.keys",
            "columns": [
                {"name": "day", "type": "TIMESTAMP(9)"},
                {"name": "ts", "type": "TIMESTAMP(9)"},
                {"name": "at", "type": "TIMESTAMP_LTZ(9)"},
                {"name": "n", "type": "INT"},
            ],
            "primary_key": ["day", "ts", "at"],
            "partition_keys": ["day"],
            "options": {"bucket.num": 8},
        }
    )
    base = ns("2026-01-01T12:00:00.000000000")
    day = "2026-01-01 00:00:00.000000001"

    def text(n: int, hours: int = 0) -> str:
        """ISO text of ``base + n`` ns, as wall time at a UTC offset of ``hours`` (no suffix)."""
        return np.datetime_as_string(np.datetime64(base + n + hours * 3_600_000_000_000, "ns"), unit="ns")

    records = [
        {"op": "+I", "data": {"day": day, "ts": text(i), "at": text(-i) + "Z", "n": i}} for i in range(24)
    ]
    lake.apply("t.keys", records, batch_id=1)
    spec = lake.spec("t.keys")
    from changelake.bucketing import bucket_of
    from changelake.storage.fastread import decode_lookup_value

    buckets = set()
    for i in range(24):
        key = {"day": day, "ts": text(i), "at": text(-i, hours=1) + "+01:00"}
        found = lake.lookup("t.keys", key)
        assert [r["n"] for r in found] == [i]
        again = lake.lookup(
            "t.keys", {k: found[0][k] for k in ("day", "ts", "at")}
        )  # pandas.Timestamp values
        assert [r["n"] for r in again] == [i]
        buckets.add(bucket_of(spec, {k: decode_lookup_value(spec, k, v) for k, v in key.items()}))
    assert len(buckets) > 1  # the keys spread over buckets, so a wrong hash would miss rows
    assert lake.lookup("t.keys", {"day": day, "ts": text(0), "at": text(1) + "Z"}) == []
    row = lake.lookup("t.keys", {"day": day, "ts": text(5), "at": text(-5) + "Z"})[0]
    assert (row["ts"].value, row["at"].value, row["day"].value) == (base + 5, base - 5, ns(day))

    def cli(*args):
        result = subprocess.run(
            [sys.executable, "-m", "changelake.cli", *args],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return [json.loads(line) for line in result.stdout.splitlines()]

    assert cli("lookup", "t.keys", f"day={day}", f"ts={text(7)}", f"at={text(-7)}Z", "--format", "jsonl") == [
        {"day": "2026-01-01T00:00:00.000000001", "ts": text(7), "at": text(-7) + "+00:00", "n": 7}
    ]
    # scan and changelog print the exact nanoseconds too (no pandas in the CLI's read path).
    scanned = cli("scan", "t.keys", "--format", "jsonl")
    assert sorted((r["ts"], r["n"]) for r in scanned) == sorted((text(i), i) for i in range(24))
    logged = cli("changelog", "t.keys", "--format", "jsonl")
    assert sorted((r["at"], r["n"]) for r in logged) == sorted((text(-i) + "+00:00", i) for i in range(24))


@pytest.mark.integration
def test_aggregation_functions_keep_nanoseconds(lake):
    functions = ("max", "min", "last_value", "first_value")
    columns = [{"name": "id", "type": "INT"}]
    options = {"table.merge-engine": "aggregation"}
    for f in functions:
        columns += [
            {"name": f"{f}_ts", "type": "TIMESTAMP(9)"},
            {"name": f"{f}_at", "type": "TIMESTAMP_LTZ(9)"},  # a (7) would cut these nanoseconds away
        ]
        options |= {f"fields.{f}_ts.agg": f, f"fields.{f}_at.agg": f}
    lake.create_table({"name": "t.agg", "columns": columns, "primary_key": ["id"], "options": options})
    offsets = [5, 9, 1, 7]  # nanoseconds after TS, in arrival order
    stamps = [np.datetime_as_string(np.datetime64(TS_NS + o, "ns"), unit="ns") for o in offsets]
    lake.apply(
        "t.agg",
        [{"op": "+U", "data": {"id": 1, **{c["name"]: s for c in columns[1:]}}} for s in stamps[:2]],
        batch_id=1,
    )
    lake.apply(
        "t.agg",
        [{"op": "+U", "data": {"id": 1, **{c["name"]: s for c in columns[1:]}}} for s in stamps[2:]],
        batch_id=2,
    )
    row = lake.rows_arrow("t.agg")
    expected = {"max": 9, "min": 1, "last_value": 7, "first_value": 5}
    for f, offset in expected.items():
        assert _values(row, f"{f}_ts") == [TS_NS + offset], f
        assert _values(row, f"{f}_at") == [TS_NS + offset], f


@pytest.mark.integration
def test_parquet_landing_with_timestamp_ns_columns_round_trips(lake, tmp_path):
    lake.create_table(VERSIONED)
    path = tmp_path / "batch.parquet"
    pq.write_table(
        pa.table(
            {
                "op": ["+I", "+I", "+I"],
                "id": pa.array([1, 1, 2], pa.int64()),
                "ver": pa.array([TS_NS, TS_NS - 1, -1], pa.timestamp("ns")),
                "note": ["kept", "older by 1 ns", "before 1970"],
            }
        ),
        path,
    )
    lake.apply("t.versions", file=path, batch_id=1)
    rows = lake.rows_arrow("t.versions").sort_by("id")
    assert rows.column("note").to_pylist() == ["kept", "before 1970"]
    assert _values(rows, "ver") == [TS_NS, -1]


@pytest.mark.integration
def test_spark_view_shows_microseconds_and_the_exact_nanoseconds(lake, spark):
    """Spark's timestamps hold microseconds: the view floors to them (no session time zone involved) and adds
    ``<column>__nanos``, the exact BIGINT."""
    from changelake.storage import sparkread

    lake.create_table(
        {
            "name": "t.view",
            "columns": [
                {"name": "id", "type": "INT"},
                {"name": "ts", "type": "TIMESTAMP(9)"},
                {"name": "at", "type": "TIMESTAMP_LTZ(9)"},
                {"name": "t6", "type": "TIMESTAMP(6)"},
            ],
            "primary_key": ["id"],
        }
    )
    # numpy's NaT is the smallest int64, so the extremes are written out.
    cases = {
        TS: TS_NS,
        "1969-12-31T23:59:59.999999999": -1,
        "1677-09-21T00:12:43.145224192": -(2**63),
        "2262-04-11T23:47:16.854775807": 2**63 - 1,
        None: None,
    }
    text, values = list(cases), list(cases.values())
    lake.apply(
        "t.view",
        [
            {"op": "+I", "data": {"id": i, "ts": t, "at": t and t + "Z", "t6": t and t[:26]}}
            for i, t in enumerate(text)
        ],
        batch_id=1,
    )
    spec = lake.spec("t.view")
    stored = sparkread.rows_df(spark, lake.storage, spec).drop("_bucket")
    view = stored.select(*[c for col in spec.columns for c in col.type.view_spark_columns(col.name)])
    assert view.dtypes == [
        ("id", "int"),
        ("ts", "timestamp_ntz"),
        ("ts__nanos", "bigint"),
        ("at", "timestamp"),
        ("at__nanos", "bigint"),
        ("t6", "timestamp_ntz"),
    ]
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        got = {
            r["id"]: (r["ts"], r["ts__nanos"], r["micros"], r["t6"])
            for r in view.selectExpr("*", "unix_micros(at) AS micros").collect()
        }
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    for i, v in enumerate(values):
        floor = None if v is None else dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=v // 1000)
        assert got[i] == (floor, v, None if v is None else v // 1000, floor), i
    # The API's rows(), changelog() and the dbt/GX views show the same columns (sparkread.to_view_types).
    assert lake.rows("t.view").dtypes == view.dtypes
    assert sorted(tuple(r) for r in lake.rows("t.view").collect()) == sorted(tuple(r) for r in view.collect())
    assert [c for c in lake.changelog("t.view").columns if c.startswith(("ts", "at"))] == [
        "ts", "ts__nanos", "at", "at__nanos"
    ]  # fmt: skip


@pytest.mark.slow  # imports Great Expectations (3-7 s), the only unit test that would
def test_quality_suites_identify_rows_by_the_exact_nanoseconds():
    """GX's key uniqueness and tombstone checks key on ``<col>__nanos``: the view's microsecond TIMESTAMP
    would make two keys 1 ns apart look like one duplicated key."""
    from changelake.quality.suites import key_columns
    from changelake.spec import TableSpec

    spec = TableSpec.from_dict(
        {
            "name": "t.k",
            "columns": [
                {"name": "id", "type": "INT"},
                {"name": "ts", "type": "TIMESTAMP(9)"},
                {"name": "t3", "type": "TIMESTAMP(3)"},
            ],
            "primary_key": ["id", "ts", "t3"],
        }
    )
    assert key_columns(spec) == ["id", "ts__nanos", "t3"]


def test_a_column_named_like_a_nanosecond_view_column_is_refused():
    from changelake.spec import TableSpec

    columns = [{"name": "id", "type": "INT"}, {"name": "ts", "type": "TIMESTAMP(9)"}]
    with pytest.raises(SpecError, match=r"'ts__nanos' collides with the view column .* 'ts'"):
        TableSpec.from_dict(
            {
                "name": "t.c",
                "columns": [*columns, {"name": "TS__nanos", "type": "BIGINT"}],
                "primary_key": ["id"],
            }
        )
    # Beside a microsecond timestamp the name is free (its view has no __nanos column).
    columns[1]["type"] = "TIMESTAMP(6)"
    TableSpec.from_dict(
        {"name": "t.c", "columns": [*columns, {"name": "ts__nanos", "type": "BIGINT"}], "primary_key": ["id"]}
    )
