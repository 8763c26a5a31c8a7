"""upsert-kafka's key and value formats (Flink's ``key.format`` / ``value.format``): json, csv, raw, avro and
avro-confluent.

A codec turns the bytes of a Kafka record's key or value into ``field name -> value`` in the plain JSON forms
every column type decodes (:meth:`changelake.types.DataType.decode_json`), and datagen's rows back into bytes.
In a landed upsert-kafka line the key and value of the ``json`` format are JSON objects (as before); those of
``csv`` are the CSV text; those of the binary formats (``raw``, ``avro``, ``avro-confluent``) are their bytes
in base64, as Kafka Connect's JSON converter writes bytes.

Avro is decoded by fastavro. The reader schema is the table's (derived as Flink's ``AvroSchemaConverter``
does: nullable columns are ``["null", T]`` with default null) or the schema file ``avro.schema-file``; the
writer schema is the reader's for plain binary, the embedded one for an object container, found by its
CRC-64-AVRO fingerprint for single-object encoding, and by its id (``<dir>/<id>.avsc`` or the registry's
``GET /schemas/ids/<id>``) for Confluent's wire format. fastavro resolves one to the other with Avro's rules:
a field the writer added is skipped, a field it dropped takes the reader's default.
"""

from __future__ import annotations

import base64
import binascii
import csv
import datetime as dt
import decimal
import io
import json
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro
import fastavro.schema

from changelake.errors import ChangelakeError, SpecError, short_repr
from changelake.inputs.formats.base import FieldError, json_kind, json_object, json_value
from changelake.source_options import PartOptions
from changelake.types import DataType

if TYPE_CHECKING:
    from changelake.spec import TableSpec

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONTAINER_MAGIC = b"Obj\x01"
CONFLUENT_MAGIC = 0
RAW_TYPES = {
    "BOOLEAN": "?",
    "TINYINT": "b",
    "SMALLINT": "h",
    "INT": "i",
    "BIGINT": "q",
    "FLOAT": "f",
    "DOUBLE": "d",
}
REGISTRY_TIMEOUT_S = 10.0


class SchemaRegistryError(ChangelakeError):
    """The schema registry could not be asked (not a bad record: the batch stops and nothing is written)."""


# --- the fields a part holds --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    """One field of a key or value format: its name there, the column it fills, the column's type."""

    name: str
    column: str
    type: DataType
    nullable: bool


def part_fields(spec: TableSpec, part: str, prefix: str, include: str) -> list[Field]:
    """The key's fields (the primary key, named with ``key.fields-prefix``) or the value's (every column, or
    the non-key ones under ``value.fields-include: EXCEPT_KEY``), in the table's order."""
    by_name = {c.name: c for c in spec.columns}
    if part == "key":
        return [Field(prefix + k, k, by_name[k].type, False) for k in spec.primary_key]
    return [
        Field(c.name, c.name, c.type, c.nullable and c.name not in spec.primary_key)
        for c in spec.columns
        if include == "ALL" or c.name not in spec.primary_key
    ]


# --- codecs -------------------------------------------------------------------------------------------------
class Codec:
    """One part's format: bytes (as the landed line carries them) <-> ``field -> plain JSON form``."""

    def __init__(self, part: str, fields: list[Field], opts: PartOptions):
        self.part, self.fields, self.opts = part, fields, opts

    def decode(self, data: Any) -> dict[str, Any]:
        """The fields of a non-null key or value; FieldError names the part (or ``part.field``)."""
        raise NotImplementedError

    def encode(self, row: dict[str, Any]) -> Any:
        """A row (column -> Python value) as the landed line carries this part."""
        raise NotImplementedError

    def _bytes(self, data: Any) -> bytes:
        if not isinstance(data, str):
            raise FieldError(
                self.part, f"expected the {self.opts.format} bytes in base64, got {json_kind(data)}"
            )
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise FieldError(self.part, f"{short_repr(data)} is not valid base64") from None


class JsonCodec(Codec):
    def decode(self, data: Any) -> dict[str, Any]:
        return json_object(data, self.part)

    def encode(self, row: dict[str, Any]) -> Any:
        return {f.name: json_value(row.get(f.column)) for f in self.fields}


