"""Reads without a JVM: lookups, scans, changelogs, status and dead letters through pyarrow (and pyiceberg).

Spark is for applying batches; reading one key or the first rows of a table must not wait for a JVM.
:class:`FastReader` plans the files of a snapshot from Iceberg metadata and reads them with pyarrow:

* a lookup computes the key's bucket exactly as the apply does (:func:`changelake.bucketing.bucket_of`,
  Spark's xxhash64 in Python), so it opens only the files of that (partition, bucket), skips row groups whose Parquet
  statistics exclude the key, and reads the other columns only of row groups that hold it;
* a scan with a limit reads the key columns first and then only the row groups holding the first rows;
* a changelog read prunes by ``_batch_id`` partition and orders each batch by
  (``_batch_id``, partition columns, ``_bucket``, ``_log_offset``) — or by ``_log_offset`` alone for a
  changelog without ``_bucket`` — the same order :meth:`changelake.api.ChangeLake.changelog` gives; with a
  limit, it visits row groups by their statistics and reads only the order columns until the first records
  are known, then only those rows.

Two ways to the metadata (:mod:`changelake.storage.catalog`), with one reading code on top
(:class:`~changelake.storage.catalog.TableSource`):

* **direct** — the default SQLite catalog or a REST catalog (its loadTable answer, with a bearer token), and a
  local or object-store (``s3://``) warehouse: the catalog row is read with ``sqlite3``,
  the metadata JSON with ``json`` and the manifests with a small Avro decoder
  (:mod:`changelake.storage.avro`). Importing pyiceberg (and pandas, which ``pyarrow.dataset`` pulls in)
  costs seconds on a small machine, more than the whole read;
* **pyiceberg** — every other catalog or warehouse (PostgreSQL, other file systems), through
  :class:`changelake.storage.iceberg.Storage`; also the fallback when the direct way meets anything it does not
  know (another Avro codec, delete files).

What a read can skip (changelog files by batch bounds, row groups by statistics) is
:mod:`changelake.storage.pruning`.

Values come back in the types Spark reads return (:func:`view_schema`: storage types, TINYINT/SMALLINT as
int8/int16), except that TIMESTAMP_LTZ values are timezone-aware UTC datetimes (Spark's Python rows hold
naive local times) and that TIMESTAMP(7..9)/TIMESTAMP_LTZ(7..9) are exact Arrow ``timestamp[ns]`` columns
(``pandas.Timestamp`` values in rows), where Spark shows microseconds plus a ``<column>__nanos`` BIGINT.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import heapq
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake import objectstore
from changelake.bucketing import bucket_of, partition_value
from changelake.config import Settings
from changelake.errors import ChangelakeError, java_list, missing_table, short_repr, unknown_table
from changelake.identifiers import split_table_name
from changelake.spec import TableSpec, load_specs
from changelake.storage import history, summary
from changelake.storage.avro import Unsupported
from changelake.storage.catalog import (
    DirectSource,
    IcebergSource,
    TableSource,
    read_bytes,
    snapshot_total,
    sqlite_table_names,
)
from changelake.storage.files import (
    BUCKET_COLUMN,
    Layout,
    TableFile,
    check_stored_types,
    read_position_deletes,
)
from changelake.storage.pruning import (
    batch_range,
    batch_runs,
    bound_type,
    group_starts,
    in_batches,
    lower_bound,
    manifest_lower_bound,
    may_contain,
    overlaps,
)
from changelake.storage.summary import BatchSummary
from changelake.types import DataType, format_timestamp_nanos

Progress = Callable[[str], None]

_CHANGELOG_SUFFIX = "__changelog"
_SOURCE_TOTALS = ("quarantined", "redelivered", "deduplicated")
_TEXTUAL = ("CHAR", "STRING", "DATE", "TIME", "TIMESTAMP", "TIMESTAMP_LTZ", "BINARY", "BYTES", "DECIMAL")


def json_default(value: Any) -> Any:
    """JSON encoding of the values changelake returns (decimals as strings, bytes as base64, timestamps as
    ISO-8601 with all nine fraction digits for precision 7..9)."""
    import base64

    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime) and hasattr(value, "nanosecond"):
        # A pandas.Timestamp: a value of a nanosecond column, always with its nine digits.
        return value.isoformat(timespec="nanoseconds")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"cannot encode {type(value).__name__}")


# --- types ------------------------------------------------------------------------------------------------
def view_arrow_type(dtype: DataType) -> pa.DataType:
    """Arrow twin of ``DataType.view_spark_type``: the storage type, TINYINT/SMALLINT narrowed, nanosecond
    timestamps as exact ``timestamp[ns]`` (:meth:`DataType.view_arrow_type`)."""
    return dtype.view_arrow_type()


_CHANGELOG_COLUMNS = {
    "_change_type": pa.string(),
    "_batch_id": pa.int64(),
    "_bucket": pa.int32(),
    "_log_offset": pa.int64(),
    "_commit_timestamp": pa.timestamp("us", tz="UTC"),
}


def view_schema(spec: TableSpec) -> pa.Schema:
    """The rows of a table as :meth:`ChangeLake.rows` shows them (declared types, no hidden ``_bucket``)."""
    return pa.schema([pa.field(c.name, view_arrow_type(c.type)) for c in spec.columns])


def _changelog_view_schema(spec: TableSpec, stored: list[str]) -> pa.Schema:
    """The changelog's columns in the table's order: row columns, then the stored metadata columns."""
    extra = [pa.field(n, _CHANGELOG_COLUMNS[n]) for n in stored if n in _CHANGELOG_COLUMNS]
    return pa.schema(list(view_schema(spec)) + extra)


def changelog_order(columns: list[str], spec: TableSpec) -> list[str]:
    """The deterministic total order of a changelog: (``_batch_id``, partition columns, ``_bucket``,
    ``_log_offset``) when ``_log_offset`` is per bucket (a ``_bucket`` column exists), else ``_log_offset``."""
    if "_bucket" in columns:
        return ["_batch_id", *spec.partition_keys, "_bucket", "_log_offset"]
    return ["_log_offset"]


# --- lookup arguments -------------------------------------------------------------------------------------
#: What a lookup value of a non-textual column must look like, for the message when it does not.
_EXPECTED_TEXT = {"BOOLEAN": "true or false", "FLOAT": "a number", "DOUBLE": "a number"}


def decode_lookup_value(spec: TableSpec, name: str, value: Any) -> Any:
    """Decode a lookup value to its storage value; CLI strings of numeric/boolean columns are parsed as JSON."""
    col = spec.column(name)
    where = f"lookup value for column '{name}' ({col.type})"
    try:
        if isinstance(value, str) and col.type.name not in _TEXTUAL:
            try:
                value = json.loads(value, parse_float=decimal.Decimal)
            except (json.JSONDecodeError, RecursionError):
                expected = _EXPECTED_TEXT.get(col.type.name, "a whole number")
                raise ChangelakeError(f"{where}: {short_repr(value)} is not {expected}") from None
        if isinstance(value, dt.datetime | dt.date) and col.type.name in _TEXTUAL:
            # A value a read returned (pandas.Timestamp keeps its nanoseconds in isoformat).
            value = value.isoformat()
        return col.type.decode_json(value)
    except ValueError as e:
        raise ChangelakeError(f"{where}: {e}") from None


def check_lookup_columns(spec: TableSpec, columns: list[str], prefix: bool) -> None:
    """docs/semantics.md §9 rules for lookups and prefix lookups, with Fluss's messages."""
    pk = list(spec.primary_key)
    if not prefix:
        if sorted(columns) != sorted(pk):
            raise ChangelakeError(
                f"Lookup on {spec.full_name} must bind exactly the primary key {pk}, got {columns}"
            )
        return
    physical = [k for k in pk if k not in spec.partition_keys]
    bucket = list(spec.bucket_key)
    lookup = java_list(columns)

    def refused(reason: str) -> ChangelakeError:
        return ChangelakeError(f"Can not perform prefix lookup on table '{spec.full_name}', because {reason}")

    def equals_primary_key(keys: list[str]) -> ChangelakeError:
        # Fluss's words, but for its Java API's advice ("Lookuper without lookupBy"): here, leave out the prefix.
        return refused(
            f"the lookup columns {lookup} equals the physical primary keys {java_list(keys)}. Please use primary "
            "key lookup (a lookup without --prefix; prefix=False in the Python API) instead."
        )

    # Fluss's order: the lookup creation refuses the whole primary key (any order) before the prefix checks.
    if len(columns) == len(pk) and set(columns) == set(pk):
        raise equals_primary_key(pk)
    if physical[: len(bucket)] != bucket:
        raise refused(
            f"the bucket keys {java_list(bucket)} is not a prefix subset of the physical primary keys "
            f"{java_list(physical)} (excluded partition fields if present)."
        )
    if any(p not in columns for p in spec.partition_keys):
        raise refused(
            f"the lookup columns {lookup} must contain all partition fields {java_list(spec.partition_keys)}."
        )
    if [c for c in columns if c not in spec.partition_keys] != bucket:
        raise refused(
            f"the lookup columns {lookup} must contain all bucket keys {java_list(bucket)} in order."
        )
    if bucket == physical:
        raise equals_primary_key(physical)


