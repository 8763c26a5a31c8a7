"""Aggregation tables that take retractions (``table.agg.retract``, docs/semantics.md §4.7).

Cases after Paimon's retraction tests (``FieldAggregatorTest``: sum/product/last_value/last_non_null_value
retract, ``ignore-retract``) and Fluss PR #2917's (SUM and LAST_VALUE(_IGNORE_NULLS) retract, refusal of the
others), with changelake's decisions where the two disagree; then the differential property test: columnar ==
reference on every function that retracts over every type it accepts, and == recomputation from the
surviving inputs for the invertible one (integer sums).
"""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from changelake.engine import columnar
from changelake.engine.merge import apply_sequential, check_batch_ops
from changelake.errors import SpecError, WriteRefusedError
from changelake.spec import TableSpec
from tests.engine.columnar_strategies import (
    AGG_GROUPS,
    ANY_TYPES,
    INT_RANGES,
    SUM_TYPES,
    ColumnDef,
    aggregation_columns,
    build_case,
    delete_options,
)
from tests.engine.test_columnar import EXAMPLES, check, reference, table_rows

pytestmark = [
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
]

D = decimal.Decimal


def spec(columns: dict[str, tuple[str, str | None]], **options) -> TableSpec:
    """A retraction table ``k INT`` + ``columns`` (name -> (type, function))."""
    fields = {f"fields.{c}.agg": fn for c, (_, fn) in columns.items() if fn}
    return TableSpec.from_dict(
        {
            "name": "t.agg",
            "columns": [{"name": "k", "type": "INT"}]
            + [{"name": c, "type": t} for c, (t, _) in columns.items()],
            "primary_key": ["k"],
            "options": {
                "table.merge-engine": "aggregation",
                "table.agg.retract": "true",
                **fields,
                **options,
            },
        }
    )


def run(s: TableSpec, records, rows=None):
    """The reference and the columnar merge on the same input; asserts they agree; returns the reference's
    (rows, changelog, counts)."""
    rows = dict(rows or {})
    stored = list(rows.values())
    log, counts = apply_sequential(s, rows, records)
    names = list(s.column_names)
    schema = pa.schema([pa.field(c.name, c.type.arrow_type()) for c in s.columns])
    head = [pa.field("_seq", pa.int64()), pa.field("_op", pa.string())]
    table = pa.Table.from_pylist(
        [{"_seq": i, "_op": op, **dict(zip(names, row, strict=True))} for i, (op, row) in enumerate(records)],
        schema=pa.schema(head + list(schema)),
    )
    got = columnar.merge_records(
        s, pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in stored], schema), table
    )
    assert sorted(table_rows(got.rows)) == sorted(rows.values())
    assert [(c, tuple(r)) for _, _, c, *r in table_rows(got.changelog)] == log
    assert got.counts == counts
    return rows, log, counts


# --- the functions ------------------------------------------------------------------------------------------
def test_sum_subtracts_and_a_retraction_of_null_changes_nothing():
    s = spec({"v": ("BIGINT", "sum")})
    rows, log, _ = run(s, [("+I", (1, 10)), ("-U", (1, 4)), ("+U", (1, 7)), ("-D", (1, None))])
    assert rows == {(1,): (1, 13)}
    assert log == [
        ("+I", (1, 10)),
        ("-U", (1, 10)),
        ("+U", (1, 6)),
        ("-U", (1, 6)),
        ("+U", (1, 13)),
        ("-U", (1, 13)),
        ("+U", (1, 13)),
    ]


def test_sum_retraction_into_a_null_sum_negates_as_paimon():
    # Paimon: null - 5 = -5 (Fluss PR #2917 keeps null); a later +3 then gives -2, as recomputation does.
    s = spec({"v": ("INT", "sum")})
    rows, _, _ = run(s, [("+I", (1, None)), ("-U", (1, 5)), ("+U", (1, 3))])
    assert rows == {(1,): (1, -2)}


def test_a_retraction_for_an_unseen_key_changes_nothing():
    """Fluss PR #2917's KvTablet skips it ("Retract on non-existent key"); Paimon's lone retraction is its own
    merge result, which its reader drops (DropDeleteReader): the key stays absent, nothing is logged."""
    s = spec({"v": ("INT", "sum")})
    rows, log, counts = run(s, [("-D", (1, 5)), ("+I", (1, 3)), ("-U", (2, 1))])
    assert rows == {(1,): (1, 3)}
    assert log == [("+I", (1, 3))]
    assert (counts.inserted, counts.updated, counts.ignored, counts.dropped_update_before) == (1, 0, 2, 0)


