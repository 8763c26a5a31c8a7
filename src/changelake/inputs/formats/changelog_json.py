"""changelog-json: Flink's (and Fluss') changelog as JSON lines, one record a line.

``{"op": "+I", "data": {...}}``, or the positional ``{"rowkind": "+I", "fields": [...]}`` with the values in
column order; ``op`` is one of ``+I``, ``-U``, ``+U``, ``-D``. The format of a ``.jsonl`` file when the table
names none, and the only one with a column-wise path (:meth:`ChangelogJson.columns`).

pyarrow and numpy are imported where the column-wise path uses them: this module is imported with every
table spec (through the format registry), and the CLI's read commands must not pull numpy in.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from changelake.errors import short_repr
from changelake.inputs.formats.base import (
    OPS,
    FieldError,
    JsonLinesFormat,
    Message,
    SourceEvent,
    json_object,
    only_fields,
    plain_row,
)
from changelake.types import INT_RANGES, MAX_NUMBER_TEXT

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from changelake.source_options import SourceOptions
    from changelake.spec import TableSpec


class ChangelogJson(JsonLinesFormat):
    name = "changelog-json"
    suffixes = (".jsonl", ".json")

    def decode(self, obj: Any, spec: TableSpec, opts: SourceOptions) -> Message:
        """``{"op": "+I", "data": {...}}`` or the positional ``{"rowkind": "+I", "fields": [...]}``."""
        obj = json_object(obj, None)
        names = spec.column_names
        if "rowkind" in obj or "fields" in obj:
            only_fields(obj, {"rowkind", "fields"})
            op, raw, op_field = obj.get("rowkind"), obj.get("fields"), "rowkind"
            if not isinstance(raw, list):
                raise FieldError("fields", "expected a JSON array in column order")
            if len(raw) != len(names):
                raise FieldError("fields", f"expected {len(names)} values {list(names)}, got {len(raw)}")
            data = dict(zip(names, raw, strict=True))
        else:
            only_fields(obj, {"op", "data"})
            op, data, op_field = obj.get("op"), obj.get("data"), "op"
            if not isinstance(data, dict):
                raise FieldError("data", "expected a JSON object with the row's columns")
        if op not in OPS:
            raise FieldError(op_field, f"unknown op {short_repr(op)}; expected one of {list(OPS)}")
        return Message([(op, data)], order_root=obj)

    def render(self, spec: TableSpec, events: list[SourceEvent], envelope: bool = False) -> list[str]:
        return [
            json.dumps({"op": op, "data": plain_row(row)}) for event in events for op, row in event.records()
        ]

    def columns(
        self, data: bytes | memoryview, first_line: int, spec: TableSpec
    ) -> tuple[np.ndarray, pa.Array, list[pa.Array]] | None:
        """Changelog JSON lines decoded column-wise: pyarrow's JSON reader, then Arrow kernels.

        Every encoding Flink's JSON format writes takes this path: timestamps in its SQL
        (``2026-01-09 09:58:40.695699``, the default) or ISO-8601 form, with 0 to 6 fraction digits, and
        ``Z`` for a TIMESTAMP_LTZ; DECIMAL as a JSON number (the default, in scientific notation where
        Jackson writes a BigDecimal so: ``1.2E+3``) or as a string; TIME with or without a fraction; a
        ``-D`` with the whole row or its key only. Only values whose per-line decoding is certain to give
        the same storage value take it; a range with anything else (a bad record, a duplicate key, a NaN
        literal, a decimal that needs rounding, a zone offset, a lone carriage return, ...) returns None and
        is decoded line by line, so every error and dead letter is the per-line path's own."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj

        from changelake.inputs.records import ColumnRules

        decimals = any(c.type.name == "DECIMAL" for c in spec.columns)
        lines = _object_lines(data, first_line, plus_minus=decimals)
        if lines is None:
            return None
        line_numbers, longest, plus_minus = lines
        if not len(line_numbers):
            return line_numbers, pa.array([], pa.string()), []
        if ColumnRules(spec).checks:
            return None  # float keys and bitmaps have rules of their own: the per-line path checks them
        if decimals and (plus_minus or _long_text(data, longest)):
            return None  # a DECIMAL's text pyarrow's reader might take and the per-line path refuse
        converters = []
        fields = []
        for column in spec.columns:
            parse_type, convert = _json_converter(column.type)
            if convert is None:
                return None  # a type decoded value by value (bytes, nanoseconds, ...): no column-wise path
            fields.append(pa.field(column.name, parse_type))
            converters.append(convert)
        schema = pa.schema([pa.field("op", pa.string()), pa.field("data", pa.struct(fields))])
        try:
            parsed = pj.read_json(
                pa.BufferReader(data),
                read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(data) + 1)),
                parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
            )
        except (pa.ArrowException, ValueError, UnicodeError):
            return None
        if parsed.num_rows != len(line_numbers) or parsed.schema != schema:
            return None  # an object spanning lines or two on one line: not JSON lines
        op = parsed.column("op").combine_chunks()
        body = parsed.column("data").combine_chunks()
        if op.null_count or body.null_count or not pc.all(pc.is_in(op, pa.array(OPS))).as_py():
            return None
        not_delete = pc.not_equal(op, "-D")
        arrays = []
        for column, convert in zip(spec.columns, converters, strict=True):
            try:
                array = convert(body.field(column.name))
            except (pa.ArrowException, ValueError, OverflowError):
                return None
            if array is None:
                return None
            required = column.name in spec.primary_key or not column.nullable
            if required and array.null_count:
                missing = (
                    pc.is_null(array)
                    if column.name in spec.primary_key
                    else pc.and_(pc.is_null(array), not_delete)
                )
                if pc.any(missing).as_py():
                    return None
            arrays.append(array)
        return line_numbers, op, arrays