# --- the reader -------------------------------------------------------------------------------------------
def _files_read(label: str, done: int, total: int, parts: list) -> str:
    return f"{label}: read {done}/{total} files, {sum(p.num_rows for p in parts):,} rows"


class _Ticker:
    """Progress of a long read: at most one line a second, none for reads that end sooner."""

    def __init__(self, progress: Progress | None, every: float = 1.0):
        self.progress, self.every, self.last = progress, every, time.monotonic()

    def tick(self, message: Callable[[], str]) -> None:
        if self.progress is not None and time.monotonic() - self.last >= self.every:
            self.progress(message())
            self.last = time.monotonic()


@dataclass
class _Stats:
    """What a read did, for the progress line and the tests."""

    files_planned: int = 0
    files_read: int = 0
    row_groups: int = 0
    row_groups_read: int = 0
    rows: int = 0


class FastReader:
    """Spark-free reads of changelake tables (see the module docstring).

    ``direct=None`` reads the default SQLite catalog and a local warehouse directly and anything else
    through pyiceberg; ``True``/``False`` force one way (the tests compare both with Spark).
    """

    def __init__(
        self,
        settings: Settings,
        progress: Progress | None = None,
        direct: bool | None = None,
        storage: Any = None,
    ):
        self.settings = settings
        self.progress: Progress = progress or (lambda _msg: None)
        sqlite = settings.catalog_type == "sql" and settings.catalog_uri.startswith("sqlite:///")
        rest = settings.catalog_type == "rest"  # the REST protocol's loadTable, plainly (catalog._rest_table)
        custom_io = any(k.startswith("py-io-impl") for k in settings.catalog_properties)
        self.direct = ((sqlite or rest) and not custom_io) if direct is None else direct
        self._storage = storage  # a changelake.storage.iceberg.Storage, made when the pyiceberg way needs one
        self.last_stats = _Stats()

    # --- tables ---------------------------------------------------------------------------------------
    @property
    def storage(self):
        if self._storage is None:
            from changelake.storage.iceberg import Storage

            self._storage = Storage(self.settings)
        return self._storage

    def _source(self, namespace: str, name: str) -> TableSource | None:
        if self.direct:
            try:
                return DirectSource.load(self.settings, namespace, name)
            except Unsupported as e:
                self.progress(f"[{namespace}.{name}] reading through pyiceberg ({e})")
        return IcebergSource.load(self.storage, namespace, name)

    def _files(self, source: TableSource, snapshot_id: int | None) -> list[TableFile]:
        try:
            return source.files(snapshot_id)
        except Unsupported as e:
            self.progress(f"[{source.name}] reading through pyiceberg ({e})")
            namespace, name = split_table_name(source.name)
            fallback = IcebergSource.load(self.storage, namespace, name)
            return fallback.files(snapshot_id) if fallback else []

    def specs(self) -> dict[str, TableSpec]:
        return load_specs(self.settings.tables_dir)

    def table_names(self) -> list[str]:
        """``namespace.table`` of the PK tables in the catalog (their changelog tables left out)."""
        if self.direct:
            names = sqlite_table_names(self.settings)
        else:
            catalog = self.storage.catalog
            names = [
                ".".join(ident)
                for (namespace, *_) in catalog.list_namespaces()
                for ident in catalog.list_tables(namespace)
                if len(ident) == 2
            ]
        return sorted(n for n in names if not n.endswith(_CHANGELOG_SUFFIX))

    def spec(self, table: str, source: TableSource | None = None) -> TableSpec:
        """The spec reads of ``table`` use (:func:`changelake.evolution.resolve`, as :meth:`ChangeLake.spec`):
        the layout stored with the table plus the spec file's other sections; the spec file alone for a
        table not created yet. A spec file that differs in layout is noted on the progress log."""
        from changelake import evolution

        namespace, name = split_table_name(table)
        specs = self.specs()
        source = source or self._source(namespace, name)
        stored = source.properties.get(summary.SPEC) if source else None
        if table not in specs and not stored:
            raise unknown_table(
                table, f"not in the catalog and no spec in {self.settings.tables_dir}", list(specs)
            )
        note = evolution.difference_note(table, specs.get(table), stored)
        if note:
            self.progress(note)
        return evolution.resolve(table, specs.get(table), stored)

    def _pk(self, table: str) -> tuple[TableSpec, TableSource]:
        namespace, name = split_table_name(table)
        source = self._source(namespace, name)
        spec = self.spec(table, source)
        if source is None:
            raise missing_table(spec.full_name)
        check_stored_types(source.name, spec, source.column_types)
        return spec, source

    def _changelog_source(self, spec: TableSpec) -> TableSource:
        source = self._source(spec.namespace, spec.table + _CHANGELOG_SUFFIX)
        if source is None:
            raise missing_table(spec.full_name, changelog=True)
        return source

    @staticmethod
    def _snapshot_for_batch(source: TableSource, table: str, batch_id: int) -> int:
        retained = source.batch_snapshots()
        for snapshot_id, props in retained:
            if summary.batch_of(props) == batch_id:
                return snapshot_id
        kept = [summary.batch_of(p) for _, p in retained]
        shown = f"batches {kept[0]}..{kept[-1]}" if kept else "no batch"
        if 0 < batch_id <= source.last_batch():
            raise ChangelakeError(
                f"{table}: batch {batch_id} was applied, but its snapshot has expired (snapshot.num-retained.min/"
                f"max, snapshot.time-retained); snapshots are retained for {shown}"
            )
        raise ChangelakeError(f"{table}: batch {batch_id} is not in the table's history (snapshots: {shown})")

    # --- reading files --------------------------------------------------------------------------------
    @staticmethod
    def _deleted(source: TableSource, files: list[TableFile]) -> dict[str, pa.Array]:
        """The positions of data rows the position-delete files among ``files`` name, per data file."""
        deletes = [f for f in files if f.is_delete]
        return _applicable(
            files, deletes, _each(lambda d: read_position_deletes(source.open(d.path, d.size)), deletes)
        )

    def _read_all(
        self, source: TableSource, files: list[TableFile], schema: pa.Schema, stats: _Stats, label: str
    ):
        """Every row of ``files`` less the deleted ones, on a few threads (pyarrow decodes without the GIL):
        the delete files and the data files are read together, then the data files' deleted rows dropped."""
        deletes = [f for f in files if f.is_delete]
        data = sorted((f for f in files if not f.is_delete), key=lambda f: f.path)  # one order both ways
        ticker = _Ticker(self.progress if label else None)
        deleted: Future[dict[str, pa.Array]] = Future()

        def read(f: TableFile) -> tuple[pa.Table, int]:
            part, groups = _read_whole(source, f, schema, None)
            gone = deleted.result().get(f.path) if deletes else None  # read by then: submitted first
            return (part if gone is None else _without(part, gone)), groups

        with ThreadPoolExecutor(max_workers=_READ_THREADS, thread_name_prefix="changelake-read") as pool:
            read_deletes = [
                pool.submit(lambda d: read_position_deletes(source.open(d.path, d.size)), d) for d in deletes
            ]
            # The large files first: the small ones (a batch's new rows) then fill the gaps at the end.
            order = sorted(range(len(data)), key=lambda i: -data[i].size)
            jobs = {i: pool.submit(read, data[i]) for i in order}
            read_data = [jobs[i] for i in range(len(data))]
            try:
                deleted.set_result(_applicable(files, deletes, [job.result() for job in read_deletes]))
            except BaseException as e:
                deleted.set_exception(e)
                raise
            parts = []
            for job in read_data:
                part, groups = job.result()
                parts.append(part)
                stats.files_read += 1
                stats.row_groups += groups
                stats.row_groups_read += groups
            ticker.tick(functools.partial(_files_read, label, len(data), len(data), parts))
        table = pa.concat_tables(parts) if parts else schema.empty_table()
        stats.rows += table.num_rows
        return table

    def _read(
        self,
        source: TableSource,
        files: list[TableFile],
        schema: pa.Schema,
        where: dict[str, Any] | None = None,
        stats: _Stats | None = None,
        label: str = "",
    ) -> pa.Table:
        """The rows of ``files`` in ``schema``, less the rows their position-delete files name; with ``where``
        (column -> storage value) only matching rows, skipping row groups whose statistics exclude a value and
        reading other columns only where a key matched."""
        stats = stats or _Stats()
        parts: list[pa.Table] = []
        ticker = _Ticker(self.progress if label else None)
        if not where and len(files) >= _PARALLEL_FILES:
            return self._read_all(source, files, schema, stats, label)
        deleted = self._deleted(source, files)
        data = sorted((f for f in files if not f.is_delete), key=lambda f: f.path)  # one order both ways
        footers = _each(lambda f: pq.ParquetFile(source.open(f.path, f.size)), data)
        for i, (f, pf) in enumerate(zip(data, footers, strict=True), start=1):
            columns = _present(pf, schema)
            stats.files_read += 1
            groups = list(range(pf.metadata.num_row_groups))
            stats.row_groups += len(groups)
            gone = deleted.get(f.path)
            if where:
                starts = group_starts(pf.metadata)
                groups = [g for g in groups if may_contain(pf.metadata, g, where)]
                key_columns = list(where)
                for g in groups:
                    keys = pf.read_row_group(g, columns=key_columns, use_threads=False)
                    stats.row_groups_read += 1
                    hits = pc.indices_nonzero(_matches(keys, where))
                    if gone is not None and len(hits):
                        hits = hits.filter(_live(hits, starts[g], gone))
                    if len(hits):
                        parts.append(_conform(_rows_at(pf, g, columns, hits.to_pylist()), schema))
            elif groups:
                part, _ = _read_whole(source, f, schema, gone, pf)
                stats.row_groups_read += len(groups)
                parts.append(part)
            ticker.tick(functools.partial(_files_read, label, i, len(data), parts))
        table = pa.concat_tables(parts) if parts else schema.empty_table()
        stats.rows += table.num_rows
        return table

    # --- rows -----------------------------------------------------------------------------------------
    def rows_arrow(
        self, table: str, at_batch: int | None = None, limit: int | None = None, by_key: bool = False
    ) -> pa.Table:
        """Rows of a table (declared types, no ``_bucket``), current or as of batch ``at_batch``.

        In storage order, or with ``by_key`` in primary-key order (the order ``changelake scan`` prints). A
        ``limit`` keeps the first rows in key order, reading the key columns first and then only the row
        groups that hold those rows.
        """
        spec, source = self._pk(table)
        snapshot_id = None if at_batch is None else self._snapshot_for_batch(source, table, at_batch)
        files = self._files(source, snapshot_id)
        shown = snapshot_id if snapshot_id is not None else source.current()[0]
        label = f"[{spec.full_name}] snapshot {shown}" + ("" if at_batch is None else f" (batch {at_batch})")
        stats = _Stats(files_planned=len(files))
        data = [f for f in files if not f.is_delete]
        self.progress(
            f"{label}: {len(data)} data file(s), {sum(f.record_count for f in data):,} rows planned"
            + (f", {len(files) - len(data)} delete file(s)" if len(data) < len(files) else "")
        )
        schema = view_schema(spec)
        then = None if snapshot_id is None else source.snapshot_columns(snapshot_id)
        if then is not None:  # a past batch reads in its snapshot's schema, as Iceberg's time travel does
            schema = pa.schema([f for f in schema if f.name in then])
        if limit is None:
            out = self._read(source, files, schema, stats=stats, label=label)
            if by_key:
                out = out.sort_by([(k, "ascending") for k in spec.primary_key])
        else:
            out = self._first_rows(spec, source, files, limit, stats, label, schema)
        self.last_stats = stats
        self.progress(
            f"{label}: read {stats.files_read} file(s), {stats.row_groups_read} of {stats.row_groups} row "
            f"group(s), {out.num_rows:,} rows"
        )
        return out

    def _first_rows(
        self,
        spec: TableSpec,
        source: TableSource,
        files: list[TableFile],
        limit: int,
        stats: _Stats,
        label: str,
        schema: pa.Schema,
    ) -> pa.Table:
        """The first ``limit`` rows by primary key (in ``schema``): the footers of the files whose manifest
        lower bounds admit a key among the first ``limit``, then the smallest keys of the row groups whose key
        statistics admit one (files and row groups in order of their lower bounds, a few at a time), then the
        rows themselves.

        A hash-bucketed table has small keys in every bucket, but a bucket's smallest key is rarely among the
        table's first ten: ``--limit 10`` on the benchmark's table opens the dozen files whose lowest key is
        no greater than the tenth key found, not all of them, and reads the keys of about ten row groups. A file
        or row group without usable statistics is always read."""
        pk = list(spec.primary_key)
        order = [(k, "ascending") for k in pk]
        if limit <= 0 or not files:
            return schema.empty_table()
        ticker = _Ticker(self.progress)
        deletes = [f for f in files if f.is_delete]
        data = [f for f in files if not f.is_delete]
        ids = source.field_ids
        kinds = [bound_type(schema.field(k).type) if k in schema.names else None for k in pk]

        def file_bound(f: TableFile) -> tuple:
            bounds = f.lower_bounds or {}
            return tuple(
                manifest_lower_bound(bounds.get(ids[k]) if k in ids else None, kind)
                for k, kind in zip(pk, kinds, strict=True)
            )

        # (lower bound, file, row group): a row group's keys to read, or (row group -1) a file's footer to open.
        heap: list[tuple[tuple, int, int]] = [(file_bound(f), i, -1) for i, f in enumerate(data)]
        heapq.heapify(heap)
        opened: dict[int, pq.ParquetFile] = {}
        deleted: dict[str, pa.Array] = {}
        groups_total = 0

        def open_files(wanted: list[int]) -> None:
            """Footers of ``wanted`` files, their row groups queued by bound; with the first, the delete files
            (read on the same threads, first: on an object store each is a request or two)."""
            nonlocal deleted, groups_total
            todo = ([] if opened else deletes) + [data[i] for i in wanted]
            both = _each(
                lambda f: (
                    read_position_deletes(source.open(f.path, f.size))
                    if f.is_delete
                    else pq.ParquetFile(source.open(f.path, f.size))
                ),
                todo,
            )
            if len(todo) > len(wanted):
                deleted = _applicable(files, deletes, both[: len(deletes)])
            for i, pf in zip(wanted, both[len(todo) - len(wanted) :], strict=True):
                opened[i] = pf
                stats.files_read += 1
                meta = pf.metadata
                stats.row_groups += meta.num_row_groups
                groups_total += meta.num_row_groups
                arrow = pf.schema_arrow
                file_kinds = [bound_type(arrow.field(k).type) if k in arrow.names else None for k in pk]
                for g in range(meta.num_row_groups):
                    rg = meta.row_group(g)
                    index = {rg.column(j).path_in_schema: j for j in range(rg.num_columns)}
                    bound = tuple(
                        lower_bound(rg, index.get(k), kind) for k, kind in zip(pk, file_kinds, strict=True)
                    )
                    heapq.heappush(heap, (bound, i, g))

        def smallest_keys(i: int, wanted: list[int]) -> list[pa.Table]:
            pf, gone = opened[i], deleted.get(data[i].path)
            starts, out = group_starts(pf.metadata), []
            for g in wanted:
                keys = _unify(pf.read_row_group(g, columns=pk, use_threads=False))
                rows = _positions(keys.num_rows)
                if gone is not None:
                    live = _live(rows, starts[g], gone)
                    keys, rows = keys.filter(live), rows.filter(live)
                index = pc.select_k_unstable(keys, k=min(limit, keys.num_rows), sort_keys=order)
                out.append(
                    keys.take(index)
                    .append_column("_file", pa.array([i] * len(index), pa.int32()))
                    .append_column("_group", pa.array([g] * len(index), pa.int32()))
                    .append_column("_row", rows.take(index))
                )
            return out

        top: pa.Table | None = None
        kth: tuple | None = None  # the key of the limit-th row found so far, as a bound
        read: set[tuple[int, int]] = set()
        remote = objectstore.is_object_location(data[0].path) if data else False
        # Objects a few at once (each a request); local files one at a time, stopping soonest.
        width = _OPEN_THREADS if remote else 1
        while heap and (kth is None or not kth < heap[0][0]):
            to_open: list[int] = []
            wave: dict[
                int, list[int]
            ] = {}  # the next few row groups, by file (one reader per file at a time)
            while heap and len(to_open) + len(wave) < width and (kth is None or not kth < heap[0][0]):
                _, i, g = heapq.heappop(heap)
                if g < 0:
                    to_open.append(i)
                else:
                    wave.setdefault(i, []).append(g)
                    read.add((i, g))
            if to_open:
                open_files(to_open)
            if not wave:
                continue
            ticker.tick(
                functools.partial("{}: keys of {}/{} row groups read".format, label, len(read), groups_total)
            )
            if len(wave) > 1 and remote:
                with ThreadPoolExecutor(
                    max_workers=_OPEN_THREADS, thread_name_prefix="changelake-open"
                ) as pool:
                    parts = [t for ts in pool.map(lambda e: smallest_keys(*e), wave.items()) for t in ts]
            else:
                parts = [t for e in wave.items() for t in smallest_keys(*e)]
            keys = pa.concat_tables(parts if top is None else [top, *parts])
            top = keys.take(pc.select_k_unstable(keys, k=min(limit, keys.num_rows), sort_keys=order))
            if top.num_rows >= limit:
                last = top.sort_by(order).slice(limit - 1, 1).select(pk).to_pylist()[0]
                kth = tuple((0, last[k]) for k in pk)
        if top is None or not top.num_rows:
            return schema.empty_table()
        wanted: dict[tuple[int, int], list[int]] = {}
        for i, g, row in zip(*(top.column(c).to_pylist() for c in ("_file", "_group", "_row")), strict=True):
            wanted.setdefault((i, g), []).append(row)
        stats.row_groups_read += len(read | set(wanted))
        rows_of = [
            _conform(_rows_at(opened[i], g, _present(opened[i], schema), rows), schema)
            for (i, g), rows in sorted(wanted.items())
        ]
        return pa.concat_tables(rows_of).sort_by(order)

    # --- changelog ------------------------------------------------------------------------------------
    def changelog_arrow(
        self,
        table: str,
        from_batch: int | None = None,
        to_batch: int | None = None,
        limit: int | None = None,
    ) -> pa.Table:
        """The changelog of batches ``from_batch..to_batch`` in its total order (:func:`changelog_order`).

        A committed batch whose changelog a crashed apply left uncommitted is rolled forward first, as
        :meth:`ChangeLake.changelog` does. With ``limit``, reading stops after the batch that fills it, and
        of a batch larger than what is left of the limit only the rows needed are read
        (:meth:`_changelog_head`): ``--limit 10`` costs the same on a batch of 100 records and of 5 million.
        """
        spec, pk_source = self._pk(table)
        source = self._changelog_source(spec)
        if pk_source.last_batch() > source.last_batch():
            self._roll_forward(spec)
            source = self._changelog_source(spec)
        expired_before(spec.full_name, source.properties, from_batch, to_batch, pk_source.last_batch())
        files = self._files(source, None)
        wanted = (from_batch, to_batch)
        runs = batch_runs(
            [f for f in files if overlaps(batch_range(source, f), wanted)],
            lambda f: batch_range(source, f),
        )
        label = f"[{spec.full_name}__changelog] snapshot {source.current()[0]}"
        stats = _Stats(files_planned=len(files))
        self.progress(f"{label}: {sum(len(r) for r in runs)} of {len(files)} file(s) after pruning by batch")
        schema = _changelog_view_schema(spec, source.columns)
        columns = changelog_order(source.columns, spec)
        order = [(c, "ascending") for c in columns]
        parts, rows = [], 0
        for run in runs:  # files whose batches overlap, runs in batch order
            if limit is not None and rows >= limit:
                break
            if limit is None or limit - rows >= sum(f.record_count for f in run):
                part = in_batches(self._read(source, run, schema, stats=stats, label=label), wanted)
                part = part.sort_by(order)
            else:
                part = self._changelog_head(source, run, schema, columns, limit - rows, stats, wanted)
            parts.append(part)
            rows += part.num_rows
        out = pa.concat_tables(parts) if parts else schema.empty_table()
        if limit is not None:
            out = out.slice(0, max(limit, 0))
        self.last_stats = stats
        self.progress(
            f"{label}: read {stats.files_read} file(s), {stats.row_groups_read} of {stats.row_groups} row "
            f"group(s), {out.num_rows:,} changelog records"
        )
        return out

    def _changelog_head(
        self,
        source: TableSource,
        files: list[TableFile],
        schema: pa.Schema,
        columns: list[str],
        limit: int,
        stats: _Stats,
        batches: tuple[int | None, int | None] = (None, None),
    ) -> pa.Table:
        """The first ``limit`` records of changelog files (of the batches in ``batches``) in the order a whole
        read sorts them
        (``columns``, then file and row position: a stable sort of the files concatenated).

        Row groups are visited by the lower bound of their first record (Parquet statistics of ``columns``,
        file, first row); only their order columns are read, until the ``limit``-th record found comes
        before the next row group's bound. Then only the rows kept are read whole. A changelog file holds
        one bucket in offset order, so ``--limit 10`` reads one row group's keys and one slice of rows
        instead of every file of the batch; data in any other order is still read exactly, only less
        cheaply (a missing statistic bounds nothing)."""
        if limit <= 0:
            return schema.empty_table()
        keys_schema = pa.schema([schema.field(c) for c in columns])
        comparable = [bound_type(f.type) for f in keys_schema]
        sort_keys = [(c, "ascending") for c in (*columns, "_file", "_group", "_row")]
        bounded = [c for c, kind in zip(columns, comparable, strict=True) if kind] + [
            "_file",
            "_group",
            "_row",
        ]
        opened: list[pq.ParquetFile] = []
        groups: list[tuple[tuple, int, int]] = []  # (lower bound, file, row group)
        for i, f in enumerate(files):
            pf = pq.ParquetFile(source.open(f.path, f.size))
            opened.append(pf)
            stats.files_read += 1
            meta = pf.metadata
            stats.row_groups += meta.num_row_groups
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                index = {rg.column(j).path_in_schema: j for j in range(rg.num_columns)}
                bound = tuple(
                    lower_bound(rg, index.get(c), kind) for c, kind in zip(columns, comparable, strict=True)
                )
                groups.append((bound + ((0, i), (0, g), (0, 0)), i, g))
        groups.sort(key=lambda entry: entry[0])
        top: pa.Table | None = None  # the first records found so far, at most ``limit``
        kth: tuple | None = None  # the sort position of the limit-th of them
        read = set()
        for bound, i, g in groups:
            if kth is not None and kth < bound:
                break  # this row group, and every later one, starts after the records kept
            pf = opened[i]
            present = [c for c in columns if c in pf.schema_arrow.names]
            keys = _conform(pf.read_row_group(g, columns=present, use_threads=False), keys_schema)
            read.add((i, g))
            n = keys.num_rows
            keys = (
                keys.append_column("_file", pa.nulls(n, pa.int32()).fill_null(pa.scalar(i, pa.int32())))
                .append_column("_group", pa.nulls(n, pa.int32()).fill_null(pa.scalar(g, pa.int32())))
                .append_column("_row", _positions(n))
            )
            keys = in_batches(keys, batches)
            top = keys if top is None else pa.concat_tables([top, keys])
            if top.num_rows >= limit:
                top = _first_sorted(top, limit, sort_keys)
                last = top.select(bounded).slice(limit - 1, 1).to_pylist()[0]
                kth = tuple(
                    ((1,) if last[c] is None else (0, last[c])) if kind else (0,)
                    for c, kind in zip(columns, comparable, strict=True)
                ) + tuple((0, last[c]) for c in ("_file", "_group", "_row"))
        if top is None:
            return schema.empty_table()
        if kth is None:
            top = top.sort_by(sort_keys)
        # The rows kept, file by file and row group by row group, each read once; then back in sort order.
        top = top.append_column("_rank", _positions(top.num_rows))
        by_place = top.sort_by([("_file", "ascending"), ("_group", "ascending"), ("_row", "ascending")])
        place = pc.add(
            pc.multiply(pc.cast(by_place.column("_file"), pa.int64()), pa.scalar(1 << 32, pa.int64())),
            pc.cast(by_place.column("_group"), pa.int64()),
        )
        runs = sorted((r["values"], r["counts"]) for r in pc.value_counts(place).to_pylist())
        parts, at = [], 0
        for value, count in runs:
            i, g = value >> 32, value & 0xFFFFFFFF
            read.add((i, g))
            rows = by_place.column("_row").slice(at, count).combine_chunks()
            parts.append(_conform(_rows_of_group(opened[i], g, _present(opened[i], schema), rows), schema))
            at += count
        stats.row_groups_read += len(read)
        out = pa.concat_tables(parts)
        stats.rows += out.num_rows
        return out.take(pc.sort_indices(by_place.column("_rank")))

    def _roll_forward(self, spec: TableSpec) -> None:
        from changelake.storage.rollforward import roll_forward_changelog

        self.progress(
            f"[{spec.full_name}] committing the changelog of a committed batch first (roll forward)"
        )
        roll_forward_changelog(self.storage, spec)

    # --- lookups --------------------------------------------------------------------------------------
    def lookup(self, table: str, key: dict[str, Any], prefix: bool = False) -> list[dict[str, Any]]:
        """Primary-key lookup (all PK columns) or, with ``prefix=True``, prefix lookup by bucket key (docs/semantics.md §9).

        Reads only the files of the key's (partition, bucket) and, in them, only row groups whose statistics
        admit the key. Rows come back as dicts ordered by primary key.
        """
        spec, source = self._pk(table)
        check_lookup_columns(spec, list(key), prefix)
        values = {name: decode_lookup_value(spec, name, value) for name, value in key.items()}
        target = tuple(partition_value(values[c]) for c in spec.partition_keys)
        bucket = bucket_of(spec, values)
        layout = Layout(tuple(source.partition_columns))
        files = self._files(source, None)
        partition = layout.partition_of(target, bucket)
        hits = [
            f
            for f in files
            if (f.partition == partition if f.is_delete else layout.key_values(f.partition) == target)
            and (f.is_delete or f.holds(bucket))
        ]
        stats = _Stats(files_planned=len(files))
        # The bucket too: a file shared by buckets (a merge-on-read batch's) skips row groups of others.
        where = {**values, BUCKET_COLUMN: bucket}
        found = self._read(source, hits, view_schema(spec), where=where, stats=stats)
        out = found.sort_by([(k, "ascending") for k in spec.primary_key])
        self.last_stats = stats
        self.progress(
            f"[{spec.full_name}] lookup: partition/bucket {(*target, bucket)}: {len(hits)} of {len(files)} file(s), "
            f"{stats.row_groups_read} of {stats.row_groups} row group(s) read, {out.num_rows} row(s)"
        )
        return to_pylist(out)

    # --- status and dead letters ----------------------------------------------------------------------
    def status(self) -> list[dict[str, Any]]:
        """Per table with a spec: last batch, rows, batch snapshots, changelog records, and the quarantined /
        redelivered / deduplicated totals of its batches. What the landing directory says (pending batches,
        problems) is added by :func:`changelake.inputs.landing.landing_status`: storage does not read it."""
        out: list[dict[str, Any]] = []
        for name, spec in sorted(self.specs().items()):
            source = self._source(spec.namespace, spec.table)
            if source is None:
                out.append(
                    {
                        "table": name,
                        "exists": False,
                        "last_batch": 0,
                        "rows": 0,
                        "snapshots": 0,
                        "history_batches": 0,
                        "files": 0,
                        "bytes": 0,
                        "last_maintenance": None,
                        "last_commit": None,
                        "changelog_records": 0,
                        **dict.fromkeys(_SOURCE_TOTALS, 0),
                        "writers": {},
                    }
                )
                continue
            snapshot_id, current = source.current()
            state = source.state()  # the current snapshot's, unless another writer committed since
            head = BatchSummary.from_properties(state) if summary.BATCH_ID in state else None
            last = head.batch_id if head else 0
            retained = source.batch_snapshots()
            # Live rows: as the batch recorded them (data files hold deleted rows too), else (a table written
            # only copy-on-write) its files' records.
            rows = head.rows if head is not None and head.rows is not None else current.get("total-records")
            if head is not None and head.totals is not None:  # carried forward by every batch
                totals = {k: head.totals[k] for k in _SOURCE_TOTALS}
            else:  # a table whose batches did not carry them: summed over its history
                batches = [b for _, b in self._history(source)]
                totals = {k: sum(b.source[k] for b in batches) for k in _SOURCE_TOTALS}
            if head is None:
                writers: dict[str, int] = {}
            elif head.writers is not None:  # carried forward by every batch
                writers = dict(head.writers)
            else:  # committed before writers were recorded: told from its history (summary.writer_positions)
                writers = summary.writer_positions(b for _, b in self._history(source))
            log_source = self._source(spec.namespace, spec.table + _CHANGELOG_SUFFIX)
            tables = [source] + ([log_source] if log_source is not None else [])
            maintained = json.loads(source.properties.get(summary.MAINTENANCE) or "{}")
            out.append(
                {
                    "table": name,
                    "exists": True,
                    "last_batch": last,
                    "rows": int(rows)
                    if rows is not None
                    else sum(f.record_count for f in self._files(source, None)),
                    "snapshots": len(retained),
                    "history_batches": sum(c.count for c in history.chunks(source.properties)),
                    "files": sum(
                        snapshot_total(t, "total-data-files") + snapshot_total(t, "total-delete-files")
                        for t in tables
                    ),
                    "bytes": sum(snapshot_total(t, "total-files-size") for t in tables),
                    "last_maintenance": _iso_ms(maintained.get("at_ms")),
                    "last_commit": _last_commit(source.last_commit()),
                    "changelog_records": head.log_end_offset if head else 0,
                    **totals,
                    "writers": writers,
                }
            )
        return out

    def _history(self, source: TableSource) -> list[tuple[int, BatchSummary]]:
        """The table's batches, oldest first: the expired ones from its history, then the retained ones."""
        return history.batches(
            history.read(functools.partial(read_bytes, source), source.properties), source.batch_snapshots()
        )

    def dead_letters(self, table: str, batch_id: int | None = None) -> list[dict[str, Any]]:
        """Quarantined records of a table (``on-bad-record: quarantine``): batch, file, line, field, reason,
        raw text — read from the dead-letter files the committed batches name."""
        namespace, name = split_table_name(table)
        source = self._source(namespace, name)
        if source is None:
            self.spec(table)  # an unknown table is an error; a known one without a table has no letters
            return []
        out = []
        for _, batch in self._history(source):
            path = batch.dead_letter
            if not path or (batch_id is not None and batch.batch_id != batch_id):
                continue
            text = read_bytes(source, path).decode()
            out += [json.loads(line) for line in text.splitlines() if line.strip()]
        return out


