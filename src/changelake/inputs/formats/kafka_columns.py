"""upsert-kafka records with Avro keys and values (or a raw key), decoded column-wise (the decode tasks' fast
path).

The per-message path (:meth:`UpsertKafka.decode` and :mod:`changelake.inputs.readers`) turns every field
into Python objects and back: about 70 us a record. Here the envelopes are parsed by pyarrow's JSON reader,
the Avro records by fastavro with the logical types left as their plain Avro values (a timestamp-micros as
its long, a decimal as its unscaled bytes: fastavro's datetime and Decimal objects were half its time), and
the columns are built by Arrow and numpy.

It takes a range only when the result is certain to equal the per-message path's: every field name appears
once per line (every string in these lines is base64 or a Kafka topic, so a quote only ever delimits a name
or a value), every writer field maps to its column's type in a way listed in :func:`_column_kind`, every
value is in range, and every key repeated in the value equals the key. Anything else (a bad record
included) returns None and the range is decoded message by message, so errors and dead letters are that
path's own.
"""

from __future__ import annotations

import base64
import binascii
import io
import struct
from typing import TYPE_CHECKING, Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from changelake.inputs.formats import kafka_codecs
from changelake.inputs.formats.changelog_json import object_lines

if TYPE_CHECKING:
    from changelake.spec import TableSpec

ENVELOPE = pa.schema(
    [
        pa.field("key", pa.string()),
        pa.field("value", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int64()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.int64()),
    ]
)
_TOPIC = r"^[A-Za-z0-9._-]{1,249}$"
# Python's datetime and date range, as microseconds and days since 1970: the per-message path builds those.
_MIN_MICROS, _MAX_MICROS = -62135596800000000, 253402300799999999
_MIN_DAYS, _MAX_DAYS = -719162, 2932896


def decode_columns(
    data: bytes | memoryview, first_line: int, spec: TableSpec, key_codec: Any, value_codec: Any
) -> tuple[np.ndarray, pa.Array, list[pa.Array], list[pa.Array]] | None:
    """(line numbers, ops, storage-typed columns, [topic, partition, offset]) of a range of upsert-kafka lines
    whose key and value are Avro, or None to decode it message by message."""
    opts = spec.source_options
    if not _columnar(spec, key_codec, value_codec):
        return None
    line_numbers = object_lines(data, first_line)
    if line_numbers is None:
        return None
    n = len(line_numbers)
    if not n:
        return line_numbers, pa.array([], pa.string()), [], []
    try:
        parsed = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(data) + 1)),
            parse_options=pj.ParseOptions(explicit_schema=ENVELOPE, unexpected_field_behavior="error"),
        ).combine_chunks()
    except (pa.ArrowException, ValueError, UnicodeError):
        return None
    if parsed.num_rows != n or parsed.schema != ENVELOPE:
        return None
    env = {name: parsed.column(name).chunk(0) if parsed.column(name).num_chunks else pa.nulls(n, f.type)
           for name, f in zip(ENVELOPE.names, ENVELOPE, strict=True)}  # fmt: skip
    if not _one_name_per_line(data, env, n):
        return None
    kafka = _kafka_columns(env, n, opts)
    if kafka is None or env["key"].null_count:
        return None
    keys = _base64_values(env["key"])
    values = _base64_values(env["value"])
    if keys is None or values is None:
        return None
    return _records(spec, key_codec, value_codec, keys, values, line_numbers, kafka)


def decode_records(
    keys: list[bytes | None],
    values: list[bytes | None],
    topic: str,
    partition: int,
    offsets: np.ndarray,
    spec: TableSpec,
    key_codec: Any,
    value_codec: Any,
) -> tuple[np.ndarray, pa.Array, list[pa.Array], list[pa.Array]] | None:
    """:func:`decode_columns` of records read from a topic partition (offsets in order, each its line number
    as a topic range numbers them): their key and value bytes go straight to the Avro decoder, without the
    JSON line a landed file holds them in (base64 text rendered, then parsed and decoded again). None when the
    per-message path must decide (the same conditions as for a range of lines)."""
    if not _columnar(spec, key_codec, value_codec):
        return None
    n = len(offsets)
    line_numbers = np.asarray(offsets, np.int64)
    if not n:
        return line_numbers, pa.array([], pa.string()), [], []
    if None in keys:  # list's own scan: no Python step per record
        return None
    kafka = [
        pa.array([topic] * n, pa.string()),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(line_numbers, pa.int64()),
    ]
    return _records(spec, key_codec, value_codec, keys, values, line_numbers, kafka)


