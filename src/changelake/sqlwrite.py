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
import dataclasses
import decimal
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changelake import sqltypes
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
    merge_mode: str | None = (
        None  # "overwrite": the statement bypasses the merge engine (docs/semantics.md §4.5)
    )


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
    from sqlglot import exp
    from sqlglot import parser as base
    from sqlglot.dialects.spark import Spark
    from sqlglot.generators.spark import SparkGenerator
    from sqlglot.parsers.spark import SparkParser
    from sqlglot.tokens import TokenType

    class FlinkWrites(Spark):
        class Tokenizer(Spark.Tokenizer):
            QUOTES = ["'"]
            STRING_ESCAPES = ["'"]
            # Flink's TIMESTAMP has no time zone (Spark's has one); BYTES is VARBINARY of the largest length.
            KEYWORDS = {**Spark.Tokenizer.KEYWORDS, "TIMESTAMP": TokenType.TIMESTAMP, "BYTES": TokenType.BLOB}

        class Parser(SparkParser):
            def _parse_types(
                self, check_func=False, schema=False, allow_identifiers=True, with_collation=False
            ):
                # The generic parser: Spark's drops CHAR(n)/VARCHAR(n) lengths (Spark treats them as STRING).
                return base.Parser._parse_types(
                    self,
                    check_func=check_func,
                    schema=schema,
                    allow_identifiers=allow_identifiers,
                    with_collation=with_collation,
                )

        class Generator(SparkGenerator):
            def datatype_sql(self, expression: exp.DataType) -> str:
                # Flink's names with their precision or length (a statement's canonical text must tell
                # TIMESTAMP(3) from TIMESTAMP(6) and TIME from TIMESTAMP).
                flink = {
                    exp.DType.TIMESTAMP: "TIMESTAMP",
                    exp.DType.TIMESTAMPLTZ: "TIMESTAMP_LTZ",
                    exp.DType.TIME: "TIME",
                    exp.DType.CHAR: "CHAR",
                    exp.DType.VARCHAR: "VARCHAR",
                    exp.DType.BINARY: "BINARY",
                    exp.DType.VARBINARY: "VARBINARY",
                    exp.DType.BLOB: "BYTES",
                }.get(expression.this)
                if flink is None:
                    return super().datatype_sql(expression)
                params = ", ".join(self.sql(e) for e in expression.expressions or [])
                return f"{flink}({params})" if params else flink

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


#: The statement options ``/*+ OPTIONS('k'='v') */`` after the table name may set (Flink's dynamic table options).
STATEMENT_OPTIONS = ("merge-mode",)
_OPTIONS_HINT = re.compile(r"\s*\+?\s*OPTIONS\s*\((.*)\)\s*", re.IGNORECASE | re.DOTALL)
_OPTION_PAIR = re.compile(r"\s*'((?:[^']|'')*)'\s*=\s*'((?:[^']|'')*)'\s*(?:,|$)")


def statement_options(tree: exp.Expr) -> dict[str, str]:
    """The options of a statement's ``/*+ OPTIONS('k'='v', ...) */`` hint after its table name (Flink's dynamic
    table options); only :data:`STATEMENT_OPTIONS` are taken, in Flink's words for the rest."""
    target = tree.this
    nodes = [target, target.this] if _is_schema(target) else [target]
    options: dict[str, str] = {}
    for comment in [c for node in nodes for c in (node.comments or [])]:
        match = _OPTIONS_HINT.fullmatch(comment)
        if match is None:
            continue
        body, at = match.group(1), 0
        while at < len(body.rstrip()):
            pair = _OPTION_PAIR.match(body, at)
            if pair is None:
                raise WriteRefusedError(f"cannot read the statement option hint OPTIONS({body.strip()})")
            key, value = (g.replace("''", "'") for g in pair.groups())
            options[key] = value
            at = pair.end()
    unknown = sorted(set(options) - set(STATEMENT_OPTIONS))
    if unknown:
        raise WriteRefusedError(
            "Unsupported options found for the statement.\n\nUnsupported options:\n\n"
            + "\n".join(unknown)
            + "\n\nSupported options:\n\n"
            + "\n".join(STATEMENT_OPTIONS)
        )
    return options


