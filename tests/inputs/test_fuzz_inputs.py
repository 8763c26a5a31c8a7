"""Fuzzing every decoder and the spec loader (issue 12): random bytes, random JSON, mutated valid records,
random Parquet tables and mutated specs. The only outcomes allowed are decoded records or a ChangelakeError
(BadRecordError is one) -- never another exception, never a hang (a deadline per example), and never the
readers' catch-all reason (a rule nobody wrote). Properties checked on the way:

* failing on the first bad record and quarantining it agree (same line, field and reason);
* under quarantine a file of JSON lines never refuses the batch (only records are bad);
* what the JSON path accepts, the Parquet path accepts too, with the same values (one set of rules).

No Spark: the readers run directly on temporary files.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import os
import string
import tempfile
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap, BitMap64

from changelake.errors import BadRecordError, ChangelakeError
from changelake.inputs.readers import UNEXPECTED, read_batch
from changelake.spec import TableSpec, load_specs
from tests.helpers import REPO

# Fuzzing takes its time (about 25 s of CPU at 60 examples): make test runs it, make test-unit does not.
pytestmark = pytest.mark.slow
FUZZ = settings(
    max_examples=int(os.environ.get("CHANGELAKE_FUZZ_EXAMPLES", 60)),
    deadline=timedelta(seconds=20),  # generous for a shared 2-core machine; a hang takes minutes
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
COLUMNS = {
    "id": "BIGINT",
    "tiny": "TINYINT",
    "i": "INT",
    "r": "FLOAT",
    "f": "DOUBLE",
    "d": "DECIMAL(38,2)",
    "small_d": "DECIMAL(5,1)",
    "c": "CHAR(3)",
    "s": "STRING",
    "b": "BINARY(2)",
    "y": "BYTES",
    "flag": "BOOLEAN",
    "dt": "DATE",
    "t": "TIME",
    "ts": "TIMESTAMP(3)",
    "ltz": "TIMESTAMP_LTZ(6)",
}
AGG_COLUMNS = {"id": "DOUBLE", "b32": "BYTES", "b64": "BYTES", "n": "BIGINT"}
AGG_OPTIONS = {"table.merge-engine": "aggregation", "fields.b32.agg": "rbm32", "fields.b64.agg": "rbm64"}
SOURCES = {
    "changelog-json": [{}],
    "upsert-kafka": [{}, {"ordering": "kafka-offset", "dedup": "kafka-offsets", "key.fields-prefix": "k_"}],
    "debezium-json": [{}, {"ordering": "source.lsn", "timestamp-epoch-unit": "us"}],
    "canal-json": [{}, {"database.include": "shop"}],
    "maxwell-json": [{}, {"ignore-unknown-fields": True}],
}


@pytest.fixture(scope="module", autouse=True)
def warm_up(tmp_path_factory):
    """Decode once before any deadline counts: the first call imports and initialises what it uses."""
    directory = tmp_path_factory.mktemp("warm")
    for fmt, sources in SOURCES.items():
        for agg in (False, True):
            path = write_lines(directory, ['{"op": "+I"}', "x"])
            read_batch([path], make_spec(fmt, sources[-1], agg, quarantine=True))
    path = directory / "1.parquet"
    pq.write_table(pa.table({"op": ["+I"], "id": [1], "c": ["a"]}), path)
    read_batch([path], make_spec("changelog-parquet", {}))


def make_spec(fmt: str, source: dict, agg: bool = False, quarantine: bool = False) -> TableSpec:
    columns = AGG_COLUMNS if agg else COLUMNS
    return TableSpec.from_dict(
        {
            "name": "fz.t",
            "columns": [{"name": n, "type": t} for n, t in columns.items()],
            "primary_key": ["id"],
            "options": AGG_OPTIONS if agg else {},
            "source": {
                "format": fmt,
                **source,
                **({"on-bad-record": "quarantine"} if quarantine else {}),
            },
        }
    )


# --- JSON text, including what json.dumps cannot write --------------------------------------------------
class Raw(str):
    """A JSON token written as is (numbers of any size, NaN, broken text)."""


class Pairs(list):
    """A JSON object written from (key, value) pairs: keys may repeat."""


def emit(value, ascii_only: bool = True) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Pairs):
        return "{" + ", ".join(f"{json.dumps(k)}: {emit(v, ascii_only)}" for k, v in value) + "}"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(
                f"{json.dumps(k, ensure_ascii=ascii_only)}: {emit(v, ascii_only)}" for k, v in value.items()
            )
            + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(emit(v, ascii_only) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=ascii_only)
    return json.dumps(value)


NAMES = [*COLUMNS, *AGG_COLUMNS, "k_id", "op", "data", "rowkind", "fields", "key", "value", "before", "after",
         "payload", "schema", "type", "old", "isDdl", "database", "table", "source", "lsn", "partition", "offset",
         "topic", "timestamp", "name", "parameters", "scale"]  # fmt: skip
TRICKY_TEXT = [
    "NaN", "Infinity", "-Infinity", "+I", "-U", "+U", "-D", "c", "u", "d", "r", "INSERT", "UPDATE", "DELETE",
    "insert", "update", "delete", "bootstrap-insert", "1e999999999999", "1e20000000", "٣", "12:00", "25:00",
    "2024-01-01", "2024-01-01T00:00:00+01:00", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00",
    "AAEC", "Og==", "", "-0", "1.5", "\ud800", "io.debezium.time.MicroTimestamp", "io.debezium.time.Time",
    "org.apache.kafka.connect.data.Decimal", "io.debezium.time.NanoTimestamp", "a:b", "shop",
]  # fmt: skip
NUMBER_TOKENS = st.from_regex(
    r"-?(0|[1-9][0-9]{0,45})(\.[0-9]{1,45})?([eE][+-]?[0-9]{1,14})?", fullmatch=True
)
raw_tokens = st.one_of(
    NUMBER_TOKENS.map(Raw),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1" + "0" * 400, "9" * 5000, "1e999999999999"]).map(Raw),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(TRICKY_TEXT),
    raw_tokens,
)
keys = st.one_of(st.sampled_from(NAMES), st.text(max_size=6))
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
        st.lists(st.tuples(keys, children), max_size=4).map(Pairs),
    ),
    max_leaves=16,
)


# --- valid records per format, then mutations -----------------------------------------------------------
def valid_values(columns: dict[str, str], draw) -> dict:
    row = {}
    for name, type_ in columns.items():
        if name != "id" and draw(st.booleans()):
            continue
        row[name] = draw(value_of(type_, name))
    return row


def value_of(type_: str, name: str):
    if name in ("b32", "b64"):
        cls = BitMap if name == "b32" else BitMap64
        bits = st.lists(st.integers(0, 2**32 - 1 if name == "b32" else 2**64 - 1), max_size=5)
        return bits.map(lambda v: base64.b64encode(cls(v).serialize()).decode())
    return {
        "BIGINT": st.integers(-(2**63), 2**63 - 1),
        "TINYINT": st.integers(-128, 127),
        "INT": st.integers(-(2**31), 2**31 - 1),
        "FLOAT": st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False), st.sampled_from(["NaN"])),
        "DOUBLE": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["NaN", "-Infinity"])),
        "DECIMAL(38,2)": st.decimals(places=2, min_value=-(10**35), max_value=10**35).map(str),
        "DECIMAL(5,1)": st.decimals(places=1, min_value=-9999, max_value=9999).map(lambda d: Raw(str(d))),
        "CHAR(3)": st.text(st.characters(exclude_categories=["Cs"]), max_size=3),
        "STRING": st.text(st.characters(exclude_categories=["Cs"]), max_size=10),
        "BINARY(2)": st.binary(max_size=2).map(lambda b: base64.b64encode(b).decode()),
        "BYTES": st.binary(max_size=6).map(lambda b: base64.b64encode(b).decode()),
        "BOOLEAN": st.booleans(),
        "DATE": st.dates().map(dt.date.isoformat),
        "TIME": st.times().map(dt.time.isoformat),
        "TIMESTAMP(3)": st.datetimes().map(dt.datetime.isoformat),
        "TIMESTAMP_LTZ(6)": st.datetimes(min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 1, 1),
                                         timezones=st.just(dt.UTC)).map(dt.datetime.isoformat),
    }[type_]  # fmt: skip


@st.composite
def valid_record(draw, fmt: str, agg: bool, source: dict) -> dict:
    columns = AGG_COLUMNS if agg else COLUMNS
    row = valid_values(columns, draw)
    if fmt == "changelog-json":
        return {"op": draw(st.sampled_from(["+I", "-U", "+U", "-D"])), "data": row}
    if fmt == "upsert-kafka":
        kafka = {"topic": "fz.t", "partition": draw(st.integers(0, 3)), "offset": draw(st.integers(0, 50))}
        key = {source.get("key.fields-prefix", "") + "id": row["id"]}
        return {"key": key, "value": draw(st.sampled_from([None, row])), **kafka}
    if fmt == "debezium-json":
        op = draw(st.sampled_from(["c", "r", "u", "d"]))
        event = {"op": op, "before": row if op in ("u", "d") else None, "after": row if op != "d" else None,
                 "source": {"db": "shop", "table": "t", "lsn": draw(st.integers(0, 10**6))}}  # fmt: skip
        if draw(st.booleans()):
            schema = {"fields": [{"field": "after", "fields": [
                {"field": "ts", "name": draw(st.sampled_from(["io.debezium.time.MicroTimestamp", "x"]))},
                {"field": "d", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}}]}]}  # fmt: skip
            return {"schema": schema, "payload": event}
        return event
    text_row = {k: v if isinstance(v, str) or v is None else str(v) for k, v in row.items()}
    if fmt == "canal-json":
        kind = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE"]))
        return {"type": kind, "database": "shop", "table": "t", "data": [text_row],
                **({"old": [{}]} if kind == "UPDATE" else {})}  # fmt: skip
    kind = draw(st.sampled_from(["insert", "update", "delete", "bootstrap-insert"]))
    return {
        "database": "shop",
        "table": "t",
        "type": kind,
        "ts": 1,
        "data": row,
        **({"old": {}} if kind == "update" else {}),
    }


def paths_of(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths_of(v, (*prefix, i))


def node_at(record, path: tuple):
    for part in path:
        record = record[part]
    return record


@st.composite
def mutated(draw, record: dict):
    """Replace, drop or repeat one value anywhere in the record, or damage its text."""
    how = draw(st.sampled_from(["replace", "drop", "repeat", "text"]))
    if how == "text":
        text = emit(record)
        at = draw(st.integers(0, len(text)))
        insert = draw(st.sampled_from(["", "{", "]", '"', "\\", ",", "\x00", "1e999", "\ud800", "ÿ"]))
        cut = draw(st.integers(0, 3))
        return Raw(text[:at] + insert + text[at + cut :])
    if how == "repeat":  # a key twice in one object: must not be last-wins
        objects = [p for p in paths_of(record) if isinstance(node_at(record, p), dict) and node_at(record, p)]
        path = draw(st.sampled_from(objects))
        node = node_at(record, path)
        pairs = Pairs([*node.items(), (draw(st.sampled_from(list(node))), draw(json_values))])
        if not path:
            return pairs
        node_at(record, path[:-1])[path[-1]] = pairs
        return record
    paths = [p for p in paths_of(record) if p]
    if draw(st.booleans()):  # half the time the envelope itself: its fields are few and each matters
        paths = [p for p in paths if len(p) <= 2 and not isinstance(p[-1], int)] or paths
    path = draw(st.sampled_from(paths))
    parent = node_at(record, path[:-1])
    if how == "replace":
        parent[path[-1]] = draw(json_values)
    else:
        del parent[path[-1]]
    return record


def json_lines(fmt: str, agg: bool, source: dict):
    record = valid_record(fmt, agg, source)
    line = st.one_of(
        record.map(lambda r: emit(r, ascii_only=False)),
        record.flatmap(mutated).map(emit),
        json_values.map(emit),
        st.binary(max_size=40),
    )
    return st.lists(line, min_size=1, max_size=6)


def write_lines(directory: Path, lines: list[str | bytes]) -> Path:
    path = directory / "1.jsonl"
    data = [line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass") for line in lines]
    path.write_bytes(b"\n".join(x.replace(b"\n", b" ") for x in data) + b"\n")
    return path


def assert_no_catch_all(batch_or_error) -> None:
    reasons = (
        [batch_or_error.reason]
        if isinstance(batch_or_error, BadRecordError)
        else [d["reason"] for d in batch_or_error.dead_letters]
    )
    assert not any(r.startswith(UNEXPECTED) for r in reasons), reasons


def decode_both_ways(path: Path, fmt: str, source: dict, agg: bool):
    """Decode failing and quarantining; return the quarantined batch. Checks the properties above."""
    try:
        strict = read_batch([path], make_spec(fmt, source, agg))
        error = None
    except BadRecordError as e:
        strict, error = None, e
        assert_no_catch_all(e)
    except ChangelakeError:
        raise AssertionError("a JSON-lines batch is refused only for a bad record") from None
    parquet_magic = path.read_bytes().startswith(b"PAR1")
    try:
        batch = read_batch([path], make_spec(fmt, source, agg, quarantine=True))
    except BadRecordError as e:
        assert parquet_magic and e.line == 1, e  # only a file that is not JSON lines refuses the batch
        return None
    assert_no_catch_all(batch)
    if error is None:
        assert batch.quarantined == 0 and same(batch.records, strict.records)
    else:
        first = batch.dead_letters[0]
        assert (first["line"], first["field"], first["reason"]) == (error.line, error.field, error.reason)
    return batch


def same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (and every value representable in Python)."""
    return a.schema == b.schema and repr(a.to_pylist()) == repr(b.to_pylist())