def _columnar(spec: TableSpec, key_codec: Any, value_codec: Any) -> bool:
    """Whether the table's key and value formats and source settings have a column-wise decode."""
    from changelake.inputs.records import ColumnRules

    opts = spec.source_options
    if not all(
        isinstance(c, kafka_codecs.AvroCodec | kafka_codecs.RawCodec) for c in (key_codec, value_codec)
    ):
        return False
    if not any(isinstance(c, kafka_codecs.AvroCodec) for c in (key_codec, value_codec)):
        return False  # raw alone: not worth a path of its own
    return not (ColumnRules(spec).checks or opts.ordering != "arrival" or opts.ignore_unknown_fields)


def _records(
    spec: TableSpec,
    key_codec: Any,
    value_codec: Any,
    keys: list[bytes | None],
    values: list[bytes | None],
    line_numbers: np.ndarray,
    kafka: list[pa.Array],
) -> tuple[np.ndarray, pa.Array, list[pa.Array], list[pa.Array]] | None:
    key_cols = _part_columns(key_codec, keys, spec)
    value_cols = _part_columns(value_codec, values, spec)
    if key_cols is None or value_cols is None:
        return None
    tombstone = pa.array([v is None for v in values], pa.bool_())
    return _rows(spec, key_cols, value_cols, tombstone, spec.source_options, len(keys), line_numbers, kafka)


def _one_name_per_line(data: bytes | memoryview, env: dict[str, pa.Array], n: int) -> bool:
    """Whether every line names key and value, and names the other fields only with a value (a ``null``
    topic, partition, offset or timestamp, or a missing value, is the per-message path's to refuse).

    pyarrow refuses a name twice in one line, and every string these lines may hold is base64 or a topic name
    (checked later; an escape makes this return False), so a quoted name is a field name and counting each
    name's occurrences in the range is exact."""
    raw = bytes(data)
    if b"\\" in raw:
        return False  # an escape: a name may be spelt otherwise
    for name, arr in env.items():
        count = raw.count(f'"{name}"'.encode())
        if count != (n if name in ("key", "value") else len(arr) - arr.null_count):
            return False
    return True


def _kafka_columns(env: dict[str, pa.Array], n: int, opts: Any) -> list[pa.Array] | None:
    """[topic, partition, offset] as the per-message path sets them, or None if it must decide."""
    partition, offset, topic = env["partition"], env["offset"], env["topic"]
    needed = opts.dedup_offsets or opts.ordering == "kafka-offset"
    if partition.null_count == n and offset.null_count == n and not needed:
        return [pa.nulls(n, pa.string()), pa.nulls(n, pa.int32()), pa.nulls(n, pa.int64())]
    if partition.null_count or offset.null_count:
        return None
    if pc.any(pc.or_(pc.less(partition, 0), pc.greater(partition, 2**31 - 1))).as_py():
        return None
    if pc.any(pc.less(offset, 0)).as_py():
        return None
    named = pc.drop_null(topic)
    if len(named) and not pc.all(pc.match_substring_regex(named, _TOPIC)).as_py():
        return None
    return [pc.fill_null(topic, ""), partition.cast(pa.int32()), offset]


def _base64_values(texts: pa.Array) -> list[bytes | None] | None:
    """Every value's bytes (None for a null), decoded as the per-message path does; None if one is not
    base64 (that path names it)."""
    out: list[bytes | None] = []
    append, decode = out.append, base64.b64decode
    try:
        for text in texts.to_pylist():
            append(None if text is None else decode(text, validate=True))
    except (binascii.Error, ValueError):
        return None
    return out


def _part_columns(codec: Any, blobs: list[bytes | None], spec: TableSpec) -> dict[str, pa.Array] | None:
    if isinstance(codec, kafka_codecs.RawCodec):
        return _raw_columns(codec, blobs)
    return _avro_columns(codec, blobs, spec)


def _raw_columns(codec: Any, blobs: list[bytes | None]) -> dict[str, pa.Array] | None:
    """A raw part's one field (Flink's raw format) as a storage array: text, bytes or a whole number; None
    for the types whose values the per-message path checks further (CHAR, BINARY, BOOLEAN, FLOAT, DOUBLE)."""
    f, name = codec.field, codec.field.type.name
    try:
        if name == "STRING":
            values: list = [None if b is None else b.decode(codec.charset) for b in blobs]
        elif name == "BYTES":
            values = blobs
        elif name in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
            code = codec.order + kafka_codecs.RAW_TYPES[name]
            size = struct.calcsize(code)
            if any(b is not None and len(b) != size for b in blobs):
                return None
            values = [None if b is None else struct.unpack(code, b)[0] for b in blobs]
        else:
            return None
        return {f.name: pa.array(values, f.type.arrow_type())}
    except (UnicodeDecodeError, LookupError, pa.ArrowException):
        return None