class CsvCodec(Codec):
    """One CSV line of the fields in order (Flink's csv format): numbers and booleans as text, an empty field
    (or ``csv.null-literal``) null for any type but the strings, bytes in base64, temporal values ISO-8601."""

    def __init__(self, part: str, fields: list[Field], opts: PartOptions):
        super().__init__(part, fields, opts)
        self.delimiter = opts.get("csv.field-delimiter", ",") or ","
        self.quote = opts.get("csv.quote-character", '"') or '"'
        self.null = opts.get("csv.null-literal")

    def decode(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, str):
            raise FieldError(self.part, f"expected the CSV text, got {json_kind(data)}")
        if "\n" in data.rstrip("\r\n") or "\r" in data.rstrip("\r\n"):
            raise FieldError(self.part, "a CSV key or value is one line")
        try:
            rows = list(
                csv.reader([data.rstrip("\r\n")], delimiter=self.delimiter, quotechar=self.quote, strict=True)
            )
        except csv.Error as e:
            raise FieldError(self.part, f"malformed CSV: {e}") from None
        values = rows[0] if rows else []
        if len(values) != len(self.fields):
            names = [f.name for f in self.fields]
            raise FieldError(self.part, f"expected {len(names)} CSV fields {names}, got {len(values)}")
        return {f.name: self._value(f, v) for f, v in zip(self.fields, values, strict=True)}

    def _value(self, f: Field, text: str) -> Any:
        if self.null is not None and text == self.null:
            return None
        n = f.type.name
        if n in ("STRING", "CHAR"):
            return text
        if text == "":
            return None
        if n == "BOOLEAN":
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise FieldError(f"{self.part}.{f.name}", f"expected true or false, got {short_repr(text)}")
            return lowered == "true"
        if f.type.is_integer or n in ("FLOAT", "DOUBLE", "DECIMAL"):
            if n in ("FLOAT", "DOUBLE") and text in ("NaN", "Infinity", "-Infinity"):
                return text
            try:
                number = decimal.Decimal(text.strip())
            except decimal.InvalidOperation:
                raise FieldError(f"{self.part}.{f.name}", f"{short_repr(text)} is not a number") from None
            if not number.is_finite():
                raise FieldError(f"{self.part}.{f.name}", f"{short_repr(text)} is not a number")
            return number
        return text

    def encode(self, row: dict[str, Any]) -> Any:
        out = io.StringIO()
        writer = csv.writer(out, delimiter=self.delimiter, quotechar=self.quote, lineterminator="")
        null = "" if self.null is None else self.null
        writer.writerow([null if (v := row.get(f.column)) is None else _csv_text(v) for f in self.fields])
        return out.getvalue()


def _csv_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    plain = json_value(value)
    return plain if isinstance(plain, str) else str(plain)


class RawCodec(Codec):
    """Flink's raw format: the bytes are the one field's value (text in ``raw.charset``, bytes as they are,
    numbers in ``raw.endianness`` as Java writes them)."""

    def __init__(self, part: str, fields: list[Field], opts: PartOptions):
        super().__init__(part, fields, opts)
        self.field = fields[0]
        self.charset = opts.get("raw.charset", "UTF-8") or "UTF-8"
        self.order = "<" if opts.get("raw.endianness") == "little-endian" else ">"

    def decode(self, data: Any) -> dict[str, Any]:
        raw = self._bytes(data)
        f, n = self.field, self.field.type.name
        where = f"{self.part}.{f.name}"
        if n in ("STRING", "CHAR"):
            try:
                return {f.name: raw.decode(self.charset)}
            except UnicodeDecodeError as e:
                raise FieldError(where, f"not {self.charset} text at byte {e.start + 1}") from None
        if n in ("BYTES", "BINARY"):
            return {f.name: base64.b64encode(raw).decode()}
        code = self.order + RAW_TYPES[n]
        if len(raw) != struct.calcsize(code):
            raise FieldError(where, f"expected {struct.calcsize(code)} bytes for raw {n}, got {len(raw)}")
        (value,) = struct.unpack(code, raw)
        if n == "BOOLEAN" and raw not in (b"\x00", b"\x01"):
            raise FieldError(where, f"expected the byte 0 or 1 for raw BOOLEAN, got {raw[0]}")
        return {f.name: value}

    def encode(self, row: dict[str, Any]) -> Any:
        value, n = row.get(self.field.column), self.field.type.name
        if value is None:
            return None
        if n in ("STRING", "CHAR"):
            raw = str(value).encode(self.charset)
        elif n in ("BYTES", "BINARY"):
            raw = bytes(value)
        else:
            raw = struct.pack(self.order + RAW_TYPES[n], value)
        return base64.b64encode(raw).decode()