@pytest.mark.parametrize(
    ("fmt", "source", "agg"),
    [(fmt, source, agg) for fmt, sources in SOURCES.items() for source in sources for agg in (False, True)],
    ids=lambda v: str(v) if not isinstance(v, dict) else "+".join(v) or "defaults",
)
def test_json_decoders_never_crash(fmt, source, agg):
    @FUZZ
    @given(lines=json_lines(fmt, agg, source))
    def run(lines):
        with tempfile.TemporaryDirectory() as tmp:
            decode_both_ways(write_lines(Path(tmp), lines), fmt, source, agg)

    run()


@FUZZ
@given(lines=json_lines("changelog-json", False, {}))
def test_what_json_accepts_parquet_accepts_with_the_same_values(lines):
    """The decoded records, landed as a changelog-parquet batch, decode to the same records."""
    with tempfile.TemporaryDirectory() as tmp:
        batch = decode_both_ways(write_lines(Path(tmp), lines), "changelog-json", {}, False)
        if batch is None or batch.num_records == 0:
            return
        records = batch.records
        table = records.drop_columns(["_seq"]).rename_columns(["op", *records.column_names[2:]])
        path = Path(tmp) / "2.parquet"
        pq.write_table(table, path)
        again = read_batch([path], make_spec("changelog-parquet", {}))
        assert same(again.records, records)