def statement_merge_mode(tree: exp.Expr, given: str | None = None) -> str | None:
    """The merge mode a statement writes in: its ``'merge-mode'`` option, else ``given`` (the caller's, for every
    statement); None for the default mode. Both, differing, are refused."""
    from changelake.spec import merge_mode_of

    stated = statement_options(tree).get("merge-mode")
    mode, other = merge_mode_of(stated), merge_mode_of(given)
    if stated is not None and given is not None and mode != other:
        raise WriteRefusedError(
            f"the statement's option 'merge-mode'='{stated}' contradicts the merge mode '{given}' it is run with"
        )
    return mode if stated is not None else other


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
    merge_mode: str | None = None,
) -> WritePlan:
    """The records ``tree`` (an INSERT, UPDATE or DELETE of ``spec``'s table) writes; a refusal raises
    WriteRefusedError with Fluss's words. ``lookup`` gives a key's stored row (UPDATE), ``read_rows`` a
    table's current rows and ``spec_of`` its spec (INSERT … SELECT). ``merge_mode`` (with the statement's own
    option, :func:`statement_merge_mode`) is the mode it writes in: in the overwrite mode the merge engine is
    bypassed, so the checks that exist because of an engine (row-level statements, partial inserts, a
    ``disable`` delete behaviour) do not apply."""
    from sqlglot import exp

    mode = statement_merge_mode(tree, merge_mode)
    if isinstance(tree, exp.Insert):
        written = _plan_insert(tree, spec, read_rows, known, spec_of, mode)
    elif isinstance(tree, exp.Delete):
        written = _plan_delete(tree, spec, lookup, mode)
    elif isinstance(tree, exp.Update):
        written = _plan_update(tree, spec, lookup, mode)
    else:
        raise WriteRefusedError(f"not an INSERT, UPDATE or DELETE: {_short(tree)}")
    written.merge_mode = mode
    return written


