"""Pluggable batch readers: turn a landed file into typed changelog records.

A reader yields a :class:`DecodedBatch`: an Arrow table with ``_seq`` (the record's position in the batch,
file then line order), ``_op`` (``+I``, ``-U``, ``+U``, ``-D``) and the table's columns in storage types.
Any problem raises :class:`BadRecordError` naming file, line and field, before anything is written.

Formats: ``changelog-json`` (JSON lines, ``{"op", "data"}`` or positional ``{"rowkind", "fields"}``) and
``changelog-parquet`` (an ``op`` column plus the row columns). Register more with :func:`register_reader`.
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake.errors import BadRecordError, ChangelakeError
from changelake.spec import TableSpec

OPS = ("+I", "-U", "+U", "-D")
_INT_BOUNDS = {"TINYINT": (-128, 127), "SMALLINT": (-32768, 32767), "INT": (-(2**31), 2**31 - 1)}


@dataclass
class DecodedBatch:
    """Typed records of one batch, in batch order."""

    records: pa.Table  # _seq, _op, <columns>

    @property
    def num_records(self) -> int:
        return self.records.num_rows

    def op_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(OPS, 0)
        for row in pc.value_counts(self.records.column("_op")).to_pylist():
            counts[row["values"]] = row["counts"]
        return counts


def batch_arrow_schema(spec: TableSpec) -> pa.Schema:
    return pa.schema(
        [pa.field("_seq", pa.int64(), False), pa.field("_op", pa.string(), False)]
        + [pa.field(c.name, c.type.arrow_type()) for c in spec.columns]
    )


Reader = Callable[[Path, TableSpec, int], pa.Table]
_READERS: dict[str, Reader] = {}


def register_reader(name: str, reader: Reader) -> None:
    """Register a reader ``(path, spec, first_seq) -> Arrow table`` under a format name."""
    _READERS[name] = reader


def reader_names() -> list[str]:
    return sorted(_READERS)


def format_for(path: Path, spec: TableSpec) -> str:
    """The input format of a landed file: the table's ``source.format``, else by file extension."""
    configured = spec.source.get("format")
    if configured:
        return str(configured)
    if path.suffix == ".parquet":
        return "changelog-parquet"
    return "changelog-json"


def read_batch(paths: list[Path], spec: TableSpec, fmt: str | None = None) -> DecodedBatch:
    """Decode the files of one batch (in the given order) into one DecodedBatch."""
    tables = []
    seq = 0
    for path in paths:
        name = fmt or format_for(path, spec)
        if name not in _READERS:
            raise ChangelakeError(f"{path}: unknown input format '{name}'; known: {reader_names()}")
        table = _READERS[name](path, spec, seq)
        seq += table.num_rows
        tables.append(table)
    schema = batch_arrow_schema(spec)
    if not tables:
        return DecodedBatch(schema.empty_table())
    return DecodedBatch(pa.concat_tables([t.cast(schema) for t in tables]))


def _check_row(path: Path, line: int, op: str, values: list, spec: TableSpec) -> None:
    """Primary-key values must be present; NOT NULL columns too, except on deletes (only the key matters)."""
    for col, value in zip(spec.columns, values, strict=True):
        if value is None and (col.name in spec.primary_key or (not col.nullable and op != "-D")):
            what = "primary key" if col.name in spec.primary_key else "NOT NULL"
            raise BadRecordError(str(path), line, col.name, f"{what} column is missing or null")


