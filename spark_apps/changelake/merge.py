"""Merge semantics of primary-key tables — the one module that owns them (spec §2, §3.1, §5).

:class:`RowMerger` applies one record to the rows of a key, exactly as Fluss's ``KvTablet.putAsLeader``
does, and returns the changelog it emits. Every path uses it: the Spark apply runs it inside one task per
touched bucket (:mod:`changelake.buckets`), over that bucket's records in batch order, and the tests use
:func:`apply_sequential` as the plain one-record-at-a-time reference.

Rules of the default (last-row) engine, FULL image: an upsert of a new key emits ``+I``; of an existing key
``-U old, +U new`` (even if equal); a delete of an existing key ``-D old``; a delete of a missing key
nothing; ``-U`` inputs are dropped (a Flink upsert sink drops UPDATE_BEFORE). ``table.delete.behavior``:
allow deletes, ignore drops them, disable refuses the batch. ``sink.ignore-delete`` drops deletes before
the table sees them. WAL image: an upsert emits only ``+U new`` (also for a new key), a delete ``-D old``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from changelake.errors import WriteRefusedError
from changelake.spec import TableSpec

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
    ignored: int = 0  # deletes that changed nothing: ignored by behaviour, sink.ignore-delete, or key absent
    dropped_update_before: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def deletes_dropped_before_table(spec: TableSpec) -> bool:
    """True when ``-D`` records never reach the table (``sink.ignore-delete`` or behaviour ``ignore``)."""
    return spec.ignore_delete or spec.delete_behavior == "ignore"


def check_batch_ops(spec: TableSpec, op_counts: dict[str, int]) -> BatchCounts:
    """Validate a batch's operations before any work and count what is dropped up front."""
    counts = BatchCounts(records=sum(op_counts.values()), dropped_update_before=op_counts.get("-U", 0))
    deletes = op_counts.get("-D", 0)
    if deletes and not spec.ignore_delete and spec.delete_behavior == "disable":
        raise WriteRefusedError(
            f"{spec.full_name}: {DELETE_DISABLED} The batch holds {deletes} delete record(s)."
        )
    if deletes_dropped_before_table(spec):
        counts.ignored += deletes
    return counts


# --- the merger ---------------------------------------------------------------------------------------
Row = tuple
Change = tuple[str, Row]  # (change type, row image)


class RowMerger:
    """Applies records of a table to a dict ``key -> row`` (rows are tuples in column order)."""

    def __init__(self, spec: TableSpec):
        self.spec = spec
        self.key_index = tuple(spec.column_names.index(k) for k in spec.primary_key)
        self.drop_deletes = deletes_dropped_before_table(spec)
        self.disable_deletes = spec.delete_behavior == "disable" and not spec.ignore_delete
        self.wal = spec.changelog_image == "wal"
        self.counts = BatchCounts()

    def key_of(self, row: Row) -> Row:
        return tuple(row[i] for i in self.key_index)

    def apply(self, rows: dict[Row, Row], op: str, row: Row) -> list[Change]:
        """Apply one record and return the changelog it emits (possibly empty)."""
        return self.apply_keyed(rows, op, self.key_of(row), row)

    def apply_keyed(self, rows: dict, op: str, key: Row, row) -> list[Change]:
        """:meth:`apply` with the key given. The last-row engine never looks inside ``row``, so callers may
        pass a handle (e.g. an index into an Arrow table) and gather the row images afterwards."""
        counts = self.counts
        if op == "-U":
            counts.dropped_update_before += 1
            return []
        old = rows.get(key)
        if op == "-D":
            if self.drop_deletes:
                counts.ignored += 1
                return []
            if self.disable_deletes:
                raise WriteRefusedError(DELETE_DISABLED)
            if old is None:
                counts.ignored += 1
                return []
            del rows[key]
            counts.deleted += 1
            return [("-D", old)]
        rows[key] = row
        if old is None:
            counts.inserted += 1
            return [("+U" if self.wal else "+I", row)]
        counts.updated += 1
        return [("+U", row)] if self.wal else [("-U", old), ("+U", row)]


def apply_sequential(
    spec: TableSpec, rows: dict[Row, Row], records: Iterable[tuple[str, Row]]
) -> tuple[list[Change], BatchCounts]:
    """Reference semantics: apply ``records`` one by one, in order. Mutates ``rows``.

    A batch that holds a delete on a ``disable`` table fails as a whole: nothing is applied.
    """
    records = list(records)
    merger = RowMerger(spec)
    if merger.disable_deletes and any(op == "-D" for op, _ in records):
        raise WriteRefusedError(DELETE_DISABLED)
    changelog: list[Change] = []
    for op, row in records:
        merger.counts.records += 1
        changelog.extend(merger.apply(rows, op, row))
    return changelog, merger.counts