def _plain_schema(schema: Any) -> Any:
    """An Avro schema without its logical types (so fastavro returns the plain long, int and bytes)."""
    if isinstance(schema, dict):
        return {
            k: _plain_schema(v) for k, v in schema.items() if k != "logicalType" and not k.startswith("__")
        }
    if isinstance(schema, list):
        return [_plain_schema(v) for v in schema]
    return schema


def _nonnull(avro: Any) -> Any:
    """A field's type without a ``null`` branch; None for any other union."""
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        return branches[0] if len(branches) == 1 else None
    return avro


def _column_kind(t: Any, writer_type: Any) -> str | None:
    """How a writer field's values become a column's storage values column-wise, or None (the per-message
    path then decides): ``same`` (Arrow converts the plain values exactly), ``decimal``, ``millis``,
    ``micros`` or ``days``."""
    w = _nonnull(writer_type)
    if w is None:
        return None
    physical = w.get("type") if isinstance(w, dict) else w
    logical = w.get("logicalType") if isinstance(w, dict) else None
    name = t.name
    if name in ("BIGINT", "INT", "SMALLINT", "TINYINT"):
        return "same" if physical in ("int", "long") and logical is None else None
    if name == "DOUBLE":
        return "same" if physical in ("float", "double") and logical is None else None
    if name == "BOOLEAN":
        return "same" if physical == "boolean" else None
    if name == "STRING":
        return "same" if physical == "string" and logical is None else None
    if name == "BYTES":
        return "same" if physical == "bytes" and logical is None else None
    if name == "DECIMAL":
        scale = t.decimal_shape[1]
        ok = physical == "bytes" and logical == "decimal" and w.get("scale", 0) == scale
        return "decimal" if ok else None
    if name in ("TIMESTAMP", "TIMESTAMP_LTZ") and not t.is_nanos and physical == "long":
        return {"timestamp-millis": "millis", "timestamp-micros": "micros"}.get(logical or "")
    if name == "DATE" and physical == "int" and logical == "date":
        return "days"
    return None


def _avro_columns(codec: Any, blobs: list[bytes | None], spec: TableSpec) -> dict[str, pa.Array] | None:
    """A part's fields as storage arrays (null where the part is null), or None to decide message by message."""
    n = len(blobs)
    by_writer: dict[int, tuple[dict, list[int], list[bytes]]] = {}
    confluent = isinstance(codec, kafka_codecs.ConfluentCodec)
    single = not confluent and codec.encoding == "single-object"
    if not confluent and codec.encoding == "container":
        return None
    for i, blob in enumerate(blobs):
        if blob is None:
            continue
        if confluent:
            if len(blob) < 5 or blob[0] != kafka_codecs.CONFLUENT_MAGIC:
                return None
            writer = codec.registry.schema(int.from_bytes(blob[1:5], "big"))
            body = blob[5:]
        elif single:
            if blob[:2] != kafka_codecs.SINGLE_OBJECT_MAGIC or len(blob) < 10:
                return None
            writer, body = codec.known.get(blob[2:10]), blob[10:]
        else:
            writer, body = codec.reader, blob
        if writer is None:
            return None
        group = by_writer.setdefault(id(writer), (writer, [], []))
        group[1].append(i)
        group[2].append(body)
    columns = {c.name: c for c in spec.columns}
    out_values: dict[str, list] = {}
    plans: dict[str, str] = {}
    reader_fields = {f["name"]: f for f in codec.reader["fields"]}
    for name in reader_fields:
        if name not in codec.types:
            return None  # a field the table does not have: the per-message path refuses or ignores it
        out_values[name] = [None] * n
    for writer, rows, bodies in by_writer.values():
        plain_writer, plain_reader = _plain_pair(codec, writer)
        writer_fields = {f["name"]: f["type"] for f in writer["fields"]}
        for name in reader_fields:
            if name not in writer_fields:
                continue  # the reader's default (null: the derived reader's fields are nullable or required)
            kind = _column_kind(codec.types[name], writer_fields[name])
            if kind is None or plans.setdefault(name, kind) != kind:
                return None
        read = fastavro.schemaless_reader
        records = []
        for body in bodies:
            buf = io.BytesIO(body)
            try:
                record = read(buf, plain_writer, plain_reader)
            except Exception:
                return None
            if buf.tell() != len(body) or not isinstance(record, dict):
                return None
            records.append(record)
        for name, slots in out_values.items():
            got = [r.get(name) for r in records]
            if len(rows) == n:
                out_values[name] = got
            else:
                for row, value in zip(rows, got, strict=True):
                    slots[row] = value
    arrays = {}
    for name, values in out_values.items():
        column = columns[_column_of(codec, name)]
        array = _storage_array(values, column.type, plans.get(name, "same"))
        if array is None:
            return None
        arrays[name] = array
    return arrays


