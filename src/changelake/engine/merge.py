"""Merge semantics of primary-key tables — the one module that owns them (docs/semantics.md §2, §3.1, §5).

:class:`RowMerger` applies one record to the rows of a key, exactly as Fluss's ``KvTablet.putAsLeader``
does, and returns the changelog it emits. One subclass per merge engine, found in :data:`MERGERS`; the
aggregation engine folds each column with its function from :mod:`changelake.engine.aggregates`. The bucket
task (:mod:`changelake.engine.buckets`) runs the columnar merge (:mod:`changelake.engine.columnar`), which
takes its configuration from a merger and is tested equal to :func:`apply_sequential`, the plain
one-record-at-a-time reference.

Rules of the default (last-row) engine, FULL image: an upsert of a new key emits ``+I``; of an existing key
``-U old, +U new`` (even if equal); a delete of an existing key ``-D old``; a delete of a missing key
nothing; ``-U`` inputs are dropped (a Flink upsert sink drops UPDATE_BEFORE). ``table.delete.behavior``:
allow deletes, ignore drops them, disable refuses the batch. ``sink.ignore-delete`` drops deletes before
the table sees them. WAL image: an upsert emits only ``+U new`` (also for a new key), a delete ``-D old``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from changelake.engine import aggregates
from changelake.errors import WriteRefusedError, java_list
from changelake.spec import TableSpec, merge_mode_of

DELETE_DISABLED = (
    "Delete operations are disabled for this table. The table.delete.behavior is set to 'disable'."
)


@dataclass
class BatchCounts:
    """Per-batch counters recorded in the snapshot summary."""

    records: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    ignored: int = (
        0  # records that changed nothing: ignored/absent-key deletes, first_row repeats, older versions
    )
    dropped_update_before: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def deletes_dropped_before_table(spec: TableSpec) -> bool:
    """True when ``-D`` records never reach the table (``sink.ignore-delete`` or behaviour ``ignore``; on a
    retraction table without an explicit behaviour they retract instead)."""
    return spec.ignore_delete or (spec.delete_behavior == "ignore" and not spec.retracts_delete)


def check_retraction_format(spec: TableSpec, fmt: str | None, merge_mode: str | None = None) -> None:
    """Refuse an upsert-kafka batch into a table whose deletes retract: a tombstone holds only the key, no
    before image to take back (docs/semantics.md §4.7; spec.py refuses such a table's upsert-kafka source). An
    overwrite batch retracts nothing, so it may."""
    if fmt == "upsert-kafka" and spec.retracts_delete and merge_mode_of(merge_mode) is None:
        raise WriteRefusedError(
            f"{spec.full_name}: the upsert-kafka format has no before image, so its tombstones cannot retract; "
            "set 'table.delete.behavior' (ignore, allow or disable) to say what a tombstone does on this "
            "'table.agg.retract' table."
        )


def check_batch_ops(spec: TableSpec, op_counts: dict[str, int], merge_mode: str | None = None) -> BatchCounts:
    """Validate a batch's operations before any work and count what is dropped up front (an overwrite batch
    takes every delete and retracts nothing: :class:`OverwriteMerger`)."""
    overwrite = merge_mode_of(merge_mode) == "overwrite"
    dropped = 0 if spec.retracts_update_before and not overwrite else op_counts.get("-U", 0)
    counts = BatchCounts(records=sum(op_counts.values()), dropped_update_before=dropped)
    deletes = op_counts.get("-D", 0)
    if overwrite:
        return counts
    if deletes and not spec.ignore_delete and spec.delete_behavior == "disable":
        raise WriteRefusedError(
            f"{spec.full_name}: {DELETE_DISABLED} The batch holds {deletes} delete record(s)."
        )
    if deletes_dropped_before_table(spec):
        counts.ignored += deletes
    return counts


#: Returned by :meth:`RowMerger.merge` when a write changes nothing (first_row repeat, older version).
UNCHANGED = object()


# --- the merger ---------------------------------------------------------------------------------------
Row = tuple
Change = tuple[str, Row]  # (change type, row image)


class RowMerger:
    """Applies records of a table to a dict ``key -> row`` (rows are tuples in column order).

    The default (last-row) engine; :func:`merger_for` picks the engine of a spec. Engines override
    :meth:`merge`; returning :data:`UNCHANGED` means "no change" — nothing stored, nothing emitted. That is
    Fluss's identity rule (docs/semantics.md §2, §11) made explicit: Python may share equal tuples, so identity would lie.
    """

    #: False when the engine never looks inside rows, so callers may pass handles instead of tuples.
    needs_values = False
    #: Whether the engine takes partial (target-column) writes (docs/semantics.md §6).
    partial_update = True

    def __init__(
        self, spec: TableSpec, target: tuple[int, ...] | None = None, ids: IdAllocator | None = None
    ):
        self.spec = spec
        ai = spec.auto_increment_column
        self.auto_increment_index = None if ai is None else spec.column_names.index(ai)
        self.ids = ids
        self.key_index = tuple(spec.column_names.index(k) for k in spec.primary_key)
        self.drop_deletes = deletes_dropped_before_table(spec)
        self.disable_deletes = spec.delete_behavior == "disable" and not spec.ignore_delete
        self.wal = spec.changelog_image == "wal"
        # Partial update (docs/semantics.md §6): the indexes of the batch's target columns, None for full-row writes.
        self.target = None if target is None else frozenset(target)
        self.target_is_key = self.target == frozenset(self.key_index)
        self.needs_values = type(self).needs_values or target is not None or ai is not None
        # Fluss's WAL shortcut: only full-row writes of the plain last-row engine skip reading the old row.
        self.wal_shortcut = self.wal and spec.merge_engine is None and target is None
        # A retraction table's -U (and -D with no explicit delete behaviour) take values back (§4.7).
        self.retracts_update_before = spec.retracts_update_before
        self.retracts_delete = spec.retracts_delete
        self.counts = BatchCounts()

    def key_of(self, row: Row) -> Row:
        return tuple(row[i] for i in self.key_index)

    def first_write(self, new):
        """The row stored for a key's first write: a partial write leaves non-target columns null."""
        if self.target is None:
            return new
        return tuple(v if i in self.target else None for i, v in enumerate(new))

    def merge(self, old, new):
        """The engine's merge of an incoming row into the stored one (``old`` is never None here)."""
        if self.target is None:
            return new
        if self.target_is_key:
            return UNCHANGED  # a write of only the key columns to an existing key changes nothing
        return tuple(new[i] if i in self.target else v for i, v in enumerate(old))

    def delete(self, old):
        """None removes the row; a partial delete nulls the target columns unless nothing else is left."""
        if self.target is None:
            return None
        rest = [v for i, v in enumerate(old) if i not in self.target]
        if all(v is None for v in rest):
            return None
        return tuple(None if i in self.target and i not in self.key_index else v for i, v in enumerate(old))

    def retract(self, old, row):
        """The row after retracting ``row`` from the stored row ``old``. Only a retraction table's merger
        (:class:`AggregationMerger`) is asked."""
        raise NotImplementedError(f"the {self.spec.merge_engine} merge engine does not retract")

    def _insert(self, rows: dict, key: Row, row) -> list[Change]:
        """Store a key's first row: only a key's first insert takes an auto-increment id; later writes keep it
        (it is never a target column)."""
        if self.auto_increment_index is not None:
            i = self.auto_increment_index
            assert self.ids is not None, "an auto-increment table's merger is given its id ranges"
            row = (*row[:i], self.ids.next(), *row[i + 1 :])
        rows[key] = row
        self.counts.inserted += 1
        return [("+U" if self.wal_shortcut else "+I", row)]

    def _retract(self, rows: dict, key: Row, row) -> list[Change]:
        """A retraction: the key's row with the record's values taken back, logged as any update (``-U``/``+U``).
        A retraction for a key with no row changes nothing and logs nothing: the key stays absent, as in Fluss's
        retraction pull request (``KvTablet``: "Retract on non-existent key ... ignoring") and in what Paimon
        reads (a lone retraction is its own merge result, which ``DropDeleteReader`` drops), docs/semantics.md
        §4.7."""
        old = rows.get(key)
        if old is None:
            self.counts.ignored += 1
            return []
        merged = self.retract(old, row)
        rows[key] = merged
        self.counts.updated += 1
        return [("-U", old), ("+U", merged)]  # a retraction table has the FULL image (aggregation)

    def apply(self, rows: dict[Row, Row], op: str, row: Row) -> list[Change]:
        """Apply one record and return the changelog it emits (possibly empty)."""
        return self.apply_keyed(rows, op, self.key_of(row), row)

    def apply_keyed(self, rows: dict, op: str, key: Row, row) -> list[Change]:
        """:meth:`apply` with the key given. Engines with ``needs_values = False`` never look inside ``row``,
        so callers may pass a handle (e.g. an index into an Arrow table) and gather the images afterwards."""
        counts = self.counts
        if op == "-U":
            if self.retracts_update_before:
                return self._retract(rows, key, row)
            counts.dropped_update_before += 1
            return []
        old = rows.get(key)
        if op == "-D":
            if self.drop_deletes:
                counts.ignored += 1
                return []
            if self.disable_deletes:
                raise WriteRefusedError(DELETE_DISABLED)
            if self.retracts_delete:
                return self._retract(rows, key, row)
            if old is None:
                counts.ignored += 1
                return []
            replacement = self.delete(old)
            if replacement is None:
                del rows[key]
                counts.deleted += 1
                return [("-D", old)]
            rows[key] = replacement
            counts.updated += 1
            return [("+U", replacement)] if self.wal else [("-U", old), ("+U", replacement)]
        if old is None:
            return self._insert(rows, key, self.first_write(row))
        merged = self.merge(old, row)
        if merged is UNCHANGED:
            counts.ignored += 1
            return []
        rows[key] = merged
        counts.updated += 1
        return [("+U", merged)] if self.wal else [("-U", old), ("+U", merged)]