# --- Parquet ---------------------------------------------------------------------------------------------
ARROW_TYPES = [
    pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint64(), pa.float32(), pa.float64(), pa.bool_(),
    pa.string(), pa.large_string(), pa.binary(), pa.date32(), pa.time64("us"), pa.time32("s"),
    pa.timestamp("us"), pa.timestamp("ns"), pa.timestamp("ms", tz="UTC"), pa.decimal128(38, 2),
    pa.decimal128(6, 3), pa.null(), pa.list_(pa.int64()), pa.struct([("a", pa.int64())]),
]  # fmt: skip


@st.composite
def arrow_column(draw, n: int) -> pa.Array:
    t = draw(st.sampled_from(ARROW_TYPES))
    if pa.types.is_null(t):
        return pa.nulls(n)
    if pa.types.is_list(t):
        return pa.array(
            draw(st.lists(st.none() | st.lists(st.integers(0, 9), max_size=2), min_size=n, max_size=n)), t
        )
    if pa.types.is_struct(t):
        return pa.array([{"a": 1}] * n, t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        tricky = st.sampled_from([t for t in TRICKY_TEXT if t != "\ud800"])
        texts = st.one_of(st.none(), st.text(st.characters(exclude_categories=["Cs"]), max_size=8), tricky)
        array = pa.array(draw(st.lists(texts, min_size=n, max_size=n)), t)
        return array.dictionary_encode() if draw(st.booleans()) else array
    if pa.types.is_binary(t):
        return pa.array(draw(st.lists(st.none() | st.binary(max_size=6), min_size=n, max_size=n)), t)
    if pa.types.is_boolean(t):
        return pa.array(draw(st.lists(st.none() | st.booleans(), min_size=n, max_size=n)), t)
    if pa.types.is_floating(t):
        return pa.array(draw(st.lists(st.none() | st.floats(width=t.bit_width), min_size=n, max_size=n)), t)
    if pa.types.is_decimal(t):
        digits = t.precision - t.scale
        values = st.decimals(
            places=t.scale, min_value=-(10**digits) + 1, max_value=10**digits - 1, allow_nan=False
        )
        return pa.array(draw(st.lists(st.none() | values, min_size=n, max_size=n)), t)
    # integers and the temporal types: any stored integer, as a corrupt or hostile writer could store it
    if pa.types.is_integer(t):
        lo, hi = (
            (0, 2**t.bit_width - 1)
            if pa.types.is_unsigned_integer(t)
            else (-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
        )
        small = st.integers(max(lo, -1000), min(hi, 1000))
        return pa.array(draw(st.lists(st.none() | st.integers(lo, hi) | small, min_size=n, max_size=n)), t)
    storage = pa.int32() if t.bit_width == 32 else pa.int64()
    lo, hi = -(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1
    ints = draw(st.lists(st.none() | st.integers(lo, hi) | st.integers(-1000, 10**6), min_size=n, max_size=n))
    return pa.array(ints, storage).view(t)


@st.composite
def parquet_tables(draw) -> pa.Table:
    n = draw(st.integers(1, 6))
    ops = st.one_of(st.none(), st.sampled_from(["+I", "-U", "+U", "-D", "??", ""]))
    columns = {"op": pa.array(draw(st.lists(ops, min_size=n, max_size=n)), pa.string())}
    for name in draw(st.lists(st.sampled_from([*COLUMNS, "nope"]), unique=True, max_size=6)):
        columns[name] = draw(arrow_column(n))
    if draw(st.booleans()):
        columns["id"] = pa.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), pa.int64())
    return pa.table(columns)


def decode_parquet_both_ways(path: Path, agg: bool = False) -> None:
    try:
        strict = read_batch([path], make_spec("changelog-parquet", {}, agg))
        error = None
    except BadRecordError as e:
        strict, error = None, e
        assert_no_catch_all(e)
    try:
        batch = read_batch([path], make_spec("changelog-parquet", {}, agg, quarantine=True))
    except BadRecordError as e:
        assert error is not None and (e.line, e.field, e.reason) == (error.line, error.field, error.reason)
        return
    if error is None:
        assert batch.quarantined == 0 and same(batch.records, strict.records)
        return
    first = batch.dead_letters[0]
    assert (first["line"], first["field"], first["reason"]) == (error.line, error.field, error.reason)
    # Each quarantined row gets the error it gets alone (the row, landed as a file of its own).
    table = pq.read_table(path)
    for letter in batch.dead_letters[:3]:
        alone = path.with_name("alone.parquet")
        pq.write_table(table.slice(letter["line"] - 1, 1), alone)
        with pytest.raises(BadRecordError) as e:
            read_batch([alone], make_spec("changelog-parquet", {}, agg))
        assert (e.value.line, e.value.field, e.value.reason) == (1, letter["field"], letter["reason"])


@FUZZ
@given(table=parquet_tables())
def test_parquet_decoder_never_crashes(table):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "1.parquet"
        pq.write_table(table, path)
        decode_parquet_both_ways(path)


@FUZZ
@given(
    data=st.binary(max_size=200),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
)
@example(
    data=b"", flips=[(19667, 128)]
)  # a column name's first byte made 0x80: not UTF-8 (found by this test)
def test_damaged_parquet_files_are_bad_records(data, flips):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "1.parquet"
        pq.write_table(pa.table({"op": ["+I", "-D"], "id": [1, 2], "s": ["a", "b"]}), path)
        raw = bytearray(path.read_bytes() if data[:1] != b"x" else data)
        for at, byte in flips:
            raw[at % len(raw)] = byte
        path.write_bytes(bytes(raw))
        decode_parquet_both_ways(path)


# --- spec loader -----------------------------------------------------------------------------------------
DEMO_SPECS = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "examples" / "tables").glob("*.yaml"))]
yaml_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10),
        st.dates(), st.sampled_from(["BIGINT", "DECIMAL(38,2)", "DECIMAL(1٠,2)", "shop.orders", "a__b.c",
                                     "x.t__input", "1", "١", "true", "fields.x.agg", "rbm32", "quarantine"]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), children, max_size=4),
    ),
    max_leaves=10,
)  # fmt: skip