def to_pylist(table: pa.Table) -> list[dict[str, Any]]:
    """``table.to_pylist()`` with nanosecond timestamps exact: ``pandas.Timestamp`` values (what pyarrow
    gives), or, in a process whose pyarrow runs without pandas (the CLI's read commands keep it out for their
    start-up time), ISO-8601 text with all nine fraction digits (``+00:00`` for an instant), the text
    :func:`json_default` writes of a ``pandas.Timestamp``."""
    nanos = [i for i, f in enumerate(table.schema) if pa.types.is_timestamp(f.type) and f.type.unit == "ns"]
    shim = getattr(pa.lib, "_pandas_api", None)
    if nanos and shim is not None and not shim.have_pandas:
        for i in nanos:
            zone = "+00:00" if table.schema.field(i).type.tz is not None else ""
            text = [
                None if v is None else format_timestamp_nanos(v) + zone
                for v in table.column(i).cast(pa.int64()).to_pylist()
            ]
            table = table.set_column(
                i, table.schema.field(i).with_type(pa.string()), pa.array(text, pa.string())
            )
    return table.to_pylist()


def expired_before(
    table: str, properties: dict[str, str], from_batch: int | None, to_batch: int | None, last: int
) -> None:
    """Refuse a changelog read of batches whose records ``table.log.ttl`` removed, saying what is kept."""
    start = int(properties.get(summary.LOG_START_BATCH) or 1)
    asked = [b for b in (from_batch, to_batch) if b is not None]
    if start > 1 and any(b < start for b in asked):
        raise ChangelakeError(
            f"{table}: the changelog of batches before {start} has expired (table.log.ttl); it keeps batches "
            f"{start}..{last}"
        )