def test_a_row_back_to_no_contribution_is_kept_with_zeros_and_nulls():
    s = spec({"v": ("INT", "sum"), "name": ("STRING", "last_value")})
    rows, log, counts = run(s, [("+I", (1, 5, "a")), ("-D", (1, 5, "a"))])
    assert rows == {(1,): (1, 0, None)}  # Fluss PR #2917 would delete a row whose values are all null
    assert log[-2:] == [("-U", (1, 5, "a")), ("+U", (1, 0, None))]
    assert counts.deleted == 0


def refused(s: TableSpec, records, rows=None) -> str:
    """The reference and the columnar merge both refuse the batch with the same words; returns them."""
    with pytest.raises(WriteRefusedError) as expected:
        apply_sequential(s, dict(rows or {}), records)
    names = list(s.column_names)
    schema = pa.schema([pa.field(c.name, c.type.arrow_type()) for c in s.columns])
    head = [pa.field("_seq", pa.int64()), pa.field("_op", pa.string())]
    table = pa.Table.from_pylist(
        [{"_seq": i, "_op": op, **dict(zip(names, row, strict=True))} for i, (op, row) in enumerate(records)],
        schema=pa.schema(head + list(schema)),
    )
    stored = pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in (rows or {}).values()], schema)
    with pytest.raises(WriteRefusedError) as got:
        columnar.merge_records(s, stored, table)
    assert str(got.value) == str(expected.value)
    return str(expected.value)


def test_integer_overflow_is_refused_in_paimons_words_on_add_retract_and_negate():
    """Paimon 2.0's FieldSumAgg (addExact, subtractExact, negateExact; Fluss PR #2917 the same): never a wrap."""
    s = spec({"t": ("TINYINT", "sum"), "b": ("BIGINT", "sum")})
    assert (
        refused(s, [("+I", (1, -128, 0)), ("-U", (1, 1, 0))])
        == "Column 't' (sum): byte overflow: -128 - 1 = -129"
    )
    assert refused(s, [("+I", (1, 0, -(2**63))), ("-U", (1, 0, 1))]) == (
        "Column 'b' (sum): long overflow: -9223372036854775808 - 1"
    )
    assert refused(s, [("+I", (1, None, None)), ("-U", (1, -128, None))]) == (
        "Column 't' (sum): byte overflow: --128 = 128"  # a retraction into a null sum negates, exactly
    )
    assert refused(s, [("+I", (1, 0, 2**62)), ("+U", (1, 0, 2**62))]) == (
        "Column 'b' (sum): long overflow: 4611686018427387904 + 4611686018427387904"
    )
    rows, _, _ = run(s, [("+I", (1, -127, -(2**63) + 1)), ("-U", (1, 1, 1))])
    assert rows == {(1,): (1, -128, -(2**63))}  # up to the type's bounds, exactly


def test_decimal_sum_retraction_beyond_the_precision_is_null():
    s = spec({"m": ("DECIMAL(5,2)", "sum")})
    rows, _, _ = run(
        s, [("+I", (1, D("-999.99"))), ("-U", (1, D("0.01"))), ("+I", (2, None)), ("-U", (2, D("1.50")))]
    )
    assert rows == {(1,): (1, None), (2,): (2, D("-1.50"))}


def test_product_divides_truncating_as_java():
    s = spec({"p": ("INT", "product"), "d": ("DOUBLE", "product")})
    rows, _, _ = run(s, [("+I", (1, -7, 0.5)), ("+U", (1, 3, 4.0)), ("-U", (1, 2, 4.0))])
    assert rows == {(1,): (1, -10, 0.5)}  # -21 / 2 truncates toward zero


def test_product_retraction_of_zero_or_from_null_is_null_and_the_next_factor_restarts_it():
    s = spec({"p": ("BIGINT", "product")})
    rows, _, _ = run(
        s,
        [("+I", (1, 0)), ("-U", (1, 0)), ("+U", (1, 6)), ("+I", (2, None)), ("-D", (2, 3)), ("+U", (2, 4))],
    )
    assert rows == {(1,): (1, 6), (2,): (2, 4)}