def read_changelog_json(path: Path, spec: TableSpec, first_seq: int = 0) -> pa.Table:
    """Read JSON lines ``{"op": "+I", "data": {...}}`` or ``{"rowkind": "+I", "fields": [...]}``."""
    names = spec.column_names
    index = {n: i for i, n in enumerate(names)}
    decoders = [c.type.decode_json for c in spec.columns]
    columns: list[list] = [[] for _ in names]
    ops: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line, parse_float=decimal.Decimal)
            except json.JSONDecodeError as e:
                raise BadRecordError(
                    str(path), line_no, None, f"malformed JSON: {e.msg} at column {e.colno}"
                ) from None
            if not isinstance(obj, dict):
                raise BadRecordError(str(path), line_no, None, "expected a JSON object per line")
            if "rowkind" in obj or "fields" in obj:
                op, raw = obj.get("rowkind"), obj.get("fields")
                op_field, data_field = "rowkind", "fields"
                if not isinstance(raw, list):
                    raise BadRecordError(
                        str(path), line_no, "fields", "expected a JSON array in column order"
                    )
                if len(raw) != len(names):
                    raise BadRecordError(
                        str(path),
                        line_no,
                        "fields",
                        f"expected {len(names)} values {list(names)}, got {len(raw)}",
                    )
                pairs = list(zip(names, raw, strict=True))
            else:
                op, raw = obj.get("op"), obj.get("data")
                op_field, data_field = "op", "data"
                if not isinstance(raw, dict):
                    raise BadRecordError(
                        str(path), line_no, "data", "expected a JSON object with the row's columns"
                    )
                pairs = list(raw.items())
            extra = set(obj) - {op_field, data_field}
            if extra:
                raise BadRecordError(str(path), line_no, sorted(extra)[0], "unknown top-level field")
            if op not in OPS:
                raise BadRecordError(
                    str(path), line_no, op_field, f"unknown op {op!r}; expected one of {list(OPS)}"
                )
            values: list = [None] * len(names)
            for name, value in pairs:
                i = index.get(name)
                if i is None:
                    raise BadRecordError(
                        str(path), line_no, name, f"unknown column; table columns are {list(names)}"
                    )
                try:
                    values[i] = decoders[i](value)
                except ValueError as e:
                    raise BadRecordError(str(path), line_no, name, str(e)) from None
            _check_row(path, line_no, op, values, spec)
            ops.append(op)
            for i, v in enumerate(values):
                columns[i].append(v)
    n = len(ops)
    arrays = [pa.array(range(first_seq, first_seq + n), pa.int64()), pa.array(ops, pa.string())]
    arrays += [pa.array(col, c.type.arrow_type()) for col, c in zip(columns, spec.columns, strict=True)]
    return pa.Table.from_arrays(arrays, schema=batch_arrow_schema(spec))


def read_changelog_parquet(path: Path, spec: TableSpec, first_seq: int = 0) -> pa.Table:
    """Read a Parquet file with an ``op`` column and the row columns (missing nullable columns are null)."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise BadRecordError(str(path), 0, None, f"not a readable Parquet file: {e}") from None
    names = set(spec.column_names)
    for name in table.column_names:
        if name != "op" and name not in names:
            raise BadRecordError(
                str(path), 1, name, f"unknown column; table columns are {list(spec.column_names)}"
            )
    if "op" not in table.column_names:
        raise BadRecordError(str(path), 1, "op", "missing the 'op' column")
    n = table.num_rows
    ops = table.column("op").cast(pa.string())
    bad = pc.invert(pc.fill_null(pc.is_in(ops, pa.array(OPS)), False))
    if pc.any(bad).as_py():
        row = pc.index(bad, True).as_py()
        raise BadRecordError(
            str(path), row + 1, "op", f"unknown op {ops[row].as_py()!r}; expected one of {list(OPS)}"
        )
    arrays = [pa.array(range(first_seq, first_seq + n), pa.int64()), ops]
    for col in spec.columns:
        target = col.type.arrow_type()
        if col.name not in table.column_names:
            arrays.append(pa.nulls(n, target))
            continue
        source = table.column(col.name)
        try:
            cast = source.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            row = _first_bad_row(source, target)
            raise BadRecordError(str(path), row + 1, col.name, f"does not fit {col.type}: {e}") from None
        if col.type.name in _INT_BOUNDS and n:
            out_of_range = pc.or_(
                pc.less(cast, _INT_BOUNDS[col.type.name][0]), pc.greater(cast, _INT_BOUNDS[col.type.name][1])
            )
            if pc.any(pc.fill_null(out_of_range, False)).as_py():
                row = pc.index(pc.fill_null(out_of_range, False), True).as_py()
                try:
                    col.type.check_integer(cast[row].as_py())
                except ValueError as e:
                    raise BadRecordError(str(path), row + 1, col.name, str(e)) from None
        arrays.append(cast)
    result = pa.Table.from_arrays(arrays, schema=batch_arrow_schema(spec))
    not_delete = pc.not_equal(result.column("_op"), "-D")
    for col in spec.columns:
        if col.name in spec.primary_key:
            missing = pc.is_null(result.column(col.name))
        elif not col.nullable:
            missing = pc.and_(pc.is_null(result.column(col.name)), not_delete)
        else:
            continue
        if pc.any(missing).as_py():
            row = pc.index(missing, True).as_py()
            what = "primary key" if col.name in spec.primary_key else "NOT NULL"
            raise BadRecordError(str(path), row + 1, col.name, f"{what} column is missing or null")
    return result


def _first_bad_row(source: pa.ChunkedArray, target: pa.DataType) -> int:
    for i, value in enumerate(source.combine_chunks()):
        try:
            pa.array([value.as_py()], source.type).cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return i
    return 0


register_reader("changelog-json", read_changelog_json)
register_reader("changelog-parquet", read_changelog_parquet)
