"""Column types of a table spec (Fluss/Flink vocabulary) and how each is stored, read and decoded.

Storage follows what Spark can write to Parquet and Iceberg can describe:

==================  ====================  ==================================================================
spec type           Iceberg / Spark       note
==================  ====================  ==================================================================
TINYINT, SMALLINT   int                   Iceberg has no 8/16-bit ints; values are range-checked on input
CHAR(n), STRING     string                CHAR values longer than n are refused
TIME                string                ``HH:MM:SS.ffffff`` (fixed width, so it sorts); Spark 4.1 cannot
                                          write TIME to Parquet
TIMESTAMP(p)        timestamp             microseconds; p > 6 is accepted and truncated to microseconds
TIMESTAMP_LTZ(p)    timestamptz           an instant, kept in UTC
BINARY, BYTES       binary                JSON inputs carry base64 strings
==================  ====================  ==================================================================
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import re
from dataclasses import dataclass
from typing import Any

from changelake.errors import SpecError

_INT_RANGES = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
}
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
    "TIME",
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
_TYPE_RE = re.compile(r"^\s*([A-Za-z_]+)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$")


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
        return self.name in _INT_RANGES

    # --- storage ---------------------------------------------------------------------------------------
    @property
    def storage_kind(self) -> str:
        """How values are stored: one of the keys shared by the Spark, Iceberg and Arrow mappings below."""
        return _STORAGE_KIND[self.name]

    def spark_type(self):
        """The Spark type of this column in storage and in changelake's internal DataFrames."""
        from pyspark.sql import types as T

        if self.name == "DECIMAL":
            return T.DecimalType(self.precision, self.scale)
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
        """The Spark type shown in registered views (closest to the declared type)."""
        from pyspark.sql import types as T

        if self.name == "TINYINT":
            return T.ByteType()
        if self.name == "SMALLINT":
            return T.ShortType()
        return self.spark_type()

    def iceberg_type(self):
        from pyiceberg import types as I

        if self.name == "DECIMAL":
            return I.DecimalType(self.precision, self.scale)
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
        """Convert a JSON value to this type's storage value. Raises ValueError with the reason."""
        if value is None:
            return None
        n = self.name
        if n == "BOOLEAN":
            if isinstance(value, bool):
                return value
            raise ValueError(f"expected a JSON boolean for BOOLEAN, got {value!r}")
        if n in _INT_RANGES:
            if isinstance(value, bool) or not isinstance(value, int | decimal.Decimal):
                raise ValueError(f"expected an integer for {self}, got {value!r}")
            if isinstance(value, decimal.Decimal):
                if value != value.to_integral_value():
                    raise ValueError(f"expected an integer for {self}, got {value}")
                value = int(value)
            return self.check_integer(value)
        if n in ("FLOAT", "DOUBLE"):
            if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
                if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
                    return float(value)
                raise ValueError(f"expected a number for {n}, got {value!r}")
            return float(value)
        if n == "DECIMAL":
            if isinstance(value, bool) or not isinstance(value, int | float | str | decimal.Decimal):
                raise ValueError(f"expected a number or numeric string for {self}, got {value!r}")
            try:
                d = decimal.Decimal(str(value)) if not isinstance(value, decimal.Decimal) else value
            except decimal.InvalidOperation:
                raise ValueError(f"{value!r} is not a decimal number") from None
            return self.check_decimal(d)
        if n in ("CHAR", "STRING"):
            if not isinstance(value, str):
                raise ValueError(f"expected a string for {self}, got {value!r}")
            if n == "CHAR" and len(value) > self.precision:
                raise ValueError(f"string of length {len(value)} does not fit {self}")
            return value
        if n in ("BINARY", "BYTES"):
            if not isinstance(value, str):
                raise ValueError(f"expected a base64 string for {n}, got {value!r}")
            try:
                raw = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"{value!r} is not valid base64") from None
            if n == "BINARY" and self.precision is not None and len(raw) > self.precision:
                raise ValueError(f"{len(raw)} bytes do not fit {self}")
            return raw
        if not isinstance(value, str):
            raise ValueError(f"expected an ISO-8601 string for {self}, got {value!r}")
        try:
            if n == "DATE":
                return dt.date.fromisoformat(value)
            if n == "TIME":
                return format_time(dt.time.fromisoformat(value))
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO-8601 {n.lower()}") from None
        if n == "TIMESTAMP":
            if parsed.tzinfo is not None:
                raise ValueError(f"{value!r} has a time zone; TIMESTAMP is zone-less (use TIMESTAMP_LTZ)")
            return parsed
        # TIMESTAMP_LTZ: an instant; a zone-less value is taken as UTC.
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=dt.UTC)
        return parsed.astimezone(dt.UTC)

    def check_integer(self, value: int) -> int:
        lo, hi = _INT_RANGES[self.name]
        if not lo <= value <= hi:
            raise ValueError(f"{value} is out of range for {self.name} [{lo}, {hi}]")
        return value

    def check_decimal(self, d: decimal.Decimal) -> decimal.Decimal:
        """Round HALF_UP to the scale (as Flink's JSON format does); refuse values exceeding the precision."""
        if not d.is_finite():
            raise ValueError(f"{d} is not a finite decimal")
        q = d.quantize(decimal.Decimal(1).scaleb(-self.scale), rounding=decimal.ROUND_HALF_UP)
        if len(q.as_tuple().digits) > self.precision and q != 0:
            raise ValueError(f"{d} does not fit {self}")
        return q


def format_time(t: dt.time) -> str:
    return t.replace(tzinfo=None).isoformat(timespec="microseconds")


def parse_type(text: object, column: str = "?") -> DataType:
    """Parse a type string such as ``DECIMAL(12,2)``; raise SpecError naming the column otherwise."""
    m = _TYPE_RE.match(text) if isinstance(text, str) else None
    if not m:
        raise SpecError(f"Column '{column}': cannot parse type {text!r}")
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
    if name in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        p = 6 if p is None else p
        if not 0 <= p <= 9:
            raise SpecError(f"Column '{column}': {name} precision must be 0..9, got {p}")
        return DataType(name, p)
    if name == "CHAR":
        p = 1 if p is None else p
        if p < 1:
            raise SpecError(f"Column '{column}': CHAR length must be >= 1")
        return DataType(name, p)
    if name == "BINARY":
        return DataType(name, p)
    if name in _SIMPLE and s is None and (p is None or name == "TIME"):
        return DataType(name)
    if name in ("ARRAY", "MAP", "ROW", "MULTISET"):
        raise SpecError(f"Column '{column}': nested type {name} is not supported by changelake tables")
    raise SpecError(
        f"Column '{column}': unknown type {text!r}; supported: BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, "
        "DOUBLE, DECIMAL(p,s), CHAR(n), STRING, BINARY, BYTES, DATE, TIME, TIMESTAMP(p), TIMESTAMP_LTZ(p)"
    )
