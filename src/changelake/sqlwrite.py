"""SQL writes to primary-key tables: Flink's ``INSERT``, ``UPDATE`` and ``DELETE`` as changelake batches.

A statement is parsed by sqlglot into a tree, with Spark's dialect adjusted to Flink's lexical rules
(:func:`dialect`), checked against the table's spec with
the words Fluss's Flink connector (``FlinkTableSink``, ``FlinkTableSource``, v0.9.1) refuses with, and
planned into changelog records (:class:`WritePlan`). Nothing from the statement is spliced into SQL: table
and column names are validated names of the spec, literals are typed by the column they are written to
(:meth:`changelake.types.DataType.decode_json`). :meth:`changelake.api.ChangeLake.sql` applies each plan as
one exactly-once batch through the ordinary apply path, so every merge engine's rules hold.

What each statement becomes (docs/sql-writes.md):

* ``INSERT INTO t VALUES …`` / ``INSERT INTO t SELECT <literals>``: one ``+I`` (an upsert) per row, in order.
* ``INSERT INTO t (c1, c2) …``: the same, as a partial update of those columns (all columns: a full row).
* ``INSERT INTO t [(cols)] SELECT cols FROM s [WHERE …]``: the rows of one changelake table ``s`` (its
  current snapshot, read without Spark), projected and filtered here; joins, aggregates and functions are
  refused.
* ``DELETE FROM t WHERE <pk> = …``: one ``-D`` keyed by the whole primary key; nothing if there is no such
  row (a primary-key lookup), as for an UPDATE.
* ``UPDATE t SET c = … WHERE <pk> = …``: the stored row (a primary-key lookup) with the new values, written
  as a full row (``+U``), as Fluss's sink writes an UPDATE (FLINK-36736); nothing if there is no such row.

This module plans only; it reads rows through the callables it is given and never imports the API.
"""

from __future__ import annotations

import base64
import decimal
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changelake.errors import ChangelakeError, WriteRefusedError, java_list, printable
from changelake.identifiers import check_name, qualify_table_name

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlglot import exp

    from changelake.spec import TableSpec

#: A statement's text is at most this long (a VALUES list of a few thousand rows).
MAX_STATEMENT_CHARS = 16 << 20

Lookup = Callable[["TableSpec", dict[str, Any]], "dict[str, Any] | None"]
ReadRows = Callable[["TableSpec"], "pa.Table"]


@dataclass
class WritePlan:
    """What one statement writes: changelog-json records (``{"op", "data"}``) for one batch of ``table``."""

    kind: str  # "insert" | "update" | "delete"
    table: str
    records: list[dict[str, Any]] = field(default_factory=list)
    target_columns: list[str] | None = None  # a partial update's columns
    note: str | None = None  # why there is nothing to write
    reads_target: bool = False  # planned on the table's rows (UPDATE, DELETE, INSERT … SELECT from itself)


@dataclass
class SqlResult:
    """The outcome of one statement: the batch it applied (or found applied), and what it did to the rows."""

    statement: str
    kind: str
    table: str
    status: str  # "applied" | "already-applied" | "nothing to write"
    batch_id: int | None = None  # the table's batch id of the commit
    writer_seq: int | None = None  # the statement's number in the table's ``sql`` writer
    counts: dict[str, int] = field(default_factory=dict)  # rows inserted, updated, deleted; records ignored
    changelog_records: int = 0
    idempotency_key: str | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    def describe(self) -> str:
        return describe(self.to_dict())


def describe(result: dict[str, Any]) -> str:
    """One line for the CLI of a :class:`SqlResult` (as a dict): what happened, the batch, the rows."""
    where = f"{str(result['kind']).upper()} {result['table']}"
    if result["status"] == "nothing to write":
        return f"{where}: nothing to write ({result.get('note')})"
    c = result.get("counts") or {}
    counts = (
        f"inserted {c.get('inserted', 0)}, updated {c.get('updated', 0)}, deleted {c.get('deleted', 0)}, "
        f"ignored {c.get('ignored', 0)}; changelog {result.get('changelog_records', 0)} record(s)"
    )
    batch = f"sql batch {result.get('writer_seq')} (table batch {result['batch_id']})"
    if result["status"] == "already-applied":
        return f"{where}: no-op (already applied as {batch}); {counts}"
    return f"{where}: {batch} applied; {counts}"