def test_product_overflow_is_refused_on_multiply_and_divide():
    s = spec({"p": ("SMALLINT", "product"), "q": ("INT", "product")})
    assert refused(s, [("+I", (1, -(2**15), 1)), ("-U", (1, -1, 1))]) == (
        "Column 'p' (product): short overflow: -32768 / -1 = 32768"  # Paimon's divideExactShort
    )
    assert refused(s, [("+I", (1, 1, 65536)), ("+U", (1, 1, 65536))]) == (
        "Column 'q' (product): int overflow: 65536 * 65536"
    )


def test_last_value_clears_and_last_value_ignore_nulls_clears_unless_the_retraction_is_null():
    s = spec(
        {"lv": ("STRING", "last_value"), "ln": ("STRING", "last_value_ignore_nulls"), "d": ("INT", None)}
    )
    rows, _, _ = run(s, [("+I", (1, "a", "b", 1)), ("-U", (1, "x", None, 1))])
    # last_value clears whatever value is retracted (Paimon); the default function keeps on a null retraction
    assert rows == {(1,): (1, None, "b", None)}


def test_ignore_retract_keeps_a_column_that_cannot_retract():
    s = spec({"v": ("INT", "sum"), "hi": ("INT", "max")}, **{"fields.hi.ignore-retract": "true"})
    rows, _, _ = run(
        s, [("+I", (1, 5, 5)), ("+U", (1, 2, 9)), ("-U", (1, 2, 9)), ("+I", (2, 0, 4)), ("-D", (2, 1, 1))]
    )
    assert rows == {(1,): (1, 5, 9), (2,): (2, -1, 4)}


def test_partial_retraction_touches_only_the_target_columns():
    s = spec({"v": ("INT", "sum"), "w": ("INT", "sum")})
    rows = {(1,): (1, 10, 10)}
    log, _ = apply_sequential(s, rows, [("-U", (1, 3, 3)), ("-U", (2, 1, 1))], target_columns=["k", "v"])
    assert rows == {(1,): (1, 7, 10)}  # key 2 has no row: its retraction changes nothing
    assert log == [("-U", (1, 10, 10)), ("+U", (1, 7, 10))]


# --- deletes, options and the spec --------------------------------------------------------------------------
def test_remove_record_on_delete_keeps_its_meaning():
    # -D removes the whole row; -U still retracts.
    s = spec({"v": ("INT", "sum")}, **{"table.agg.remove-record-on-delete": "true"})
    rows, log, counts = run(s, [("+I", (1, 5)), ("-U", (1, 2)), ("-D", (1, 0))])
    assert rows == {}
    assert log[-1] == ("-D", (1, 3)) and counts.deleted == 1


def test_remove_record_on_delete_false_lets_deletes_retract():
    s = spec({"v": ("INT", "sum")}, **{"table.agg.remove-record-on-delete": "false"})
    rows, _, _ = run(s, [("+I", (1, 5)), ("-D", (1, 2))])
    assert rows == {(1,): (1, 3)}


def test_explicit_delete_behaviours_and_sink_ignore_delete():
    ignore = spec({"v": ("INT", "sum")}, **{"table.delete.behavior": "ignore"})
    rows, _, counts = run(ignore, [("+I", (1, 5)), ("-D", (1, 2)), ("-U", (1, 1))])
    assert rows == {(1,): (1, 4)} and counts.ignored == 1  # the -D dropped, the -U retracted
    sink = spec({"v": ("INT", "sum")}, **{"sink.ignore-delete": "true"})
    rows, _, counts = run(sink, [("+I", (1, 5)), ("-D", (1, 2)), ("-U", (1, 1))])
    assert rows == {(1,): (1, 5)} and (counts.ignored, counts.dropped_update_before) == (1, 1)
    assert check_batch_ops(sink, {"+I": 1, "-U": 1, "-D": 1}).dropped_update_before == 1
    assert check_batch_ops(ignore, {"+I": 1, "-U": 1, "-D": 1}).dropped_update_before == 0


def test_paimons_option_names_are_aliases():
    removes = spec({"v": ("INT", "sum")}, **{"aggregation.remove-record-on-delete": "true"})
    assert removes.options["table.delete.behavior"] == "allow" and not removes.retracts_delete
    ignores = spec({"v": ("INT", "sum")}, **{"ignore-delete": "TRUE"})
    assert ignores.ignore_delete and not ignores.retracts_update_before
    with pytest.raises(SpecError, match="conflicts with"):
        spec({"v": ("INT", "sum")}, **{"ignore-delete": "true", "sink.ignore-delete": "false"})


