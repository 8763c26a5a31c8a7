"""The Python API: everything a notebook, a test or an app does with changelake, in one SparkSession.

>>> from changelake import ChangeLake
>>> lake = ChangeLake()                                   # settings from env / config file
>>> lake.create_table({"name": "demo.t", "columns": [{"name": "k", "type": "INT"},
...                    {"name": "v", "type": "STRING"}], "primary_key": ["k"]})
>>> lake.apply("demo.t", [{"op": "+I", "data": {"k": 1, "v": "a"}}], batch_id=1)
>>> lake.rows("demo.t").show(); lake.changelog("demo.t").show()
>>> lake.lookup("demo.t", {"k": 1})                       # no Spark: [{'k': 1, 'v': 'a'}]
>>> lake.rows_arrow("demo.t"); lake.changelog_arrow("demo.t")   # no Spark: pyarrow Tables
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changelake import evolution, tables
from changelake.apply import Applier, BatchResult, Progress, stderr_progress
from changelake.config import Settings, load_settings
from changelake.errors import ChangelakeError
from changelake.fastread import FastReader, changelog_order, json_default
from changelake.identifiers import split_table_name
from changelake.landing import scan_landing
from changelake.spec import TableSpec, check_new_table, load_specs
from changelake.storage import CHANGELOG_SUFFIX, Storage

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ChangeLake", "json_default"]


class ChangeLake:
    """Entry point of the Python API. Creates the SparkSession lazily through :func:`changelake.session.get_spark`."""

    def __init__(
        self,
        settings: Settings | None = None,
        spark=None,
        progress: Progress | None = stderr_progress,
        **overrides: Any,
    ):
        self.settings = settings or load_settings(**overrides)
        self.storage = Storage(self.settings)
        self._spark = spark
        self.progress: Progress = progress or (lambda _msg: None)
        self.reader = FastReader(self.settings, self.progress, storage=self.storage)

    @property
    def spark(self):
        if self._spark is None:
            from changelake.session import get_spark

            self._spark = get_spark(self.settings)
        return self._spark

    @property
    def applier(self) -> Applier:
        return Applier(lambda: self.spark, self.storage, self.progress)

    # --- specs and tables ------------------------------------------------------------------------------
    def specs(self) -> dict[str, TableSpec]:
        """Table specs found in ``$CHANGELAKE_TABLES``."""
        return load_specs(self.settings.tables_dir)

    def spec(self, table: str) -> TableSpec:
        """The spec reads and writes of ``table`` use (:func:`changelake.evolution.resolve`): the layout
        stored with the table plus the spec file's source/datagen/comment sections; the spec file alone for
        a table not created yet. A spec file that differs in layout is noted on the progress log."""
        namespace, name = split_table_name(table)
        file_spec = self.specs().get(table)
        stored = self.storage.stored_spec(namespace, name)
        if file_spec is None and stored is None:
            raise ChangelakeError(
                f"Unknown table {table}: not in the catalog and no spec in {self.settings.tables_dir} "
                f"(known: {sorted(self.specs()) or 'none'})"
            )
        note = evolution.difference_note(table, file_spec, stored)
        if note:
            self.progress(note)
        return evolution.resolve(table, file_spec, stored)

    def create_table(self, spec: TableSpec | dict | str | Path) -> TableSpec:
        """Create a PK table and its changelog table from a spec (TableSpec, dict, or YAML path), or apply
        the spec's supported changes to the existing table (:func:`changelake.evolution.plan`; anything else
        is refused). Idempotent. Returns the spec the table now has."""
        if isinstance(spec, dict):
            spec = TableSpec.from_dict(spec)
        elif isinstance(spec, str | Path):
            spec = TableSpec.from_yaml(spec)
        return self._create(spec)

    def _create(self, spec: TableSpec) -> TableSpec:
        """:meth:`Storage.create`, after the naming rule for a table that does not exist yet: the same rule
        the spec directory obeys (:func:`changelake.spec.check_new_table`), against every table in the
        catalog and every spec file, so a table created from a spec object cannot take another table's
        view or changelog name either."""
        if not self.storage.exists(spec):
            check_new_table(spec, [*self._catalog_tables(), *self.specs()], f"table {spec.full_name}")
        return self.storage.create(spec, self.progress)

    def _catalog_tables(self) -> list[str]:
        """Full names of the PK tables in the catalog (their changelog tables are derived names)."""
        catalog = self.storage.catalog
        return [
            ".".join(ident)
            for (namespace, *_) in catalog.list_namespaces()
            for ident in catalog.list_tables(namespace)
            if len(ident) == 2 and not ident[1].endswith(CHANGELOG_SUFFIX)
        ]

    def create_all(self) -> list[TableSpec]:
        return [self.create_table(s) for s in self.specs().values()]

    def drop_table(self, table: str) -> None:
        self.storage.drop(self.spec(table))

    def _ensure(self, table: str) -> TableSpec:
        """The table's spec for a write: creates whatever part of the table is missing and applies the spec
        file's supported changes, refusing any other difference (idempotent, safe against racing creators)."""
        file_spec = self.specs().get(table)
        return self._create(file_spec if file_spec is not None else self.spec(table))

    # --- writes ----------------------------------------------------------------------------------------
    def apply(
        self,
        table: str,
        records: list[dict] | Any = None,
        batch_id: int | None = None,
        file: str | Path | None = None,
        fmt: str | None = None,
        target_columns: list[str] | None = None,
    ) -> BatchResult:
        """Apply one batch exactly once: a list of changelog records, a DataFrame, or a landed ``file``.

        Records use the changelog-json shapes: ``{"op": "+I", "data": {...}}`` or
        ``{"rowkind": "+I", "fields": [...]}``. A DataFrame has an ``op`` column and the row columns; its
        row order (as collected) is the batch order. Without ``batch_id`` the next id is used.
        ``target_columns`` makes the batch a partial update: only those columns (which must include the
        primary key) are written.
        """
        spec = self._ensure(table)
        if batch_id is None:
            batch_id = Storage.state(self.storage.pk_table(spec)).last_batch + 1
        if file is not None:
            return self.applier.apply_files(spec, batch_id, [Path(file)], fmt, target_columns)
        if records is None:
            raise ChangelakeError("apply() needs records, a DataFrame or file=")
        staged = self._stage_records(spec, records)
        fmt = "changelog-parquet" if staged.suffix == ".parquet" else "changelog-json"
        return self.applier.apply_files(spec, batch_id, [staged], fmt, target_columns=target_columns)

    def apply_pending(
        self, table: str | None = None, up_to: int | None = None, from_batch: int | None = None
    ) -> list[BatchResult]:
        """Apply every landed batch newer than each table's last one (all tables with specs if ``table`` is None).

        ``from_batch``/``up_to`` bound a replay or backfill range; replayed batches are no-ops.
        """
        names = [table] if table else sorted(self.specs())
        results: list[BatchResult] = []
        for name in names:
            results += self.applier.apply_pending(
                self._ensure(name), self.settings.landing_dir, up_to, from_batch
            )
        return results

    def _stage_records(self, spec: TableSpec, records) -> Path:
        """Write API records to a content-addressed file, so re-applying the same records is a no-op."""
        directory = self.settings.staging_dir / spec.full_name
        directory.mkdir(parents=True, exist_ok=True)
        if isinstance(records, list):
            payload = "".join(
                json.dumps(_finite(r), default=json_default, sort_keys=True, allow_nan=False) + "\n"
                for r in records
            ).encode()
            path = directory / f"api-{hashlib.sha256(payload).hexdigest()[:20]}.jsonl"
            path.write_bytes(payload)
            return path
        # A DataFrame: one Parquet file in the DataFrame's order.
        tmp = directory / f"df-{uuid.uuid4().hex}"
        records.coalesce(1).write.parquet(str(tmp))
        part = next(tmp.glob("*.parquet"))
        path = directory / f"df-{hashlib.sha256(part.read_bytes()).hexdigest()[:20]}.parquet"
        part.replace(path)
        return path

    # --- reads -----------------------------------------------------------------------------------------
    def rows(self, table: str, at_batch: int | None = None):
        """Current rows as a DataFrame (declared types, no hidden bucket), or as of batch ``at_batch``."""
        spec = self.spec(table)
        snapshot_id = None
        if at_batch is not None:
            snap = self.storage.snapshot_for_batch(self.storage.pk_table(spec), at_batch)
            if snap is None:
                raise ChangelakeError(f"{table}: batch {at_batch} is not in the table's history")
            snapshot_id = snap.snapshot_id
        df = tables.rows_df(self.spark, self.storage, spec, snapshot_id).drop("_bucket")
        return tables.to_view_types(spec, df)

    def rows_arrow(self, table: str, at_batch: int | None = None) -> pa.Table:
        """:meth:`rows` without Spark: a pyarrow Table with the same rows and types (TIMESTAMP_LTZ values
        timezone-aware in UTC), read by :class:`changelake.fastread.FastReader`."""
        return self.reader.rows_arrow(table, at_batch=at_batch)

    def changelog(self, table: str, from_batch: int | None = None, to_batch: int | None = None):
        """The changelog (``_change_type``, ``_batch_id``, ``_log_offset``, ``_commit_timestamp``) in its total
        order: (``_batch_id``, partition columns, ``_bucket``, ``_log_offset``) when ``_log_offset`` counts per
        bucket, else ``_log_offset`` (:func:`changelake.fastread.changelog_order`).

        If a crashed apply left a committed batch's changelog uncommitted, it is rolled forward first (the
        same deterministic commit the next apply would make), so readers never miss a committed batch.
        """
        from pyspark.sql import functions as F

        spec = self.spec(table)
        self.applier.roll_forward_changelog(spec)
        df = tables.changelog_df(self.spark, self.storage, spec)
        if from_batch is not None:
            df = df.filter(F.col("_batch_id") >= from_batch)
        if to_batch is not None:
            df = df.filter(F.col("_batch_id") <= to_batch)
        return tables.to_view_types(spec, df.orderBy(*changelog_order(df.columns, spec)))

    def changelog_arrow(
        self, table: str, from_batch: int | None = None, to_batch: int | None = None
    ) -> pa.Table:
        """:meth:`changelog` without Spark: a pyarrow Table with the same records in the same order."""
        return self.reader.changelog_arrow(table, from_batch, to_batch)

    def lookup(self, table: str, key: dict[str, Any], prefix: bool = False) -> list[dict[str, Any]]:
        """Primary-key lookup (all PK columns) or, with ``prefix=True``, prefix lookup by bucket key (spec §9).

        No Spark: reads only the files of the key's (partition, bucket), see :meth:`FastReader.lookup`.
        """
        return self.reader.lookup(table, key, prefix)

    def status(self) -> list[dict[str, Any]]:
        """Per table: last batch, rows, batch snapshots, changelog records, pending landed batches."""
        return self.reader.status()

    def dead_letters(self, table: str, batch_id: int | None = None) -> list[dict[str, Any]]:
        """Quarantined records of a table (``on-bad-record: quarantine``): batch, file, line, field, reason,
        raw text — read from the dead-letter files the committed batches name."""
        return self.reader.dead_letters(table, batch_id)

    def register_views(self, names: list[str] | None = None) -> list[str]:
        """Register each table's current snapshot and changelog as global temp views.

        Views: ``global_temp.<namespace>__<table>`` and ``global_temp.<namespace>__<table>__changelog``
        (dbt sources and GX suites read these).
        """
        registered = []
        for name in names or sorted(self.specs()):
            spec = self.spec(name)
            if not self.storage.exists(spec):
                continue
            view = f"{spec.namespace}__{spec.table}"
            self.rows(name).createOrReplaceGlobalTempView(view)
            self.changelog(name).createOrReplaceGlobalTempView(view + "__changelog")
            self.input_records(name).createOrReplaceGlobalTempView(view + "__input")
            registered += [
                f"global_temp.{view}",
                f"global_temp.{view}__changelog",
                f"global_temp.{view}__input",
            ]
        return registered

    def input_records(self, table: str):
        """Every record of the table's applied landed batches as delivered, redeliveries included.

        Columns: the table's columns, ``_op``, ``_batch_id``, ``_line`` and the Kafka ``_topic``,
        ``_partition``, ``_offset`` (null for formats without them). Decoded by the same readers as the
        apply; quarantined lines are left out. dbt recomputes aggregation tables exactly from this.
        """
        from changelake.readers import delivered_records

        spec = self._ensure(table)
        last = Storage.state(self.storage.pk_table(spec)).last_batch
        # The usable batches: a bad landed file blocks its own table's later batches, not every view.
        landed = scan_landing(self.settings.landing_dir, spec).batches
        applied = {b: p for b, p in landed.items() if b <= last}
        return tables.to_view_types(spec, self.spark.createDataFrame(delivered_records(applied, spec)))


def _finite(value: Any) -> Any:
    """NaN and infinities as the strings the JSON readers accept ("NaN", "Infinity", "-Infinity"): the bare
    literals json.dumps would write are not JSON, and the readers refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