# --- parsing -----------------------------------------------------------------------------------------------
@functools.cache
def dialect() -> Any:
    """sqlglot's Spark dialect with Flink's literals: Flink SQL and Spark SQL share the DML grammar used here
    (``INSERT INTO t (cols) VALUES``, ``UPDATE … SET``, ``DELETE FROM``, backtick-quoted identifiers), but a
    Flink string is single-quoted with ``''`` as its only escape (a backslash is itself, a double quote
    starts no string), where Spark also takes ``"…"`` and backslash escapes."""
    from sqlglot.dialects.spark import Spark

    class FlinkWrites(Spark):
        class Tokenizer(Spark.Tokenizer):
            QUOTES = ["'"]
            STRING_ESCAPES = ["'"]

    return FlinkWrites


def parse(text: str) -> list[exp.Expr]:
    """The statements of ``text`` (``;``-separated; empty ones dropped), each an INSERT, UPDATE or DELETE."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    if not isinstance(text, str):
        raise ChangelakeError(f"SQL text must be a string, got {type(text).__name__}")
    if len(text) > MAX_STATEMENT_CHARS:
        raise ChangelakeError(f"SQL text of {len(text):,} characters; at most {MAX_STATEMENT_CHARS:,}")
    try:
        trees = [t for t in sqlglot.parse(text, read=dialect()) if t is not None]
    except ParseError as e:
        raise ChangelakeError(_unparsable(text, e)) from None
    except TokenError:
        raise ChangelakeError(
            "SQL parse error: a string or a quoted name is not closed ('...' or `...`)"
        ) from None
    except RecursionError:
        raise ChangelakeError("SQL parse error: the statement is nested too deeply") from None
    if not trees:
        raise ChangelakeError("no SQL statement given")
    for tree in trees:
        if not isinstance(tree, exp.Insert | exp.Update | exp.Delete):
            raise WriteRefusedError(
                "changelake sql runs only writes to primary-key tables (INSERT, UPDATE, DELETE); "
                f"not {_kind_of(tree)} ({_short(tree)})"
            )
    return trees


#: What ``changelake sql`` takes, for the message of a statement that does not parse (a message, not SQL).
_WRITES_TAKEN = "expected INSERT INTO, UPDATE ... SET ... WHERE or DELETE FROM ... WHERE (docs/sql-writes.md)"


def _unparsable(text: str, error: Any) -> str:
    """Where the parser stopped in the statement, in the user's words (sqlglot's own description names its
    classes: "Required keyword: 'this' missing for <class ...Where>")."""
    where = (getattr(error, "errors", None) or [{}])[0]
    line, col = where.get("line"), where.get("col")
    token = ((where.get("start_context") or "")[-30:] + (where.get("highlight") or "")).strip()
    at = f" at line {line}, column {col}" if line and col else ""
    near = f", near {printable(token, 40)!r}" if token else ""
    return f"SQL parse error{at}{near}: {_WRITES_TAKEN}"


def statement_text(tree: exp.Expr) -> str:
    """The statement in a canonical form (what an idempotency key is bound to)."""
    return tree.sql(dialect=dialect())


def target_table(tree: exp.Expr, known: Callable[[], list[str]]) -> str:
    """The ``namespace.table`` a statement writes to (``known`` lists the tables, for an unqualified name)."""
    return _table_name(tree.this if not _is_schema(tree.this) else tree.this.this, known)


# --- planning ----------------------------------------------------------------------------------------------
def plan(
    tree: exp.Expr,
    spec: TableSpec,
    lookup: Lookup,
    read_rows: ReadRows,
    known: Callable[[], list[str]],
    spec_of: Callable[[str], TableSpec],
) -> WritePlan:
    """The records ``tree`` (an INSERT, UPDATE or DELETE of ``spec``'s table) writes; a refusal raises
    WriteRefusedError with Fluss's words. ``lookup`` gives a key's stored row (UPDATE), ``read_rows`` a
    table's current rows and ``spec_of`` its spec (INSERT … SELECT)."""
    from sqlglot import exp

    if isinstance(tree, exp.Insert):
        return _plan_insert(tree, spec, read_rows, known, spec_of)
    if isinstance(tree, exp.Delete):
        return _plan_delete(tree, spec, lookup)
    if isinstance(tree, exp.Update):
        return _plan_update(tree, spec, lookup)
    raise WriteRefusedError(f"not an INSERT, UPDATE or DELETE: {_short(tree)}")


def _plan_insert(
    tree: exp.Insert,
    spec: TableSpec,
    read_rows: ReadRows,
    known: Callable[[], list[str]],
    spec_of: Callable[[str], TableSpec],
) -> WritePlan:
    from sqlglot import exp

    name = spec.full_name
    if tree.args.get("overwrite"):
        raise WriteRefusedError(
            f"INSERT OVERWRITE requires that the underlying DynamicTableSink of table '{name}' implements the "
            "SupportsOverwrite interface."
        )
    target = tree.this.this if _is_schema(tree.this) else tree.this
    static = _static_partition(target, spec)
    _only_args(
        tree, "INSERT", {"this", "expression", "overwrite", "by_name", "exists", "stored", "is_function"}
    )
    if tree.args.get("by_name"):
        raise WriteRefusedError(
            "INSERT ... BY NAME is not supported; name the columns: INSERT INTO t (a, b) ..."
        )
    columns = list(spec.column_names)
    listed: list[str] | None = None
    if _is_schema(tree.this):
        listed = []
        for ident in tree.this.expressions:
            column = _identifier(ident, "target column")
            if column not in columns:
                raise WriteRefusedError(
                    f"Unknown target column '{column}' of table {name} {_columns_hint(spec)}"
                )
            if column in listed or column in static:
                raise WriteRefusedError(f"Target column '{column}' is assigned more than once")
            listed.append(column)
    # A static PARTITION (c = v) gives c to every row; the rows list the other columns.
    writes = listed if listed is not None else [c for c in columns if c not in static]
    partial = listed is not None and len(listed) + len(static) != len(columns)
    if partial:
        _check_partial_insert(spec, [*writes, *static])
    source = tree.expression
    if isinstance(source, exp.Values):
        rows = [_tuple_values(row) for row in source.expressions]
    elif isinstance(source, exp.Select) and source.args.get("from_") is None and _plain_select(source):
        rows = [list(source.expressions)]
    elif isinstance(source, exp.Select):
        return _plan_insert_select(tree, spec, writes, static, partial, source, read_rows, known, spec_of)
    else:
        raise WriteRefusedError(
            f"{name}: expected VALUES or a query as the rows to write; got {_short(source)}"
        )
    records = []
    for number, row in enumerate(rows, start=1):
        if len(row) != len(writes):
            raise _arity_error(name, len(row), writes)
        data = {
            column: _typed(node, spec, column, f"row {number}")
            for column, node in zip(writes, row, strict=True)
        }
        data.update(static)
        _check_not_null(spec, data, number)
        records.append({"op": "+I", "data": data})
    return WritePlan("insert", name, records, [*writes, *static] if partial else None)


def _static_partition(target: exp.Table, spec: TableSpec) -> dict[str, Any]:
    """The columns and values of ``INSERT INTO t PARTITION (c = v, ...)`` (Flink's static partition): each a
    partition key of the table, its value typed by the column (a number is taken as text for a string
    column, as Flink reads a partition spec)."""
    from sqlglot import exp

    partition = target.args.get("partition")
    if partition is None:
        return {}
    static: dict[str, Any] = {}
    qualifiers = _qualifiers(target, spec)
    for item in partition.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise WriteRefusedError(
                f"{spec.full_name}: PARTITION takes static values (c = value), not {_short(item)}"
            )
        column = _column(item.this, spec, qualifiers, what="target column")
        if column not in spec.partition_keys:
            raise WriteRefusedError(
                f"{spec.full_name}: '{column}' in PARTITION (...) is not a partition column "
                f"(partition keys: {java_list(spec.partition_keys)})"
            )
        if column in static:
            raise WriteRefusedError(f"Target column '{column}' is assigned more than once")
        value = item.expression
        if (
            isinstance(value, exp.Literal)
            and not value.is_string
            and spec.column(column).type.name in ("STRING", "CHAR")
        ):
            value = exp.Literal.string(str(value.this))
        static[column] = _typed(value, spec, column, "PARTITION")
    return static


def _plan_insert_select(
    tree: exp.Insert,
    spec: TableSpec,
    writes: list[str],
    static: dict[str, Any],
    partial: bool,
    select: exp.Select,
    read_rows: ReadRows,
    known: Callable[[], list[str]],
    spec_of: Callable[[str], TableSpec],
) -> WritePlan:
    """INSERT … SELECT of a projection and filter of one changelake table, read without Spark."""
    from sqlglot import exp

    name = spec.full_name
    unsupported = sorted(
        k for k, v in select.args.items() if v and k not in ("expressions", "from_", "where")
    )
    source = select.args["from_"].this
    if (
        unsupported
        or select.args.get("joins")
        or not isinstance(source, exp.Table)
        or not _plain_select(select)
    ):
        raise WriteRefusedError(
            f"INSERT INTO {name} ... SELECT: changelake sql reads one table's rows, projected (columns, "
            "literals, *) and filtered (comparisons with literals, IS [NOT] NULL, IN, AND/OR/NOT); "
            f"{', '.join(unsupported) or 'this query'} is not supported ({_short(select)})"
        )
    source_spec = spec_of(_source_table_name(source, known))
    qualifiers = _qualifiers(source, source_spec)
    outputs: list[tuple[str, Any]] = []  # ("column", name) or ("literal", node)
    for item in select.expressions:
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star):
            outputs += [("column", c) for c in source_spec.column_names]
        elif isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
            _check_qualifier(node, qualifiers, source_spec)
            outputs += [("column", c) for c in source_spec.column_names]
        elif isinstance(node, exp.Column):
            outputs.append(("column", _column(node, source_spec, qualifiers)))
        else:
            outputs.append(("literal", node))
    if len(outputs) != len(writes):
        raise _arity_error(name, len(outputs), writes)
    # Literals are typed (and refused) before any row is read.
    literals = {
        i: _typed(node, spec, writes[i], "the SELECT list")
        for i, (what, node) in enumerate(outputs)
        if what == "literal"
    }
    rows = read_rows(source_spec)
    where = select.args.get("where")
    if where is not None:
        mask = _predicate(where.this, rows, source_spec, qualifiers)
        rows = rows.filter(mask)
    needed = sorted({c for what, c in outputs if what == "column"})
    values = {c: rows.column(c).to_pylist() for c in needed} if rows.num_rows else {}
    records = []
    for number in range(rows.num_rows):
        data: dict[str, Any] = {}
        for i, (what, item) in enumerate(outputs):
            column = writes[i]
            if what == "literal":
                data[column] = literals[i]
            else:
                data[column] = _stored_as_json(spec, column, values[item][number], f"source row {number + 1}")
        data.update(static)
        _check_not_null(spec, data, number + 1)
        records.append({"op": "+I", "data": data})
    note = None if records else f"the SELECT on {source_spec.full_name} found no rows"
    target = [*writes, *static] if partial else None
    return WritePlan("insert", name, records, target, note, reads_target=source_spec.full_name == name)