def test_without_the_option_update_befores_are_still_dropped():
    s = TableSpec.from_dict(
        {
            "name": "t.agg",
            "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "INT"}],
            "primary_key": ["k"],
            "options": {"table.merge-engine": "aggregation", "fields.v.agg": "sum"},
        }
    )
    rows, _, counts = run(s, [("+I", (1, 5)), ("-U", (1, 2)), ("-D", (1, 2))])
    assert rows == {(1,): (1, 5)} and (counts.dropped_update_before, counts.ignored) == (1, 1)


@pytest.mark.parametrize(
    "function,type_text",
    [
        ("max", "INT"),
        ("min", "INT"),
        ("first_value", "INT"),
        ("first_value_ignore_nulls", "INT"),
        ("listagg", "STRING"),
        ("string_agg", "STRING"),
        ("bool_and", "BOOLEAN"),
        ("bool_or", "BOOLEAN"),
        ("rbm32", "BYTES"),
        ("rbm64", "BYTES"),
    ],
)
def test_a_function_that_cannot_retract_is_refused_unless_it_ignores_retractions(function, type_text):
    with pytest.raises(SpecError) as refused:
        spec({"c": (type_text, function)})
    assert str(refused.value).endswith(
        f"Aggregation function '{function}' of column 'c' does not support retract, but 'table.agg.retract' "
        "is true. Set 'fields.c.ignore-retract' = 'true' to keep the column unchanged by retractions, or use a "
        "function that supports retract: [last_value, last_value_ignore_nulls, product, sum]."
    )
    assert spec({"c": (type_text, function)}, **{"fields.c.ignore-retract": "TRUE"}).ignores_retract("c")


@pytest.mark.parametrize(
    "options,message",
    [
        ({"table.agg.retract": "yes"}, "Could not parse value 'yes' for key 'table.agg.retract'"),
        ({"fields.v.ignore-retract": "maybe"}, "must be true or false, got 'maybe'"),
        ({"fields.nope.ignore-retract": "true"}, "column 'nope' does not exist"),
        ({"fields.k.ignore-retract": "true"}, "primary key column 'k'"),
    ],
)
def test_bad_retraction_options_are_refused(options, message):
    with pytest.raises(SpecError, match=message):
        spec({"v": ("INT", "sum")}, **options)
    with pytest.raises(SpecError, match="'table.agg.retract' is only supported for aggregation merge engine"):
        spec({"v": ("INT", None)}, **{"table.merge-engine": "first_row"})


def test_upsert_kafka_tombstones_must_say_what_they_do():
    data = {
        "name": "t.agg",
        "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "INT"}],
        "primary_key": ["k"],
        "options": {"table.merge-engine": "aggregation", "table.agg.retract": "true", "fields.v.agg": "sum"},
        "source": {"format": "upsert-kafka"},
    }
    with pytest.raises(SpecError, match="upsert-kafka format has no before image"):
        TableSpec.from_dict(data)
    data["options"]["table.delete.behavior"] = "ignore"
    assert not TableSpec.from_dict(data).retracts_delete


# --- differential property tests ------------------------------------------------------------------------------
RETRACTING = {
    "sum": SUM_TYPES,
    "product": SUM_TYPES,
    "last_value": ANY_TYPES,
    "last_value_ignore_nulls": ANY_TYPES,
    "default": ANY_TYPES,  # no function declared: last_value_ignore_nulls
}
CANNOT_RETRACT = tuple(
    entry for group in AGG_GROUPS.values() for entry in group if entry[0] not in (*RETRACTING, None)
)


@st.composite
def retraction_cases(
    draw, function: str, targets: bool = False, recompute: bool = False, auto_increment: bool = False
):
    """1-3 columns of ``function`` (types drawn from all it accepts), and now and then a column of a function
    that cannot retract with ``ignore-retract``; delete options of every kind (none, for ``recompute``)."""
    fn = None if function == "default" else function
    types = RETRACTING[function]
    if recompute:  # exact types: integers (wrapping) and DECIMALs
        types = tuple(t for t in SUM_TYPES if t in INT_RANGES or t.startswith("DECIMAL"))
    columns = [ColumnDef(f"c{i}", draw(st.sampled_from(types))) for i in range(draw(st.integers(1, 3)))]
    options = {"table.merge-engine": "aggregation", "table.agg.retract": "true"}
    if fn is not None:
        options.update({f"fields.{c.name}.agg": fn for c in columns})
    if not recompute and draw(st.integers(0, 3)) == 0:
        extra, extra_options = draw(aggregation_columns(CANNOT_RETRACT, max_size=1, garbage_one_in=1000))
        extra[0] = ColumnDef("x0", extra[0].type, values=extra[0].values)
        options.update({k.replace("c0", "x0", 1): v for k, v in extra_options.items()})
        options["fields.x0.ignore-retract"] = "true"
        columns += extra
    if not recompute:
        options.update(draw(delete_options((None, None, None, "allow", "ignore", "disable"))))
    uid = ColumnDef("uid", draw(st.sampled_from(["INT", "BIGINT"]))) if auto_increment else None
    return draw(build_case(columns, options, targets=targets, auto_increment=uid))


