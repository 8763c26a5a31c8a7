"""changelog-parquet: a Parquet file of changelog rows, an ``op`` column (``+I``/``-U``/``+U``/``-D``) plus the row
columns (a missing nullable column is null). The format of a ``.parquet`` file when the table names none.

Decoded column-wise: every column at once, with the per-line path's rules (the column types'
:meth:`~changelake.types.DataType.convert_arrow` and the table's
:class:`~changelake.inputs.records.ColumnRules`), so a bad row gets the error it would get as a JSON line.
Problems of the file (not Parquet, a column twice, an unknown column, no ``op``, a column type that cannot
hold the column's) refuse it whole, even under quarantine: they are not any record's.

pyarrow (and the decoded-batch helpers, which import it) are imported where used: this module is imported
with every table spec (through the format registry), and the CLI's read commands must not pull numpy in.
"""

from __future__ import annotations

import itertools
import json
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from changelake.errors import BadRecordError, short_repr
from changelake.inputs.formats.base import OPS, RowsFormat, SourceEvent
from changelake.types import ColumnTypeError

if TYPE_CHECKING:
    import pyarrow as pa

    from changelake.inputs.records import DecodedBatch
    from changelake.source_options import SourceOptions
    from changelake.spec import TableSpec


class ChangelogParquet(RowsFormat):
    name = "changelog-parquet"
    extension = "parquet"
    suffixes = (".parquet",)
    title = "Parquet"
    magic = b"PAR1"

    def read(self, path: PurePath, spec: TableSpec, opts: SourceOptions, out: DecodedBatch) -> pa.Table:
        """Validate column-wise; under quarantine, set each bad row aside and validate the rest again."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            with _open(path) as fh, pq.ParquetFile(fh) as parquet:
                table = parquet.read()
        except (pa.ArrowException, OSError, ValueError) as e:
            raise BadRecordError(str(path), 0, None, f"not a readable Parquet file: {e}") from None
        table = parquet_columns(table, path, spec, opts)
        out.messages += table.num_rows
        rows = pa.array(np.arange(1, table.num_rows + 1, dtype=np.int64))  # original row numbers (1-based)
        result, bad = decode_rows(table, path, spec, rows)
        for error in bad:  # the first raises under on-bad-record: fail
            out.reject(error, raw_row(table, error.line - 1), opts)  # rows are 1..n here
        return result

    def row_ranges(self, path: PurePath, rows_per_range: int) -> list[tuple[int, int]] | None:
        """Along row groups: small groups together up to ``rows_per_range``, a large one alone (the decode
        planner cuts it if there are too few ranges for the cores)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            with _open(path) as fh, pq.ParquetFile(fh) as parquet:
                sizes = [rg.num_rows for rg in _row_groups(parquet.metadata)]
        except (pa.ArrowException, OSError, ValueError):
            return None
        cuts, start, row = [], 0, 0
        for size in sizes:
            if row > start and row - start + size > rows_per_range:
                cuts.append(row)
                start = row
            row += size
        if row > start or not cuts:
            cuts.append(row)
        return list(itertools.pairwise([0, *cuts]))

    def read_rows(
        self, path: PurePath, start: int, end: int, spec: TableSpec, opts: SourceOptions, out: DecodedBatch
    ) -> tuple[pa.Table, int]:
        """Reads only the row groups of ``[start, end)``; checks and errors as :meth:`read` has them."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            with _open(path) as fh, pq.ParquetFile(fh) as parquet:
                picked, first, row = [], None, 0
                for i, rg in enumerate(_row_groups(parquet.metadata)):
                    if row < end and row + rg.num_rows > start:
                        picked.append(i)
                        first = row if first is None else first
                    row += rg.num_rows
                table = parquet.read_row_groups(picked) if picked else parquet.schema_arrow.empty_table()
            table = table.slice(start - (first or 0), end - start)
        except (pa.ArrowException, OSError, ValueError):
            # Whatever the reader says of this file (it reads it whole), in its words.
            return self.read(path, spec, opts, out), 0
        table = parquet_columns(table, path, spec, opts)
        out.messages += table.num_rows
        rows = pa.array(np.arange(start + 1, start + 1 + table.num_rows), pa.int64())
        result, bad = decode_rows(table, path, spec, rows)
        for error in bad:  # the first raises under on-bad-record: fail
            out.reject(error, raw_row(table, error.line - 1 - start), opts)
        return result, start

    def write(self, spec: TableSpec, events: list[SourceEvent], path: Path, envelope: bool = False) -> int:
        """The events' changelog records as rows; the columns no record carries (a partial update's) left
        out, so they read as null. One message per event."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [record for event in events for record in event.records()]
        present = [col for col in spec.columns if any(col.name in r for _, r in rows)] or list(spec.columns)
        arrays = [pa.array([op for op, _ in rows], pa.string())]
        arrays += [
            pa.array([r.get(col.name) for _, r in rows], col.type.view_arrow_type()) for col in present
        ]
        pq.write_table(pa.Table.from_arrays(arrays, names=["op"] + [c.name for c in present]), path)
        return len(events)