def _plan_delete(tree: exp.Delete, spec: TableSpec, lookup: Lookup) -> WritePlan:
    name = spec.full_name
    _check_row_level(spec)
    if spec.options.get("table.delete.behavior") == "disable":
        raise WriteRefusedError(
            f"Table {name} has delete behavior set to 'disable' which does not support DELETE statements."
        )
    _only_args(tree, "DELETE", {"this", "where"})
    key = _key_condition(tree, spec, "DELETE")
    if lookup(spec, key) is None:  # as an UPDATE of a missing key: nothing to write, and said so
        return WritePlan("delete", name, note=f"no row of {name} has the key {key}", reads_target=True)
    return WritePlan("delete", name, [{"op": "-D", "data": key}], reads_target=True)


def _plan_update(tree: exp.Update, spec: TableSpec, lookup: Lookup) -> WritePlan:
    from sqlglot import exp

    name = spec.full_name
    _check_row_level(spec)
    _only_args(tree, "UPDATE", {"this", "expressions", "where"})
    qualifiers = _qualifiers(tree.this, spec)
    assignments: dict[str, Any] = {}
    for item in tree.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise WriteRefusedError(
                f"each assignment of an update of {name} is column = value; got {_short(item)}"
            )
        column = _column(item.this, spec, qualifiers, what="target column")
        if column in assignments:
            raise WriteRefusedError(f"Target column '{column}' is assigned more than once")
        assignments[column] = item.expression
    updated = list(assignments)
    if set(updated) & set(spec.primary_key):
        raise WriteRefusedError(
            f"Updates to primary keys are not supported, primaryKeys ({java_list(spec.primary_key)}), "
            f"updatedColumns ({java_list(updated)})"
        )
    values = {c: _typed(node, spec, c, "SET") for c, node in assignments.items()}
    key = _key_condition(tree, spec, "UPDATE")
    stored = lookup(spec, key)
    if stored is None:
        return WritePlan("update", name, note=f"no row of {name} has the key {key}", reads_target=True)
    row = {c: _stored_as_json(spec, c, stored.get(c), "the stored row") for c in spec.column_names}
    row.update(values)
    _check_not_null(spec, row, 1)
    return WritePlan("update", name, [{"op": "+U", "data": row}], reads_target=True)


