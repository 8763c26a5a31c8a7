"""Flink's SQL types of literals and its casts, for ``changelake sql`` (docs/sql-writes.md#values-typed-as-flink-types-them).

A literal gets the type Flink's parser (Calcite) gives it: ``7`` is INT (BIGINT, then DECIMAL(n, 0) when it does
not fit), ``12.345`` DECIMAL(5, 3), ``1e3`` DOUBLE, ``'abc'`` CHAR(3), ``X'0a'`` BINARY(1), ``TRUE`` BOOLEAN,
``TIMESTAMP '… .123'`` TIMESTAMP(3) (as many digits as written), ``NULL`` the NULL type. ``CAST(x AS T)``
converts to T by Flink's cast rules (``org.apache.flink.table.planner.functions.casting``: HALF_UP to a DECIMAL's
scale, NULL when it overflows; timestamps cut to the precision; a string parsed as Flink parses it, a failure
refused in Flink's words); ``TRY_CAST`` gives NULL where CAST fails. A value then reaches its column by Flink's
implicit cast, if ``LogicalTypeCasts.supportsImplicitCast`` allows it (INT into BIGINT, TIMESTAMP(6) into
TIMESTAMP(3), …), else the statement is refused as Flink's ``DynamicSinkUtils`` refuses it.

This module owns those rules; :mod:`changelake.sqlwrite` walks the statement and calls them. Values are held
as: Python ints (integer types), ``decimal.Decimal`` (DECIMAL), floats (FLOAT/DOUBLE), bools, ``str``
(CHAR/VARCHAR), ``bytes`` (BINARY/VARBINARY), ``datetime.date`` (DATE), microseconds of the day (TIME),
nanoseconds since the epoch (TIMESTAMP; in UTC for TIMESTAMP_LTZ: changelake's session time zone is UTC).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
import re
import struct
from dataclasses import dataclass, replace
from typing import Any

from changelake.errors import WriteRefusedError, short_repr
from changelake.types import (
    INT_RANGES,
    DataType,
    format_time,
    format_timestamp_nanos,
    time_from_micros,
    truncate_nanos,
    truncate_time_micros,
)

#: Flink's largest CHAR/VARCHAR/BINARY/VARBINARY length: VARCHAR of it is STRING, VARBINARY of it BYTES.
MAX_LENGTH = 2_147_483_647
_INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT")
_BITS = {"TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64}
_NUMERIC = (*_INTEGERS, "DECIMAL", "FLOAT", "DOUBLE")
_CHARACTER = ("CHAR", "VARCHAR")
_BINARY = ("BINARY", "VARBINARY")
_TIMESTAMPS = ("TIMESTAMP", "TIMESTAMP_LTZ")
_DATETIME = ("DATE", "TIME", *_TIMESTAMPS)
_ROOT_OF = {"INT": "INTEGER", "STRING": "VARCHAR", "BYTES": "VARBINARY"}


@dataclass(frozen=True)
class SqlType:
    """A Flink logical type: its root (``LogicalTypeRoot`` in SQL spelling), precision or length, scale,
    nullability."""

    root: str
    precision: int | None = None
    scale: int | None = None
    nullable: bool = True

    def __str__(self) -> str:
        """As Flink's ``LogicalType.asSummaryString`` prints it (``INT NOT NULL``, ``DECIMAL(5, 3)``, ``STRING``)."""
        r, p = self.root, self.precision
        if r == "NULL":
            return "NULL"
        if r == "VARCHAR" and p == MAX_LENGTH:
            text = "STRING"
        elif r == "VARBINARY" and p == MAX_LENGTH:
            text = "BYTES"
        elif r == "INTEGER":
            text = "INT"
        elif r == "DECIMAL":
            text = f"DECIMAL({p}, {self.scale})"
        elif p is not None:
            text = f"{r}({p})"
        else:
            text = r
        return text if self.nullable else f"{text} NOT NULL"

    def not_null(self) -> SqlType:
        return replace(self, nullable=False)


NULL_TYPE = SqlType("NULL")


@dataclass(frozen=True)
class Value:
    """A typed SQL value (``value`` None is NULL)."""

    type: SqlType
    value: Any


