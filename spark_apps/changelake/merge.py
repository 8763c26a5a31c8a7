"""Merge semantics of primary-key tables — the one module that owns them (spec §2, §3.1, §5).

Two renderings of the same rules live here, side by side, and the test suite checks them against each other:

* :func:`apply_sequential` — the reference: applies records one at a time to a dict of rows, exactly as
  Fluss's ``KvTablet.putAsLeader`` does, and returns the changelog it emits.
* :func:`last_row_plan` — the Spark plan the apply app runs for the default (last-row) engine. Per key it
  orders the batch's records after the stored row, looks at the previous state with window functions and
  derives the same changelog, vectorised: no Python per record.

Rules of the default engine (FULL image): an upsert of a new key emits ``+I``; of an existing key
``-U old, +U new`` (even if equal); a delete of an existing key ``-D old``; a delete of a missing key nothing;
``-U`` inputs are dropped (a Flink upsert sink drops UPDATE_BEFORE). ``table.delete.behavior``: allow deletes,
ignore drops them, disable refuses the batch. ``sink.ignore-delete`` drops deletes before the table sees them.
WAL image: an upsert emits only ``+U new`` (also for a new key), a delete ``-D old``.
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
        raise WriteRefusedError(f"{spec.full_name}: {DELETE_DISABLED} The batch holds {deletes} delete record(s).")
    if deletes_dropped_before_table(spec):
        counts.ignored += deletes
    return counts


# --- reference model -------------------------------------------------------------------------------------
Row = tuple
Change = tuple[str, Row]  # (change type, row image)


def apply_record(spec: TableSpec, rows: dict[Row, Row], op: str, row: Row, counts: BatchCounts) -> list[Change]:
    """Apply one record to ``rows`` (key -> full row, in column order) and return the changelog it emits."""
    key_idx = [spec.column_names.index(k) for k in spec.primary_key]
    key = tuple(row[i] for i in key_idx)
    old = rows.get(key)
    if op == "-U":
        counts.dropped_update_before += 1
        return []
    if op == "-D":
        if spec.ignore_delete or spec.delete_behavior == "ignore":
            counts.ignored += 1
            return []
        if spec.delete_behavior == "disable":
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
        return [("+U" if spec.changelog_image == "wal" else "+I", row)]
    counts.updated += 1
    if spec.changelog_image == "wal":
        return [("+U", row)]
    return [("-U", old), ("+U", row)]


def apply_sequential(
    spec: TableSpec, rows: dict[Row, Row], records: Iterable[tuple[str, Row]]
) -> tuple[list[Change], BatchCounts]:
    """Reference semantics: apply ``records`` one by one, in order. Mutates ``rows``."""
    counts = BatchCounts()
    changelog: list[Change] = []
    records = list(records)
    if any(op == "-D" for op, _ in records) and spec.delete_behavior == "disable" and not spec.ignore_delete:
        raise WriteRefusedError(DELETE_DISABLED)  # the whole batch fails, nothing applied
    for op, row in records:
        counts.records += 1
        changelog.extend(apply_record(spec, rows, op, row, counts))
    return changelog, counts


# --- Spark plan ------------------------------------------------------------------------------------------
def last_row_plan(spec: TableSpec, records, old):
    """Spark rendering of the default engine for the keys a batch touches.

    ``records``: ``_seq, _op, <columns>`` with ``-U`` (and ignored deletes) already removed.
    ``old``: the stored rows of the touched keys (``<columns>``).
    Returns ``(events, final_rows, changelog)``: ``events`` carries a per-record ``_effect``
    (insert/update/delete/noop) for counting; ``final_rows`` the keys' new rows; ``changelog`` the records
    ``_seq, _sub, _change_type, <columns>`` in batch order.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols = list(spec.column_names)
    pk = list(spec.primary_key)
    stored = old.select(F.lit(-1).cast("long").alias("_seq"), F.lit("+I").alias("_op"), *cols)
    events = stored.unionByName(records.select("_seq", "_op", *cols))
    w = Window.partitionBy(*pk).orderBy("_seq")
    row = F.struct(*[F.col(c) for c in cols])
    ev = events.select(
        "*",
        F.lag("_op").over(w).alias("_prev_op"),
        F.lag(row).over(w).alias("_prev"),
        F.lead("_seq").over(w).alias("_next_seq"),
    )
    has_prev = F.col("_prev_op").isNotNull() & (F.col("_prev_op") != "-D")
    is_delete = F.col("_op") == "-D"
    ev = ev.withColumn(
        "_effect",
        F.when(F.col("_seq") < 0, F.lit("stored"))
        .when(is_delete, F.when(has_prev, "delete").otherwise("noop"))
        .otherwise(F.when(has_prev, "update").otherwise("insert")),
    )

    def image(change_type: str, source, sub: int):
        return F.struct(F.lit(sub).alias("_sub"), F.lit(change_type).alias("_change_type"), source.alias("_row"))

    wal = spec.changelog_image == "wal"
    current = F.col("_row_now")
    emitted = (
        F.when(F.col("_effect") == "insert", F.array(image("+U" if wal else "+I", current, 0)))
        .when(
            F.col("_effect") == "update",
            F.array(image("+U", current, 0)) if wal
            else F.array(image("-U", F.col("_prev"), 0), image("+U", current, 1)),
        )
        .when(F.col("_effect") == "delete", F.array(image("-D", F.col("_prev"), 0)))
    )
    changelog = (
        ev.filter(F.col("_effect").isin("insert", "update", "delete"))
        .withColumn("_row_now", row)
        .select("_seq", F.explode(emitted).alias("_e"))
        .select("_seq", "_e._sub", "_e._change_type", *[F.col(f"_e._row.{c}").alias(c) for c in cols])
    )
    final_rows = ev.filter(F.col("_next_seq").isNull() & (F.col("_seq") >= 0) & ~is_delete).select(*cols)
    return ev, final_rows, changelog