# --- Fluss's checks --------------------------------------------------------------------------------------
def _engine_name(spec: TableSpec) -> str:
    return str(spec.merge_engine).upper()


def _check_row_level(spec: TableSpec) -> None:
    """``FlinkTableSink.validateUpdatable``: DELETE and UPDATE only on tables without a merge engine."""
    if spec.merge_engine is not None:
        raise WriteRefusedError(
            f"Table {spec.full_name} uses the '{_engine_name(spec)}' merge engine which does not support DELETE "
            "or UPDATE statements."
        )


def _check_partial_insert(spec: TableSpec, listed: list[str]) -> None:
    """``FlinkTableSink.getSinkRuntimeProvider``'s checks of an INSERT with fewer columns than the table."""
    if spec.merge_engine is not None and spec.merge_engine != "aggregation":
        raise WriteRefusedError(
            f"Table {spec.full_name} uses the '{_engine_name(spec)}' merge engine which does not support "
            "partial updates. Please make sure the number of specified columns in INSERT INTO matches columns "
            "of the Fluss table."
        )
    if not set(spec.primary_key) <= set(listed):
        raise WriteRefusedError(
            "Fluss table sink does not support partial updates without fully specifying the primary key "
            f"columns. The insert columns are {java_list(listed)}, but the primary key columns are "
            f"{java_list(spec.primary_key)}. Please make sure the specified columns in INSERT INTO contains the "
            "primary key columns."
        )