@pytest.mark.slow  # 300 examples each: make test, not test-unit
@pytest.mark.parametrize("function", list(RETRACTING))
@given(data=st.data())
@EXAMPLES
def test_columnar_equals_reference(function, data):
    """Every function that retracts, over every type it accepts: rows, changelog, counts and refusals of the
    columnar merge equal the record-by-record reference's (which itself equals the records applied one by one)."""
    check(data.draw(retraction_cases(function), label="case"))


@pytest.mark.slow  # 300 examples each: make test, not test-unit
@given(case=retraction_cases("sum", targets=True))
@EXAMPLES
def test_partial_retractions_columnar_equals_reference(case):
    check(case)


@pytest.mark.slow  # 300 examples each: make test, not test-unit
@given(case=retraction_cases("sum", auto_increment=True))
@EXAMPLES
def test_retractions_with_auto_increment_columnar_equals_reference(case):
    """Ids go to first writes only, in record order; a retraction for a key with no row takes none."""
    check(case)


@pytest.mark.slow  # 300 examples each: make test, not test-unit
@given(case=retraction_cases("sum", recompute=True))
@EXAMPLES
def test_exact_sum_equals_recomputation_from_the_surviving_inputs(case):
    """sum is invertible: whatever the order of additions and retractions, a key's value is the exact sum of
    what was added less what was retracted once the key had a row (a retraction for a key with no row changes
    nothing; a retraction table never deletes) -- null only if no value was ever given. An integer sum that
    would leave its type refuses the batch (never wraps); a DECIMAL sum that left its precision on the way is
    null from there (§4.2): such a column of such a key is not compared."""
    check(case)
    expected = reference(case)
    names = list(case.spec.column_names)
    key_index = [names.index(k) for k in case.spec.primary_key]
    stored = {tuple(row[i] for i in key_index): row for row in case.stored}  # the stored state: one row a key
    inputs: dict[tuple, list[tuple[int, tuple]]] = {key: [(1, row)] for key, row in stored.items()}
    for _, op, row in sorted(case.records, key=lambda r: r[0]):
        sign = -1 if op in ("-U", "-D") else 1
        key = tuple(row[i] for i in key_index)
        if key in inputs or sign == 1:  # a retraction before the key has a row is dropped
            inputs.setdefault(key, []).append((sign, row))
    overflowed = False
    wanted: dict[tuple, dict[int, object]] = {}
    for key, contributions in inputs.items():
        for i, column in enumerate(case.spec.columns):
            if i in key_index:
                continue
            values = [(sign, row[i]) for sign, row in contributions if row[i] is not None]
            with decimal.localcontext(prec=80):  # exact: the default 28 digits would round DECIMAL(38)
                partial = [sum(sign * v for sign, v in values[: n + 1]) for n in range(len(values))]
                t = column.type
                if t.name == "DECIMAL":
                    largest = D(10) ** (t.precision - t.scale) - D(1).scaleb(-t.scale)
            if column.type.name == "DECIMAL":
                if any(abs(p) > largest for p in partial):
                    continue  # overflowed on the way: null, then restarted by the next value
            else:
                lo, hi = INT_RANGES[column.type.name]
                if any(not lo <= p <= hi for p in partial):
                    overflowed = True
                    continue
            wanted.setdefault(key, {})[i] = partial[-1] if values else None
    if isinstance(expected, WriteRefusedError):
        assert overflowed and "overflow" in str(expected)
        return
    assert not overflowed
    got = {tuple(r[i] for i in key_index): r for r in table_rows(expected.rows)}
    assert set(got) == set(inputs)
    for key, columns in wanted.items():
        for i, want in columns.items():
            assert got[key][i] == want, (key, names[i], inputs[key])