# --- column-wise ------------------------------------------------------------------------------------------
_DATE_TEXT = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
_CLOCK_TEXT = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
# ISO-8601's "T" or the SQL form's space (Flink's JSON format writes either, SQL by default), and at most
# six fraction digits: what pyarrow's cast to microseconds reads as the per-line path does.
_STAMP_TEXT = _DATE_TEXT + "[T ]" + _CLOCK_TEXT + r"(\.[0-9]{1,6})?"
_TIME_WIDTH = len("00:00:00.000000")


def object_lines(data: bytes | memoryview, first_line: int) -> np.ndarray | None:
    """The line number of every non-blank line, if each is one ``{...}`` (a carriage return only before a
    newline, the text valid UTF-8); else None. ``data`` may be a view of a memory-mapped file: nothing here
    copies it."""
    lines = _object_lines(data, first_line)
    return None if lines is None else lines[0]


def _object_lines(
    data: bytes | memoryview, first_line: int, plus_minus: bool = False
) -> tuple[np.ndarray, int, bool] | None:
    """:func:`object_lines`, the length of the longest line in bytes, and (``plus_minus``: looked for in the
    same pass) whether the bytes ``+-`` are anywhere.

    pyarrow's JSON reader converts a JSON number or string to a DECIMAL from its text, exactly, with the
    per-line path's grammar (sign, digits, fraction, exponent) but two differences: it takes an exponent
    written ``e+-5``, and text of any length (the per-line path refuses numeric text over MAX_NUMBER_TEXT
    characters). A JSON number has neither, so a range of a table with a DECIMAL column whose bytes hold
    ``+-`` or a text that long (:func:`_long_text`) is left to the per-line path."""
    import numpy as np
    import pyarrow as pa

    raw = np.frombuffer(data, np.uint8)
    if not len(raw):
        return np.zeros(0, np.int64), 0, False
    # One pass finds the newlines and any carriage return (both among the bytes below 14), and the "+"s.
    controls = np.flatnonzero((raw < 14) | (raw == ord("+")) if plus_minus else raw < 14)
    kinds = raw[controls]
    if plus_minus:
        plus = controls[kinds == ord("+")]
        plus_minus = bool(len(plus)) and bool((raw[np.minimum(plus + 1, len(raw) - 1)] == ord("-")).any())
        controls = controls[kinds != ord("+")]
        kinds = raw[controls]
    newlines = controls[kinds == 10]
    returns = controls[kinds == 13]
    if (
        len(returns)
        and ((returns + 1 >= len(raw)) | (raw[np.minimum(returns + 1, len(raw) - 1)] != 10)).any()
    ):
        return None  # a lone \r: the per-line path decides what it means inside its line
    starts = np.r_[0, newlines + 1]
    ends = np.r_[newlines, len(raw)]  # exclusive, without the newline
    if len(returns):
        ends = ends - ((ends > starts) & (raw[np.maximum(ends - 1, 0)] == 13))  # without a \r before it
    blank = ends == starts
    filled = np.flatnonzero(~blank)
    if (raw[starts[filled]] != ord("{")).any() or (raw[ends[filled] - 1] != ord("}")).any():
        return None
    if raw.max() >= 128:  # ASCII is valid UTF-8 (and a max is ~4x faster than validating)
        text = pa.py_buffer(data)
        offsets = pa.array([0, text.size], pa.int64()).buffers()[1]
        try:
            pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, text]).cast(
                pa.large_string()
            ).validate(full=True)
        except pa.ArrowInvalid:
            return None
    return filled.astype(np.int64) + first_line, int((ends - starts).max()), plus_minus


def _long_text(data: bytes | memoryview, longest: int) -> bool:
    """Whether a JSON string in the range may be longer than MAX_NUMBER_TEXT characters: a decimal text
    pyarrow's reader takes has no quote inside, so it is at least as long as a gap between two quotes (only
    looked for when a line is that long)."""
    import numpy as np

    if longest <= MAX_NUMBER_TEXT:
        return False
    quotes = np.flatnonzero(np.frombuffer(data, np.uint8) == ord('"'))
    return len(quotes) > 1 and int(np.diff(quotes).max()) > MAX_NUMBER_TEXT