def _key_condition(tree: exp.Expr, spec: TableSpec, kind: str) -> dict[str, Any]:
    """The primary key a DELETE/UPDATE names: its WHERE must be ``pk = literal`` for every key column, and
    nothing else (Fluss pushes such a filter down as a one-row delete or lookup; v0.9.1 refuses the rest)."""
    from sqlglot import exp

    refused = WriteRefusedError(
        f"Currently, Fluss table only supports {kind} statement with conditions on primary key."
    )
    where = tree.args.get("where")
    if where is None:
        raise refused
    qualifiers = _qualifiers(tree.this, spec)
    conjuncts: list[exp.Expr] = []
    stack = [where.this]
    while stack:
        node = stack.pop()
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.And):
            stack += [node.expression, node.this]
        else:
            conjuncts.append(node)
    if len(conjuncts) != len(spec.primary_key):
        raise refused
    key: dict[str, Any] = {}
    for node in conjuncts:
        if not isinstance(node, exp.EQ):
            raise refused
        column, value = node.this, node.expression
        if isinstance(value, exp.Column) and not isinstance(column, exp.Column):
            column, value = value, column
        if not isinstance(column, exp.Column) or isinstance(value, exp.Column):
            raise refused
        name = _column(column, spec, qualifiers)
        if name not in spec.primary_key or name in key:
            raise refused
        key[name] = _typed(value, spec, name, "WHERE")
        if key[name] is None:
            raise refused  # `pk = NULL` is never true: Flink does not push it down either
    return {c: key[c] for c in spec.primary_key}


def _check_not_null(spec: TableSpec, data: dict[str, Any], number: int) -> None:
    """Flink's sink NOT NULL enforcer (``table.exec.sink.not-null-enforcer`` = ERROR, its default)."""
    for column, value in data.items():
        c = spec.column(column)
        if value is None and (not c.nullable or column in spec.primary_key):
            raise WriteRefusedError(
                f"Column '{column}' is NOT NULL, however, a null value is being written into it (row {number}). "
                "You can set job configuration 'table.exec.sink.not-null-enforcer'='DROP' to suppress this "
                "exception and drop such records silently."
            )