def _last_commit(commit: dict[str, Any]) -> str | None:
    """Who committed a table's current snapshot and what it was, in a few words: ``changelake: batch``,
    ``changelake: compaction``, or another writer's engine and Iceberg operation (``spark 4.1.4 (Apache Iceberg
    1.12.0): replace``)."""
    if commit.get("by") is None:
        return None
    return f"{commit['by']}: {commit['operation']}"


def _iso_ms(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


#: Object-store files opened at once (their footers read): each open is a round trip or two, not a syscall.
_OPEN_THREADS = 8


def _each(fn: Callable[[Any], Any], files: list[TableFile]) -> list[Any]:
    """``fn`` of each file, in order: on :data:`_OPEN_THREADS` threads when the files are objects (an open and
    a footer read are requests whose waits overlap), else one after another."""
    if len(files) < 2 or not objectstore.is_object_location(files[0].path):
        return [fn(f) for f in files]
    with ThreadPoolExecutor(max_workers=_OPEN_THREADS, thread_name_prefix="changelake-open") as pool:
        return list(pool.map(fn, files))


#: A read of at least this many whole files (or delete files) reads them on _READ_THREADS threads.
_PARALLEL_FILES = 4
_READ_THREADS = 3  # on 2 cores: 3 keeps both busy while one waits for its file


def _read_whole(
    source: TableSource,
    f: TableFile,
    schema: pa.Schema,
    gone: pa.Array | None,
    pf: pq.ParquetFile | None = None,
) -> tuple[pa.Table, int]:
    """A data file's rows in ``schema`` less the deleted ones, and its row-group count."""
    pf = pf or pq.ParquetFile(source.open(f.path, f.size))
    groups = pf.metadata.num_row_groups
    if not groups:
        return schema.empty_table(), 0
    rows = pf.read_row_groups(list(range(groups)), columns=_present(pf, schema), use_threads=False)
    if gone is not None:
        rows = rows.filter(_live_rows(rows.num_rows, gone))
    return _conform(rows, schema), groups


def _applicable(files: list[TableFile], deletes: list[TableFile], read: list[dict]) -> dict[str, pa.Array]:
    """The positions each data file among ``files`` loses to the delete files ``deletes`` (``read``: their
    positions per path): a delete file applies to data files no newer than itself (Iceberg's sequence rule)."""
    sequence = {f.path: f.sequence_number for f in files if not f.is_delete}
    parts: dict[str, list[pa.Array]] = {}
    for d, positions_of in zip(deletes, read, strict=True):
        for path, positions in positions_of.items():
            seq = sequence.get(path, -1)
            if seq != -1 and (seq is None or d.sequence_number is None or seq <= d.sequence_number):
                parts.setdefault(path, []).append(positions)
    return {path: pa.concat_arrays(p) for path, p in parts.items()}


def _without(rows: pa.Table, gone: pa.Array) -> pa.Table:
    return rows.filter(_live_rows(rows.num_rows, gone))


def _live_rows(n: int, gone: pa.Array) -> pa.Array:
    """A mask of a file's ``n`` rows that no delete names: with numpy when this process has it (a set of
    positions into a boolean array: ~0.1 ms for a 156,000-row file, where Arrow's ``is_in`` hashes every row),
    else with Arrow (the CLI's read commands run without numpy)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            positions = gone.to_numpy(zero_copy_only=False)
        except ImportError:  # pyarrow imported without its numpy integration
            numpy = None
    if numpy is None:
        return _live(_positions(n), 0, gone)
    mask = numpy.ones(n, bool)
    mask[positions[positions < n]] = False
    return pa.array(mask)


def _live(positions: pa.Array, start: int, gone: pa.Array) -> pa.Array:
    """A mask of the rows at ``positions`` (within a row group starting at file position ``start``) that no
    delete names."""
    at = pc.add(positions.cast(pa.int64()), pa.scalar(start, pa.int64())) if start else positions
    return pc.invert(pc.is_in(at, value_set=gone))


_BATCH_ROWS = 16_384


def _rows_at(pf: pq.ParquetFile, group: int, columns: list[str], rows: list[int]) -> pa.Table:
    """The rows at positions ``rows`` of one row group, decoding batches only up to the last one needed
    (a lookup's row sits anywhere in its file: on average half the row group is never decoded)."""
    rows, parts, start = sorted(rows), [], 0
    batches = pf.iter_batches(batch_size=_BATCH_ROWS, row_groups=[group], columns=columns, use_threads=False)
    for batch in batches:
        end = start + batch.num_rows
        inside = [r - start for r in rows if start <= r < end]
        if inside:
            parts.append(pa.Table.from_batches([batch]).take(pa.array(inside, pa.int64())))
        start = end
        if start > rows[-1]:
            break
    return pa.concat_tables(parts)


def _rows_of_group(pf: pq.ParquetFile, group: int, columns: list[str], rows: pa.Array) -> pa.Table:
    """The rows at (ascending) positions ``rows`` of one row group: :func:`_rows_at` for a few, the row
    group read whole for many (``_rows_at`` scans the positions once per batch it decodes)."""
    if len(rows) <= _BATCH_ROWS:
        return _rows_at(pf, group, columns, rows.to_pylist())
    return pf.read_row_group(group, columns=columns, use_threads=False).take(rows)


def _positions(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int64, without a Python range (``pa.array(range(n))`` costs 0.1 s a million)."""
    # Python numbers given to a compute function bring pandas in (the CLI keeps it out): Arrow scalars.
    one = pa.scalar(1, pa.int64())
    return pc.subtract(pc.cumulative_sum(pa.nulls(n, pa.int64()).fill_null(one)), one)


def _first_sorted(table: pa.Table, k: int, sort_keys: list[tuple[str, str]]) -> pa.Table:
    """The first ``k`` rows of ``table`` by ``sort_keys`` (which make rows unique), sorted: a selection
    when ``k`` is small beside the table, else a sort (Arrow's selection of a large ``k`` costs ten times
    a sort of data in order, as a changelog's is)."""
    if k * 16 < table.num_rows:
        return table.take(pc.select_k_unstable(table, k=k, sort_keys=sort_keys)).sort_by(sort_keys)
    return table.take(pc.sort_indices(table, sort_keys=sort_keys).slice(0, k))


def _matches(keys: pa.Table, where: dict[str, Any]) -> pa.ChunkedArray:
    mask = None
    for name, value in where.items():
        column = keys.column(name)
        eq = pc.equal(column, pa.scalar(value, type=column.type))
        mask = eq if mask is None else pc.and_(mask, eq)
    return pc.fill_null(mask, False)


def _unify(table: pa.Table) -> pa.Table:
    """Large string/binary (some writers) as plain string/binary, so tables from different files concatenate."""
    fields = []
    for f in table.schema:
        if pa.types.is_large_string(f.type):
            f = f.with_type(pa.string())
        elif pa.types.is_large_binary(f.type):
            f = f.with_type(pa.binary())
        fields.append(f)
    schema = pa.schema(fields)
    return table if schema == table.schema else table.cast(schema)


def _present(pf: pq.ParquetFile, schema: pa.Schema) -> list[str]:
    """The columns of ``schema`` a file has (a file written before a column was added lacks it)."""
    names = set(pf.schema_arrow.names)
    return [n for n in schema.names if n in names]


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``: its columns in order and types, nulls for those the file lacked (as Spark
    reads a file written before a column was added)."""
    if table.schema.equals(schema, check_metadata=False):
        return table
    arrays = [
        table.column(f.name).cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