def avro_type(t: DataType) -> Any:
    """A column type as Avro, as Flink's AvroSchemaConverter maps it (DECIMAL as bytes, TIMESTAMP of precision
    up to 3 as timestamp-millis, finer as timestamp-micros; TIME as time-millis)."""
    n = t.name
    simple = {"BOOLEAN": "boolean", "TINYINT": "int", "SMALLINT": "int", "INT": "int", "BIGINT": "long",
              "FLOAT": "float", "DOUBLE": "double", "STRING": "string", "CHAR": "string", "BYTES": "bytes",
              "BINARY": "bytes"}  # fmt: skip
    if n in simple:
        return simple[n]
    if n == "DECIMAL":
        precision, scale = t.decimal_shape
        return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    if n == "DATE":
        return {"type": "int", "logicalType": "date"}
    if n == "TIME":
        return {"type": "int", "logicalType": "time-millis"}
    millis = t.precision is not None and t.precision <= 3
    return {"type": "long", "logicalType": "timestamp-millis" if millis else "timestamp-micros"}


def table_schema(fields: list[Field], name: str) -> dict:
    """The Avro record of a part's fields; nullable ones are ``["null", T]`` with default null."""
    return {
        "type": "record",
        "name": name,
        "namespace": "org.apache.flink.avro.generated",
        "fields": [
            {"name": f.name, "type": ["null", avro_type(f.type)], "default": None}
            if f.nullable
            else {"name": f.name, "type": avro_type(f.type)}
            for f in fields
        ],
    }


def _parse_avro(schema: Any, where: str) -> dict:
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as e:  # fastavro raises several kinds for a schema it cannot read
        raise SpecError(f"{where}: not an Avro schema: {short_repr(str(e), 200)}") from None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise SpecError(f"{where}: the schema must be an Avro record")
    return parsed


def record_schema(schema: Any) -> dict:
    """fastavro's parsed form of an Avro record schema (ValueError for any other schema)."""
    parsed = fastavro.parse_schema(schema)
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise ValueError("the schema is not an Avro record")
    return parsed


def _read_schema_file(path: str, where: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise SpecError(f"{where}: cannot read the Avro schema file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise SpecError(f"{where}: the Avro schema file {path} is not JSON: {e}") from None


def _fingerprint(schema: dict) -> bytes:
    canonical = fastavro.schema.to_parsing_canonical_form(schema)
    return bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))