def _plain_pair(codec: Any, writer: dict) -> tuple[dict, dict | None]:
    """The writer and the reader schema (named as the writer, as resolution needs) without logical types,
    parsed once per writer."""
    cache = codec.__dict__.setdefault("_plain_pairs", {})
    pair = cache.get(id(writer))
    if pair is None:
        reader = codec.reader_for(writer)
        plain_writer, plain_reader = _plain_schema(writer), _plain_schema(reader)
        # The same schema both sides: no resolution to run (fastavro decodes a third faster without).
        pair = (
            fastavro.parse_schema(plain_writer),
            None if plain_writer == plain_reader else fastavro.parse_schema(plain_reader),
        )
        cache[id(writer)] = pair
        codec.__dict__.setdefault("_plain_keep", []).append(writer)  # the id stays this schema's
    return pair


def _column_of(codec: Any, field: str) -> str:
    return next(f.column for f in codec.fields if f.name == field)


def _storage_array(values: list, t: Any, kind: str) -> pa.Array | None:
    storage = t.arrow_type()
    try:
        if kind == "same":
            return pa.array(values, storage)
        if kind in ("millis", "micros"):
            ints = pa.array(values, pa.int64())
            if kind == "millis":
                ints = pc.multiply_checked(ints, 1000)
            lo, hi = pc.min_max(ints).values()
            if lo.is_valid and (lo.as_py() < _MIN_MICROS or hi.as_py() > _MAX_MICROS):
                return None
            # Cut to the declared precision as every other path (types.truncate_nanos; no value leaves the range).
            stamps, _ = t.truncate_timestamps(ints.cast(pa.timestamp("us")))
            return stamps.cast(storage)
        if kind == "days":
            ints = pa.array(values, pa.int32())
            lo, hi = pc.min_max(ints).values()
            if lo.is_valid and (lo.as_py() < _MIN_DAYS or hi.as_py() > _MAX_DAYS):
                return None
            return ints.cast(pa.date32())
        if kind == "decimal":
            return _decimals(values, t)
    except (pa.ArrowException, OverflowError, ValueError, TypeError):
        return None
    return None


def _decimals(values: list, t: Any) -> pa.Array | None:
    """Avro's decimal bytes (big-endian two's-complement unscaled values, at the column's scale) as a
    decimal128 array; None if one exceeds the column's precision."""
    precision, _ = t.decimal_shape
    limit = 10**precision
    unscaled = [None if v is None else int.from_bytes(v, "big", signed=True) for v in values]
    if any(u is not None and not -limit < u < limit for u in unscaled):
        return None
    if precision <= 18:
        ints = np.array([0 if u is None else u for u in unscaled], np.int64)
        words = np.empty((len(ints), 2), np.int64)
        words[:, 0], words[:, 1] = ints, ints >> 63  # 128-bit little-endian two's complement
        nulls = any(u is None for u in unscaled)
        mask = pa.array([u is not None for u in unscaled], pa.bool_()).buffers()[1] if nulls else None
        return pa.Array.from_buffers(t.arrow_type(), len(ints), [mask, pa.py_buffer(words.tobytes())])
    import decimal

    scale = t.decimal_shape[1]
    return pa.array(
        [None if u is None else decimal.Decimal(u).scaleb(-scale) for u in unscaled], t.arrow_type()
    )


def _rows(
    spec: TableSpec,
    key_cols: dict[str, pa.Array],
    value_cols: dict[str, pa.Array],
    tombstone: pa.Array,
    opts: Any,
    n: int,
    line_numbers: np.ndarray,
    kafka: list[pa.Array],
) -> tuple[np.ndarray, pa.Array, list[pa.Array], list[pa.Array]] | None:
    """The records: ``+U`` with the value's columns and the key's, ``-D`` (the key only) for a null value
    (``tombstone``)."""
    prefix = opts.key_fields_prefix
    op = pc.if_else(tombstone, "-D", "+U")
    arrays = []
    for column in spec.columns:
        key = key_cols.get(prefix + column.name) if column.name in spec.primary_key else None
        value = value_cols.get(column.name)
        if column.name in spec.primary_key:
            if key is None or key.null_count:
                return None
            if value is not None:
                if opts.value_fields_include == "EXCEPT_KEY":
                    return None
                same = pc.or_(tombstone, pc.fill_null(pc.equal(key, value), False))
                if not pc.all(same).as_py():
                    return None  # a key field in the value that differs: the per-message path names it
            arrays.append(key)
            continue
        if value is None:
            value = pa.nulls(n, column.type.arrow_type())
        else:
            value = pc.if_else(tombstone, pa.scalar(None, value.type), value)
        if not column.nullable and pc.any(pc.and_(pc.is_null(value), pc.invert(tombstone))).as_py():
            return None
        arrays.append(value)
    return line_numbers, op, arrays, kafka