class FirstRowMerger(RowMerger):
    """``first_row``: the first row of a key is kept; later upserts change nothing and emit nothing."""

    partial_update = False

    def merge(self, old, new):
        return UNCHANGED


#: What a null INT/BIGINT version compares as: the type's minimum, as Fluss's VersionedRowMerger reads it (so a
#: null ties with a stored minimum and replaces it). A null timestamp version is below every storable timestamp.
NULL_VERSIONS = {"INT": -(2**31), "BIGINT": -(2**63)}


class VersionedMerger(RowMerger):
    """``versioned``: keep the row with the larger version; ties replace; a null version is the smallest
    (an INT/BIGINT one equal to the type's minimum: :data:`NULL_VERSIONS`)."""

    needs_values = True
    partial_update = False

    def __init__(self, spec: TableSpec, target: tuple[int, ...] | None = None, ids=None):
        super().__init__(spec, target, ids)
        version = spec.column(spec.version_column or "")  # a versioned spec always names it (spec.py checks)
        self.version_index = spec.column_names.index(version.name)
        self.null_version = NULL_VERSIONS.get(version.type.name)

    def merge(self, old, new):
        old_v, new_v = old[self.version_index], new[self.version_index]
        if self.null_version is not None:
            old_v = self.null_version if old_v is None else old_v
            new_v = self.null_version if new_v is None else new_v
        if new_v is None:
            return new if old_v is None else UNCHANGED
        if old_v is None or old_v <= new_v:
            return new
        return UNCHANGED