def _arity_error(table: str, got: int, writes: list[str]) -> WriteRefusedError:
    return WriteRefusedError(
        f"Column types of query result and sink for '{table}' do not match. Cause: Different number of "
        f"columns: the query gives {got} value(s), the sink takes {len(writes)} ({java_list(writes)})."
    )


# --- names -------------------------------------------------------------------------------------------------
def _is_schema(node: Any) -> bool:
    from sqlglot import exp

    return isinstance(node, exp.Schema)


def _identifier(node: Any, what: str) -> str:
    """A validated name from an identifier node (quoted or not: the same strict rule)."""
    from sqlglot import exp

    if not isinstance(node, exp.Identifier):
        raise WriteRefusedError(f"expected a {what} name, got {_short(node)}")
    try:
        return check_name(node.this, what)
    except ChangelakeError as e:
        raise WriteRefusedError(str(e)) from None


def _table_name(table: Any, known: Callable[[], list[str]]) -> str:
    """``namespace.table`` of a table reference; an unqualified name must name exactly one known table."""
    from sqlglot import exp

    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise WriteRefusedError(f"expected a table name, got {_short(table)}")
    if table.args.get("catalog") is not None:
        raise WriteRefusedError(
            f"catalog-qualified table {_short(table)}: name changelake tables as <namespace>.<table>"
        )
    name = _identifier(table.this, "table name")
    if table.args.get("db") is not None:
        return f"{_identifier(table.args['db'], 'namespace')}.{name}"
    return qualify_table_name(name, known)  # the CLI's rule for a name without its namespace


def _source_table_name(table: exp.Table, known: Callable[[], list[str]]) -> str:
    """A SELECT's table: ``namespace.table``, or its view ``global_temp.<namespace>__<table>``."""
    db = table.args.get("db")
    if db is not None and isinstance(db, type(table.this)) and str(db.this).lower() == "global_temp":
        view = _identifier(table.this, "view name")
        for name in known():
            if name.replace(".", "__", 1) == view:
                return name
        raise WriteRefusedError(f"View 'global_temp.{view}' is not the view of a changelake table")
    return _table_name(table, known)


def _qualifiers(table: exp.Table, spec: TableSpec) -> set[str]:
    """What may qualify a column of this table reference: its alias, its name, ``namespace.table``."""
    names = {spec.table, spec.full_name}
    alias = table.args.get("alias")
    if alias is not None and alias.this is not None:
        names = {str(alias.name)}
    return names


def _check_qualifier(node: exp.Column, qualifiers: set[str], spec: TableSpec) -> None:
    parts = [p.name for p in (node.args.get("db"), node.args.get("table")) if p is not None]
    if parts and ".".join(parts) not in qualifiers:
        raise WriteRefusedError(
            f"Column {_short(node)} names a table that is not {spec.full_name} (write {spec.table}.<column>)"
        )


def _column(node: exp.Column, spec: TableSpec, qualifiers: set[str], what: str = "column") -> str:
    _check_qualifier(node, qualifiers, spec)
    from sqlglot import exp

    if node.args.get("catalog") is not None or not isinstance(node.this, exp.Identifier):
        raise WriteRefusedError(f"expected a column of {spec.full_name}, got {_short(node)}")
    name = _identifier(node.this, what)
    if name not in spec.column_names:
        if what == "target column":
            raise WriteRefusedError(
                f"Unknown target column '{name}' of table {spec.full_name} {_columns_hint(spec)}"
            )
        raise WriteRefusedError(f"Column '{name}' not found in table {spec.full_name} {_columns_hint(spec)}")
    return name


def _columns_hint(spec: TableSpec) -> str:
    return f"(columns: {java_list(spec.column_names)})"


# --- literals ----------------------------------------------------------------------------------------------
def _tuple_values(row: Any) -> list[Any]:
    from sqlglot import exp

    return list(row.expressions) if isinstance(row, exp.Tuple) else [row]