def _row_groups(metadata) -> list:
    return [metadata.row_group(i) for i in range(metadata.num_row_groups)]


def parquet_columns(table: pa.Table, path, spec: TableSpec, opts) -> pa.Table:
    """The columns of a landed Parquet file the batch reads (``op`` and the table's), after the file-level
    checks: a column twice, an unknown column (unless ``ignore-unknown-fields``), no ``op`` column. Shared by
    the whole-file reader and the row ranges of decode tasks, so both refuse a file in the same words."""
    names = set(spec.column_names)
    seen: set[str] = set()
    try:
        columns = table.column_names
    except UnicodeDecodeError:  # a damaged footer: Arrow reads the name's bytes, Python cannot decode them
        raise BadRecordError(
            str(path), 1, None, "not a readable Parquet file: a column name is not UTF-8"
        ) from None
    for name in columns:
        if name in seen:
            raise BadRecordError(str(path), 1, name, "the column appears twice in the file")
        seen.add(name)
        if name != "op" and name not in names and not opts.ignore_unknown_fields:
            raise BadRecordError(
                str(path), 1, name, f"unknown column; table columns are {list(spec.column_names)}"
            )
    if "op" not in table.column_names:
        raise BadRecordError(str(path), 1, "op", "missing the 'op' column")
    return table.select([c for c in table.column_names if c == "op" or c in names])


def raw_row(table: pa.Table, position: int) -> str:
    """A Parquet row as dead-letter text, whatever its values (invalid ones are shown as Arrow prints them)."""
    row = {}
    for name in table.column_names:
        scalar = table.column(name)[position]
        try:
            row[name] = scalar.as_py()
            json.dumps(row[name], default=str)
        except Exception:
            row[name] = f"<{scalar.type}: not representable>"
    return json.dumps(row, default=str)


