"""upsert-kafka batches landed as Avro object container files (``<batch_id>.avro``) of Kafka records.

Each container record is one Kafka record: ``key`` and ``value`` (bytes or string, nullable), and optionally
``topic``, ``partition``, ``offset`` and ``timestamp`` (a long of epoch milliseconds, or a timestamp-millis).
A container is read by turning it, in memory, into the JSON lines the upsert-kafka reader decodes (the key and
value as :mod:`changelake.inputs.formats.kafka_codecs` expects them in a line), one line per record in order.
Every later step is then the JSON-lines path's: record *n* of the container is line *n* in errors and dead
letters, Kafka offsets are claimed and deduplicated alike, and the column-wise path applies.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import fastavro

from changelake.errors import BadRecordError, ChangelakeError, short_repr
from changelake.inputs.landed import open_landed

if TYPE_CHECKING:
    from changelake.spec import TableSpec

SUFFIX = ".avro"
MAGIC = b"Obj\x01"
FIELDS = ("key", "value", "topic", "partition", "offset", "timestamp")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def is_container(path: str | PurePath) -> bool:
    """Whether a landed file is read as an Avro container (by its name: ``<batch_id>.avro``)."""
    return str(path).endswith(SUFFIX)


#: The header of every Avro object container file (the Avro specification's "Object Container Files").
_HEADER = fastavro.parse_schema(
    {
        "type": "record",
        "name": "org.apache.avro.file.Header",
        "fields": [
            {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 4}},
            {"name": "meta", "type": {"type": "map", "values": "bytes"}},
            {"name": "sync", "type": {"type": "fixed", "name": "Sync", "size": 16}},
        ],
    }
)


def incomplete(fd: int, size: int) -> str | None:
    """Why a landed container is not complete yet (the completion rule: it ends with the sync marker its
    header names, as every block does), or None. A file that is no container is complete: its read says so."""
    if size < len(MAGIC):
        return "incomplete: shorter than an Avro container's header"
    if os.pread(fd, len(MAGIC), 0) != MAGIC:
        return None
    with os.fdopen(os.dup(fd), "rb") as fh:
        fh.seek(0)
        try:
            header = fastavro.schemaless_reader(fh, _HEADER, None)
        except Exception:  # cut short inside the header
            return "incomplete: the Avro container's header is not all there yet"
        end = fh.tell()
    if not isinstance(header, dict) or size < end or os.pread(fd, 16, size - 16) != header.get("sync"):
        return "incomplete: does not end with the Avro container's sync marker yet"
    return None


def check_format(path: str | PurePath, fmt: str) -> None:
    """An Avro container batch is read only as upsert-kafka records."""
    if is_container(path) and fmt != "upsert-kafka":
        raise ChangelakeError(
            f"{path}: an Avro container batch holds Kafka records, read as upsert-kafka, not {fmt}"
        )


def as_json_lines(path: str | PurePath, spec: TableSpec) -> bytes:
    """The container's Kafka records as upsert-kafka JSON lines (``key``/``value`` in the table's formats)."""
    line = line_renderer(spec)
    lines: list[bytes] = []
    try:
        with open_landed(path if not isinstance(path, str) else Path(path)) as fh:
            if fh.read(4) != MAGIC:
                raise BadRecordError(
                    str(path), 1, None, "not an Avro object container file (it starts with 'Obj' 01)"
                )
            fh.seek(0)
            try:
                reader = fastavro.reader(fh)
                _check_schema(reader.writer_schema, str(path))
                for number, record in enumerate(reader, start=1):
                    if not isinstance(record, dict):  # the schema is a record: fastavro gives dicts
                        raise BadRecordError(str(path), number, None, "not a record")
                    lines.append(line(record, str(path), number))
            except (BadRecordError, ChangelakeError):
                raise
            except Exception as e:  # a corrupt block: nothing after it can be read
                at = len(lines) + 1
                reason = f"cannot read the Avro container: {short_repr(f'{type(e).__name__}: {e}', 200)}"
                raise BadRecordError(str(path), at, None, reason) from None
    except OSError as e:
        raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None
    return b"".join(lines)


def line_renderer(spec: TableSpec):
    """``render(record, path, number)``: a Kafka record (a mapping of :data:`FIELDS`) as the upsert-kafka JSON
    line the table's key and value formats read, with its newline (a Kafka topic source renders its records so
    too: :mod:`changelake.inputs.kafka`)."""
    opts = spec.source_options
    render = {"key": _renderer(opts.key_format.format), "value": _renderer(opts.value_format.format)}
    return lambda record, path, number: _line(record, render, path, number)


def record_lines(
    spec: TableSpec,
    topic: str,
    partition: int,
    offsets: list[int],
    keys: list[bytes | None],
    values: list[bytes | None],
    timestamps: list[int | None],
) -> list[bytes]:
    """The upsert-kafka lines (without their newlines) of one topic-partition's records, byte for byte what
    :func:`line_renderer` gives for each record with all six :data:`FIELDS`, built in one pass over the
    client's lists: no mapping, no ``json.dumps`` and no text decoded and encoded again per record (that was
    70% of what a topic range cost beyond a landed file's, profiled). A JSON key or value is its bytes with
    line breaks as spaces (the text round trip of :func:`_json_text` leaves every other byte as it is)."""
    opts = spec.source_options
    key_text, value_text = _part_bytes(opts.key_format.format), _part_bytes(opts.value_format.format)
    # A topic name has no %, but the layout is %-formatted: it must not depend on that.
    quoted = json.dumps(topic).encode().replace(b"%", b"%%")
    layout = (
        b'{"key": %b, "value": %b, "topic": '
        + quoted
        + b', "partition": '
        + b"%d" % partition
        + b', "offset": %d, "timestamp": %b}'
    )
    return [
        layout % (key_text(key), value_text(value), offset, b"null" if ts is None else b"%d" % ts)
        for offset, key, value, ts in zip(offsets, keys, values, timestamps, strict=True)
    ]


def _part_bytes(fmt: str):
    """How a key or value's bytes (None: null) appear in a line, as bytes (:func:`_renderer`'s text)."""
    if fmt == "json":
        return _json_bytes
    render = _renderer(fmt)
    return lambda raw: b"null" if raw is None else render(raw).encode("utf-8", "surrogateescape")


def _json_bytes(raw: bytes | None) -> bytes:
    return b"null" if raw is None else raw.replace(b"\r", b" ").replace(b"\n", b" ")


def _check_schema(schema: Any, path: str) -> None:
    fields = {f["name"] for f in schema.get("fields", [])} if isinstance(schema, dict) else set()
    if schema.get("type") != "record" or not {"key", "value"} <= fields:
        raise BadRecordError(
            path,
            1,
            None,
            "an Avro container batch holds Kafka records: a record schema with key and value fields",
        )


def _renderer(fmt: str):
    """How a key or value's bytes appear in a JSON line for its format."""
    if fmt == "json":
        return lambda raw: _json_text(raw)
    if fmt == "csv":
        return lambda raw: json.dumps(_text(raw))
    return lambda raw: json.dumps(base64.b64encode(raw if isinstance(raw, bytes) else raw.encode()).decode())


def _text(raw: bytes | str) -> str:
    if isinstance(raw, str):
        return raw
    return raw.decode("utf-8", "surrogateescape")


def _json_text(raw: bytes | str) -> str:
    """A JSON key or value as it is: the line's parser checks it (a line break becomes a space, which JSON
    reads as the same whitespace; inside a string a raw line break is refused either way)."""
    return _text(raw).replace("\r", " ").replace("\n", " ")


def _line(record: dict, render: dict, path: str, number: int) -> bytes:
    parts = []
    for name in FIELDS:
        if name not in record:
            continue
        value = record[name]
        if value is None:
            text = "null"
        elif name in ("key", "value"):
            if not isinstance(value, bytes | str):
                raise BadRecordError(path, number, name, "expected bytes or a string in the Avro container")
            text = render[name](value)
        elif name == "timestamp" and isinstance(value, dt.datetime):
            text = str((value - _EPOCH) // dt.timedelta(milliseconds=1))
        else:
            text = json.dumps(value)
        parts.append(f'"{name}": {text}')
    return ("{" + ", ".join(parts) + "}\n").encode("utf-8", "surrogateescape")