def _plain_select(select: exp.Select) -> bool:
    """A SELECT without DISTINCT, GROUP BY, ORDER BY, LIMIT, windows or set operations."""
    return not any(
        select.args.get(k)
        for k in (
            "distinct",
            "group",
            "having",
            "order",
            "limit",
            "offset",
            "qualify",
            "windows",
            "with",
            "laterals",
            "joins",
            "pivots",
        )
    )


def _typed(node: Any, spec: TableSpec, column: str, where: str) -> Any:
    """The JSON value (as the changelog-json reader takes it) a literal writes to ``column``; refused unless
    it is a literal of the column's type (Flink does not cast a string into a number column, nor back)."""
    from sqlglot import exp

    c = spec.column(column)
    n = c.type.name
    original = node
    if isinstance(node, exp.Cast | exp.TryCast):  # DATE '…', TIMESTAMP '…', CAST(literal AS type)
        node = node.this
    negative = False
    if isinstance(node, exp.Neg):
        negative, node = True, node.this
    value: Any
    if isinstance(node, exp.Null):
        value = None
    elif isinstance(node, exp.Boolean) and not negative:
        value = bool(node.this)
    elif isinstance(node, exp.Literal) and not node.is_string:
        text = ("-" if negative else "") + str(node.this)
        value = _number(text, c.type.name, column, where, original)
    elif isinstance(node, exp.Literal) and not negative:
        value = str(node.this)
        if n not in (
            "CHAR",
            "STRING",
            "DATE",
            "TIME",
            "TIMESTAMP",
            "TIMESTAMP_LTZ",
            "DECIMAL",
            "FLOAT",
            "DOUBLE",
        ):
            raise _type_error(column, c.type, original, where)
        if n in ("DECIMAL", "FLOAT", "DOUBLE") and not isinstance(original, exp.Cast | exp.TryCast):
            raise _type_error(
                column, c.type, original, where
            )  # '1.5' into a number column: not without a CAST
        if n in ("FLOAT", "DOUBLE") and value not in _special_floats():
            value = _number(value, n, column, where, original)
    elif isinstance(node, exp.HexString) and not negative:
        if n not in ("BINARY", "BYTES"):
            raise _type_error(column, c.type, original, where)
        try:
            value = base64.b64encode(bytes.fromhex(str(node.this))).decode()
        except ValueError:
            raise WriteRefusedError(f"{where}: {_short(original)} is not a hex literal") from None
    else:
        raise WriteRefusedError(
            f"{where}: the value for column '{column}' must be a literal (a number, 'text', TRUE/FALSE, NULL, "
            f"X'hex', DATE/TIME/TIMESTAMP '...'); got {_short(original)}"
        )
    if value is not None:
        if isinstance(value, bool) != (n == "BOOLEAN"):
            raise _type_error(column, c.type, original, where)
        try:
            c.type.decode_json(value)
        except (ValueError, ArithmeticError) as e:
            raise WriteRefusedError(
                f"{where}: {_short(original)} for column '{column}' ({c.type}): {e}"
            ) from None
    return value


def _special_floats() -> dict[str, float]:
    from changelake.types import SPECIAL_FLOATS

    return SPECIAL_FLOATS


def _number(text: str, type_name: str, column: str, where: str, node: Any) -> Any:
    """A number literal as the JSON value of a column: int (integer types), the exact text (DECIMAL), float."""
    try:
        number = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise WriteRefusedError(f"{where}: {text!r} is not a number (column '{column}')") from None
    if type_name in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        if not number.is_finite() or number != number.to_integral_value() or abs(number.adjusted()) > 40:
            raise WriteRefusedError(
                f"{where}: {_short(node)} is not an integer for column '{column}' ({type_name})"
            )
        return int(number)
    if type_name == "DECIMAL":
        return text
    if type_name in ("FLOAT", "DOUBLE"):
        value = float(number)
        if math.isinf(value):
            raise WriteRefusedError(
                f"{where}: {_short(node)} is out of range for column '{column}' ({type_name})"
            )
        return value
    raise _type_error(column, type_name, node, where)


def _type_error(column: str, dtype: Any, node: Any, where: str) -> WriteRefusedError:
    return WriteRefusedError(
        f"{where}: {_short(node)} cannot be written to column '{column}' of type {dtype} (no implicit cast)"
    )