@st.composite
def mutated_spec_text(draw) -> bytes:
    spec = json.loads(json.dumps(draw(st.sampled_from(DEMO_SPECS)), default=str))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in paths_of(spec) if p]
        path = draw(st.sampled_from(paths))
        parent = spec
        for part in path[:-1]:
            parent = parent[part]
        if draw(st.booleans()):
            parent[path[-1]] = draw(yaml_values)
        else:
            del parent[path[-1]]
    text = yaml.safe_dump(spec, allow_unicode=True)
    how = draw(st.sampled_from(["as is", "repeat a key", "damage"]))
    if how == "repeat a key":
        text += draw(st.sampled_from(["name: other.t\n", "columns: []\n", "options: {}\n"]))
    elif how == "damage":
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at]
            + draw(st.sampled_from(["\t", ":", "- ", "&a ", "*a", "[", "{", "\x00", "!!python/object "]))
            + text[at:]
        )
    return text.encode("utf-8", "surrogatepass")


spec_texts = st.one_of(
    st.binary(max_size=80),
    yaml_values.map(lambda v: yaml.safe_dump(v, allow_unicode=True).encode("utf-8", "surrogatepass")),
    mutated_spec_text(),
    st.just(b"[" * 5000),
    st.just(b"a: &a [1]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n"),
)