def _plan_insert(
    tree: exp.Insert,
    spec: TableSpec,
    read_rows: ReadRows,
    known: Callable[[], list[str]],
    spec_of: Callable[[str], TableSpec],
    merge_mode: str | None = None,
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
        _check_partial_insert(spec, [*writes, *static], merge_mode)
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
    for row in rows:
        if len(row) != len(writes):
            raise _arity_error(name, len(row), writes)
    typed = [[_literal(node, f"row {number}") for node in row] for number, row in enumerate(rows, start=1)]
    if typed:
        _check_sink_types(spec, writes, _row_types(typed))
    records = []
    for number, row_values in enumerate(typed, start=1):
        data = {
            column: _written(value, spec, column, f"row {number}")
            for column, value in zip(writes, row_values, strict=True)
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
        # A partition spec's value is converted to the column's type (Flink reads partition values as text).
        literal = _literal(value, "PARTITION")
        column_type = sqltypes.of_column(spec.column(column).type)
        try:
            converted = sqltypes.cast(literal, column_type, explicit=True)
        except WriteRefusedError as e:
            raise WriteRefusedError(f"PARTITION ({column} = {_short(value)}): {e}") from None
        static[column] = _written(converted, spec, column, "PARTITION")
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
    # Literals are typed, and every output checked against its column, before any row is read.
    typed = {
        i: _literal(node, "the SELECT list") for i, (what, node) in enumerate(outputs) if what == "literal"
    }
    types = [
        typed[i].type if what == "literal" else sqltypes.of_column(source_spec.column(item).type)
        for i, (what, item) in enumerate(outputs)
    ]
    _check_sink_types(spec, writes, types)
    literals = {i: _written(v, spec, writes[i], "the SELECT list") for i, v in typed.items()}
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
                source = source_spec.column(item).type
                stored = source.decode_json(
                    _stored_as_json(source_spec, item, values[item][number], "source row")
                )
                data[column] = _written(
                    sqltypes.of_stored(source, stored), spec, column, f"source row {number + 1}"
                )
        data.update(static)
        _check_not_null(spec, data, number + 1)
        records.append({"op": "+I", "data": data})
    note = None if records else f"the SELECT on {source_spec.full_name} found no rows"
    target = [*writes, *static] if partial else None
    return WritePlan("insert", name, records, target, note, reads_target=source_spec.full_name == name)


def _plan_delete(
    tree: exp.Delete, spec: TableSpec, lookup: Lookup, merge_mode: str | None = None
) -> WritePlan:
    name = spec.full_name
    _check_row_level(spec, merge_mode)
    _only_args(tree, "DELETE", {"this", "where"})
    key = _key_condition(tree, spec, "DELETE")
    if NO_MATCH in key.values():
        return WritePlan("delete", name, note=f"no row of {name} can have the key the WHERE names")
    if lookup(spec, key) is None:  # as an UPDATE of a missing key: nothing to write, and said so
        return WritePlan("delete", name, note=f"no row of {name} has the key {key}", reads_target=True)
    return WritePlan("delete", name, [{"op": "-D", "data": key}], reads_target=True)


def _plan_update(
    tree: exp.Update, spec: TableSpec, lookup: Lookup, merge_mode: str | None = None
) -> WritePlan:
    from sqlglot import exp

    name = spec.full_name
    _check_row_level(spec, merge_mode)
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
    typed = {c: _literal(node, "SET") for c, node in assignments.items()}
    _check_sink_types(spec, list(typed), [v.type for v in typed.values()])
    values = {c: _written(v, spec, c, "SET") for c, v in typed.items()}
    key = _key_condition(tree, spec, "UPDATE")
    if NO_MATCH in key.values():
        return WritePlan("update", name, note=f"no row of {name} can have the key the WHERE names")
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


def _check_row_level(spec: TableSpec, merge_mode: str | None = None) -> None:
    """``FlinkTableSink.validateUpdatableAndDeletable`` (Fluss 0.9.1), for DELETE and UPDATE alike: only on tables
    without a merge engine, and not on a ``table.delete.behavior: disable`` table (0.9.1 refuses UPDATE there
    too, in the words it uses for DELETE). An overwrite statement bypasses the engine and takes deletes."""
    if merge_mode is not None:
        return
    if spec.merge_engine is not None:
        raise WriteRefusedError(
            f"Table {spec.full_name} uses the '{_engine_name(spec)}' merge engine which does not support DELETE "
            "or UPDATE statements."
        )
    if spec.options.get("table.delete.behavior") == "disable":
        raise WriteRefusedError(
            f"Table {spec.full_name} has delete behavior set to 'disable' which does not support DELETE "
            "statements."
        )


def _check_partial_insert(spec: TableSpec, listed: list[str], merge_mode: str | None = None) -> None:
    """``FlinkTableSink.getSinkRuntimeProvider``'s checks of an INSERT with fewer columns than the table (an
    overwrite statement bypasses the engine: any engine takes it)."""
    if spec.merge_engine is not None and spec.merge_engine != "aggregation" and merge_mode is None:
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
        key[name] = _compared(value, spec, name, "WHERE")
        if key[name] is None:
            raise refused  # `pk = NULL` is never true: Flink does not push it down either
    return {c: key[c] for c in spec.primary_key}


#: A WHERE literal that no value of its column equals (its column's type cannot hold it exactly).
NO_MATCH = object()


def _compared(node: Any, spec: TableSpec, column: str, where: str) -> Any:
    """A literal compared with ``column``: Flink compares values of types one of which casts implicitly to the
    other (else Calcite's refusal); the literal as a value of the column's type, or :data:`NO_MATCH` when that
    type cannot hold it exactly (``k = 1.5`` on an INT key, ``ts = TIMESTAMP '… .1239'`` on a TIMESTAMP(3) key:
    no stored value equals it)."""
    value = _literal(node, where)
    c = spec.column(column)
    target = sqltypes.of_column(c.type)
    if not sqltypes.comparable(value.type, target):
        raise WriteRefusedError(
            f"{where}: Cannot apply '=' to arguments of type '<{target.root}> = <{value.type}>' (column '{column}')"
        )
    if value.value is None:
        return None
    exact = sqltypes.cast(value, target, explicit=True)
    if exact.value is None or sqltypes.cast(exact, value.type, explicit=True).value != value.value:
        return NO_MATCH
    return _written(exact, spec, column, where)


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


def _literal(node: Any, where: str) -> sqltypes.Value:
    """A literal's Flink type and value (:func:`changelake.sqltypes.literal`); refused naming ``where``."""
    try:
        return sqltypes.literal(node)
    except WriteRefusedError as e:
        if str(e).startswith("not a literal"):
            raise WriteRefusedError(
                f"{where}: a value must be a literal (a number, 'text', TRUE/FALSE, NULL, X'hex', "
                f"DATE/TIME/TIMESTAMP '...', CAST(literal AS type)); got {_short(node)}"
            ) from None
        raise WriteRefusedError(f"{where}: {e}") from None


def _written(value: sqltypes.Value, spec: TableSpec, column: str, where: str) -> Any:
    """The JSON value (as the changelog-json reader takes it) a typed value writes to ``column``, after Flink's
    implicit cast to the column's type (the caller checked that Flink allows it); the column's own rules
    (ranges, CHAR length) apply as to any input."""
    c = spec.column(column)
    cast = sqltypes.cast(value, sqltypes.of_column(c.type), explicit=False)
    data = sqltypes.json_value(cast, c.type)
    if data is not None:
        try:
            c.type.decode_json(data)
        except (ValueError, ArithmeticError) as e:
            raise WriteRefusedError(f"{where}: {data!r} for column '{column}' ({c.type}): {e}") from None
    return data


def _typed(node: Any, spec: TableSpec, column: str, where: str) -> Any:
    """The JSON value a literal writes to ``column`` by Flink's typing and implicit cast, refused in Flink's
    words where the literal's type does not cast implicitly to the column's (one value: its own schema)."""
    value = _literal(node, where)
    _check_sink_types(spec, [column], [value.type])
    return _written(value, spec, column, where)


def _check_sink_types(spec: TableSpec, columns: list[str], types: list[sqltypes.SqlType]) -> None:
    """Flink's ``DynamicSinkUtils.validateSchemaAndApplyImplicitCast``: every value's type must cast implicitly
    to its column's, else the statement is refused with Flink's message (the query schema in the written
    columns' order, the sink schema of those columns)."""
    sink = [sqltypes.of_column(spec.column(c).type) for c in columns]
    for i, (column, source, target) in enumerate(zip(columns, types, sink, strict=True)):
        if not sqltypes.supports_cast(source, target, explicit=False):
            query_schema = ", ".join(f"EXPR${j}: {t}" for j, t in enumerate(types))
            sink_schema = ", ".join(f"{c}: {t}" for c, t in zip(columns, sink, strict=True))
            raise WriteRefusedError(
                f"Column types of query result and sink for '{spec.full_name}' do not match.\n"
                f"Cause: Incompatible types for sink column '{column}' at position {i}.\n\n"
                f"Query schema: [{query_schema}]\n"
                f"Sink schema:  [{sink_schema}]"
            )


def _row_types(rows: list[list[sqltypes.Value]]) -> list[sqltypes.SqlType]:
    """The type of each column of a VALUES list: the one type every row's value casts to implicitly (Calcite's
    least restrictive type: INT and BIGINT give BIGINT, CHAR(1) and CHAR(3) CHAR(3), NULL takes the other's);
    values of no common type are refused as Calcite refuses them."""
    out = []
    for column in zip(*[[v.type for v in row] for row in rows], strict=True):
        known = [t for t in column if t.root != "NULL"]
        if not known:
            out.append(sqltypes.NULL_TYPE)
            continue
        widest = known[0]
        for t in known[1:]:
            if sqltypes.supports_cast(widest, t, explicit=False) and not sqltypes.supports_cast(
                t, widest, explicit=False
            ):
                widest = t
            elif t.root == widest.root:
                widest = _wider(widest, t)
            elif not sqltypes.supports_cast(t, widest, explicit=False):
                raise WriteRefusedError(
                    f"Values passed to VALUES operator must have compatible types ({widest} and {t})"
                )
        nullable = len(known) < len(column) or any(t.nullable for t in known)
        out.append(dataclasses.replace(widest, nullable=nullable))
    return out


def _wider(a: sqltypes.SqlType, b: sqltypes.SqlType) -> sqltypes.SqlType:
    """Two types of one root: the larger precision (length); for DECIMAL the digits of both sides."""
    if a.root == "DECIMAL":
        scale = max(a.scale or 0, b.scale or 0)
        whole = max((a.precision or 0) - (a.scale or 0), (b.precision or 0) - (b.scale or 0))
        return dataclasses.replace(a, precision=min(38, whole + scale), scale=scale)
    if a.precision is None or b.precision is None:
        return a
    return a if a.precision >= b.precision else b


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

    value = _compared(node, spec, column, "WHERE")
    if value is NO_MATCH:
        raise WriteRefusedError(
            f"WHERE: {_short(node)} is not a value of column '{column}' ({spec.column(column).type}); compare "
            "it with a literal of the column's type"
        )
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