class AvroCodec(Codec):
    """Avro binary (Flink's avro format), single-object encoding, or an object container of one record."""

    def __init__(self, part: str, fields: list[Field], opts: PartOptions, table: str):
        super().__init__(part, fields, opts)
        where = f"{table}: {part}"
        file = opts.get("avro.schema-file")
        self.reader = _parse_avro(
            _read_schema_file(file, where) if file else table_schema(fields, f"{part}_record"), where
        )
        self.encoding = opts.get("avro.encoding", "binary") or "binary"
        self.types = {f.name: f.type for f in fields}
        self._resolved: dict[str, dict] = {}  # writer's record name -> the reader named so
        self._lock = threading.Lock()
        self.known: dict[bytes, dict] = {_fingerprint(self.reader): self.reader}
        directory = opts.get("avro.schema-dir")
        if directory:
            for path in sorted(Path(directory).glob("*.avsc")):
                schema = _parse_avro(_read_schema_file(str(path), where), f"{where}: {path}")
                self.known[_fingerprint(schema)] = schema

    def decode(self, data: Any) -> dict[str, Any]:
        raw = self._bytes(data)
        if self.encoding == "container":
            return self._container(raw)
        if self.encoding == "single-object":
            if raw[:2] != SINGLE_OBJECT_MAGIC or len(raw) < 10:
                raise FieldError(
                    self.part, "not Avro single-object encoding (it starts with C3 01 and a fingerprint)"
                )
            writer = self.known.get(raw[2:10])
            if writer is None:
                raise FieldError(
                    self.part, f"no known Avro schema has the fingerprint {raw[2:10].hex()} (CRC-64-AVRO)"
                )
            return read_avro(self, raw[10:], writer)
        return read_avro(self, raw, self.reader)

    def _container(self, raw: bytes) -> dict[str, Any]:
        if raw[:4] != CONTAINER_MAGIC:
            raise FieldError(self.part, "not an Avro object container (it starts with 'Obj' 01)")
        try:
            reader = fastavro.reader(io.BytesIO(raw))
            writer = record_schema(reader.writer_schema)
            records = list(fastavro.reader(io.BytesIO(raw), self.reader_for(writer)))
        except FieldError:
            raise
        except Exception as e:
            raise FieldError(self.part, f"cannot read the Avro object container: {_avro_error(e)}") from None
        if len(records) != 1 or not isinstance(records[0], dict):
            raise FieldError(self.part, f"an Avro object container of one record, got {len(records)}")
        return self.plain(records[0])

    def reader_for(self, writer: dict) -> dict:
        """The reader schema named as the writer's record: Avro resolves records only of the same name."""
        name = writer.get("name")
        if writer.get("type") != "record" or not isinstance(name, str):
            raise FieldError(self.part, f"the writer schema is a {writer.get('type')}, not a record")
        if name == self.reader["name"]:
            return self.reader
        with self._lock:
            reader = self._resolved.get(name)
            if reader is None:
                renamed = {k: v for k, v in self.reader.items() if not k.startswith("__")}
                renamed["name"] = name
                renamed.pop("namespace", None)
                reader = self._resolved[name] = record_schema(renamed)
        return reader

    def plain(self, record: dict) -> dict[str, Any]:
        """Avro values (fastavro's Python objects) as the plain JSON forms of the fields' column types."""
        out = {}
        for name, value in record.items():
            t = self.types.get(name)
            out[name] = value if t is None or value is None else _plain(t, value, f"{self.part}.{name}")
        return out

    def encode(self, row: dict[str, Any]) -> Any:
        record = {f.name: _avro_value(f.type, row.get(f.column)) for f in self.fields}
        buf = io.BytesIO()
        if self.encoding == "container":
            fastavro.writer(buf, self.reader, [record])
        else:
            if self.encoding == "single-object":
                buf.write(SINGLE_OBJECT_MAGIC + _fingerprint(self.reader))
            fastavro.schemaless_writer(buf, self.reader, record)
        return base64.b64encode(buf.getvalue()).decode()


def read_avro(codec: AvroCodec, body: bytes, writer: dict) -> dict[str, Any]:
    """One Avro binary record written with ``writer``, resolved to the codec's reader schema."""
    reader = codec.reader if writer is codec.reader else codec.reader_for(writer)
    buf = io.BytesIO(body)
    try:
        record = fastavro.schemaless_reader(buf, writer, reader)
    except Exception as e:
        raise FieldError(codec.part, f"not Avro of the expected schema: {_avro_error(e)}") from None
    if buf.tell() != len(body):
        raise FieldError(codec.part, f"{len(body) - buf.tell()} bytes after the Avro record")
    if not isinstance(record, dict):
        raise FieldError(codec.part, "the Avro datum is not a record")
    return codec.plain(record)


def _avro_error(e: Exception) -> str:
    text = f"{type(e).__name__}: {e}"
    if type(e).__name__ == "SchemaResolutionError":
        text = "the writer schema does not resolve to the reader schema (Avro's rules)"
        if "missing" in str(e).lower() or "default" in str(e).lower():
            text += f": {str(e)[:200]}"
    elif isinstance(e, EOFError | StopIteration):
        text = "the bytes end inside the record"
    return short_repr(text, 300)


