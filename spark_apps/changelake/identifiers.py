"""Validation of every identifier that reaches SQL, a catalog or a file path.

Names are deliberately strict (ASCII letters, digits, underscore): they end up in Spark SQL view names,
Iceberg identifiers and directory names, and a strict rule is simpler than quoting correctly everywhere.
"""

import re

from changelake.errors import SpecError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

#: Columns changelake adds to storage; user columns may not use these names.
RESERVED_COLUMNS = frozenset({"_bucket", "_change_type", "_batch_id", "_log_offset", "_commit_timestamp"})


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a safe identifier, else raise SpecError naming ``what`` and the value."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise SpecError(
            f"Invalid {what} {value!r}: use 1-128 ASCII letters, digits or '_' , not starting with a digit."
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
        raise SpecError(f"Invalid table name {full_name!r}: expected '<namespace>.<table>'.")
    namespace, table = full_name.split(".")
    return check_name(namespace, "namespace"), check_name(table, "table name")


def quote(name: str) -> str:
    """Backtick-quote an already validated identifier for Spark SQL."""
    check_name(name, "identifier")
    return f"`{name}`"