def of_column(t: DataType) -> SqlType:
    """The Flink type of a changelake column type, as a sink's schema has it (nullable: Flink's
    ``fixSinkDataType`` checks NOT NULL at run time)."""
    root = _ROOT_OF.get(t.name, t.name)
    if t.name in ("STRING", "BYTES"):
        return SqlType(root, MAX_LENGTH)
    if t.name == "BINARY" and t.precision is None:
        return SqlType("BINARY", 1)
    return SqlType(root, t.precision, t.scale)


def refused(message: str) -> WriteRefusedError:
    return WriteRefusedError(message)


# --- literals ----------------------------------------------------------------------------------------------
def literal(node: Any) -> Value:
    """The type and value Flink gives a literal expression (sqlglot node); anything but a literal, a typed
    literal, a (TRY_)CAST of one, a negated number or a parenthesis around one is not a value here (None)."""
    from sqlglot import exp

    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Null):
        return Value(NULL_TYPE, None)
    if isinstance(node, exp.Boolean):
        return Value(SqlType("BOOLEAN", nullable=False), bool(node.this))
    if isinstance(node, exp.Neg):
        inner = literal(node.this)
        if inner.type.root not in _NUMERIC:
            raise refused(f"Cannot apply '-' to arguments of type '-<{inner.type}>'")
        return _negate(inner)
    if isinstance(node, exp.Literal) and not node.is_string:
        return _number_literal(str(node.this))
    if isinstance(node, exp.Literal):
        text = str(node.this)
        return Value(SqlType("CHAR", len(text), nullable=False), text)
    if isinstance(node, exp.HexString):
        try:
            raw = bytes.fromhex(str(node.this))
        except ValueError:
            raise refused(
                f"Binary literal string must contain an even number of hexits: {node.this}"
            ) from None
        return Value(SqlType("BINARY", len(raw), nullable=False), raw)
    if isinstance(node, exp.TryCast):  # CAST(x AS T) (Spark's grammar parses CAST as TRY_CAST), TRY_CAST
        target = cast_target(node.to)
        source = literal(node.this)
        if node.args.get("safe"):
            try:
                return cast(source, target)
            except WriteRefusedError as e:
                if "Cast function cannot convert" in str(e):
                    raise
                return Value(target, None)
        return cast(source, target)
    if isinstance(node, exp.Cast):  # a typed literal: DATE '…', TIME '…', TIMESTAMP '…', TIMESTAMP_LTZ '…'
        if not (isinstance(node.this, exp.Literal) and node.this.is_string):
            raise refused(f"not a literal: {node.sql()}")
        return _typed_literal(node.to, str(node.this.this))
    raise refused(f"not a literal: {node.sql() if hasattr(node, 'sql') else node!r}")


def _number_literal(text: str) -> Value:
    if "e" in text.lower():
        value = float(text)
        if math.isinf(value):
            raise refused(f"Numeric literal '{text}' out of range")
        return Value(SqlType("DOUBLE", nullable=False), value)
    number = decimal.Decimal(text)
    if "." not in text:
        n = int(number)
        for root in ("INTEGER", "BIGINT"):
            lo, hi = _range(root)
            if lo <= n <= hi:
                return Value(SqlType(root, nullable=False), n)
    digits, exponent = number.as_tuple().digits, int(number.as_tuple().exponent)
    scale = max(0, -exponent)
    precision = max(len(digits) + max(0, exponent), scale, 1)
    if precision > 38:
        raise refused(f"Numeric literal '{text}' out of range")
    return Value(SqlType("DECIMAL", precision, scale, nullable=False), number)


def _negate(v: Value) -> Value:
    if v.type.root in _INTEGERS:
        lo, hi = _range(v.type.root)
        if not lo <= -v.value <= hi:  # -MIN: Java wraps the negation, as Flink's codegen does
            return Value(v.type, _wrap(-v.value, v.type.root))
    return Value(v.type, -v.value)


_DATE_TEXT = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})")
_TIME_TEXT = re.compile(r"([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:\.([0-9]*))?")