class ConfluentCodec(AvroCodec):
    """Confluent's wire format: byte 0, the schema id (4 bytes, big-endian), the Avro binary record; the
    writer schema by id from ``<avro-confluent.schema-dir>/<id>.avsc`` or the registry at ``avro-confluent.url``."""

    def __init__(self, part: str, fields: list[Field], opts: PartOptions, table: str):
        super().__init__(part, fields, PartOptions("avro", ()), table)
        self.opts = opts
        self.registry = Registry(opts.get("avro-confluent.url"), opts.get("avro-confluent.schema-dir"))

    def decode(self, data: Any) -> dict[str, Any]:
        raw = self._bytes(data)
        if len(raw) < 5 or raw[0] != CONFLUENT_MAGIC:
            raise FieldError(self.part, "not Confluent's wire format (magic byte 0 and a 4-byte schema id)")
        schema_id = int.from_bytes(raw[1:5], "big")
        writer = self.registry.schema(schema_id)
        if writer is None:
            raise FieldError(self.part, f"schema id {schema_id} is not in the schema registry")
        return read_avro(self, raw[5:], writer)

    def encode(self, row: dict[str, Any]) -> Any:
        schema_id = self.registry.id_of(self.reader)
        record = {f.name: _avro_value(f.type, row.get(f.column)) for f in self.fields}
        buf = io.BytesIO()
        buf.write(bytes([CONFLUENT_MAGIC]) + schema_id.to_bytes(4, "big"))
        fastavro.schemaless_writer(buf, self.reader, record)
        return base64.b64encode(buf.getvalue()).decode()