def _json_converter(dtype):
    """(the type pyarrow parses a column's JSON values as, a function from that array to the storage array
    or None when a value needs the per-message path); (None, None) for a type decoded value by value."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    name, storage = dtype.name, dtype.arrow_type()
    if name == "BOOLEAN":
        return pa.bool_(), lambda a: a
    if name in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        # BIGINT needs no check: the JSON reader already refused what does not fit an int64
        lo, hi = INT_RANGES[name] if name != "BIGINT" else (None, None)

        def integer(a: pa.Array) -> pa.Array | None:
            if lo is not None and a.null_count < len(a):
                if pc.min(a).as_py() < lo or pc.max(a).as_py() > hi:
                    return None
            return a.cast(storage)

        return pa.int64(), integer
    if name in ("FLOAT", "DOUBLE"):

        def number(a: pa.Array) -> pa.Array | None:
            # Parsed as doubles, then narrowed as the per-message path narrows a Python float.
            out = a.cast(storage, safe=False)
            if not pc.all(pc.fill_null(pc.is_finite(out), True)).as_py():
                return None  # NaN/Infinity literals (not JSON) or a FLOAT out of range
            values = out.to_numpy(zero_copy_only=False)
            if (np.signbit(values) & (values == 0)).any():
                return None  # -0 is the integer 0 there, -0.0 a negative zero: not told apart here
            return out

        return pa.float64(), number
    if name in ("CHAR", "STRING"):

        def text(a: pa.Array) -> pa.Array | None:
            if (
                name == "CHAR"
                and a.null_count < len(a)
                and pc.max(pc.utf8_length(a)).as_py() > dtype.precision
            ):
                return None
            return a

        return pa.string(), text
    if name == "DECIMAL":
        # A JSON number (Flink's default) or a numeric string: pyarrow's reader converts either from its text,
        # exactly (never through a binary float), at the column's scale, and refuses a value that would need
        # rounding (HALF_UP rounding is the per-line path's) or more than 38 digits. Parsed at precision 38,
        # the cast to the column's own precision refuses what does not fit it, as the per-line path does.
        def decimal_value(a: pa.Array) -> pa.Array | None:
            return a.cast(storage)

        return pa.decimal128(38, dtype.scale), decimal_value
    if name == "DATE":
        return pa.string(), _temporal_converter(_DATE_TEXT, pa.date32(), None)
    if name == "TIME":
        # Stored as HH:MM:SS.ffffff; Flink writes HH:mm:ss and a fraction only when it is not zero. TIME(p)
        # keeps min(p, 3) fraction digits (types.truncate_time_micros): the rest become zeros.
        kept = min(dtype.precision or 0, 3)

        def clock(a: pa.Array) -> pa.Array | None:
            values = a.drop_null()
            if (
                len(values)
                and not pc.all(pc.match_substring_regex(values, rf"^{_CLOCK_TEXT}(\.[0-9]{{1,6}})?$")).as_py()
            ):
                return None
            if len(values) and pc.min(pc.utf8_length(values)).as_py() < _TIME_WIDTH:
                whole = pc.equal(pc.utf8_length(a), 8)
                a = pc.utf8_rpad(
                    pc.if_else(whole, pc.binary_join_element_wise(a, ".", ""), a), _TIME_WIDTH, "0"
                )
            return pc.utf8_replace_slice(a, 9 + kept, 15, "0" * (6 - kept)) if kept < 6 else a

        return pa.string(), clock
    if name in ("TIMESTAMP", "TIMESTAMP_LTZ") and storage in (
        pa.timestamp("us"),
        pa.timestamp("us", tz="UTC"),
    ):
        zone = "Z?" if name == "TIMESTAMP_LTZ" else ""
        return pa.string(), _temporal_converter(_STAMP_TEXT + zone, storage, dtype)
    return None, None


def _temporal_converter(pattern: str, storage: pa.DataType, dtype):
    import pyarrow as pa
    import pyarrow.compute as pc

    def convert(a: pa.Array) -> pa.Array | None:
        values = a.drop_null()
        if len(values):
            if not pc.all(pc.match_substring_regex(values, f"^{pattern}$")).as_py():
                return None
            if pc.any(pc.starts_with(values, "0000")).as_py():
                return None  # year 0: not a date
        # The pattern allows a "Z" only at the end (TIMESTAMP_LTZ): strip it where one is (a regex replace
        # over every value cost 16 ms per 250,000 timestamps, more than the cast).
        zoned = (
            pa.types.is_timestamp(storage) and pattern.endswith("Z?") and pc.any(pc.ends_with(a, "Z")).as_py()
        )
        text = pc.replace_substring_regex(a, "Z$", "") if zoned else a
        parse = pa.timestamp("us") if pa.types.is_timestamp(storage) else storage
        out = text.cast(parse)
        if dtype is not None:
            out, _ = dtype.truncate_timestamps(
                out
            )  # the declared precision (microseconds never leave the range)
        return out.cast(storage) if parse != storage else out

    return convert