@FUZZ
@given(text=spec_texts)
def test_spec_loader_never_crashes(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fz.t.yaml"
        path.write_bytes(text)
        try:
            spec = TableSpec.from_yaml(path)
        except ChangelakeError:
            return
        spec.source_options  # noqa: B018 - the source settings of a loaded spec are valid
        assert TableSpec.from_dict(spec.to_dict()) == spec


@FUZZ
@given(
    names=st.lists(
        st.from_regex(r"[A-Za-z_]{1,4}(__[a-z]{1,3})?\.[A-Za-z_]{1,4}(__[a-z]{1,3})?", fullmatch=True),
        min_size=1,
        max_size=4,
    )
)
def test_spec_sets_with_colliding_names_are_refused(names):
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(names):
            spec = {"name": name, "columns": [{"name": "id", "type": "INT"}], "primary_key": ["id"]}
            (Path(tmp) / f"s{i}.yml").write_text(yaml.safe_dump(spec))
        try:
            specs = load_specs(tmp)
        except ChangelakeError:
            return
        views = [f"{s.namespace}__{s.table}".lower() for s in specs.values()]
        derived = views + [v + "__input" for v in views] + [v + "__changelog" for v in views]
        assert len(set(derived)) == len(derived)


def test_fuzz_helpers_write_what_they_mean():
    """The generators' JSON writer: repeated keys, raw tokens and non-ASCII text as written."""
    assert emit(Pairs([("op", "+I"), ("op", Raw("1e999"))])) == '{"op": "+I", "op": 1e999}'
    assert emit({"s": "é"}, ascii_only=False) == '{"s": "é"}'
    assert math.isnan(json.loads(emit(Raw("NaN"))))
    assert all(c in string.printable for c in emit({"s": "é\ud800"}))
    assert decimal.Decimal(emit(Raw("1.50"))) == decimal.Decimal("1.5")
