"""Validation of every identifier that reaches SQL, a catalog or a file path.

Names are deliberately strict (ASCII letters, digits, underscore): they end up in Spark SQL view names,
Iceberg identifiers and directory names, and a strict rule is simpler than quoting correctly everywhere.
Patterns are matched whole (``fullmatch``), so a trailing newline is not part of a valid name.
"""

import re
from collections.abc import Callable, Iterable

from changelake.errors import BadInput, SpecError, unknown_table

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

#: Columns changelake adds to storage; user columns may not use these names.
RESERVED_COLUMNS = frozenset({"_bucket", "_change_type", "_batch_id", "_log_offset", "_commit_timestamp"})
#: Suffixes of the tables and views changelake derives from a table ``ns.t``: the changelog table
#: ``ns.t__changelog`` and the views ``ns__t``, ``ns__t__changelog``, ``ns__t__input``.
RESERVED_SUFFIXES = ("__changelog", "__input")


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a safe identifier, else raise SpecError naming ``what`` and the value."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        shown = repr(value) if not isinstance(value, str) or len(value) <= 140 else repr(value[:140]) + "..."
        raise SpecError(
            f"Invalid {what} {shown}: use 1-128 ASCII letters, digits or '_' , not starting with a digit."
        )
    return value


def check_column_name(value: object) -> str:
    name = check_name(value, "column name")
    if name.lower() in RESERVED_COLUMNS or name.startswith("__"):
        raise SpecError(
            f"Column name {name!r} is reserved by changelake (reserved: {sorted(RESERVED_COLUMNS)}, '__*')."
        )
    return name


def split_table_name(full_name: object) -> tuple[str, str]:
    """Split ``namespace.table`` and validate both parts."""
    if not isinstance(full_name, str) or full_name.count(".") != 1:
        shown = (
            full_name if not isinstance(full_name, str) or len(full_name) <= 140 else full_name[:140] + "..."
        )
        raise SpecError(f"Invalid table name {shown!r}: expected '<namespace>.<table>'.")
    namespace, table = full_name.split(".")
    return check_name(namespace, "namespace"), check_name(table, "table name")


def qualify_table_name(name: str, known: Callable[[], Iterable[str]]) -> str:
    """The ``namespace.table`` a user means by a table name typed into a command or a SQL statement: the name
    itself when it has a namespace, else the one table of ``known()`` (the tables with a spec or in the
    catalog) with that name. The one rule for table names the CLI's commands and ``changelake sql`` share.
    A malformed name or an ambiguous one is a bad argument (:class:`BadInput`); a name no table has is
    :class:`TableNotFound`."""
    if isinstance(name, str) and "." not in name:
        try:
            check_name(name, "table name")
        except SpecError as e:
            raise BadInput(str(e)) from None
        tables = sorted(known())
        matches = [t for t in tables if t.split(".", 1)[1] == name]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise unknown_table(name, "no table of that name in any namespace", tables)
        raise BadInput(
            f"Table name '{name}' is ambiguous ({', '.join(matches)}); name it as <namespace>.{name}"
        )
    try:
        namespace, table = split_table_name(name)
    except SpecError as e:
        raise BadInput(str(e)) from None
    return f"{namespace}.{table}"


def check_table_name(full_name: object) -> tuple[str, str]:
    """Split and validate a table name a spec may declare: no reserved suffix (``__changelog``, ``__input``),
    since changelake derives tables and views with those names from every table."""
    namespace, table = split_table_name(full_name)
    for suffix in RESERVED_SUFFIXES:
        if table.lower().endswith(suffix):
            raise SpecError(
                f"Invalid table name '{namespace}.{table}': the suffix '{suffix}' is reserved for the tables "
                f"and views changelake derives from a table (reserved: {list(RESERVED_SUFFIXES)})."
            )
    return namespace, table


def view_name(namespace: str, table: str) -> str:
    """The Spark view / Airflow task name of a table: ``<namespace>__<table>``."""
    return f"{namespace}__{table}"


def derived_names(namespace: str, table: str) -> tuple[str, ...]:
    """Every name changelake derives from a table that must be unique across tables, case-folded (Spark and
    most catalogs compare identifiers case-insensitively)."""
    base = view_name(namespace, table).lower()
    full = f"{namespace}.{table}".lower()
    return (base, *(base + s for s in RESERVED_SUFFIXES), full, full + "__changelog")


def quote(name: str) -> str:
    """Backtick-quote an already validated identifier for Spark SQL."""
    check_name(name, "identifier")
    return f"`{name}`"