class Registry:
    """Writer schemas by Confluent schema id: a directory of ``<id>.avsc`` first, then the registry's REST API
    (``GET <url>/schemas/ids/<id>``). Found schemas are cached; an id the registry does not know (404) is a
    bad record, a registry that cannot be asked stops the batch (:class:`SchemaRegistryError`)."""

    def __init__(self, url: str | None, directory: str | None):
        self.url, self.directory = url, directory
        self.cache: dict[int, dict] = {}
        self.lock = threading.Lock()

    def schema(self, schema_id: int) -> dict | None:
        with self.lock:
            if schema_id in self.cache:
                return self.cache[schema_id]
        found = self._lookup(schema_id)
        if found is None:
            return None  # not cached: an id registered later is found by the next batch of a warm process
        with self.lock:
            return self.cache.setdefault(schema_id, found)

    def _lookup(self, schema_id: int) -> dict | None:
        if self.directory:
            path = Path(self.directory) / f"{schema_id}.avsc"
            if path.is_file():
                return self._parse(_read_text(path), f"{path}")
        if not self.url:
            return None
        address = f"{self.url.rstrip('/')}/schemas/ids/{schema_id}"
        try:
            with urllib.request.urlopen(address, timeout=REGISTRY_TIMEOUT_S) as response:  # noqa: S310 - http(s) checked
                body = json.loads(response.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise SchemaRegistryError(f"schema registry {address}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise SchemaRegistryError(f"schema registry {address}: {getattr(e, 'reason', e)}") from None
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise SchemaRegistryError(f"schema registry {address}: the answer has no 'schema' string")
        if body.get("schemaType", "AVRO") != "AVRO":
            raise FieldError(None, f"schema id {schema_id} is a {body['schemaType']} schema, not Avro")
        return self._parse(body["schema"], address)

    def _parse(self, text: str, where: str) -> dict:
        try:
            return record_schema(json.loads(text))
        except Exception as e:
            raise SchemaRegistryError(f"{where}: not an Avro schema: {short_repr(str(e), 200)}") from None

    def id_of(self, schema: dict) -> int:
        """The id of ``schema`` in the directory, adding it as the next id if it is not there (datagen)."""
        if not self.directory:
            raise ChangelakeError("datagen writes avro-confluent records only with avro-confluent.schema-dir")
        directory = Path(self.directory)
        directory.mkdir(parents=True, exist_ok=True)
        canonical = fastavro.schema.to_parsing_canonical_form(schema)
        ids = []
        for path in directory.glob("*.avsc"):
            if path.stem.isdigit():
                ids.append(int(path.stem))
                other = record_schema(json.loads(_read_text(path)))
                if fastavro.schema.to_parsing_canonical_form(other) == canonical:
                    return int(path.stem)
        new = max(ids, default=0) + 1
        plain = {k: v for k, v in schema.items() if not k.startswith("__")}
        (directory / f"{new}.avsc").write_text(json.dumps(plain, indent=2) + "\n")
        return new


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise SchemaRegistryError(f"cannot read {path}: {e.strerror or e}") from None


# --- Avro values <-> plain JSON forms -----------------------------------------------------------------------
def _plain(t: DataType, value: Any, where: str) -> Any:
    """fastavro's value for a column of type ``t`` as the plain JSON form ``t.decode_json`` reads."""
    n = t.name
    if isinstance(value, dt.datetime):
        if n not in ("TIMESTAMP", "TIMESTAMP_LTZ"):
            raise FieldError(where, f"an Avro timestamp for a {t} column")
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
            if n == "TIMESTAMP":
                value = value.replace(tzinfo=None)
        elif n == "TIMESTAMP_LTZ":
            value = value.replace(tzinfo=dt.UTC)
        return value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        if n not in ("BYTES", "BINARY"):
            raise FieldError(where, f"Avro bytes for a {t} column")
        return base64.b64encode(value).decode()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, float) and n == "DECIMAL":
        return decimal.Decimal(repr(value))
    if isinstance(value, dict | list):
        raise FieldError(where, f"an Avro {json_kind(value)} for a {t} column")
    return value


def _avro_value(t: DataType, value: Any) -> Any:
    """A Python row value as fastavro writes the column's Avro type."""
    if value is None:
        return None
    n = t.name
    if n == "TIMESTAMP_LTZ" and isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    if n == "TIME" and isinstance(value, str):
        return dt.time.fromisoformat(value)
    if n == "DECIMAL" and not isinstance(value, decimal.Decimal):
        return decimal.Decimal(str(value))
    return value


# --- building a table's codecs ------------------------------------------------------------------------------
def make_codec(spec: TableSpec, part: str, opts: PartOptions, prefix: str, include: str) -> Codec:
    """The codec of one part of a table's upsert-kafka records; SpecError if the table cannot use it."""
    fields = part_fields(spec, part, prefix, include)
    where = f"{spec.full_name}: {part}.format {opts.format}"
    if opts.format == "json":
        return JsonCodec(part, fields, opts)
    if opts.format == "csv":
        return CsvCodec(part, fields, opts)
    if opts.format == "raw":
        if len(fields) != 1:
            raise SpecError(
                f"{where}: the raw format holds exactly one field, but the {part} has {[f.name for f in fields]}"
                + (" (use value.fields-include: EXCEPT_KEY)" if part == "value" else "")
            )
        n = fields[0].type.name
        if n not in RAW_TYPES and n not in ("STRING", "CHAR", "BYTES", "BINARY"):
            raise SpecError(
                f"{where}: the raw format does not support {fields[0].type} (column {fields[0].column})"
            )
        return RawCodec(part, fields, opts)
    if opts.format == "avro":
        return AvroCodec(part, fields, opts, spec.full_name)
    return ConfluentCodec(part, fields, opts, spec.full_name)


_CACHE: dict[tuple, tuple[Codec, Codec]] = {}
_CACHE_LOCK = threading.Lock()


def codecs_for(
    spec: TableSpec, key_opts: PartOptions, value_opts: PartOptions, prefix: str, include: str
) -> tuple[Codec, Codec]:
    """The (key, value) codecs of a table, built once per table shape and options in a process (schemas
    parsed once, the registry's answers cached)."""
    shape = (spec.full_name, tuple((c.name, str(c.type), c.nullable) for c in spec.columns), spec.primary_key)
    key = (shape, key_opts, value_opts, prefix, include)
    with _CACHE_LOCK:
        found = _CACHE.get(key)
    if found is None:
        found = (
            make_codec(spec, "key", key_opts, prefix, include),
            make_codec(spec, "value", value_opts, prefix, include),
        )
        with _CACHE_LOCK:
            if len(_CACHE) >= 64:
                _CACHE.clear()
            found = _CACHE.setdefault(key, found)
    return found
