"""Schema evolution by Fluss's ALTER TABLE rules, and the one spec every read and write of a table uses.

A table's layout — columns, keys, bucketing, merge engine, options — is the spec stored with it (the
``changelake.spec`` property of its PK table). The spec file in ``$CHANGELAKE_TABLES`` may differ from it
only in what Fluss lets ``ALTER TABLE`` change on a primary-key table; :func:`plan` finds those changes
(applied by :meth:`changelake.storage.iceberg.Storage.create` when the table is opened for ``create``/``apply``) and
refuses anything else, naming the column or option and Fluss's rule:

* ``ADD COLUMN``: nullable columns appended after the existing ones (``SchemaUpdate.addColumn``:
  "Column <c> must be nullable.", "Only support addColumn column at last now."), on an aggregation table
  with an aggregate function (``fields.<c>.agg``; none means ``last_value_ignore_nulls``, as in Fluss).
  Dropping, renaming and modifying a column (type, nullability, position, aggregate function) are refused
  ("Not support drop|rename|modify column now.").
* ``SET``/``RESET`` options: the Flink connector options except ``bucket.num``, ``bucket.key`` and
  ``auto-increment.fields`` ("The option '<k>' is not supported to alter yet.", ``FlinkCatalog.alterTable``),
  and among ``table.*`` options only ``FlussConfigUtils.ALTERABLE_TABLE_OPTIONS`` ("The following options
  are not supported to alter yet: '<k>'.", ``TableDescriptorValidation.validateAlterTableProperties``).
* Fluss has no ALTER for the primary key, partition keys, bucket key or bucket count.

The ``source:``, ``datagen:`` and ``comment`` sections are not part of the layout and may always change:
:func:`resolve` gives the stored layout with the file's sections, so an edited ``bucket.num`` can never make
a read or a write hash a key to another bucket than the one its rows were written to.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from changelake.errors import ChangelakeError, SpecError, unknown_table
from changelake.spec import Column, TableSpec

#: ``table.*`` options Fluss lets ALTER TABLE set or reset (``FlussConfigUtils.ALTERABLE_TABLE_OPTIONS``).
ALTERABLE_TABLE_OPTIONS = frozenset(
    {
        "table.datalake.enabled",
        "table.datalake.historical-partition.enabled",
        "table.datalake.freshness",
        "table.datalake.auto-compaction",
        "table.log.ttl",
        "table.log.tiered.local-segments",
        "table.log.local-ttl",
        "table.auto-partition.enabled",
        "table.auto-partition.num-retention",
        "table.auto-partition.num-precreate",
        "table.statistics.columns",
        "table.kv.standby-replica.enabled",
    }
)
#: Connector options Fluss's Flink catalog refuses to alter (``FlinkConnectorOptions.ALTER_DISALLOW_OPTIONS``).
ALTER_DISALLOW_OPTIONS = ("auto-increment.fields", "bucket.num", "bucket.key", "bootstrap.servers")

_SUPPORTED = (
    "supported changes: new nullable columns appended at the end (with fields.<column>.agg on aggregation "
    "tables), the alterable options, and the source/datagen/comment sections"
)


@dataclass(frozen=True)
class Evolution:
    """The supported changes from a table's stored spec to its spec file."""

    added: tuple[Column, ...] = ()
    set_options: dict[str, str] = field(default_factory=dict)
    reset_options: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.set_options or self.reset_options)

    def describe(self) -> str:
        """One line for the progress log, e.g. ``add column note STRING; set 'sink.ignore-delete'='true'``."""
        parts = [f"add column {c.name} {c.type}" for c in self.added]
        parts += [f"set '{k}'='{v}'" for k, v in sorted(self.set_options.items())]
        parts += [f"reset '{k}'" for k in self.reset_options]
        return "; ".join(parts)


def plan(stored: TableSpec, wanted: TableSpec, origin: str = "the spec file") -> Evolution:
    """What ALTER TABLE would change to turn ``stored`` into ``wanted``.

    Raises SpecError listing every difference Fluss does not allow, each with the column or option, the two
    values and Fluss's rule; the message ends with what may change."""
    problems: list[str] = []
    added = _column_changes(stored, wanted, problems)
    added_names = {c.name for c in added}
    for what, old_keys, new_keys in (
        ("primary key", stored.primary_key, wanted.primary_key),
        ("partition keys", stored.partition_keys, wanted.partition_keys),
    ):
        if old_keys != new_keys:
            problems.append(
                f"{what} {list(old_keys)} -> {list(new_keys)} "
                f"(a table's {what} cannot change: Fluss has no ALTER TABLE for it)"
            )
    if stored.bucket_key != wanted.bucket_key:
        problems.append(
            f"bucket key {list(stored.bucket_key)} -> {list(wanted.bucket_key)} "
            "(The option 'bucket.key' is not supported to alter yet.)"
        )
    if stored.bucket_num != wanted.bucket_num:
        problems.append(
            f"bucket.num {stored.bucket_num} -> {wanted.bucket_num} "
            "(The option 'bucket.num' is not supported to alter yet.)"
        )

    set_options: dict[str, str] = {}
    reset: list[str] = []
    for key in sorted(set(stored.options) | set(wanted.options)):
        old, new = stored.options.get(key), wanted.options.get(key)
        if old == new:
            continue
        shown = f"option '{key}' {_value(old)} -> {_value(new)}"
        if key.startswith("fields."):
            column = key.split(".")[1]
            if column not in added_names:
                problems.append(
                    f"{shown}: the aggregate function of existing column '{column}' is part of the column "
                    "(Not support modify column now.)"
                )
                continue
        elif key in ALTER_DISALLOW_OPTIONS:
            problems.append(f"{shown} (The option '{key}' is not supported to alter yet.)")
            continue
        elif key.startswith("table.") and key not in ALTERABLE_TABLE_OPTIONS:
            problems.append(f"{shown} (The following options are not supported to alter yet: '{key}'.)")
            continue
        if new is None:
            reset.append(key)
        else:
            set_options[key] = new
    if problems:
        raise SpecError(
            f"Table {stored.full_name} already exists with a different spec: {origin} changes what Fluss's "
            f"ALTER TABLE cannot: {'; '.join(problems)}. The table keeps its stored spec; {_SUPPORTED}. "
            "Restore the spec, or drop the table and create it again."
        )
    return Evolution(tuple(added), set_options, tuple(reset))


