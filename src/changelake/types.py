"""Column types of a table spec (Fluss/Flink vocabulary) and how each is stored, read and decoded.

Storage follows what Spark can write to Parquet and Iceberg can describe:

==================  ====================  ==================================================================
spec type           Iceberg / Spark       note
==================  ====================  ==================================================================
TINYINT, SMALLINT   int                   Iceberg has no 8/16-bit ints; values are range-checked on input
CHAR(n), STRING     string                CHAR values longer than n are refused
TIME(p)             string                ``HH:MM:SS.ffffff`` (fixed width, so it sorts; at most three
                                          digits are not zero); Spark 4.1 cannot write TIME to Parquet
TIMESTAMP(0..6)     timestamp             microseconds
TIMESTAMP_LTZ(0..6) timestamptz           an instant, kept in UTC, microseconds
TIMESTAMP(7..9)     long                  exact: nanoseconds since 1970-01-01 00:00:00 (see below)
TIMESTAMP_LTZ(7..9) long                  exact: nanoseconds since 1970-01-01 00:00:00 UTC
BINARY, BYTES       binary                JSON inputs carry base64 strings
==================  ====================  ==================================================================

TIMESTAMP(7..9) and TIMESTAMP_LTZ(7..9) keep every nanosecond, as Fluss does (its rows hold milliseconds plus a
nano-of-millisecond): Iceberg's ``timestamp_ns`` needs table format v3, which pyiceberg 0.12 cannot write, so
the value is a 64-bit count of nanoseconds (Iceberg ``long``, the field's doc says so, the type is in the stored
spec). It covers 1677-09-21 00:12:43.145224192 to 2262-04-11 23:47:16.854775807; values outside are refused.
Python storage values are ints; reads without Spark return Arrow ``timestamp[ns]`` (``pandas.Timestamp``
values); Spark views show the TIMESTAMP floored to microseconds plus ``<column>__nanos`` (the exact long, see
:meth:`DataType.view_spark_columns`). More than 9 fraction digits are refused (Flink's timestamp formats parse
at most 9).

Declared precision (docs/semantics.md §15): every value is cut to its column's precision where it enters, on
every input path, as Flink's cast to the column's type cuts it: TIMESTAMP(p)/TIMESTAMP_LTZ(p) by
:func:`truncate_nanos` (Flink's ``DateTimeUtils.truncate``), TIME(p) to ``min(p, 3)`` digits
(:func:`truncate_time_micros`: Flink and Fluss hold a TIME in milliseconds), DECIMAL(p,s) rounded HALF_UP to the
scale (Fluss's ``Decimal.fromBigDecimal``). Keys, versions, aggregates, lookups and the changelog then only ever
see cut values.

Decoding (one set of rules for every input path: :meth:`DataType.decode_json` for JSON values,
:meth:`DataType.from_arrow` for Parquet columns, which decodes strings with ``decode_json`` and checks the
rest with :meth:`DataType.check_value`'s rules):

* numbers: integers must fit the type; DECIMAL values are rounded HALF_UP to the scale in a 100-digit context
  and refused beyond the precision; a finite number beyond FLOAT's or DOUBLE's range is refused (never stored
  as infinity); numeric text is ASCII digits (other scripts' digits are refused), at most 1000 characters.
* NaN and infinities: JSON has no such numbers, so the literals ``NaN``/``Infinity`` are malformed JSON (as
  for Jackson's default parser); the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` decode to the IEEE
  values for FLOAT/DOUBLE, as Flink's JSON format reads them (``Double.parseDouble``). Parquet floats may
  hold them. Primary-key columns refuse NaN and infinities (NaN never equals itself, so it names no row).
* text: valid Unicode (a lone surrogate such as ``"\\ud800"`` is refused); CHAR(n)/BINARY(n) lengths apply.
* time: TIME is a time of day without a zone; TIMESTAMP refuses a zone (use TIMESTAMP_LTZ), TIMESTAMP_LTZ
  takes a zone-less value as UTC; every value is within 0001-01-01..9999-12-31 (in UTC for TIMESTAMP_LTZ), and
  within the 64-bit nanosecond range above for precision 7..9. Parquet timestamps of any unit (and dates) are
  converted exactly; a value that overflows nanoseconds is a bad record like any other.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import math
import re
import struct
from dataclasses import dataclass
from typing import Any

from changelake.errors import SpecError, short_repr

#: Width in bits of each integer type: Java's byte, short, int and long. The one source of integer ranges
#: (:data:`INT_RANGES`) and of the wrap-around of integer sums and products (:mod:`changelake.engine.aggregates`).
INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}
#: Smallest and largest value of each integer type (two's complement).
INT_RANGES = {name: (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) for name, bits in INT_BITS.items()}
_SIMPLE = {
    "BOOLEAN",
    "TINYINT",
    "SMALLINT",
    "INT",
    "BIGINT",
    "FLOAT",
    "DOUBLE",
    "STRING",
    "BYTES",
    "DATE",
}
# Storage of each spec type (see the module docstring); DECIMAL keeps its precision and scale.
_STORAGE_KIND = {
    "BOOLEAN": "boolean",
    "TINYINT": "int",
    "SMALLINT": "int",
    "INT": "int",
    "BIGINT": "long",
    "FLOAT": "float",
    "DOUBLE": "double",
    "DECIMAL": "decimal",
    "CHAR": "string",
    "STRING": "string",
    "TIME": "string",
    "BINARY": "binary",
    "BYTES": "binary",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "TIMESTAMP_LTZ": "timestamptz",
}
_ALIASES = {"INTEGER": "INT", "VARCHAR": "STRING", "VARBINARY": "BYTES", "REAL": "FLOAT", "BOOL": "BOOLEAN"}
# Matched whole, with ASCII digits only (``\d`` would take any script's digits).
_TYPE_RE = re.compile(
    r"[ \t]*([A-Za-z_]+)[ \t]*(?:\([ \t]*([0-9]{1,10})[ \t]*(?:,[ \t]*([0-9]{1,10})[ \t]*)?\))?[ \t]*"
)
_MAX_LENGTH = 2**31 - 1  # CHAR(n) / BINARY(n), as Flink's


@dataclass(frozen=True)
class DataType:
    """A parsed column type, e.g. ``DECIMAL(12,2)`` or ``TIMESTAMP_LTZ(3)``."""

    name: str
    precision: int | None = None
    scale: int | None = None

    def __str__(self) -> str:
        if self.name == "DECIMAL":
            return f"DECIMAL({self.precision},{self.scale})"
        if self.precision is not None:
            return f"{self.name}({self.precision})"
        return self.name

    @property
    def is_integer(self) -> bool:
        return self.name in INT_RANGES

    @property
    def decimal_shape(self) -> tuple[int, int]:
        """A DECIMAL's precision and scale (:func:`parse_type` always sets both)."""
        if self.precision is None or self.scale is None:
            raise AssertionError(f"{self} is no DECIMAL(p,s)")
        return self.precision, self.scale

    @property
    def is_nanos(self) -> bool:
        """TIMESTAMP(7..9) or TIMESTAMP_LTZ(7..9): stored exactly as nanoseconds since the epoch in a long."""
        return self.name in ("TIMESTAMP", "TIMESTAMP_LTZ") and (self.precision or 0) > 6

    # --- storage ---------------------------------------------------------------------------------------
    @property
    def storage_kind(self) -> str:
        """How values are stored: one of the keys shared by the Spark, Iceberg and Arrow mappings below.

        Nanosecond timestamps are ``long``: every path that only moves, hashes or compares stored values
        (bucket hash, key equality, versioned order, max/min) treats them as the 64-bit integers they are."""
        return "long" if self.is_nanos else _STORAGE_KIND[self.name]

    def storage_doc(self) -> str | None:
        """The Iceberg field doc of a column whose stored type does not say what it holds, else None."""
        if self.is_nanos:
            zone = " UTC" if self.name == "TIMESTAMP_LTZ" else ""
            return f"{self}: nanoseconds since 1970-01-01 00:00:00{zone} (changelake)"
        return None

    def spark_type(self):
        """The Spark type of this column in storage and in changelake's internal DataFrames."""
        from pyspark.sql import types as T

        if self.name == "DECIMAL":
            return T.DecimalType(*self.decimal_shape)
        return {
            "boolean": T.BooleanType,
            "int": T.IntegerType,
            "long": T.LongType,
            "float": T.FloatType,
            "double": T.DoubleType,
            "string": T.StringType,
            "binary": T.BinaryType,
            "date": T.DateType,
            "timestamp": T.TimestampNTZType,
            "timestamptz": T.TimestampType,
        }[self.storage_kind]()

    def view_spark_type(self):
        """The Spark type shown in registered views (closest to the declared type; Spark's timestamps hold
        microseconds, so a nanosecond timestamp is shown floored to them, see :meth:`view_spark_columns`)."""
        from pyspark.sql import types as T

        if self.name == "TINYINT":
            return T.ByteType()
        if self.name == "SMALLINT":
            return T.ShortType()
        if self.is_nanos:
            return T.TimestampType() if self.name == "TIMESTAMP_LTZ" else T.TimestampNTZType()
        return self.spark_type()

    def view_spark_columns(self, name: str) -> list:
        """The Spark columns a view shows for stored column ``name`` (storage -> declared type).

        A nanosecond timestamp becomes two columns: ``name`` as Spark's TIMESTAMP_NTZ (TIMESTAMP) or TIMESTAMP
        (TIMESTAMP_LTZ) floored to microseconds -- what Spark can hold, and what Fluss's own Iceberg tiering
        shows Spark of a TIMESTAMP(9) -- and ``name__nanos``, the exact nanoseconds since the epoch as a BIGINT
        (Spark's own reading of nanosecond Parquet, ``spark.sql.legacy.parquet.nanosAsLong``): order, compare
        and join on it where the nanoseconds matter. No session time zone is involved in either.
        """
        from pyspark.sql import functions as F

        if self.name in ("TINYINT", "SMALLINT"):
            return [F.col(name).cast(self.view_spark_type()).alias(name)]
        if not self.is_nanos:
            return [F.col(name)]
        # Floor division without overflow (x - pmod(x, 1000) overflows at the smallest long).
        micros = f"(`{name}` div 1000) - IF(`{name}` % 1000 < 0, 1, 0)"
        if self.name == "TIMESTAMP_LTZ":
            shown = F.timestamp_micros(F.expr(micros))
        else:
            shown = F.expr(f"timestampadd(MICROSECOND, {micros}, TIMESTAMP_NTZ'1970-01-01 00:00:00')")
        return [shown.alias(name), F.col(name).alias(name + NANOS_SUFFIX)]

    def iceberg_type(self):
        from pyiceberg import types as I

        if self.name == "DECIMAL":
            return I.DecimalType(*self.decimal_shape)
        return {
            "boolean": I.BooleanType,
            "int": I.IntegerType,
            "long": I.LongType,
            "float": I.FloatType,
            "double": I.DoubleType,
            "string": I.StringType,
            "binary": I.BinaryType,
            "date": I.DateType,
            "timestamp": I.TimestampType,
            "timestamptz": I.TimestamptzType,
        }[self.storage_kind]()

    def view_arrow_type(self):
        """The Arrow type reads without Spark return: the storage type, TINYINT/SMALLINT narrowed, nanosecond
        timestamps as ``timestamp[ns]`` (UTC for TIMESTAMP_LTZ), which hold them exactly."""
        import pyarrow as pa

        if self.name in ("TINYINT", "SMALLINT"):
            return pa.int8() if self.name == "TINYINT" else pa.int16()
        if self.is_nanos:
            return pa.timestamp("ns", tz="UTC" if self.name == "TIMESTAMP_LTZ" else None)
        return self.arrow_type()

    def arrow_type(self):
        import pyarrow as pa

        if self.name == "DECIMAL":
            return pa.decimal128(self.precision, self.scale)
        return {
            "boolean": pa.bool_(),
            "int": pa.int32(),
            "long": pa.int64(),
            "float": pa.float32(),
            "double": pa.float64(),
            "string": pa.string(),
            "binary": pa.binary(),
            "date": pa.date32(),
            "timestamp": pa.timestamp("us"),
            "timestamptz": pa.timestamp("us", tz="UTC"),
        }[self.storage_kind]

    # --- decoding ---------------------------------------------------------------------------------------
    def decode_json(self, value: Any) -> Any:
        """Convert a JSON value to this type's storage value. Raises ValueError with the reason.

        Every rule a stored value must satisfy is checked here (through :meth:`check_value`), so every input
        path that decodes with this method, and the Parquet path through :meth:`from_arrow`, validate alike.
        """
        if value is None:
            return None
        n = self.name
        if n == "BOOLEAN":
            if isinstance(value, bool):
                return value
            raise ValueError(f"expected a JSON boolean for BOOLEAN, got {short_repr(value)}")
        if n in INT_RANGES:
            return self.check_integer(self._integer(value))
        if n in ("FLOAT", "DOUBLE"):
            return self._float(value)
        if n == "DECIMAL":
            return self.check_decimal(self._decimal(value))
        if n in ("CHAR", "STRING"):
            if not isinstance(value, str):
                raise ValueError(f"expected a string for {self}, got {short_repr(value)}")
            return self.check_value(value)
        if n in ("BINARY", "BYTES"):
            if not isinstance(value, str):
                raise ValueError(f"expected a base64 string for {n}, got {short_repr(value)}")
            try:
                raw = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"{short_repr(value)} is not valid base64") from None
            return self.check_value(raw)
        return self._temporal(value)

    def _integer(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | decimal.Decimal):
            raise ValueError(f"expected an integer for {self}, got {short_repr(value)}")
        if isinstance(value, decimal.Decimal):
            if not value.is_finite():
                raise ValueError(f"expected an integer for {self}, got {value}")
            # Checked before converting: int() of 1e999999999999 would allocate the whole number.
            if value and value.adjusted() > 40:
                lo, hi = INT_RANGES[self.name]
                raise ValueError(f"{short_repr(value)} is out of range for {self.name} [{lo}, {hi}]")
            if value != value.to_integral_value(context=DECIMAL_CONTEXT):
                raise ValueError(f"expected an integer for {self}, got {short_repr(value)}")
            value = int(value)
        return value

    def _float(self, value: Any) -> float:
        """JSON numbers, or the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (as Flink's JSON format
        reads them); a finite number beyond the type's range is refused rather than stored as infinity."""
        if isinstance(value, str):
            special = SPECIAL_FLOATS.get(value)
            if special is None:
                raise ValueError(f"expected a number for {self.name}, got {short_repr(value)}")
            return special
        if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
            raise ValueError(f"expected a number for {self.name}, got {short_repr(value)}")
        if isinstance(value, float):
            return self.check_value(value)  # a Python float: NaN/inf were written explicitly
        if isinstance(value, decimal.Decimal) and not value.is_finite():
            raise ValueError(f"expected a number for {self.name}, got {value}")
        try:
            f = float(value)
        except OverflowError:
            f = math.inf
        if math.isinf(f):
            raise ValueError(f"{short_repr(value)} is out of range for {self.name}")
        return self.check_value(f)

    def _decimal(self, value: Any) -> decimal.Decimal:
        if isinstance(value, bool) or not isinstance(value, int | float | str | decimal.Decimal):
            raise ValueError(f"expected a number or numeric string for {self}, got {short_repr(value)}")
        if isinstance(value, decimal.Decimal):
            return value
        if isinstance(value, int):
            return decimal.Decimal(value)
        if isinstance(value, float):
            return decimal.Decimal(repr(value))  # the float as a JSON writer prints it
        number = parse_number_text(value)
        if number is None:
            raise ValueError(f"{short_repr(value)} is not a decimal number")
        return decimal.Decimal(number)

    def _temporal(self, value: Any) -> Any:
        n = self.name
        if not isinstance(value, str):
            raise ValueError(f"expected an ISO-8601 string for {self}, got {short_repr(value)}")
        if n in ("DATE", "TIME"):
            try:
                if n == "DATE":
                    return dt.date.fromisoformat(value)
                t = dt.time.fromisoformat(value)
            except ValueError:
                raise ValueError(f"{short_repr(value)} is not an ISO-8601 {n.lower()}") from None
            if t.tzinfo is not None:
                raise ValueError(f"{short_repr(value)} has a time zone; TIME is zone-less")
            micros = ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
            return format_time(time_from_micros(truncate_time_micros(micros, self.precision or 0)))
        # Python's datetime holds microseconds: the fraction is read apart, exactly, so the declared precision
        # is applied to the value as given (Flink's truncation looks at all nine digits).
        text, fraction = _split_fraction(value, self)
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
        except ValueError:
            raise ValueError(f"{short_repr(value)} is not an ISO-8601 {n.lower()}") from None
        if n == "TIMESTAMP":
            if parsed.tzinfo is not None:
                raise ValueError(
                    f"{short_repr(value)} has a time zone; TIMESTAMP is zone-less (use TIMESTAMP_LTZ)"
                )
            since_epoch = parsed - _EPOCH
        else:  # TIMESTAMP_LTZ: an instant; a zone-less value is taken as UTC.
            aware = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
            since_epoch = aware - _EPOCH_UTC
        seconds = since_epoch.days * 86_400 + since_epoch.seconds
        nanos = seconds * 1_000_000_000 + since_epoch.microseconds * 1_000 + int(fraction.ljust(9, "0"))
        return self.stored_instant(truncate_nanos(nanos, self.precision or 0), value)

    def stored_instant(self, nanos: int, shown: Any = None) -> Any:
        """The storage value of a TIMESTAMP/TIMESTAMP_LTZ instant given as nanoseconds since the epoch (in UTC for
        TIMESTAMP_LTZ), already cut to the declared precision: the nanoseconds for precision 7..9, else a
        ``datetime`` of its microseconds (zone-less, or UTC). ValueError, naming ``shown``, when the type's range
        does not hold it."""
        shown = short_repr(shown if shown is not None else f"{nanos} nanoseconds since 1970")
        if self.is_nanos:
            if not NANOS_MIN <= nanos <= NANOS_MAX:
                raise ValueError(f"{shown} is out of range for {self} ({self._nanos_range()})")
            return nanos
        ltz = self.name == "TIMESTAMP_LTZ"
        try:
            return (_EPOCH_UTC if ltz else _EPOCH) + dt.timedelta(microseconds=nanos // 1_000)
        except OverflowError:
            zone = " UTC" if ltz else ""
            raise ValueError(
                f"{shown} is out of range for {self.name} (0001-01-01 to 9999-12-31{zone})"
            ) from None

    def _nanos_range(self) -> str:
        zone = " UTC" if self.name == "TIMESTAMP_LTZ" else ""
        return f"{NANOS_RANGE}{zone}: nanoseconds since 1970 in 64 bits"

    def check_integer(self, value: int) -> int:
        lo, hi = INT_RANGES[self.name]
        if not lo <= value <= hi:
            raise ValueError(f"{short_repr(value)} is out of range for {self.name} [{lo}, {hi}]")
        return value

    def check_decimal(self, d: decimal.Decimal) -> decimal.Decimal:
        """Round HALF_UP to the scale (as Flink's JSON format does); refuse values exceeding the precision.

        Computed in :data:`DECIMAL_CONTEXT` (Python's default context has only 28 digits), and the magnitude
        is checked before rounding, so a huge exponent costs nothing."""
        if not d.is_finite():
            raise ValueError(f"{d} is not a finite decimal")
        p, s = self.decimal_shape
        if not d or d.adjusted() < -s - 1:
            return _zero(s)  # rounds to zero at this scale
        if d.adjusted() >= p - s:
            raise ValueError(f"{short_repr(d)} does not fit {self}")
        q = d.quantize(_quantum(s), rounding=decimal.ROUND_HALF_UP, context=DECIMAL_CONTEXT)
        if len(q.as_tuple().digits) > p and q != 0:
            raise ValueError(f"{short_repr(d)} does not fit {self}")
        return q

    def check_value(self, value: Any) -> Any:
        """The rules a non-null storage value of this type satisfies; returns it, or raises ValueError.

        The last step of :meth:`decode_json`, and what :meth:`validate_arrow` reports a bad Arrow value with.
        """
        n = self.name
        if n in INT_RANGES:
            return self.check_integer(value)
        if self.is_nanos:
            if not NANOS_MIN <= value <= NANOS_MAX:
                raise ValueError(f"{value} nanoseconds since 1970 is out of range for {self}")
            return value
        if n == "FLOAT" and math.isfinite(value):
            try:
                struct.pack("<f", value)
            except OverflowError:
                raise ValueError(f"{short_repr(value)} is out of range for FLOAT") from None
        elif n in ("CHAR", "STRING"):
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise ValueError(
                        f"invalid Unicode: a lone surrogate {value[e.start]!r} at position {e.start}"
                    ) from None
            if n == "CHAR" and self.precision is not None and len(value) > self.precision:
                raise ValueError(f"string of length {len(value)} does not fit {self}")
        elif n == "BINARY" and self.precision is not None and len(value) > self.precision:
            raise ValueError(f"{len(value)} bytes do not fit {self}")
        elif n == "DECIMAL":
            if not value.is_finite() or (len(value.as_tuple().digits) > self.decimal_shape[0] and value != 0):
                raise ValueError(f"{short_repr(value)} does not fit {self}")
        elif n == "TIME" and not _TIME_TEXT.fullmatch(value):
            raise ValueError(f"{short_repr(value)} is not a time of day HH:MM:SS.ffffff")
        return value

    # --- Arrow (Parquet input) ----------------------------------------------------------------------------
    def arrow_type_problem(self, t) -> str | None:
        """Why a Parquet column of Arrow type ``t`` cannot hold this type at all, or None.

        A problem of the file's schema, not of a row: checked for every column before any value. The value
        kinds accepted are the JSON path's (strings only for text types, or as ISO/numeric text decoded by
        :meth:`decode_json`; numbers for numeric types; timestamps without a zone for TIMESTAMP)."""
        import pyarrow as pa

        if pa.types.is_dictionary(t):
            t = t.value_type
        if self.name == "TIME":
            ok = pa.types.is_null(t) or _is_time(t) or _is_text(t)
            return None if ok else f"a Parquet column of type {t} cannot hold {self}"
        if pa.types.is_null(t) or (_is_text(t) and self.storage_kind != "string"):
            return None
        accepts = _is_temporal if self.is_nanos else _ACCEPTS[self.storage_kind]
        if not accepts(t):
            return f"a Parquet column of type {t} cannot hold {self}"
        if pa.types.is_timestamp(t) and t.tz is not None and self.name == "TIMESTAMP":
            return f"a timestamp with time zone {t.tz}; TIMESTAMP is zone-less (use TIMESTAMP_LTZ)"
        if self.name == "DECIMAL" and not _exact_decimal_cast(t, self):
            return None  # value by value
        try:
            pa.array([], t).cast(self.view_arrow_type() if self.is_nanos else self.arrow_type())
        except pa.ArrowNotImplementedError as e:
            return f"a Parquet column of type {t} cannot hold {self}: {e}"
        return None

    def from_arrow(self, source):
        """Convert a Parquet column to this type's storage array with the rules :meth:`decode_json` applies.

        Raises :class:`ColumnTypeError` for :meth:`arrow_type_problem`, else :class:`ColumnValueError` for
        the first bad row (see :meth:`convert_arrow`)."""
        cast, problems = self.convert_arrow(source)
        if problems:
            raise ColumnValueError(*problems[0])
        return cast

    def convert_arrow(self, source) -> tuple[Any, list[tuple[int, str]]]:
        """A Parquet column in this type's storage type, with every bad row set to null, and the bad rows
        (0-based, in row order) with the reason each would get alone. One pass whatever the number of bad
        rows, so quarantining many rows stays linear.

        Strings into non-string types and inexact numbers into DECIMAL go value by value through
        :meth:`decode_json` itself; everything else is an Arrow cast (``safe``) followed by
        :meth:`validate_arrow_all`. A zone-less timestamp is taken as UTC for TIMESTAMP_LTZ (as a zone-less
        JSON string is). Raises :class:`ColumnTypeError` for :meth:`arrow_type_problem`.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        array = source.combine_chunks() if isinstance(source, pa.ChunkedArray) else source
        problem = self.arrow_type_problem(array.type)
        if problem is not None:
            raise ColumnTypeError(_first_valid(array), problem)
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        target = self.arrow_type()
        t = array.type
        if pa.types.is_null(t):
            return pa.nulls(len(array), target), []
        if self.name == "TIME" and _is_time(t):
            return self._time_from_arrow(array)
        if _is_text(t) and (self.storage_kind != "string" or self.name == "TIME"):
            return self._from_python(array)
        if self.name == "DECIMAL" and not _exact_decimal_cast(t, self):
            return self._from_python(array)  # rounding HALF_UP to the scale, or a float's shortest text
        problems: dict[int, str] = {}
        if pa.types.is_timestamp(t):
            array, problems = self.truncate_timestamps(array)
        if self.is_nanos:
            cast, more = self._nanos_from_arrow(array)
            return cast, sorted({**dict(more), **problems}.items())
        if pa.types.is_timestamp(t) and t.unit == "ns":
            array = pc.floor_temporal(array, 1, "microsecond")  # precision <= 6 keeps microseconds, as JSON
        try:
            cast = array.cast(target, safe=True)
        except pa.ArrowInvalid:
            for row in _uncastable_rows(array, target):
                try:
                    array.slice(row, 1).cast(target, safe=True)
                except pa.ArrowInvalid as e:
                    problems[row] = f"does not fit {self}: {e}"
            array = _null_at(array, problems)
            cast = array.cast(target, safe=True)
        if self.name == "FLOAT" and pa.types.is_floating(t):
            overflow = pc.fill_null(pc.and_(pc.is_inf(cast), pc.invert(pc.is_inf(array))), False)
            for row in pc.indices_nonzero(overflow).to_pylist():
                problems[row] = f"{short_repr(array[row].as_py())} is out of range for FLOAT"
        for row, reason in self.validate_arrow_all(cast):
            problems.setdefault(row, reason)
        if problems:
            cast = _null_at(cast, problems)
        return cast, sorted(problems.items())

    def truncate_timestamps(self, array) -> tuple[Any, dict[int, str]]:
        """An Arrow timestamp array (any unit or zone) cut to this type's precision (:func:`truncate_nanos`, in
        the array's own unit, so every digit it holds counts), and the rows whose cut value leaves the 64-bit
        range (set to null). The same array when the unit holds no more digits than the precision."""
        import numpy as np
        import pyarrow as pa

        digits = UNIT_DIGITS[array.type.unit]
        if (self.precision or 0) >= digits or len(array) == array.null_count:
            return array, {}
        ticks = array.cast(pa.int64())
        nulls = ticks.is_null().to_numpy(zero_copy_only=False)
        cut, underflow = truncate_ticks(ticks.fill_null(0).to_numpy(), digits, self.precision or 0)
        problems = {
            int(row): f"{_arrow_text(array[int(row)])} is out of range for {self} once cut to its precision"
            for row in np.flatnonzero(underflow & ~nulls)
        }
        out = pa.array(cut, pa.int64(), mask=nulls | underflow).cast(array.type)
        return out, problems

    def normalize_stored(self, array) -> Any:
        """A storage-typed Arrow array cut to the declared precision (docs/semantics.md §15): what a value written
        before changelake enforced precision becomes when a compaction (non-key columns) or ``changelake
        repair`` (every column) rewrites it. TIMESTAMP/TIMESTAMP_LTZ by :func:`truncate_nanos`, TIME by
        :func:`truncate_time_micros`; other types already hold their declared precision. A value that would
        leave the 64-bit nanosecond range is left as it is."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks() if array.num_chunks else pa.array([], self.arrow_type())
        if self.name == "TIME":
            kept = min(self.precision or 0, 3)
            return pc.utf8_replace_slice(array, 9 + kept, 15, "0" * (6 - kept)) if kept < 6 else array
        if self.name not in ("TIMESTAMP", "TIMESTAMP_LTZ") or len(array) == array.null_count:
            return array
        if not self.is_nanos:
            return self.truncate_timestamps(array)[0]
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        ticks = array.fill_null(0).to_numpy()
        cut, underflow = truncate_ticks(ticks, 9, self.precision or 0)
        return pa.array(np.where(underflow, ticks, cut), pa.int64(), mask=nulls)

    def _nanos_from_arrow(self, array) -> tuple[Any, list[tuple[int, str]]]:
        """Arrow timestamps of any unit (or dates) as exact nanoseconds since the epoch (int64); a value that
        overflows nanoseconds is refused with the JSON path's words. A zone-less timestamp is taken as UTC
        for TIMESTAMP_LTZ; a zoned one is an instant, which Arrow keeps in UTC already."""
        import pyarrow as pa

        target = self.view_arrow_type()  # Arrow casts a zone-less timestamp to a zoned one as UTC
        problems: dict[int, str] = {}
        try:
            cast = array.cast(target, safe=True)
        except pa.ArrowInvalid:
            for row in _uncastable_rows(array, target):
                problems[row] = (
                    f"{_arrow_text(array[row])} is out of range for {self} ({self._nanos_range()})"
                )
            cast = _null_at(array, problems).cast(target, safe=True)
        return cast.cast(pa.int64()), sorted(problems.items())

    def validate_arrow(self, array) -> tuple[int, str] | None:
        """The first row (0-based) of a storage-typed Arrow array that breaks this type's rules, and why."""
        problems = self.validate_arrow_all(array)
        return problems[0] if problems else None

    def validate_arrow_all(self, array) -> list[tuple[int, str]]:
        """Every row (0-based, in order) of a storage-typed Arrow array that breaks this type's rules, and why.

        Candidates are found column-wise; the reason is the one :meth:`check_value` gives for that value, so
        both input paths refuse the same values with the same words. DATE and TIMESTAMP values outside
        0001-01-01..9999-12-31 (which Python and Spark cannot hold) are refused here as well.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if len(array) == 0 or array.null_count == len(array) or self.is_nanos:
            return []  # every int64 is a nanosecond timestamp in range
        n = self.name
        if n in ("TINYINT", "SMALLINT"):
            lo, hi = INT_RANGES[n]
            bad = pc.or_(pc.less(array, lo), pc.greater(array, hi))
        elif n == "CHAR":
            bad = pc.greater(pc.utf8_length(array), self.precision)
        elif n == "BINARY" and self.precision is not None:
            bad = pc.greater(pc.binary_length(array), self.precision)
        elif n == "TIME":
            bad = pc.invert(pc.match_substring_regex(array, "^" + _TIME_TEXT.pattern + "$"))
        elif n in ("DATE", "TIMESTAMP", "TIMESTAMP_LTZ"):
            lo, hi = _TEMPORAL_BOUNDS["date" if n == "DATE" else "timestamp"]
            raw = array.view(pa.int32() if n == "DATE" else pa.int64())
            bad = pc.fill_null(pc.or_(pc.less(raw, lo), pc.greater(raw, hi)), False)
            unit = "days" if n == "DATE" else "microseconds"
            return [
                (
                    row,
                    f"{raw[row].as_py()} {unit} since 1970-01-01 is out of range for {self} (0001-01-01 to 9999-12-31)",
                )
                for row in pc.indices_nonzero(bad).to_pylist()
            ]
        else:
            return []
        out = []
        for row in pc.indices_nonzero(pc.fill_null(bad, False)).to_pylist():
            try:
                self.check_value(array[row].as_py())
            except ValueError as e:
                out.append((row, str(e)))
                continue
            raise AssertionError(f"validate_arrow and check_value disagree on {array[row]} for {self}")
        return out

    def _from_python(self, array) -> tuple[Any, list[tuple[int, str]]]:
        """Decode an Arrow array value by value with :meth:`decode_json` (exactly the JSON path's rules)."""
        import pyarrow as pa

        out, problems = [], []
        for row, value in enumerate(array.to_pylist()):
            try:
                out.append(self.decode_json(value))
            except ValueError as e:
                out.append(None)
                problems.append((row, str(e)))
        return pa.array(out, self.arrow_type()), problems

    def _time_from_arrow(self, array) -> tuple[Any, list[tuple[int, str]]]:
        """Arrow time32/time64 values as ``HH:MM:SS.ffffff``, cut to the declared precision
        (:func:`truncate_time_micros`)."""
        import pyarrow as pa

        per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[array.type.unit]
        out, problems = [], []
        for row, ticks in enumerate(array.cast(pa.int64()).to_pylist()):
            micros = None if ticks is None else ticks * 1_000_000 // per_second
            if micros is not None and not 0 <= micros < MICROS_PER_DAY:
                problems.append((row, f"{ticks} {array.type.unit} is not a time of day (0 to 24 h)"))
                micros = None
            if micros is not None:
                micros = truncate_time_micros(micros, self.precision or 0)
            out.append(None if micros is None else format_time(time_from_micros(micros)))
        return pa.array(out, pa.string()), problems


class ColumnValueError(ValueError):
    """A value of an Arrow column breaks its type's rules: ``row`` is its 0-based position."""

    def __init__(self, row: int, reason: str):
        super().__init__(reason)
        self.row, self.reason = row, reason


class ColumnTypeError(ColumnValueError):
    """The Arrow column's type cannot hold the column's type at all: a problem of the file, not of a row
    (``row`` is its first non-null value)."""


#: Decimal arithmetic of the input paths: wide enough for DECIMAL(38,s) and any rounding of it (Python's
#: default context keeps 28 digits and would refuse or round a valid DECIMAL(38) value).
DECIMAL_CONTEXT = decimal.Context(
    prec=100,
    rounding=decimal.ROUND_HALF_UP,
    Emin=-999_999_999,
    Emax=999_999_999,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)
#: The JSON strings that decode to IEEE specials for FLOAT/DOUBLE (Java's ``Double.parseDouble`` names).
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf, "-Infinity": -math.inf}
MICROS_PER_DAY = 86_400_000_000
#: Longest numeric text decoded (a DECIMAL(38,s) needs 40 characters; the rest is padding or an attack).
MAX_NUMBER_TEXT = 1000
# ASCII digits only: Python's int()/Decimal()/float() also accept other scripts' digits ('٣' == 3).
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TIME_TEXT = re.compile(r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{6}")
# Days and microseconds since the epoch of 0001-01-01 and 9999-12-31 (23:59:59.999999).
_TEMPORAL_BOUNDS = {
    "date": (-719_162, 2_932_896),
    "timestamp": (-62_135_596_800_000_000, 253_402_300_799_999_999),
}


#: Nanosecond timestamps (precision 7..9) are a signed 64-bit count of nanoseconds since 1970-01-01.
NANOS_MIN, NANOS_MAX = -(2**63), 2**63 - 1
NANOS_RANGE = "1677-09-21 00:12:43.145224192 to 2262-04-11 23:47:16.854775807"
#: Suffix of the exact BIGINT column a Spark view adds for a nanosecond timestamp column.
NANOS_SUFFIX = "__nanos"
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# The fraction of the time of day (``T12:00:00.f``, basic ``T120000.f``): digits and colons after the date's
# separator, so never a fraction inside an offset.
_TIME_FRACTION = re.compile(r"[T ][0-9:]*[0-9]([.,])([0-9]+)")


def _split_fraction(value: str, dtype: DataType) -> tuple[str, str]:
    """``value`` without the fraction of its seconds, and that fraction's digits ("" if none): at most 9,
    as Flink's timestamp formats (``appendFraction(NANO_OF_SECOND, 0, 9, true)``) read."""
    m = _TIME_FRACTION.search(value)
    if m is None:
        return value, ""
    digits = m.group(2)
    if len(digits) > 9:
        raise ValueError(
            f"{short_repr(value)} has {len(digits)} fraction digits; {dtype} holds at most 9 (nanoseconds)"
        )
    return value[: m.start(1)] + value[m.end(2) :], digits


#: Digits of the fraction of a second each Arrow time unit holds.
UNIT_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def truncate_nanos(nanos: int, precision: int) -> int:
    """An instant (nanoseconds since the epoch, in UTC for TIMESTAMP_LTZ) cut to ``precision`` fraction digits
    as Flink's cast to TIMESTAMP(p) cuts it (``DateTimeUtils.truncate(TimestampData, int)``, see
    docs/semantics.md §15): digits are dropped, never rounded; for p <= 3 on the epoch milliseconds with Java's
    integer division, so before 1970 the cut goes toward 1970 (``zeroLastDigits``); and a value whose
    nano-of-second has at most p digits as a number (below 10^p ns) is kept whole, as Flink's shortcut
    (``Integer.toString(nano).length() <= precision``) keeps it."""
    if precision >= 9:
        return nanos
    nano_of_second = nanos % 1_000_000_000
    if nano_of_second < 10**precision:
        return nanos
    millis, nano_of_milli = divmod(nanos, 1_000_000)
    if precision <= 3:
        step = 10 ** (3 - precision)
        toward_zero = -(-millis // step) if millis < 0 else millis // step
        return toward_zero * step * 1_000_000
    step = 10 ** (9 - precision)
    return millis * 1_000_000 + nano_of_milli // step * step


def truncate_ticks(ticks, unit_digits: int, precision: int):
    """:func:`truncate_nanos` over a numpy int64 array of ticks of 10^-``unit_digits`` s since the epoch (an
    Arrow timestamp's unit); returns the cut ticks and a mask of those that leave int64 (only ticks within a
    second of the smallest nanosecond timestamp can)."""
    import numpy as np

    if precision >= unit_digits:
        return ticks, np.zeros(len(ticks), bool)
    per_second = 10**unit_digits
    fraction = ticks % per_second  # numpy's % floors: 0 <= fraction < per_second
    keep = fraction * 10 ** (9 - unit_digits) < 10**precision
    if precision <= 3:
        per_milli = 10 ** (unit_digits - 3)
        millis = ticks // per_milli  # floored first (TimestampData's milliseconds), then cut toward 1970
        step = 10 ** (3 - precision)
        cut_millis = np.where(millis < 0, -((-millis) // step), millis // step) * step
        underflow = cut_millis < -(-np.iinfo(np.int64).min // per_milli)  # below the smallest int64 of ticks
        with np.errstate(over="ignore"):
            cut = cut_millis * per_milli
    else:
        rest = fraction % 10 ** (unit_digits - precision)
        underflow = ticks < np.iinfo(np.int64).min + rest
        with np.errstate(over="ignore"):
            cut = ticks - rest
    return np.where(keep, ticks, cut), underflow & ~keep


def truncate_time_micros(micros: int, precision: int) -> int:
    """A time of day (microseconds after midnight) cut to TIME(p): Flink and Fluss hold a TIME as milliseconds of
    the day (``toInternal(LocalTime)``: ``getNano() / 1_000_000``), so at most three digits stay, and a cast to
    TIME(p < 3) drops the rest (docs/semantics.md §15). Never rounded."""
    step = 10 ** (6 - min(precision, 3))
    return micros - micros % step


def format_timestamp_nanos(nanos: int, ltz: bool = False) -> str:
    """ISO-8601 text of a nanosecond count since the epoch, all nine fraction digits (``Z`` for an instant);
    raises OverflowError beyond year 9999."""
    seconds, fraction = divmod(nanos, 1_000_000_000)
    stamp = _EPOCH + dt.timedelta(seconds=seconds)
    return f"{stamp.isoformat(timespec='seconds')}.{fraction:09d}" + ("Z" if ltz else "")


def parse_number_text(text: str) -> int | decimal.Decimal | None:
    """A number written as text (Canal's values, DECIMAL strings): ASCII digits, optional sign, fraction
    and exponent. None if ``text`` is not a number; ValueError if it is longer than MAX_NUMBER_TEXT."""
    if len(text) > MAX_NUMBER_TEXT:
        raise ValueError(f"a number of {len(text)} characters exceeds the limit of {MAX_NUMBER_TEXT}")
    if not _NUMBER_TEXT.fullmatch(text):
        return None
    if len(text) <= 40 and text.lstrip("+-").isdigit():
        return int(text)
    return decimal.Decimal(text)


def time_from_micros(micros: int) -> dt.time:
    """The time of day ``micros`` microseconds after midnight (0 <= micros < 24 h)."""
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return dt.time(hour, minute, second, micro)


def format_time(t: dt.time) -> str:
    return t.replace(tzinfo=None).isoformat(timespec="microseconds")


def _zero(scale: int) -> decimal.Decimal:
    return decimal.Decimal((0, (0,), -scale))


def _quantum(scale: int) -> decimal.Decimal:
    return decimal.Decimal((0, (1,), -scale))


def _is_text(t) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_time(t) -> bool:
    import pyarrow as pa

    return pa.types.is_time32(t) or pa.types.is_time64(t)


def _is_number(t) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _is_binary(t) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    )


def _is_temporal(t) -> bool:
    import pyarrow as pa

    return pa.types.is_timestamp(t) or pa.types.is_date(t)


#: Arrow column types a Parquet input may use for each storage kind (the JSON path's value kinds).
_ACCEPTS = {
    "boolean": lambda t: __import__("pyarrow").types.is_boolean(t),
    "int": _is_number,
    "long": _is_number,
    "float": _is_number,
    "double": _is_number,
    "decimal": _is_number,
    "string": _is_text,
    "binary": _is_binary,
    "date": lambda t: __import__("pyarrow").types.is_date(t),
    "timestamp": _is_temporal,
    "timestamptz": _is_temporal,
}


def _exact_decimal_cast(t, target: DataType) -> bool:
    """Whether an Arrow cast to ``target`` is exact (no rounding): decimals of no larger scale, integers."""
    import pyarrow as pa

    if pa.types.is_decimal(t):
        return t.scale <= target.scale
    if pa.types.is_integer(t):
        digits = len(str(2 ** (t.bit_width - (1 if pa.types.is_signed_integer(t) else 0))))
        precision, scale = target.decimal_shape
        return digits <= precision - scale
    return False


def _first_valid(array) -> int:
    """Row of the first non-null value (the row an error about the whole column names)."""
    import pyarrow.compute as pc

    valid = pc.is_valid(array)
    return pc.index(valid, True).as_py() if pc.any(valid).as_py() else 0


def _arrow_text(scalar) -> str:
    """A temporal Arrow value as an error names it: its ISO text, or its raw ticks when Python cannot hold it."""
    import pyarrow as pa

    try:
        value = scalar.as_py()
    except (OverflowError, ValueError):
        unit = scalar.type.unit if pa.types.is_timestamp(scalar.type) else "days"
        return f"{scalar.cast(pa.int64()).as_py()} {unit} since 1970-01-01"
    return short_repr(value.isoformat(sep=" ") if isinstance(value, dt.datetime) else str(value))


def _uncastable_rows(array, target) -> list[int]:
    """Rows whose safe cast to ``target`` fails: one cast of the whole array when none does, else halves
    cast recursively, so a few bad rows cost a few casts and many cost O(n log n) values cast."""
    import pyarrow as pa

    def bad(lo: int, hi: int) -> list[int]:
        try:
            array.slice(lo, hi - lo).cast(target, safe=True)
            return []
        except pa.ArrowInvalid:
            if hi - lo == 1:
                return [lo]
        mid = (lo + hi) // 2
        return bad(lo, mid) + bad(mid, hi)

    return bad(0, len(array)) if len(array) else []


def _null_at(array, rows) -> Any:
    """``array`` with the given rows set to null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    flags = [False] * len(array)
    for row in rows:
        flags[row] = True
    return pc.if_else(pa.array(flags, pa.bool_()), pa.scalar(None, array.type), array)


def parse_type(text: object, column: str = "?") -> DataType:
    """Parse a type string such as ``DECIMAL(12,2)``; raise SpecError naming the column otherwise."""
    m = _TYPE_RE.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise SpecError(f"Column '{column}': cannot parse type {short_repr(text)}")
    name = _ALIASES.get(m.group(1).upper(), m.group(1).upper())
    p = int(m.group(2)) if m.group(2) is not None else None
    s = int(m.group(3)) if m.group(3) is not None else None
    if name == "DECIMAL":
        p = 10 if p is None else p
        s = 0 if s is None else s
        if not (1 <= p <= 38 and 0 <= s <= p):
            raise SpecError(
                f"Column '{column}': DECIMAL precision must be 1..38 and scale 0..precision, got {text}"
            )
        return DataType(name, p, s)
    if name in ("TIMESTAMP", "TIMESTAMP_LTZ", "TIME"):
        # Flink's defaults: TIMESTAMP(6), TIME(0) (docs/semantics.md §15).
        p = (0 if name == "TIME" else 6) if p is None else p
        if not 0 <= p <= 9 or s is not None:
            raise SpecError(f"Column '{column}': {name} precision must be 0..9, got {text}")
        return DataType(name, p)
    if name in ("CHAR", "BINARY"):
        if p is None:
            return DataType(name, 1 if name == "CHAR" else None)
        if not 1 <= p <= _MAX_LENGTH:
            raise SpecError(f"Column '{column}': {name} length must be 1..{_MAX_LENGTH}, got {p}")
        return DataType(name, p)
    if name in _SIMPLE and s is None and p is None:
        return DataType(name)
    if name in ("ARRAY", "MAP", "ROW", "MULTISET"):
        raise SpecError(f"Column '{column}': nested type {name} is not supported by changelake tables")
    raise SpecError(
        f"Column '{column}': unknown type {short_repr(text)}; supported: BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, "
        "DOUBLE, DECIMAL(p,s), CHAR(n), STRING, BINARY, BYTES, DATE, TIME, TIMESTAMP(p), TIMESTAMP_LTZ(p)"
    )