# --- Kafka-offset dedup ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dedup", [True, False])
def test_a_redelivered_retraction_is_not_applied_twice(dedup):
    """Dedup works on messages, whatever their records' kinds: a CDC update's -U/+U pair and a -D sent again
    at their offsets (or at an offset the table already applied) are dropped with ``dedup: kafka-offsets``;
    without it they are counted as redeliveries and applied again, as any redelivery is."""
    from changelake.engine.buckets import BucketContext, order_and_dedup
    from changelake.inputs.records import MESSAGE_SHIFT

    s = spec({"v": ("BIGINT", "sum")})
    ctx = BucketContext(
        s, (), {}, {}, "", "", 1, 0, ordering="kafka-offset", dedup_offsets=dedup, applied_offsets={"t:0": 9}
    )
    messages = [  # (offset, records)
        (9, [("-D", 100)]),  # applied by an earlier batch
        (10, [("+I", 20)]),
        (11, [("-U", 20), ("+U", 7)]),  # a corrected update: its before image retracts
        (12, [("-D", 7)]),  # a refund
        (11, [("-U", 20), ("+U", 7)]),  # redelivered
        (12, [("-D", 7)]),  # redelivered
    ]
    rows = [
        {
            "_seq": (m << MESSAGE_SHIFT) | sub,
            "_op": op,
            "k": 1,
            "v": v,
            "_kafka_topic": "t",
            "_kafka_partition": 0,
            "_kafka_offset": offset,
        }
        for m, (offset, records) in enumerate(messages)
        for sub, (op, v) in enumerate(records)
    ]
    table = pa.Table.from_pylist(rows).cast(
        pa.schema(
            [
                ("_seq", pa.int64()),
                ("_op", pa.string()),
                ("k", pa.int32()),
                ("v", pa.int64()),
                ("_kafka_topic", pa.string()),
                ("_kafka_partition", pa.int32()),
                ("_kafka_offset", pa.int64()),
            ]
        )
    )
    records, source = order_and_dedup(table, ctx)
    assert (source["redelivered"], source["offsets"]) == (3, {"t:0": 12})
    assert source["deduplicated"] == (3 if dedup else 0)
    empty = pa.table({"k": pa.array([], pa.int32()), "v": pa.array([], pa.int64())})
    got = columnar.merge_records(s, empty, records)
    assert got.rows.to_pylist() == [{"k": 1, "v": 0 if dedup else -20}]
    # 20 - 20 + 7 - 7 = 0 once; the redeliveries take 20 - 7 + 7 more (the already applied -D came before the
    # key had a row: without dedup it is applied again, and changes nothing)


_EDGES = {
    "TINYINT": (-128, 127),
    "SMALLINT": (-32768, 32767),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
}


@pytest.mark.parametrize("type_text", list(_EDGES))
def test_every_integer_overflow_is_refused_by_both_merges(type_text):
    """Add, subtract, negate, multiply and divide at each integer type's edges: the columnar merge refuses
    exactly where the reference does, with its words, and computes the results just inside the range."""
    lo, hi = _EDGES[type_text]
    s = spec({"v": (type_text, "sum"), "p": (type_text, "product")})
    overflowing = [
        [("+I", (1, hi, 1)), ("+U", (1, 1, 1))],  # hi + 1
        [("+I", (1, lo, 1)), ("+U", (1, -1, 1))],  # lo + -1
        [("+I", (1, lo, 1)), ("-U", (1, 1, None))],  # lo - 1
        [("+I", (1, hi, 1)), ("-U", (1, -1, None))],  # hi - -1
        [("+I", (1, None, 1)), ("-U", (1, lo, None))],  # -lo into a null sum
        [("+I", (1, 0, hi)), ("+U", (1, 0, 2))],  # hi * 2
        [("+I", (1, 0, lo)), ("+U", (1, 0, -1))],  # lo * -1
        [("+I", (1, 0, -1)), ("+U", (1, 0, lo))],  # -1 * lo
        [("+I", (1, 0, lo)), ("-U", (1, None, -1))],  # lo / -1
    ]
    for records in overflowing:
        assert "overflow" in refused(s, records), records
    rows, _, _ = run(
        s,
        [
            ("+I", (1, hi - 1, hi)),
            ("+U", (1, 1, 1)),
            ("+I", (2, lo + 1, lo)),
            ("-U", (2, 1, 1)),
        ],
    )
    assert rows == {(1,): (1, hi, hi), (2,): (2, lo, lo)}
