"""Avro as Iceberg writes it (manifest lists, manifests), read in plain Python for the reads without a JVM.

Only what Iceberg's manifests use: the object container format with the null or deflate codec, records,
unions, arrays, maps and primitives; a field the caller does not ask for is skipped, not decoded. Anything
else raises :class:`Unsupported` and the reader goes through pyiceberg instead.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any


class Unsupported(Exception):
    """Something the direct way does not read; the pyiceberg way takes over."""


class _Buf:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def long(self) -> int:
        data, pos = self.data, self.pos
        b = data[pos]
        n, shift = b & 0x7F, 7
        while b & 0x80:
            pos += 1
            b = data[pos]
            n |= (b & 0x7F) << shift
            shift += 7
        self.pos = pos + 1
        return (n >> 1) ^ -(n & 1)

    def take(self, size: int) -> bytes:
        start = self.pos
        self.pos += size
        return self.data[start : self.pos]

    def blocks(self) -> Iterator[int]:
        """Item counts of an Avro array or map, block by block (a negative count carries a byte size)."""
        while True:
            count = self.long()
            if count == 0:
                return
            if count < 0:
                self.long()
                count = -count
            yield count


_AVRO_PRIMITIVES: dict[str, Callable[[_Buf], Any]] = {
    "null": lambda b: None,
    "boolean": lambda b: b.take(1) == b"\x01",
    "int": _Buf.long,
    "long": _Buf.long,
    "float": lambda b: struct.unpack("<f", b.take(4))[0],
    "double": lambda b: struct.unpack("<d", b.take(8))[0],
    "bytes": lambda b: b.take(b.long()),
    "string": lambda b: b.take(b.long()).decode("utf-8"),
}


def _skip_long(b: _Buf) -> None:
    data, pos = b.data, b.pos
    while data[pos] & 0x80:
        pos += 1
    b.pos = pos + 1


def _skip_bytes(b: _Buf) -> None:
    size = b.long()
    b.pos += size


_AVRO_SKIPS: dict[str, Callable[[_Buf], None]] = {
    "null": lambda b: None,
    "boolean": lambda b: setattr(b, "pos", b.pos + 1),
    "int": _skip_long,
    "long": _skip_long,
    "float": lambda b: setattr(b, "pos", b.pos + 4),
    "double": lambda b: setattr(b, "pos", b.pos + 8),
    "bytes": _skip_bytes,
    "string": _skip_bytes,
}


def _avro_skipper(schema: Any, named: dict[str, Callable[[_Buf], None]]) -> Callable[[_Buf], None]:
    """A function that moves past one value of an Avro schema without building it."""
    if isinstance(schema, str):
        return _AVRO_SKIPS.get(schema) or (lambda b: named[schema](b))
    if isinstance(schema, list):
        branches = [_avro_skipper(s, named) for s in schema]
        return lambda b: branches[b.long()](b)
    kind = schema["type"]
    if kind == "record":
        fields = [_avro_skipper(f["type"], named) for f in schema["fields"]]

        def record(b: _Buf) -> None:
            for skip in fields:
                skip(b)

        named[schema.get("name", "")] = record
        return record
    if kind in ("array", "map"):
        item = _avro_skipper(schema["items"] if kind == "array" else schema["values"], named)

        def blocks(b: _Buf) -> None:
            while True:
                count = b.long()
                if count == 0:
                    return
                if count < 0:  # the block carries its byte size: jump over it
                    b.pos += b.long()
                    continue
                for _ in range(count):
                    if kind == "map":
                        _skip_bytes(b)
                    item(b)

        return blocks
    if kind in ("fixed", "enum"):
        size = schema.get("size")
        skip = (lambda b: setattr(b, "pos", b.pos + size)) if kind == "fixed" else _skip_long
        named[schema["name"]] = skip
        return skip
    return _avro_skipper(kind, named)


def _avro_decoder(
    schema: Any, named: dict[str, Callable[[_Buf], Any]], fields: dict[str, Any] | None = None
) -> Callable[[_Buf], Any]:
    """A decoding function for an Avro writer schema (logical types are left as their base values).

    ``fields`` projects a record: ``{name: None}`` decodes that field whole, ``{name: {...}}`` projects it in
    turn, and every other field is skipped unbuilt (a manifest's column statistics are most of its bytes).
    """
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        return lambda b: named[schema](b)
    if isinstance(schema, list):
        branches = [_avro_decoder(s, named, fields) for s in schema]
        return lambda b: branches[b.long()](b)
    kind = schema["type"]
    if kind == "record":
        steps: list[tuple[str | None, Callable[[_Buf], Any]]] = []
        for f in schema["fields"]:
            if fields is not None and f["name"] not in fields:
                steps.append((None, _avro_skipper(f["type"], {})))
            else:
                steps.append((f["name"], _avro_decoder(f["type"], named, fields and fields[f["name"]])))

        def record(b: _Buf) -> dict[str, Any]:
            out = {}
            for name, step in steps:
                value = step(b)
                if name is not None:
                    out[name] = value
            return out

        if fields is None:
            named[schema.get("name", "")] = record
        return record
    if kind == "array":
        item = _avro_decoder(schema["items"], named)
        return lambda b: [item(b) for count in b.blocks() for _ in range(count)]
    if kind == "map":
        value = _avro_decoder(schema["values"], named)
        read_key = _AVRO_PRIMITIVES["string"]
        return lambda b: {read_key(b): value(b) for count in b.blocks() for _ in range(count)}
    if kind == "fixed":
        size = schema["size"]
        reader = lambda b: b.take(size)  # noqa: E731
        named[schema["name"]] = reader
        return reader
    if kind == "enum":
        symbols = schema["symbols"]
        reader = lambda b: symbols[b.long()]  # noqa: E731
        named[schema["name"]] = reader
        return reader
    return _avro_decoder(kind, named)


def read_avro(data: bytes, fields: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The records of an Avro object container file (codecs null and deflate; zstandard if installed),
    projected to ``fields`` (see :func:`_avro_decoder`)."""
    if data[:4] != b"Obj\x01":
        raise Unsupported("not an Avro object container file")
    buf = _Buf(data, 4)
    meta = {buf.take(buf.long()).decode(): buf.take(buf.long()) for c in buf.blocks() for _ in range(c)}
    buf.take(16)  # sync marker
    decode = _avro_decoder(json.loads(meta["avro.schema"]), {}, fields)
    codec = meta.get("avro.codec", b"null").decode()
    out: list[dict[str, Any]] = []
    while buf.pos < len(data):
        count = buf.long()
        block = buf.take(buf.long())
        buf.take(16)
        if codec == "deflate":
            block = zlib.decompress(block, -15)
        elif codec == "zstandard":
            try:
                import zstandard
            except ImportError:
                raise Unsupported("zstandard Avro codec without the zstandard module") from None
            block = zstandard.ZstdDecompressor().decompressobj().decompress(block)
        elif codec != "null":
            raise Unsupported(f"Avro codec {codec}")
        block_buf = _Buf(block)
        out += [decode(block_buf) for _ in range(count)]
    return out