def _stored_as_json(spec: TableSpec, column: str, value: Any, where: str) -> Any:
    """A value a read returned, as the JSON value that decodes to it under ``column``'s type."""
    import datetime as dt

    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime) and hasattr(value, "nanosecond"):  # pandas.Timestamp (nanos columns)
        return value.isoformat()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    raise WriteRefusedError(
        f"{where}: column '{column}' holds a {type(value).__name__} this write cannot copy"
    )


# --- INSERT … SELECT filters ---------------------------------------------------------------------------------
_COMPARISONS = {
    "EQ": "equal",
    "NEQ": "not_equal",
    "LT": "less",
    "LTE": "less_equal",
    "GT": "greater",
    "GTE": "greater_equal",
}


def _predicate(node: Any, rows: pa.Table, spec: TableSpec, qualifiers: set[str]) -> pa.Array:
    """A boolean mask of ``rows`` for a WHERE clause: comparisons of a column with a literal, IS [NOT] NULL,
    IN (literals), AND, OR, NOT (SQL's three-valued logic: a null comparison keeps no row)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from sqlglot import exp

    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return pc.and_kleene(
            _predicate(node.this, rows, spec, qualifiers), _predicate(node.expression, rows, spec, qualifiers)
        )
    if isinstance(node, exp.Or):
        return pc.or_kleene(
            _predicate(node.this, rows, spec, qualifiers), _predicate(node.expression, rows, spec, qualifiers)
        )
    if isinstance(node, exp.Not):
        return pc.invert(_predicate(node.this, rows, spec, qualifiers))
    if (
        isinstance(node, exp.Is)
        and isinstance(node.this, exp.Column)
        and isinstance(node.expression, exp.Null)
    ):
        return pc.is_null(rows.column(_column(node.this, spec, qualifiers)))
    if isinstance(node, exp.In) and isinstance(node.this, exp.Column) and not node.args.get("query"):
        column = _column(node.this, spec, qualifiers)
        values = [_scalar(v, spec, column) for v in node.expressions]
        found = pc.is_in(
            rows.column(column), value_set=pa.array([v.as_py() for v in values], rows.column(column).type)
        )
        return pc.if_else(pc.is_null(rows.column(column)), pa.scalar(None, pa.bool_()), found)
    kind = type(node).__name__
    if kind in _COMPARISONS:
        left, right, name = node.this, node.expression, _COMPARISONS[kind]
        if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            left, right = right, left
            name = {
                "less": "greater",
                "greater": "less",
                "less_equal": "greater_equal",
                "greater_equal": "less_equal",
            }.get(name, name)
        if isinstance(left, exp.Column) and not isinstance(right, exp.Column):
            column = _column(left, spec, qualifiers)
            return getattr(pc, name)(rows.column(column), _scalar(right, spec, column))
    raise WriteRefusedError(
        "INSERT ... SELECT: the WHERE clause may compare columns with literals (=, <>, <, <=, >, >=), test "
        f"IS [NOT] NULL or IN (literals), joined by AND, OR, NOT; not {_short(node)}"
    )


def _scalar(node: Any, spec: TableSpec, column: str) -> pa.Scalar:
    """A literal typed by ``column`` (its stored value) as an Arrow scalar of the read's column type."""
    import pyarrow as pa

    value = _typed(node, spec, column, "WHERE")
    stored = spec.column(column).type.decode_json(value)
    view_type = spec.column(column).type.view_arrow_type()
    return pa.scalar(stored, view_type)


# --- helpers -------------------------------------------------------------------------------------------------
def _only_args(tree: Any, kind: str, allowed: set[str]) -> None:
    """Refuse clauses changelake does not run (RETURNING, USING, LIMIT, ORDER BY, hints, ...)."""
    extra = sorted(k for k, v in tree.args.items() if v and k not in allowed)
    if extra:
        raise WriteRefusedError(f"{kind}: {', '.join(extra)} is not supported ({_short(tree)})")


def _kind_of(tree: Any) -> str:
    key = getattr(tree, "key", type(tree).__name__)
    return str(key).upper()


def _short(node: Any, limit: int = 120) -> str:
    try:
        text = node.sql(dialect=dialect()) if hasattr(node, "sql") else str(node)
    except Exception:  # an unrenderable node: its repr is still a useful hint
        text = repr(node)
    return text if len(text) <= limit else text[:limit] + "..."