def decode_rows(
    table: pa.Table, path: PurePath, spec: TableSpec, rows: pa.Array
) -> tuple[pa.Table, list[BadRecordError]]:
    """Decode every column at once; return the good rows and an error for every bad row, in row order.

    Each bad row gets the error it would get alone: the first failing check in the order op, the columns
    in spec order (valid data, then the type's rules through
    :meth:`~changelake.types.DataType.convert_arrow` -- the JSON path's rules -- then the table's
    :class:`~changelake.inputs.records.ColumnRules`), then required columns. One pass, however many rows
    are bad (``rows`` holds their original 1-based numbers). A problem of the file's schema raises
    BadRecordError with line 0 (not quarantined)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from changelake.inputs.records import ColumnRules, batch_arrow_schema

    _check_schema(table, path, spec)
    n = table.num_rows
    flagged: dict[int, tuple[str, str]] = {}

    def flag(problems, field: str) -> None:
        for row, reason in problems:
            flagged.setdefault(row, (field, reason))

    ops, invalid = _valid_array(table.column("op"), path, "op")
    flag(invalid, "op")
    if pa.types.is_dictionary(ops.type):
        ops = ops.dictionary_decode()
    ops = pa.nulls(n, pa.string()) if pa.types.is_null(ops.type) else ops.cast(pa.string())
    unknown = pc.indices_nonzero(pc.invert(pc.fill_null(pc.is_in(ops, pa.array(OPS)), False))).to_pylist()
    flag(
        ((r, f"unknown op {short_repr(ops[r].as_py())}; expected one of {list(OPS)}") for r in unknown), "op"
    )
    rules = ColumnRules(spec)
    arrays = [pa.array(np.arange(n, dtype=np.int64)), ops]
    for col in spec.columns:
        if col.name not in table.column_names:
            arrays.append(pa.nulls(n, col.type.arrow_type()))
            continue
        array, invalid = _valid_array(table.column(col.name), path, col.name)
        flag(invalid, col.name)
        try:
            cast, problems = col.type.convert_arrow(array)
        except ColumnTypeError as e:  # checked with the schema; kept for a type only values reveal
            raise BadRecordError(str(path), 0, col.name, e.reason) from None
        flag(problems, col.name)
        flag(rules.validate_arrow(col.name, cast), col.name)
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
        what = "primary key" if col.name in spec.primary_key else "NOT NULL"
        rows_missing = pc.indices_nonzero(pc.fill_null(missing, False)).to_pylist()
        flag(((r, f"{what} column is missing or null") for r in rows_missing), col.name)
    if not flagged:
        return result, []
    bad = [BadRecordError(str(path), rows[r].as_py(), *flagged[r]) for r in sorted(flagged)]
    result = result.filter(pa.array([r not in flagged for r in range(n)], pa.bool_()))
    return result.set_column(0, "_seq", pa.array(np.arange(result.num_rows, dtype=np.int64))), bad


def _check_schema(table: pa.Table, path: PurePath, spec: TableSpec) -> None:
    """Problems of the file's schema (an ``op`` column that is not text, a column type that cannot hold
    the column's type): BadRecordError with line 0, since they are not any row's."""
    import pyarrow as pa

    op_type = table.schema.field("op").type
    value_type = op_type.value_type if pa.types.is_dictionary(op_type) else op_type
    if not (
        pa.types.is_null(value_type) or pa.types.is_string(value_type) or pa.types.is_large_string(value_type)
    ):
        raise BadRecordError(str(path), 0, "op", f"expected a string column, got {op_type}")
    for col in spec.columns:
        if col.name in table.column_names:
            problem = col.type.arrow_type_problem(table.schema.field(col.name).type)
            if problem is not None:
                raise BadRecordError(str(path), 0, col.name, problem)


def _valid_array(
    column: pa.ChunkedArray, path: PurePath, name: str
) -> tuple[pa.Array, list[tuple[int, str]]]:
    """The column as one fully validated array (Parquet readers do not check that strings are UTF-8): the
    invalid rows are found by halves, reported, and set to null."""
    import pyarrow as pa

    try:
        return _valid_values(column.combine_chunks())
    except pa.ArrowInvalid as e:
        raise BadRecordError(str(path), 0, name, f"invalid column data: {e}") from None


def _valid_values(array: pa.Array) -> tuple[pa.Array, list[tuple[int, str]]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        array.validate(full=True)
        return array, []
    except pa.ArrowInvalid as e:
        whole = e

    def invalid(lo: int, hi: int) -> list[int]:
        try:
            array.slice(lo, hi - lo).validate(full=True)
            return []
        except pa.ArrowInvalid:
            if hi - lo == 1:
                return [lo]
        mid = (lo + hi) // 2
        return invalid(lo, mid) + invalid(mid, hi)

    bad = invalid(0, len(array))
    if not bad:
        raise whole  # invalid as a whole, no value to blame: a problem of the file
    reasons = []
    for row in bad:
        try:
            array.slice(row, 1).validate(full=True)
            reasons.append((row, f"invalid {array.type} data"))
        except pa.ArrowInvalid as e:  # the value's own message (a one-value slice: no position in it)
            reasons.append((row, f"invalid data: {e}"))
    flags = [False] * len(array)
    for row in bad:
        flags[row] = True
    nulled = pc.if_else(pa.array(flags, pa.bool_()), pa.scalar(None, array.type), array)
    return nulled, reasons


@contextmanager
def _open(path: PurePath):
    """The landed file, opened without following a link (an OSError, reported as an unreadable file), as
    Arrow's own file over that descriptor (``/dev/fd/N`` reopens the open file, not a path); a landed object
    (an object store's) as its store serves it.

    Not the Python file object itself: Arrow reads one into buffers holding Python objects, on its I/O
    threads too (``ReadAsync``), and freeing such a buffer takes the GIL. When the last one was freed on an
    Arrow thread while the interpreter shut down, that thread was ended by ``pthread_exit``, whose unwinding
    through Arrow's destructors calls ``std::terminate``: the CLI aborted (exit 134, "terminate called
    without an active exception") after printing a clean error, about once in a hundred runs."""
    import pyarrow as pa

    from changelake.inputs.landed import open_landed
    from changelake.objectstore import ObjectPath

    if isinstance(path, ObjectPath):
        with open_landed(path) as fh:
            yield fh
        return
    with open_landed(path) as fh, pa.OSFile(f"/dev/fd/{fh.fileno()}") as native:
        yield native