def _column_changes(stored: TableSpec, wanted: TableSpec, problems: list[str]) -> list[Column]:
    """The columns ``wanted`` appends to ``stored``; every other column difference goes to ``problems``."""
    old = {c.name: c for c in stored.columns}
    new = {c.name: c for c in wanted.columns}
    new_order = [c.name for c in wanted.columns]
    renamed: set[str] = set()
    for i, column in enumerate(stored.columns):
        if column.name in new:
            target = new[column.name]
            if target.type != column.type:
                problems.append(
                    f"column '{column.name}' type {column.type} -> {target.type} (Not support modify column now.)"
                )
            if target.nullable != column.nullable:
                problems.append(
                    f"column '{column.name}' {_nullability(column)} -> {_nullability(target)} "
                    "(Not support modify column now.)"
                )
            continue
        # A new name with the same type where the old column was reads as a rename, anything else as a drop.
        at = new_order[i] if i < len(new_order) else None
        if at is not None and at not in old and new[at].type == column.type:
            renamed.add(at)
            problems.append(f"column '{column.name}' renamed to '{at}' (Not support rename column now.)")
        else:
            problems.append(f"column '{column.name}' dropped (Not support drop column now.)")
    kept = [name for name in new_order if name in old]
    if kept != [c.name for c in stored.columns if c.name in new]:
        problems.append(f"columns reordered to {kept} (Not support modify column now.)")
    last_kept = max((new_order.index(name) for name in kept), default=-1)
    added = []
    for i, name in enumerate(new_order):
        if name in old or name in renamed:
            continue
        column = new[name]
        if i < last_kept:
            problems.append(
                f"column '{name}' added before existing column '{new_order[last_kept]}' "
                "(Only support addColumn column at last now.)"
            )
        if not column.nullable:
            problems.append(f"column '{name}' added NOT NULL (Column {name} must be nullable.)")
        added.append(column)
    return added


def _nullability(column: Column) -> str:
    return "NULL" if column.nullable else "NOT NULL"


def _value(value: str | None) -> str:
    return "(unset)" if value is None else f"'{value}'"


def stored_spec(stored_json: str, table: str, file_spec: TableSpec | None = None) -> TableSpec:
    """Parse the spec JSON stored with a table (validated like a spec file).

    Before changelake kept a TIME column's precision it stored every TIME(p) as a bare ``TIME``: such a stored
    column takes the precision ``file_spec`` declares for it (otherwise TIME is TIME(0), as in Flink)."""
    try:
        data = json.loads(stored_json)
    except json.JSONDecodeError as e:
        raise ChangelakeError(f"Table {table}: its stored spec is not valid JSON ({e})") from None
    if file_spec is not None and isinstance(data, dict) and isinstance(data.get("columns"), list):
        declared = {c.name: c.type for c in file_spec.columns}
        for column in data["columns"]:
            name = column.get("name") if isinstance(column, dict) else None
            if isinstance(name, str) and str(column.get("type")).strip().upper() == "TIME":
                wanted = declared.get(name)
                if wanted is not None and wanted.name == "TIME":
                    column["type"] = str(wanted)
    return TableSpec.from_dict(data, origin=f"the spec stored with table {table}")


def with_sections(stored: TableSpec, file_spec: TableSpec | None) -> TableSpec:
    """``stored`` with the ``source``, ``datagen`` and ``comment`` sections of ``file_spec`` (if any)."""
    if file_spec is None:
        return stored
    return dataclasses.replace(
        stored, source=dict(file_spec.source), datagen=dict(file_spec.datagen), comment=file_spec.comment
    )


def resolve(table: str, file_spec: TableSpec | None, stored_json: str | None) -> TableSpec:
    """The spec reads and writes of ``table`` use: the layout stored with the table plus the file's
    ``source``/``datagen``/``comment``; the file's spec for a table not created yet; the stored spec alone
    when there is no file. A file that differs in layout is not used for reads (:func:`plan` refuses it when
    the table is opened for writing)."""
    if stored_json:
        return with_sections(stored_spec(stored_json, table, file_spec), file_spec)
    if file_spec is None:
        raise unknown_table(table, "not in the catalog and no spec file")
    return file_spec


def difference_note(table: str, file_spec: TableSpec | None, stored_json: str | None) -> str | None:
    """A progress line when the spec file differs in layout from the stored spec (reads use the stored one),
    else None."""
    if file_spec is None or not stored_json:
        return None
    stored = stored_spec(stored_json, table, file_spec)
    try:
        pending = plan(stored, file_spec)
    except SpecError as e:
        return f"[{table}] reading with the stored spec; {e}"
    if pending:
        return (
            f"[{table}] reading with the stored spec; the spec file's changes ({pending.describe()}) are "
            "applied when the table is next opened for create/apply"
        )
    return None


__all__ = [
    "ALTERABLE_TABLE_OPTIONS",
    "ALTER_DISALLOW_OPTIONS",
    "Evolution",
    "difference_note",
    "plan",
    "resolve",
    "stored_spec",
    "with_sections",
]