class AggregationMerger(RowMerger):
    """``aggregation``: the first row of a key is stored as given; later rows aggregate column by column
    with each column's function of :mod:`changelake.engine.aggregates`."""

    needs_values = True

    def __init__(self, spec: TableSpec, target: tuple[int, ...] | None = None, ids=None):
        super().__init__(spec, target, ids)
        self.functions = [
            None if c.name in spec.primary_key else aggregates.scalar_fold(spec, c.name) for c in spec.columns
        ]
        self.retractions = [
            None if fn is None or not spec.agg_retract else aggregates.scalar_retract(spec, c.name)
            for fn, c in zip(self.functions, spec.columns, strict=True)
        ]

    def first_write(self, new):
        # Fluss stores an aggregation key's first row as given, even for a partial write (docs/semantics.md §4.3, §12 #3).
        return new

    def merge(self, old, new):
        # Target columns aggregate; the others keep the stored value (a key-only write re-emits -U/+U).
        t = self.target
        return tuple(
            new[i] if fn is None else fn(old[i], new[i]) if t is None or i in t else old[i]
            for i, fn in enumerate(self.functions)
        )

    def retract(self, old, row):
        # As merge, with each column's retraction (§4.7).
        t = self.target
        return tuple(
            row[i] if fn is None else fn(old[i], row[i]) if t is None or i in t else old[i]
            for i, fn in enumerate(self.retractions)
        )


