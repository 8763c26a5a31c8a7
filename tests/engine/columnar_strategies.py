"""Hypothesis strategies for ``tests/engine/test_columnar.py``: a random primary-key table, one bucket's stored rows
and one batch of changelog records, all in storage Arrow types.

Keys come from a pool of four or five per table, so records collide with each other and with stored rows;
values sit at the edges of their types (integer limits, float32/float64 max, NaN, -0.0, decimal precision,
multi-byte strings), so wrap-around, overflow-to-null and comparison order are exercised.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
from hypothesis import strategies as st
from pyroaring import BitMap, BitMap64

from changelake.spec import TableSpec
from changelake.types import NANOS_MAX, NANOS_MIN, format_time, parse_type, truncate_nanos

YEAR_1_NANOS, YEAR_9999_NANOS = -62_135_596_800 * 10**9, 253_402_300_800 * 10**9 - 1

F32_MAX = 3.4028234663852886e38
F32_TINY = 1.401298464324817e-45  # the smallest float32 denormal
F64_MAX = 1.7976931348623157e308
INT_RANGES = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
}
INF, NAN = float("inf"), float("nan")

SUM_TYPES = (
    "TINYINT",
    "SMALLINT",
    "INT",
    "BIGINT",
    "FLOAT",
    "DOUBLE",
    "DECIMAL(5,2)",
    "DECIMAL(18,4)",
    "DECIMAL(38,10)",
)
# Every precision class of the temporal types: TIME(0) and TIME(3); TIMESTAMP(0), (3), (6) in microseconds;
# TIMESTAMP(7..9) and TIMESTAMP_LTZ(7..9) in nanoseconds (values at their declared precision, as decoded).
ORDERED_TYPES = (
    "CHAR(3)", "STRING", *SUM_TYPES, "DATE", "TIME", "TIME(3)", "TIMESTAMP(0)", "TIMESTAMP(6)", "TIMESTAMP(9)",
    "TIMESTAMP_LTZ(3)", "TIMESTAMP_LTZ(7)",
)  # fmt: skip
ANY_TYPES = (*ORDERED_TYPES, "BOOLEAN", "BYTES", "BINARY(4)", "TIMESTAMP(3)", "TIMESTAMP_LTZ(6)")

#: The aggregate functions, grouped as the tests split them, with the column types each accepts.
AGG_GROUPS: dict[str, tuple[tuple[str | None, tuple[str, ...]], ...]] = {
    "arithmetic": (("sum", SUM_TYPES), ("product", SUM_TYPES)),
    "ordering": (("max", ORDERED_TYPES), ("min", ORDERED_TYPES)),
    "value": (
        ("last_value", ANY_TYPES),
        ("last_value_ignore_nulls", ANY_TYPES),
        ("first_value", ANY_TYPES),
        ("first_value_ignore_nulls", ANY_TYPES),
        (None, ANY_TYPES),  # no function declared: last_value_ignore_nulls
    ),
    "text_bool_bitmap": (
        ("listagg", ("STRING",)),
        ("string_agg", ("STRING",)),
        ("bool_and", ("BOOLEAN",)),
        ("bool_or", ("BOOLEAN",)),
        ("rbm32", ("BYTES",)),
        ("rbm64", ("BYTES",)),
    ),
}
AGG_ALL = tuple(entry for group in AGG_GROUPS.values() for entry in group)

#: Key columns and the pool their values come from (small, so keys collide).
KEY_LAYOUTS: dict[str, tuple[tuple[tuple[str, str], ...], tuple[tuple, ...]]] = {
    "int": ((("k", "INT"),), ((0,), (1,), (2,), (3,), (-(2**31),))),
    "string": ((("k", "STRING"),), (("a",), ("b",), ("é",), ("",))),
    "int_string": ((("k", "INT"), ("s", "STRING")), ((0, "a"), (0, "b"), (1, "a"), (2, "é"))),
    "date_bigint": (
        (("d", "DATE"), ("k", "BIGINT")),
        (
            (dt.date(2024, 1, 1), 0),
            (dt.date(2024, 1, 1), 2**63 - 1),
            (dt.date(1970, 1, 1), 0),
            (dt.date(1, 1, 1), -(2**63)),
        ),
    ),
    # -0.0 and 0.0 are one key for the reference (Python dict keys); the row keeps the latest image's sign.
    "double": ((("k", "DOUBLE"),), ((0.0,), (-0.0,), (1.5,), (-INF,))),
    "bool_ltz": (
        (("b", "BOOLEAN"), ("t", "TIMESTAMP_LTZ(3)")),
        (
            (True, dt.datetime(2024, 1, 1, tzinfo=dt.UTC)),
            (False, dt.datetime(2024, 1, 1, tzinfo=dt.UTC)),
            (True, dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)),
            (False, dt.datetime(1, 1, 1, tzinfo=dt.UTC)),
        ),
    ),
    "bytes_decimal": (
        (("x", "BYTES"), ("m", "DECIMAL(5,2)")),
        (
            (b"", decimal.Decimal("0.00")),
            (b"\x00", decimal.Decimal("0.00")),
            (b"", decimal.Decimal("1.25")),
            (b"\xff", decimal.Decimal("-999.99")),
        ),
    ),
    "tinyint_time_char": (
        (("n", "TINYINT"), ("h", "TIME"), ("c", "CHAR(2)")),
        (
            (-128, "00:00:00.000000", "a"),
            (-128, "00:00:00.000000", "é"),
            (127, "23:59:59.999999", "a"),
            (0, "12:00:00.000001", ""),
        ),
    ),
}
#: Version values per version type: few, so versions tie.
VERSION_POOLS: dict[str, tuple] = {
    "INT": (-(2**31), -1, 0, 1, 2, 2**31 - 1),
    "BIGINT": (-(2**63), 0, 1, 2, 2**31, 2**63 - 1),
    "TIMESTAMP(6)": (
        dt.datetime(1, 1, 1),
        dt.datetime(1970, 1, 1),
        dt.datetime(1970, 1, 1, 0, 0, 0, 1),
        dt.datetime(2024, 5, 1, 12, 0),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    ),
    "TIMESTAMP_LTZ(3)": (
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        dt.datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=dt.UTC),
        dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC),
    ),
    "TIMESTAMP(0)": (  # whole seconds: what decoding left of .1 and .9 ties
        dt.datetime(1, 1, 1),
        dt.datetime(1970, 1, 1),
        dt.datetime(1970, 1, 1, 0, 0, 1),
        dt.datetime(2024, 5, 1, 12, 0),
    ),
    "TIMESTAMP_LTZ(9)": (-(2**63), -1, 0, 1, 2**63 - 1),  # nanoseconds since the epoch
}
OPS = ("+I", "+I", "+U", "+U", "-U", "-D", "-D")
DELIMITERS = (";", "||", "é", " ")
GARBAGE_BITMAP = b"\x01not a bitmap"


# --- values ------------------------------------------------------------------------------------------
def _integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = [lo, lo + 1, -2, -1, 0, 1, 2, hi - 1, hi]
    return st.one_of(st.sampled_from(edges), st.integers(-100, 100), st.integers(lo, hi))


def _decimals(precision: int, scale: int) -> st.SearchStrategy[decimal.Decimal]:
    top = 10**precision - 1
    # 5 and 50 make HALF_UP ties in products (0.05 * 0.5 at scale 2); 125 makes 1.25 * 1.25.
    edges = [n for n in (-top, -1, 0, 1, 5, 50, 125, 10**scale, top) if -top <= n <= top]
    small = min(top, 10_000)
    unscaled = st.one_of(st.sampled_from(edges), st.integers(-small, small), st.integers(-top, top))
    # From a string: Decimal.scaleb would round to the default context's 28 digits.
    return unscaled.map(lambda n: decimal.Decimal(f"{n}e-{scale}"))


_TEXT = st.text(st.sampled_from(["a", "b", "z", "é", "😀", ",", "\x00", " "]), max_size=3)


@functools.cache  # built once per type: building strategies is what costs time, not drawing from them
def value_strategy(type_text: str) -> st.SearchStrategy:
    """Non-null storage values of a column type (as the Arrow storage type gives them back)."""
    t = parse_type(type_text)
    if t.name in INT_RANGES:
        return _integers(*INT_RANGES[t.name])
    if t.name == "FLOAT":
        edges = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, F32_MAX, -F32_MAX, F32_MAX / 2, F32_TINY, INF, -INF, NAN]
        return st.one_of(st.sampled_from(edges), st.floats(width=32))
    if t.name == "DOUBLE":
        edges = [0.0, -0.0, 1.0, -1.0, 0.1, 0.2, F64_MAX, -F64_MAX, 5e-324, INF, -INF, NAN]
        return st.one_of(st.sampled_from(edges), st.floats())
    if t.name == "DECIMAL":
        return _decimals(t.precision, t.scale)
    if t.name in ("CHAR", "STRING"):
        return st.one_of(st.sampled_from(["", "a", "b", "é", "😀"]), _TEXT)
    if t.name in ("BYTES", "BINARY"):
        return st.binary(max_size=4)
    if t.name == "BOOLEAN":
        return st.booleans()
    if t.name == "DATE":
        edges = [dt.date(1970, 1, 1), dt.date.min, dt.date.max, dt.date(2024, 2, 29)]
        return st.one_of(st.sampled_from(edges), st.dates())
    if t.name == "TIME":
        # As decoded: cut to the declared precision (types.truncate_time_micros through decode_json).
        return st.one_of(st.sampled_from([dt.time(0), dt.time(23, 59, 59, 999999)]), st.times()).map(
            lambda v: t.decode_json(format_time(v))
        )
    if t.name in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        # Nanoseconds since the epoch, cut to the declared precision and held as the column stores them.
        lo, hi = (NANOS_MIN, NANOS_MAX) if t.is_nanos else (YEAR_1_NANOS, YEAR_9999_NANOS)
        edges = [0, -1, 1, lo, hi, 1_704_067_200_000_000_001, -1_500_000_000, 999_999_999]
        nanos = st.one_of(st.sampled_from(edges), st.integers(lo, hi), st.integers(-(10**10), 10**10))
        cut = nanos.map(lambda n: truncate_nanos(n, t.precision or 0)).filter(lambda n: lo <= n <= hi)
        return cut.map(t.stored_instant)
    raise AssertionError(type_text)


@functools.cache
def bitmap_strategy(bits: int, garbage_one_in: int = 16) -> st.SearchStrategy[bytes]:
    """Serialized pyroaring bitmaps (portable format), now and then a run of members, rarely garbage."""
    cls = BitMap if bits == 32 else BitMap64
    top = 2**bits - 1
    member = st.one_of(st.integers(0, 20), st.sampled_from([top, top - 1, 2**31, 2**16]), st.integers(0, top))
    members = st.one_of(
        st.lists(member, max_size=4),
        st.tuples(st.integers(0, 70_000), st.integers(1, 300)).map(lambda r: range(r[0], r[0] + r[1])),
    )
    valid = members.map(lambda m: cls(m).serialize())
    return st.one_of(*[valid] * (garbage_one_in - 1), st.just(GARBAGE_BITMAP))


# --- the case --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ColumnDef:
    name: str
    type: str
    nullable: bool = True
    values: st.SearchStrategy | None = None  # overrides value_strategy(type)

    def strategy(self) -> st.SearchStrategy:
        return column_strategy(self)


@functools.cache
def column_strategy(column: ColumnDef) -> st.SearchStrategy:
    base = column.values if column.values is not None else value_strategy(column.type)
    return st.one_of(st.none(), base) if column.nullable else base


@dataclass
class Case:
    """One bucket's input to ``merge_records``, kept as plain Python values so failures print readably."""

    spec_dict: dict
    stored: list[tuple]  # rows in column order, any key order
    records: list[tuple[int, str, tuple]]  # (_seq, _op, row) in table order (not _seq order)
    target_columns: list[str] | None = None
    id_ranges: list[tuple[int, int]] | None = None
    # Where the Arrow inputs are cut into chunks (the Spark path hands over multi-chunk tables).
    stored_cuts: tuple[int, ...] = ()
    record_cuts: tuple[int, ...] = ()
    merge_mode: str | None = None  # "overwrite": the batch bypasses the merge engine

    @cached_property
    def spec(self) -> TableSpec:
        return TableSpec.from_dict(self.spec_dict)

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type.arrow_type()) for c in self.spec.columns])

    def stored_table(self) -> pa.Table:
        return chunked(rows_table(self.stored, self.schema), self.stored_cuts)

    def records_table(self) -> pa.Table:
        schema = pa.schema([pa.field("_seq", pa.int64()), pa.field("_op", pa.string()), *self.schema])
        return chunked(
            rows_table([(seq, op, *row) for seq, op, row in self.records], schema), self.record_cuts
        )

    def describe(self) -> str:
        """The case as text: spec, target columns, id ranges, stored rows, records in ``_seq`` order."""
        lines = [
            "spec: " + json.dumps(self.spec_dict, ensure_ascii=False),
            f"target_columns: {self.target_columns!r}",
            f"merge_mode: {self.merge_mode!r}",
            f"id_ranges: {self.id_ranges!r}",
            f"Arrow chunks cut at: stored {list(self.stored_cuts)}, records {list(self.record_cuts)}",
            f"columns: {list(self.spec.column_names)}",
            f"stored ({len(self.stored)} rows):",
            *[f"    {row!r}" for row in self.stored],
            f"records ({len(self.records)}, in _seq order):",
            *[f"    {seq:>4} {op} {row!r}" for seq, op, row in sorted(self.records)],
        ]
        return "\n".join(lines)