def _typed_literal(to: Any, text: str) -> Value:
    """DATE/TIME/TIMESTAMP/TIMESTAMP_LTZ '…': Calcite's literal formats ('yyyy-MM-dd', 'HH:mm:ss[.f]', a date and
    a time separated by a space); the precision is the number of fraction digits written."""
    root = _sql_root(to)
    stripped = text.strip()
    if root == "DATE":
        date = _parse_date(stripped)
        if date is None:
            raise refused(f"Illegal DATE literal '{text}': not in format 'yyyy-MM-dd'")
        return Value(SqlType("DATE", nullable=False), date)
    if root == "TIME":
        m = _TIME_TEXT.fullmatch(stripped)
        micros = _time_micros(m) if m else None
        if micros is None:
            raise refused(f"Illegal TIME literal '{text}': not in format 'HH:mm:ss'")
        precision = len(m.group(4) or "") if m else 0
        if precision > 9:
            raise refused(f"TIME precision {precision} exceeds the maximum of 9")
        # Flink holds a TIME in milliseconds (Calcite's TimeString.getMillisOfDay).
        return Value(SqlType("TIME", precision, nullable=False), truncate_time_micros(micros, 3))
    if root in _TIMESTAMPS:
        date_text, _, time_text = stripped.partition(" ")
        date = _parse_date(date_text)
        m = _TIME_TEXT.fullmatch(time_text.strip()) if time_text else None
        micros = _time_micros(m) if m else None
        if date is None or micros is None:
            raise refused(f"Illegal TIMESTAMP literal '{text}': not in format 'yyyy-MM-dd HH:mm:ss'")
        fraction = (m.group(4) or "") if m else ""
        if len(fraction) > 9:
            raise refused(f"TIMESTAMP precision {len(fraction)} exceeds the maximum of 9")
        nanos = _local_nanos(date, micros // 1_000_000, int(fraction.ljust(9, "0") or 0))
        return Value(SqlType(root, len(fraction), nullable=False), nanos)
    raise refused(f"not a literal of a date or time type: {to.sql()} '{text}'")


# --- types of CAST targets --------------------------------------------------------------------------------
_TARGETS = {
    "BOOLEAN": "BOOLEAN",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INT": "INTEGER",
    "BIGINT": "BIGINT",
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "DECIMAL": "DECIMAL",
    "CHAR": "CHAR",
    "VARCHAR": "VARCHAR",
    "TEXT": "VARCHAR",
    "BINARY": "BINARY",
    "VARBINARY": "VARBINARY",
    "BLOB": "VARBINARY",  # BYTES (the dialect reads it as BLOB, apart from VARBINARY)
    "DATE": "DATE",
    "TIME": "TIME",
    "TIMESTAMP": "TIMESTAMP",
    "TIMESTAMPNTZ": "TIMESTAMP",
    "TIMESTAMPLTZ": "TIMESTAMP_LTZ",
}


def _sql_root(to: Any) -> str:
    name = to.this.name if hasattr(to.this, "name") else str(to.this)
    root = _TARGETS.get(name)
    if root is None:
        raise refused(f"changelake sql casts to the types of table columns; not to {to.sql()}")
    return root


def cast_target(to: Any) -> SqlType:
    """The type a ``CAST(… AS T)`` names, with Flink's defaults: DECIMAL(10, 0), CHAR(1), VARCHAR(1), BINARY(1),
    VARBINARY(1), TIME(0), TIMESTAMP(6), TIMESTAMP_LTZ(6); STRING is VARCHAR of the largest length, BYTES
    VARBINARY of it."""
    root = _sql_root(to)
    params = [int(str(e.this.this)) for e in to.expressions or []]
    name = to.this.name if hasattr(to.this, "name") else str(to.this)
    if root == "DECIMAL":
        p = params[0] if params else 10
        s = params[1] if len(params) > 1 else 0
        if not (1 <= p <= 38 and 0 <= s <= p):
            raise refused(
                f"Decimal precision must be between 1 and 38 and scale between 0 and precision: {to.sql()}"
            )
        return SqlType("DECIMAL", p, s, nullable=False)
    if root in (*_CHARACTER, *_BINARY):
        if name in ("TEXT", "BLOB"):
            return SqlType(root, MAX_LENGTH, nullable=False)  # STRING, BYTES
        length = params[0] if params else 1
        if not 1 <= length <= MAX_LENGTH:
            raise refused(f"{root} length must be between 1 and {MAX_LENGTH} (both inclusive): {length}")
        return SqlType(root, length, nullable=False)
    if root in ("TIME", *_TIMESTAMPS):
        p = params[0] if params else (0 if root == "TIME" else 6)
        if not 0 <= p <= 9:
            raise refused(f"{root} precision must be between 0 and 9 (both inclusive): {p}")
        return SqlType(root, p, nullable=False)
    return SqlType(root, nullable=False)


# --- Flink's casting rules (LogicalTypeCasts) ---------------------------------------------------------------
def _families(root: str) -> set[str]:
    out = {root}
    if root in _NUMERIC:
        out.add("NUMERIC")
        if root in (*_INTEGERS, "DECIMAL"):
            out.add("EXACT_NUMERIC")
    if root in _CHARACTER:
        out.add("CHARACTER_STRING")
    if root in _BINARY:
        out.add("BINARY_STRING")
    if root in _DATETIME:
        out.add("DATETIME")
    if root in _TIMESTAMPS:
        out.add("TIMESTAMP_FAMILY")
    if root == "TIME":
        out.add("TIME_FAMILY")
    return out


#: target root -> (implicit sources, explicit sources), roots or families; Flink's LogicalTypeCasts static rules.
_RULES: dict[str, tuple[set[str], set[str]]] = {
    "CHAR": ({"CHAR"}, {"PREDEFINED"}),
    "VARCHAR": ({"CHARACTER_STRING"}, {"PREDEFINED"}),
    "BOOLEAN": ({"BOOLEAN"}, {"CHARACTER_STRING", "NUMERIC"}),
    "BINARY": ({"BINARY"}, {"CHARACTER_STRING", "VARBINARY"}),
    "VARBINARY": ({"BINARY_STRING"}, {"CHARACTER_STRING", "BINARY"}),
    "DECIMAL": ({"NUMERIC"}, {"CHARACTER_STRING", "BOOLEAN", "TIMESTAMP", "TIMESTAMP_LTZ"}),
    "TINYINT": ({"TINYINT"}, {"NUMERIC", "CHARACTER_STRING", "BOOLEAN", "TIMESTAMP", "TIMESTAMP_LTZ"}),
    "SMALLINT": (
        {"TINYINT", "SMALLINT"},
        {"NUMERIC", "CHARACTER_STRING", "BOOLEAN", "TIMESTAMP", "TIMESTAMP_LTZ"},
    ),
    "INTEGER": (
        {"TINYINT", "SMALLINT", "INTEGER"},
        {"NUMERIC", "CHARACTER_STRING", "BOOLEAN", "TIMESTAMP", "TIMESTAMP_LTZ"},
    ),
    "BIGINT": (
        {"TINYINT", "SMALLINT", "INTEGER", "BIGINT"},
        {"NUMERIC", "CHARACTER_STRING", "BOOLEAN", "TIMESTAMP", "TIMESTAMP_LTZ"},
    ),
    "FLOAT": (
        {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "DECIMAL"},
        {"NUMERIC", "CHARACTER_STRING", "BOOLEAN", "TIMESTAMP", "TIMESTAMP_LTZ"},
    ),
    "DOUBLE": ({"NUMERIC"}, {"CHARACTER_STRING", "BOOLEAN", "TIMESTAMP", "TIMESTAMP_LTZ"}),
    "DATE": ({"DATE", "TIMESTAMP"}, {"TIMESTAMP_FAMILY", "CHARACTER_STRING", "BINARY_STRING"}),
    "TIME": ({"TIME", "TIMESTAMP"}, {"TIME_FAMILY", "TIMESTAMP_FAMILY", "CHARACTER_STRING", "BINARY_STRING"}),
    "TIMESTAMP": (
        {"TIMESTAMP", "TIMESTAMP_LTZ"},
        {"DATETIME", "CHARACTER_STRING", "BINARY_STRING", "NUMERIC"},
    ),
    "TIMESTAMP_LTZ": (
        {"TIMESTAMP_LTZ", "TIMESTAMP"},
        {"DATETIME", "CHARACTER_STRING", "BINARY_STRING", "NUMERIC"},
    ),
}
_PREDEFINED = {*_NUMERIC, *_CHARACTER, *_BINARY, *_DATETIME, "BOOLEAN"}


def supports_cast(source: SqlType, target: SqlType, explicit: bool) -> bool:
    """Flink's ``LogicalTypeCasts.supportsImplicitCast`` (``explicit`` False) / ``supportsExplicitCast``."""
    if source.root == "NULL" or (source.root == target.root and not _is_string(source.root)):
        return True
    implicit, more = _RULES[target.root]
    families = _families(source.root)
    if implicit & families:
        return True
    if not explicit:
        return False
    allowed = set(more)
    if "PREDEFINED" in allowed:
        allowed |= _PREDEFINED
    return bool(allowed & families)


def _is_string(root: str) -> bool:
    return root in (*_CHARACTER, *_BINARY)


# --- casts ----------------------------------------------------------------------------------------------------
def cast(v: Value, target: SqlType, explicit: bool = True) -> Value:
    """``v`` as ``target``, by Flink's cast rules; refused in Flink's words where the cast is not allowed or
    fails (a CAST that fails stops a Flink job)."""
    if not supports_cast(v.type, target, explicit):
        raise refused(f"Cast function cannot convert value of type {v.type} to type {target}")
    if v.value is None:
        return Value(replace(target, nullable=True), None)
    return Value(target, _convert(v, target))


def _convert(v: Value, t: SqlType) -> Any:
    s, x = v.type.root, v.value
    r = t.root
    if r in _CHARACTER:
        return _fit_text(_to_text(v), t)
    if r in _BINARY:
        raw = x if s in _BINARY else _to_text(v).encode("utf-8")
        return _fit_bytes(raw, t)
    if s in _CHARACTER:
        return _from_text(x, t)
    if s in _BINARY:
        return _from_text(x.decode("utf-8", "replace"), t)
    if r == "BOOLEAN":
        return x != 0 if s in _NUMERIC else bool(x)
    if s == "BOOLEAN":
        x, s = int(x), "INTEGER"
    if r in _NUMERIC:
        if s in _TIMESTAMPS:  # TimestampToNumericCastRule: seconds since the epoch
            millis = x // 1_000_000
            if r in _INTEGERS:
                return _wrap(_java_div(millis, 1000), r)
            return _from_number(decimal.Decimal(millis) / 1000, "DECIMAL", t)
        return _from_number(x, s, t)
    if r == "DATE":
        if s in _TIMESTAMPS:
            return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=x // 1000)).date()
        return x
    if r == "TIME":
        if s in _TIMESTAMPS:  # TimestampToTimeCastRule: the time of day, in milliseconds
            micros = (x // 1_000_000) % 86_400_000 * 1000
        else:
            micros = x
        return truncate_time_micros(micros, t.precision or 0)
    # TIMESTAMP, TIMESTAMP_LTZ (changelake's session time zone is UTC: both are the same epoch value)
    if s == "DATE":
        nanos = (x - dt.date(1970, 1, 1)).days * 86_400 * 10**9
    elif s == "TIME":
        nanos = x * 1000
    elif s in _INTEGERS:  # NumericToTimestampCastRule: seconds since the epoch
        nanos = x * 10**9
    elif s == "DECIMAL":
        nanos = int(x.to_integral_value(rounding=decimal.ROUND_DOWN)) * 10**9
    elif s in ("FLOAT", "DOUBLE"):
        nanos = _java_long(x * 1000) * 10**6
    else:
        nanos = x
    return truncate_nanos(nanos, t.precision if t.precision is not None else 6)


def _from_number(x: Any, s: str, t: SqlType) -> Any:
    r = t.root
    if r in _INTEGERS:
        if s in _INTEGERS:
            return _wrap(x, r)
        if s == "DECIMAL":  # DecimalDataUtils.castToIntegral: toward zero, then the Java narrowing cast
            return _wrap(_java_long_wrap(int(x.to_integral_value(rounding=decimal.ROUND_DOWN))), r)
        # FLOAT/DOUBLE: Java's (long)/(int) saturate and take NaN to 0; TINYINT/SMALLINT narrow the int after
        if r == "BIGINT":
            return _java_long(x)
        as_int = _java_int(x)
        return as_int if r == "INTEGER" else _wrap(as_int, r)
    if r == "DECIMAL":
        if s in ("FLOAT", "DOUBLE"):
            if not math.isfinite(x):
                raise refused(f"Error when casting {_shown(x)} to {t}: Infinite or NaN")
            number = decimal.Decimal(_java_float_text(x, s))
        else:
            number = decimal.Decimal(x)
        return _decimal_fit(number, t.precision or 10, t.scale or 0)
    if r == "FLOAT":
        return _float32(float(x))
    return float(x)  # DOUBLE


def _from_text(text: str, t: SqlType) -> Any:
    """A string cast to ``t`` (Flink's StringTo*CastRule): parsed, or refused as Flink's cast fails."""
    r = t.root
    if r in _INTEGERS:
        return _parse_integer(text.strip(" "), r)
    if r == "DECIMAL":
        trimmed = text.strip(" \t\n")
        number = _parse_decimal(trimmed)
        result = None if number is None else _decimal_fit(number, t.precision or 10, t.scale or 0)
        if result is None:
            raise refused(f"Error when casting '{text}' to {t}: For input string: '{text}'. Overflow.")
        return result
    if r in ("FLOAT", "DOUBLE"):
        value = _java_parse_double(text.strip())
        if value is None:
            raise refused(f"Error when casting '{text}' to {t}: For input string: \"{text.strip()}\"")
        return _float32(value) if r == "FLOAT" else value
    if r == "BOOLEAN":
        lowered = text.strip().lower()
        if lowered in ("t", "true", "y", "yes", "1"):
            return True
        if lowered in ("f", "false", "n", "no", "0"):
            return False
        raise refused(f"Error when casting '{text}' to {t}: Cannot parse '{text}' as BOOLEAN.")
    if r == "DATE":
        date = _parse_date(text.strip().split(" ")[0]) if text.strip() else None
        if date is None:
            raise refused(f"Error when casting '{text}' to {t}: For input string: '{text}'.")
        return date
    if r == "TIME":
        micros = _parse_time_millis(text)
        if micros is None:
            raise refused(f"Error when casting '{text}' to {t}: For input string: '{text}'.")
        return truncate_time_micros(micros, t.precision or 0)
    # TIMESTAMP(p)/TIMESTAMP_LTZ(p): DateTimeUtils.parseTimestampData(str, p): 'yyyy-[M]M-[d]d[ [H]H:[m]m:[s]s[.f]]',
    # the fraction floored to p digits (fromTemporalAccessor), a zone-less text taken in the session zone (UTC).
    m = re.fullmatch(
        r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})(?: ([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:\.([0-9]{0,9}))?)?",
        text,
    )
    date = None
    if m:
        try:
            date = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
            hms = [int(m.group(i) or 0) for i in (4, 5, 6)]
            seconds = (
                dt.timedelta(hours=hms[0], minutes=hms[1], seconds=hms[2])
                if all(0 <= a < b for a, b in zip(hms, (24, 60, 60), strict=True))
                else None
            )
        except ValueError:
            date = None
    if not m or date is None or seconds is None:
        raise refused(f"Error when casting '{text}' to {t}: Text '{text}' could not be parsed")
    p = t.precision if t.precision is not None else 6
    nano = int((m.group(7) or "").ljust(9, "0"))
    nano = 0 if p == 0 else nano - nano % 10 ** (9 - p)
    return _local_nanos(date, int(seconds.total_seconds()), nano)


def _to_text(v: Value) -> str:
    """A value as Flink's cast to a string writes it (``*ToStringCastRule``)."""
    s, x = v.type.root, v.value
    if s in _CHARACTER:
        return x
    if s in _BINARY:
        return x.decode("utf-8", "replace")
    if s == "BOOLEAN":
        return "TRUE" if x else "FALSE"
    if s in _INTEGERS:
        return str(x)
    if s == "DECIMAL":
        return format(x, "f")
    if s in ("FLOAT", "DOUBLE"):
        return _java_float_text(x, s)
    if s == "DATE":
        return x.isoformat()
    if s == "TIME":
        p = v.type.precision or 0
        text = format_time(time_from_micros(x))[:8]
        millis = (x // 1000) % 1000
        return text + ("." + f"{millis:03d}".ljust(p, "0")[:p] if p else "")
    # TIMESTAMP(p)/TIMESTAMP_LTZ(p): DateTimeUtils.formatTimestamp(ts, p): trailing zeros off the nine fraction
    # digits while more than p remain.
    seconds, nano = divmod(x, 10**9)
    stamp = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
    fraction = f"{nano:09d}"
    p = v.type.precision or 0
    while len(fraction) > p and fraction.endswith("0"):
        fraction = fraction[:-1]
    return stamp.strftime("%Y-%m-%d %H:%M:%S").rjust(19, "0") + ("." + fraction if fraction else "")


def _fit_text(text: str, t: SqlType) -> str:
    """CharVarCharTrimPadCastRule: cut to the length; a CHAR is padded with spaces to it."""
    n = t.precision if t.precision is not None else 1
    text = text[:n]
    return text.ljust(n) if t.root == "CHAR" else text


def _fit_bytes(raw: bytes, t: SqlType) -> bytes:
    n = t.precision if t.precision is not None else 1
    raw = raw[:n]
    return raw.ljust(n, b"\x00") if t.root == "BINARY" else raw


# --- to a column ------------------------------------------------------------------------------------------
def json_value(v: Value, column: DataType) -> Any:
    """The value as the JSON value changelake's readers take for ``column`` (after the implicit cast to the
    column's type; the reader then applies the column's own rules, e.g. its precision, which changes
    nothing more here)."""
    x = v.value
    if x is None:
        return None
    r = v.type.root
    if r in _NUMERIC:
        if r == "DECIMAL":
            return format(x, "f")
        if isinstance(x, float) and not math.isfinite(x):
            return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
        return x
    if r in _BINARY:
        return base64.b64encode(x).decode()
    if r == "DATE":
        return x.isoformat()
    if r == "TIME":
        return format_time(time_from_micros(x))
    if r in _TIMESTAMPS:
        try:
            return format_timestamp_nanos(x, ltz=column.name == "TIMESTAMP_LTZ")
        except OverflowError:
            raise refused(f"{short_repr(x)} nanoseconds since 1970 is beyond 9999-12-31") from None
    return x


# --- helpers ---------------------------------------------------------------------------------------------------
def _range(root: str) -> tuple[int, int]:
    return INT_RANGES["INT" if root == "INTEGER" else root]


def _wrap(value: int, root: str) -> int:
    """Java's narrowing cast to the integer type (two's complement)."""
    bits = _BITS[root]
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _java_long_wrap(value: int) -> int:
    return _wrap(value, "BIGINT")


def _java_long(x: float) -> int:
    """Java's ``(long) d``: toward zero, saturating at the range, NaN to 0."""
    if x != x:
        return 0
    lo, hi = _range("BIGINT")
    return lo if x <= lo else hi if x >= hi else int(x)


def _java_int(x: float) -> int:
    if x != x:
        return 0
    lo, hi = _range("INTEGER")
    return lo if x <= lo else hi if x >= hi else int(x)


def _java_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _float32(x: float) -> float:
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _decimal_fit(number: decimal.Decimal, precision: int, scale: int) -> decimal.Decimal | None:
    """``DecimalData.fromBigDecimal``: HALF_UP to the scale; None (NULL) beyond the precision."""
    context = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_UP)
    rounded = number.quantize(decimal.Decimal(1).scaleb(-scale), context=context)
    digits = len(rounded.as_tuple().digits) if rounded else 0
    return None if digits > precision else rounded


def _parse_integer(text: str, root: str) -> int:
    """``BinaryStringDataUtil.toInt``/``toLong`` (``toByte``/``toShort`` through toInt): a sign, digits, and a
    fraction that is checked and dropped."""
    shown = (
        f"Error when casting '{text}' to {root if root != 'INTEGER' else 'INT'}: For input string: '{text}'."
    )
    m = re.fullmatch(r"([+-]?)([0-9]*)(?:\.([0-9]*))?", text)
    if not text:
        raise refused(f"{shown} Input is empty.")
    if text in ("+", "-"):
        raise refused(f"{shown} Input has only positive or negative symbol.")
    if m is None or not (m.group(2) or m.group(3) is not None):
        raise refused(f"{shown} Invalid character found.")
    value = int(m.group(2) or "0") * (-1 if m.group(1) == "-" else 1)
    lo, hi = _range("BIGINT" if root == "BIGINT" else "INTEGER")
    if not lo <= value <= hi:
        raise refused(f"{shown} Overflow.")
    if root in ("TINYINT", "SMALLINT"):
        small_lo, small_hi = _range(root)
        if not small_lo <= value <= small_hi:
            raise refused(f"{shown} Overflow.")
    return value


_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _parse_decimal(text: str) -> decimal.Decimal | None:
    if not _DECIMAL_TEXT.fullmatch(text) or len(text) > 1000:
        return None
    return decimal.Decimal(text)


_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")


def _java_parse_double(text: str) -> float | None:
    """``Double.parseDouble`` (decimal forms, ``NaN``, ``Infinity``, a trailing f/d)."""
    if not _JAVA_DOUBLE.fullmatch(text):
        return None
    body = text.rstrip("fFdD") if not text.endswith("Infinity") else text
    return float(body.replace("Infinity", "inf").replace("NaN", "nan"))


def _java_float_text(x: float, root: str) -> str:
    """``Double.toString``/``Float.toString``: the shortest digits that read back as that type; scientific
    notation below 10^-3 and from 10^7 on (``1.0E7``), ``NaN``, ``Infinity``."""
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if root == "FLOAT":
        import numpy as np

        shortest = np.format_float_positional(np.float32(x), unique=True, trim="-")
    else:
        shortest = repr(float(x))
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    d = abs(decimal.Decimal(shortest))
    if d == 0:
        return sign + "0.0"
    if decimal.Decimal("1e-3") <= d < decimal.Decimal("1e7"):
        text = format(d.normalize(), "f")
        return sign + (text if "." in text else text + ".0")
    mantissa, exponent = format(d.normalize(), "e").split("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{sign}{mantissa}E{int(exponent)}"


def _shown(x: Any) -> str:
    return short_repr(x)


def _parse_date(text: str) -> dt.date | None:
    m = _DATE_TEXT.fullmatch(text)
    if not m:
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def _time_micros(m: re.Match) -> int | None:
    h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not (0 <= h < 24 and 0 <= mi < 60 and 0 <= s < 60):
        return None
    fraction = (m.group(4) or "")[:6].ljust(6, "0")
    return ((h * 60 + mi) * 60 + s) * 1_000_000 + int(fraction)


def _parse_time_millis(text: str) -> int | None:
    """``DateTimeUtils.parseTime``: ``H:m:s[.f]``, the fraction read to milliseconds with its fourth digit
    rounding (``parseFraction``); microseconds of the day, or None."""
    m = re.fullmatch(r"\s*([0-9]{1,2})(?::([0-9]{1,2})(?::([0-9]{1,2})(?:\.([0-9]*))?)?)?\s*", text)
    if not m:
        return None
    h, mi, s = (int(m.group(i) or 0) for i in (1, 2, 3))
    fraction = m.group(4) or ""
    millis = int(fraction[:3].ljust(3, "0")) if fraction else 0
    if len(fraction) > 3 and fraction[3] >= "5":
        millis += 1
    total = ((h * 60 + mi) * 60 + s) * 1000 + millis
    if not (0 <= h < 24 and 0 <= mi < 60 and 0 <= s < 60) or total >= 86_400_000:
        return None
    return total * 1000


def _local_nanos(date: dt.date, seconds_of_day: int, nano: int) -> int:
    days = (date - dt.date(1970, 1, 1)).days
    return (days * 86_400 + seconds_of_day) * 10**9 + nano


def of_stored(t: DataType, stored: Any) -> Value:
    """A column's storage value (as ``DataType.decode_json`` returns it) as a typed SQL value of the column's
    type: what a row read from a table is to a statement (INSERT … SELECT, UPDATE)."""
    sql_type = of_column(t)
    if stored is None:
        return Value(sql_type, None)
    n = t.name
    if n == "TIME":
        h, m, rest = stored.split(":")
        seconds, _, fraction = rest.partition(".")
        return Value(
            sql_type, ((int(h) * 60 + int(m)) * 60 + int(seconds)) * 1_000_000 + int(fraction.ljust(6, "0"))
        )
    if n in ("TIMESTAMP", "TIMESTAMP_LTZ") and not t.is_nanos:
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC if n == "TIMESTAMP_LTZ" else None)
        delta = stored - epoch
        return Value(sql_type, (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000)
    if n == "BINARY" or n == "BYTES":
        return Value(sql_type, bytes(stored))
    return Value(sql_type, stored)


def comparable(a: SqlType, b: SqlType) -> bool:
    """Whether Flink compares values of the two types (one casts implicitly to the other)."""
    return supports_cast(a, b, explicit=False) or supports_cast(b, a, explicit=False)