class OverwriteMerger(RowMerger):
    """Fluss's ``MergeMode.OVERWRITE`` (docs/semantics.md §4.5): the write bypasses the table's merge engine and
    replaces rows as given, as ``KvTablet.putAsLeader`` does with its ``DefaultRowMerger(kvFormat,
    DeleteBehavior.ALLOW)``: last-row rules whatever the engine, partial writes for every engine (non-target
    columns of a new key null, of a stored key kept), deletes applied whatever ``table.delete.behavior`` or
    ``sink.ignore-delete`` say, nothing retracted (``-U`` records are dropped, as a sink drops them), and the
    table's changelog image (the WAL shortcut for full-row writes). Auto-increment ids as ever."""

    def __init__(
        self, spec: TableSpec, target: tuple[int, ...] | None = None, ids: IdAllocator | None = None
    ):
        super().__init__(spec, target, ids)
        self.drop_deletes = False
        self.disable_deletes = False
        self.retracts_update_before = False
        self.retracts_delete = False
        self.wal_shortcut = self.wal and target is None


#: The merger of each ``table.merge-engine`` (None: the default last-row engine).
MERGERS: dict[str | None, type[RowMerger]] = {
    None: RowMerger,
    "first_row": FirstRowMerger,
    "versioned": VersionedMerger,
    "aggregation": AggregationMerger,
}


def merger_for(
    spec: TableSpec,
    target_columns: list[str] | None = None,
    ids: IdAllocator | None = None,
    merge_mode: str | None = None,
) -> RowMerger:
    """The merger of a table's ``table.merge-engine``, for full-row or partial (target-column) writes; in the
    overwrite merge mode, :class:`OverwriteMerger` whatever the engine."""
    target = check_target_columns(spec, target_columns, merge_mode)
    cls = OverwriteMerger if merge_mode_of(merge_mode) == "overwrite" else MERGERS[spec.merge_engine]
    return cls(spec, target, ids)


def sequence_overflow(column: str, max_value: int) -> str:
    """Fluss's refusal when an auto-increment column has handed out its type's largest value."""
    return f'Reached maximum value of sequence "<{column}>" ({max_value}).'