def rows_table(rows: Sequence[tuple], schema: pa.Schema) -> pa.Table:
    """Python rows to an Arrow table of ``schema`` (also for zero rows)."""
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    return pa.Table.from_arrays(
        [pa.array(list(c), f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def chunked(table: pa.Table, cuts: Sequence[int]) -> pa.Table:
    """``table`` with its columns split into chunks at the given row positions (empty chunks included)."""
    if not cuts:
        return table
    bounds = [0, *sorted(min(c, table.num_rows) for c in cuts), table.num_rows]
    return pa.concat_tables([table.slice(a, b - a) for a, b in zip(bounds, bounds[1:], strict=False)])


@st.composite
def build_case(
    draw,
    value_columns: Sequence[ColumnDef],
    options: dict[str, str],
    *,
    targets: bool = False,
    auto_increment: ColumnDef | None = None,
    max_records: int = 12,
    first_load: bool = False,
) -> Case:
    """A table with a random key layout plus ``value_columns`` (in a random order), stored rows of a random
    subset of the key pool, and up to ``max_records`` records on keys of the pool with every op.

    With ``first_load``: the first batch into an empty bucket (an initial load, a backfill), on one key column
    of an integer-like type, every record with its own key -- in key order, shuffled, or (one time in four)
    with one key repeated, the case the merge's fast path for distinct keys must hand back."""
    if first_load:
        key_columns, pool = (("k", draw(_FIRST_LOAD_KEY_TYPES)),), ()
    else:
        key_columns, pool = KEY_LAYOUTS[draw(_LAYOUT_NAMES)]
    keys = [ColumnDef(name, type_text, nullable=False) for name, type_text in key_columns]
    extra = [auto_increment] if auto_increment is not None else []
    unordered = [*keys, *value_columns, *extra]
    columns = [unordered[i] for i in draw(_permutation(len(unordered)))]
    key_names = [k.name for k in keys]
    spec_dict = {
        "name": "t.columnar",
        "columns": [
            {"name": c.name, "type": c.type, **({} if c.nullable else {"nullable": False})} for c in columns
        ],
        "primary_key": key_names,
        "options": dict(options),
    }
    if auto_increment is not None:
        spec_dict["options"]["auto-increment.fields"] = auto_increment.name

    strategies = {c.name: c.strategy() for c in columns}
    stored_id = st.integers(1, 50)  # a stored row already holds its id

    def row_for(key: tuple, stored: bool) -> tuple:
        by_key = dict(zip(key_names, key, strict=True))
        row = []
        for c in columns:
            if c.name in by_key:
                row.append(by_key[c.name])
            elif stored and c is auto_increment:
                row.append(draw(stored_id))
            else:
                row.append(draw(strategies[c.name]))
        return tuple(row)

    if first_load:
        stored = []
        seqs = draw(_seqs(max_records))
        record_keys = _first_load_keys(draw, key_columns[0][1], seqs)
        records = [
            (seq, draw(_OPS), row_for((key,), False)) for seq, key in zip(seqs, record_keys, strict=True)
        ]
    else:
        stored = [row_for(pool[i], True) for i in draw(_subset(len(pool)))]
        seqs = draw(_seqs(max_records))
        keys_of_pool = _index(len(pool))
        records = [(seq, draw(_OPS), row_for(pool[draw(keys_of_pool)], False)) for seq in seqs]

    target = None
    if targets or auto_increment is not None:
        ai = auto_increment.name if auto_increment is not None else None
        target = draw(target_columns([c.name for c in columns], key_names, ai))
    ranges = None
    if auto_increment is not None:
        ranges = draw(id_ranges(auto_increment.type))
    cuts = _cuts(max_records)
    return Case(spec_dict, stored, records, target, ranges, draw(cuts), draw(cuts))


def _first_load_keys(draw, type_text: str, seqs: list[int]) -> list:
    """A distinct key per record (``seqs`` in table order): increasing in ``_seq`` order, shuffled, or with
    the last one repeating the first."""
    n = len(seqs)
    keys = draw(_distinct_values(type_text, n))
    order = draw(_FIRST_LOAD_ORDERS)
    if order == "in key order":
        by_seq = sorted(range(n), key=seqs.__getitem__)
        ordered = sorted(keys)
        keys = [None] * n
        for rank, i in enumerate(by_seq):
            keys[i] = ordered[rank]
    elif order == "one key twice" and n > 1:
        keys[-1] = keys[0]
    return keys


@functools.cache
def _distinct_values(type_text: str, n: int) -> st.SearchStrategy[list]:
    return st.lists(value_strategy(type_text), unique=True, min_size=n, max_size=n)


# Strategies are built once and reused: hypothesis validates every new strategy object on its first draw,
# which costs more than drawing from it.
_LAYOUT_NAMES = st.sampled_from(sorted(KEY_LAYOUTS))
_FIRST_LOAD_KEY_TYPES = st.sampled_from(
    ("TINYINT", "INT", "BIGINT", "DATE", "TIMESTAMP(6)", "TIMESTAMP_LTZ(3)")
)
_FIRST_LOAD_ORDERS = st.sampled_from(("in key order", "in key order", "shuffled", "one key twice"))
_OPS = st.sampled_from(OPS)
_REFUSAL_KIND = st.integers(0, 29)


@functools.cache
def _index(n: int) -> st.SearchStrategy[int]:
    return st.integers(0, n - 1)


@functools.cache
def _subset(n: int) -> st.SearchStrategy[list[int]]:
    """Distinct indexes below ``n``, in a random order."""
    return st.lists(st.integers(0, n - 1), unique=True, max_size=n)


@functools.cache
def _permutation(n: int) -> st.SearchStrategy[list[int]]:
    return st.permutations(range(n))


@functools.cache
def _seqs(max_records: int) -> st.SearchStrategy[list[int]]:
    """0..max_records distinct ``_seq`` values in a random order (the records' table order); half of the
    batches hold at least max_records / 2 records (plain lists average about 4)."""
    seq = st.integers(0, 3 * max_records)
    return st.one_of(
        st.lists(seq, unique=True, max_size=max_records),
        st.lists(seq, unique=True, min_size=max_records // 2, max_size=max_records),
    )


@functools.cache
def _cuts(max_records: int) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(0, max_records), max_size=2).map(tuple)


@st.composite
def target_columns(draw, names: list[str], keys: list[str], ai: str | None) -> list[str] | None:
    """The key plus a subset of the other columns, shuffled; one time in ten a write Fluss refuses
    (no key, unknown column, the auto-increment column, no list for an auto-increment table) or a
    repeated column."""
    others = [n for n in names if n not in keys and n != ai]
    chosen = [others[i] for i in draw(_subset(len(others)))] if others else []
    unordered = [*keys, *chosen]
    target = [unordered[i] for i in draw(_permutation(len(unordered)))]
    # Valid targets come first: hypothesis favours small choices, and shrinks towards them.
    kind = draw(_REFUSAL_KIND)
    if kind == 29:
        return [c for c in target if c != keys[0]]
    if kind == 28:
        return [*target, "nope"]
    if kind == 27:
        return [*target, ai] if ai else target
    if kind == 26:
        return None
    if kind == 25:
        return [*target, target[0]]
    if kind == 24:
        return [n for n in names if n != ai]  # every column: a full-row write
    return target


@st.composite
def id_ranges(draw, type_text: str) -> list[tuple[int, int]]:
    """0-3 inclusive id ranges: short ones that run out, some near the INT/BIGINT maximum, some empty."""
    max_id = 2**31 - 1 if type_text == "INT" else 2**63 - 1
    out = []
    for _ in range(draw(st.integers(0, 3))):
        start = draw(st.one_of(st.integers(1, 100), st.sampled_from([max_id - 2, max_id - 1, max_id])))
        end = start + draw(st.sampled_from((-1, 0, 1, 2, 3, 4, 99_999)))  # 100000: the default cache size
        # BIGINT ranges stay inside int64 (the counter would need 2**63 ids to go beyond it).
        out.append((start, end if type_text == "INT" else min(end, max_id)))
    return out


@functools.cache
def delete_options(behaviors: tuple[str | None, ...]) -> st.SearchStrategy[dict[str, str]]:
    """``table.delete.behavior`` (None = the engine's default) and, optionally, ``sink.ignore-delete``."""
    return st.builds(
        lambda behavior, ignore: {
            **({} if behavior is None else {"table.delete.behavior": behavior}),
            **({} if ignore is None else {"sink.ignore-delete": ignore}),
        },
        st.sampled_from(behaviors),
        st.sampled_from((None, None, "false", "true")),
    )


@functools.cache
def plain_columns(types: tuple[str, ...] = ANY_TYPES, max_size: int = 3, not_null: bool = True):
    """0..max_size value columns ``c0, c1, ...`` of the given types; ``c0`` is NOT NULL one time in ten
    when allowed (partial writes must refuse such a table)."""
    return st.lists(
        st.tuples(st.sampled_from(types), st.integers(0, 9).map(lambda n: not_null and n == 9)),
        max_size=max_size,
    ).map(
        lambda cols: [
            ColumnDef(f"c{i}", type_text, nullable=not (required and i == 0))
            for i, (type_text, required) in enumerate(cols)
        ]
    )


@st.composite
def aggregation_columns(
    draw, functions, max_size: int = 4, garbage_one_in: int = 16
) -> tuple[list[ColumnDef], dict[str, str]]:
    """1..max_size aggregated columns with their ``fields.*`` options (and listagg delimiters); bitmap
    columns hold a value that is no bitmap once in ``garbage_one_in``."""
    columns, options = [], {}
    for i in range(draw(st.integers(1, max_size))):
        fn, types = draw(st.sampled_from(functions))
        type_text = draw(st.sampled_from(types))
        name = f"c{i}"
        bits = 32 if fn == "rbm32" else 64
        values = bitmap_strategy(bits, garbage_one_in) if fn in ("rbm32", "rbm64") else None
        columns.append(ColumnDef(name, type_text, values=values))
        if fn is not None:
            options[f"fields.{name}.agg"] = fn
        if fn in ("listagg", "string_agg") and draw(st.booleans()):
            options[f"fields.{name}.{fn}.delimiter"] = draw(st.sampled_from(DELIMITERS))
    return columns, options