class IdAllocator:
    """Auto-increment ids of one bucket (docs/semantics.md §8): consumes the id ranges the driver handed it, in order."""

    def __init__(self, ranges: list[tuple[int, int]], max_value: int, column: str):
        self.ranges = [list(r) for r in ranges]  # [next, last] each, inclusive
        self.max_value = max_value
        self.column = column

    def next(self) -> int:
        while self.ranges and self.ranges[0][0] > self.ranges[0][1]:
            self.ranges.pop(0)
        if not self.ranges:
            raise WriteRefusedError(
                "auto-increment ids ran out for this bucket (the driver allocates too few)"
            )
        value = self.ranges[0][0]
        if value > self.max_value:
            raise WriteRefusedError(sequence_overflow(self.column, self.max_value))
        self.ranges[0][0] += 1
        return value

    def remaining(self) -> tuple[int, int] | None:
        """The unused part of the current range (kept for the next batch); later ranges are given up."""
        for lo, hi in self.ranges:
            if lo <= hi:
                return lo, hi
        return None


def check_target_columns(
    spec: TableSpec, target_columns: list[str] | None, merge_mode: str | None = None
) -> tuple[int, ...] | None:
    """Validate a partial write's target columns (docs/semantics.md §6, §4.3) with Fluss's messages. An overwrite
    write (:class:`OverwriteMerger`) is checked as the last-row engine's, whatever the table's engine.

    Returns the target column indexes, or None for a full-row write (no list, or a list naming every column).
    """
    overwrite = merge_mode_of(merge_mode) == "overwrite"
    names = list(spec.column_names)
    ai = spec.auto_increment_column
    # Fluss checks these twice, in its client (UpsertWriter) and in the server (KvTablet), with different
    # words; a refusal here says both, the client's first.
    if ai is not None and target_columns is None:
        raise WriteRefusedError(
            f"This table has auto increment column [{ai}]. Explicitly specifying values for an auto increment "
            "column is not allowed. Please specify non-auto-increment columns as target columns using "
            f"partialUpdate first. (The table contains an auto-increment column [{ai}], but update target "
            "columns are not explicitly specified.)"
        )
    if target_columns is None:
        return None
    for column in target_columns:
        if column not in names:
            raise WriteRefusedError(f"Can not find target column: {column} for table {spec.full_name}.")
    engine = None if overwrite else spec.merge_engine
    if not MERGERS[engine].partial_update:
        raise WriteRefusedError(f"Partial update is not supported for the {engine} merge engine.")
    if not set(spec.primary_key) <= set(target_columns):
        raise WriteRefusedError(
            f"The target write columns {java_list(target_columns)} must contain the primary key columns "
            f"{java_list(spec.primary_key)}."
        )
    if ai is not None and ai in target_columns:
        raise WriteRefusedError(
            f"Explicitly specifying values for the auto increment column {ai} is not allowed. "
            f"(Auto-increment column [{ai}] at index {names.index(ai)} must not be included in target columns.)"
        )
    if set(target_columns) == set(names):
        return None
    what = "Partial aggregate" if engine == "aggregation" else "Partial Update"
    for c in spec.columns:
        if c.name not in spec.primary_key and c.name != ai and not c.nullable:
            raise WriteRefusedError(
                f"{what} requires all columns except primary key to be nullable, but column {c.name} is NOT NULL."
            )
    return tuple(sorted({names.index(c) for c in target_columns}))


def apply_sequential(
    spec: TableSpec,
    rows: dict[Row, Row],
    records: Iterable[tuple[str, Row]],
    target_columns: list[str] | None = None,
    ids: IdAllocator | None = None,
    merge_mode: str | None = None,
) -> tuple[list[Change], BatchCounts]:
    """Reference semantics: apply ``records`` one by one, in order. Mutates ``rows``.

    A batch that holds a delete on a ``disable`` table fails as a whole: nothing is applied.
    """
    records = list(records)
    merger = merger_for(spec, target_columns, ids, merge_mode)
    if merger.disable_deletes and any(op == "-D" for op, _ in records):
        raise WriteRefusedError(DELETE_DISABLED)
    changelog: list[Change] = []
    for op, row in records:
        merger.counts.records += 1
        changelog.extend(merger.apply(rows, op, row))
    return changelog, merger.counts
