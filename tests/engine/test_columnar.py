"""Differential test: the columnar merge (``changelake.engine.columnar.merge_records``) equals the sequential
reference (``merge.apply_sequential``) on one bucket: same final rows, same changelog (types, images, order),
same counts, same remaining auto-increment range, and the same refusal when the reference refuses.

Pure Arrow/Python (no Spark, no JVM). Values are compared exactly: NaN equals NaN, -0.0 differs from 0.0,
decimals and timestamps are compared after both sides went through the storage Arrow types.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
import traceback
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelake.engine import columnar
from changelake.engine.merge import BatchCounts, IdAllocator, apply_sequential
from changelake.errors import WriteRefusedError
from tests.engine.columnar_strategies import (
    AGG_ALL,
    AGG_GROUPS,
    VERSION_POOLS,
    Case,
    ColumnDef,
    aggregation_columns,
    build_case,
    delete_options,
    plain_columns,
    rows_table,
    value_strategy,
)

# Pure Python/Arrow: the whole module runs in about a minute; the cap catches a hanging merge. The reference
# computes FLOAT sums in numpy float32, which warns when they overflow to inf or multiply inf by 0 (intended).
pytestmark = [
    pytest.mark.slow,  # 300 hypothesis examples per engine against the reference: make test, not test-unit
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

EXAMPLES = settings(
    max_examples=300,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CHANGELOG_PREFIX = [("_seq", pa.int64()), ("_sub", pa.int32()), ("_change_type", pa.string())]


# --- the reference side ----------------------------------------------------------------------------------
@dataclass
class Expected:
    rows: pa.Table
    changelog: pa.Table
    counts: BatchCounts
    ids_remaining: tuple[int, int] | None


def table_rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(c.to_pylist() for c in table.columns), strict=True)) if table.num_rows else []


def max_id(case: Case) -> int:
    """The auto-increment maximum of the column's type (as the Spark apply passes it)."""
    return 2**31 - 1 if case.spec.column(case.spec.auto_increment_column).type.name == "INT" else 2**63 - 1


def reference(case: Case) -> Expected | WriteRefusedError:
    """``apply_sequential`` on the case's stored rows and its records in ``_seq`` order (values read back
    from the same Arrow tables the columnar merge gets)."""
    spec = case.spec
    names = list(spec.column_names)
    key_index = [names.index(k) for k in spec.primary_key]
    stored = table_rows(case.stored_table())
    ordered = case.records_table().sort_by("_seq")
    seqs = ordered.column("_seq").to_pylist()
    records = list(zip(ordered.column("_op").to_pylist(), table_rows(ordered.select(names)), strict=True))

    def start() -> tuple[dict, IdAllocator | None]:
        rows = {tuple(r[i] for i in key_index): r for r in stored}
        ids = (
            IdAllocator(list(case.id_ranges or []), max_id(case), spec.auto_increment_column)
            if spec.auto_increment_column
            else None
        )
        return rows, ids

    rows, ids = start()
    try:
        log, counts = apply_sequential(spec, rows, records, case.target_columns, ids, case.merge_mode)
    except WriteRefusedError as e:
        return e
    # Which record emitted which change: the same reference once per record, from the same start.
    one_rows, one_ids = start()
    attributed, total = [], BatchCounts()
    for seq, record in zip(seqs, records, strict=True):
        changes, c = apply_sequential(spec, one_rows, [record], case.target_columns, one_ids, case.merge_mode)
        attributed += [(seq, sub, change_type, *image) for sub, (change_type, image) in enumerate(changes)]
        total = BatchCounts(**{f: getattr(total, f) + getattr(c, f) for f in c.as_dict()})
    assert total == counts and canonical([(ct, *img) for ct, img in log]) == canonical(
        [r[2:] for r in attributed]
    ), "per-record attribution disagrees with the whole-batch reference"

    schema = case.schema
    log_schema = pa.schema([pa.field(n, t) for n, t in CHANGELOG_PREFIX] + list(schema))
    return Expected(
        rows=rows_table(list(rows.values()), schema).sort_by([(k, "ascending") for k in spec.primary_key]),
        changelog=rows_table(attributed, log_schema),
        counts=counts,
        ids_remaining=ids.remaining() if ids is not None else None,
    )


# --- comparison ------------------------------------------------------------------------------------------
def canon(value):
    """A value compared exactly: all NaNs equal, -0.0 unequal to 0.0."""
    if isinstance(value, float):
        return ("NaN",) if math.isnan(value) else ("float", value, math.copysign(1.0, value))
    return value


def canonical(rows: list[tuple]) -> list[tuple]:
    return [tuple(canon(v) for v in row) for row in rows]


def fields(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    return [(f.name, f.type) for f in schema]


def show(label: str, rows: list[tuple]) -> list[str]:
    return [f"  {label} ({len(rows)}):", *[f"    {r!r}" for r in rows]]


def differences(case: Case, expected: Expected, got) -> list[str]:
    """What ``got`` (a MergeResult) gets wrong against the reference, as readable lines (empty if equal)."""
    out: list[str] = []
    pk = [(k, "ascending") for k in case.spec.primary_key]
    if fields(got.rows.schema) != fields(expected.rows.schema):
        out.append(f"rows schema: expected {fields(expected.rows.schema)}, got {fields(got.rows.schema)}")
    else:
        if got.rows.num_rows and pc.sort_indices(got.rows, sort_keys=pk).to_pylist() != list(
            range(got.rows.num_rows)
        ):
            out.append("rows are not sorted by the primary key")
        want, have = (
            table_rows(expected.rows),
            table_rows(got.rows.sort_by(pk) if got.rows.num_rows else got.rows),
        )
        if canonical(want) != canonical(have):
            out += ["rows differ:", *show("expected", want), *show("got", have)]
    if fields(got.changelog.schema) != fields(expected.changelog.schema):
        out.append(
            f"changelog schema: expected {fields(expected.changelog.schema)}, got {fields(got.changelog.schema)}"
        )
    else:
        want, have = table_rows(expected.changelog), table_rows(got.changelog)
        if canonical(want) != canonical(have):
            out += [
                "changelog differs (_seq, _sub, _change_type, row):",
                *show("expected", want),
                *show("got", have),
            ]
    got_counts = dataclasses.asdict(got.counts)
    if got_counts != expected.counts.as_dict():
        out.append(f"counts: expected {expected.counts.as_dict()}, got {got_counts}")
    got_ids = None if got.ids_remaining is None else tuple(got.ids_remaining)
    if got_ids != expected.ids_remaining:
        out.append(f"ids_remaining: expected {expected.ids_remaining}, got {got_ids}")
    return out


def check(case: Case) -> None:
    """Run both sides on ``case`` and fail with the case and every difference when they disagree."""
    expected = reference(case)
    stored, records = case.stored_table(), case.records_table()
    try:
        got = columnar.merge_records(
            case.spec, stored, records, case.target_columns, case.id_ranges, case.merge_mode
        )
    except Exception as e:
        same = (
            isinstance(expected, WriteRefusedError)
            and type(e) is WriteRefusedError
            and str(e) == str(expected)
        )
        if not same:
            wanted = f"WriteRefusedError({expected})" if isinstance(expected, Exception) else "a result"
            problems = [f"expected {wanted}, got {type(e).__name__}: {e}", traceback.format_exc()]
            raise AssertionError("\n".join([case.describe(), *problems])) from None
        return
    if isinstance(expected, WriteRefusedError):
        problems = [f"expected WriteRefusedError({expected}), got a result"]
    else:
        problems = differences(case, expected, got)
    if problems:
        raise AssertionError("\n".join([case.describe(), *problems]))


# --- configurations ----------------------------------------------------------------------------------------
FULL = st.sampled_from([{}, {"table.changelog.image": "full"}])
IMAGES = st.sampled_from([{}, {"table.changelog.image": "full"}, {"table.changelog.image": "wal"}])
LAST_ROW_DELETES = (None, None, "allow", "ignore", "disable")
KEEP_DELETES = (None, None, "ignore", "disable")  # first_row / versioned refuse allow
AGG_DELETES = (None, "allow", "allow", "ignore", "disable")


@st.composite
def last_row_cases(
    draw, image: st.SearchStrategy[dict], targets: bool = False, first_load: bool = False
) -> Case:
    options = {**draw(image), **draw(delete_options(LAST_ROW_DELETES))}
    return draw(build_case(draw(plain_columns()), options, targets=targets, first_load=first_load))


@st.composite
def first_row_cases(draw, first_load: bool = False) -> Case:
    options = {"table.merge-engine": "first_row", **draw(IMAGES), **draw(delete_options(KEEP_DELETES))}
    return draw(build_case(draw(plain_columns()), options, first_load=first_load))


@functools.cache
def version_column(version_type: str) -> ColumnDef:
    """The version column ``ver``: mostly values of a small pool (so versions tie), nulls included."""
    pool = st.sampled_from(VERSION_POOLS[version_type])
    return ColumnDef("ver", version_type, values=st.one_of(pool, pool, pool, value_strategy(version_type)))


@st.composite
def versioned_cases(
    draw, version_type: str, deletes: st.SearchStrategy[dict] | None = None, first_load: bool = False
) -> Case:
    version = version_column(version_type)
    options = {
        "table.merge-engine": "versioned",
        "table.merge-engine.versioned.ver-column": "ver",
        **draw(IMAGES),
        **draw(deletes if deletes is not None else delete_options(KEEP_DELETES)),
    }
    return draw(build_case([version, *draw(plain_columns(max_size=2))], options, first_load=first_load))


@st.composite
def aggregation_cases(
    draw, functions, targets: bool = False, deletes=AGG_DELETES, first_load: bool = False
) -> Case:
    columns, fn_options = draw(aggregation_columns(functions))
    options = {
        "table.merge-engine": "aggregation",
        **fn_options,
        **draw(FULL),
        **draw(delete_options(deletes)),
    }
    return draw(build_case(columns, options, targets=targets, first_load=first_load))


@given(case=last_row_cases(FULL))
@EXAMPLES
def test_last_row_full_image(case):
    """Default engine, FULL image, every delete setting, any column types (a few NOT NULL)."""
    check(case)


@given(case=last_row_cases(st.just({"table.changelog.image": "wal"})))
@EXAMPLES
def test_last_row_wal_image(case):
    """Default engine with ``table.changelog.image: wal`` (+U for new keys, no -U)."""
    check(case)


@given(case=first_row_cases())
@EXAMPLES
def test_first_row(case):
    """``first_row``, FULL or WAL, deletes ignored or refused."""
    check(case)


@pytest.mark.parametrize("version_type", list(VERSION_POOLS))
@given(data=st.data())
@EXAMPLES
def test_versioned(version_type, data):
    """``versioned`` on an INT, BIGINT, TIMESTAMP(6) or TIMESTAMP_LTZ(3) version column (ties, nulls)."""
    check(data.draw(versioned_cases(version_type), label="case"))


@pytest.mark.parametrize("version_type, minimum", [("INT", -(2**31)), ("BIGINT", -(2**63))])
def test_a_null_version_ties_with_the_types_minimum(version_type, minimum):
    """Fluss reads a null INT/BIGINT version as the type's MIN_VALUE: a null over a stored minimum is a tie and
    replaces the row, a null over the minimum + 1 does not; the columnar merge says so too, not by chance."""
    spec_dict = {
        "name": "t.columnar",
        "columns": [
            {"name": "k", "type": "INT"},
            {"name": "ver", "type": version_type},
            {"name": "v", "type": "STRING"},
        ],
        "primary_key": ["k"],
        "options": {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ver"},
    }
    for stored_version, replaced in ((minimum, True), (minimum + 1, False)):
        case = Case(
            spec_dict=spec_dict, stored=[(1, stored_version, "a")], records=[(0, "+U", (1, None, "b"))]
        )
        check(case)
        got = columnar.merge_records(case.spec, case.stored_table(), case.records_table(), None, None)
        assert got.rows.column("v").to_pylist() == ["b" if replaced else "a"]
        assert got.changelog.num_rows == (2 if replaced else 0)


@pytest.mark.parametrize("group", list(AGG_GROUPS))
@given(data=st.data())
@EXAMPLES
def test_aggregation(group, data):
    """``aggregation``: every function of the group over every type it accepts, full-row writes."""
    check(data.draw(aggregation_cases(AGG_GROUPS[group]), label="case"))


@given(case=last_row_cases(IMAGES, targets=True))
@EXAMPLES
def test_partial_update_last_row(case):
    """Default engine, target columns (key + a subset; now and then a write Fluss refuses), partial deletes."""
    check(case)


@given(case=aggregation_cases(AGG_ALL, targets=True, deletes=(None, "allow", "allow", "allow", "disable")))
@EXAMPLES
def test_partial_update_aggregation(case):
    """``aggregation`` with target columns over all 14 functions; deletes mostly allowed (partial deletes)."""
    check(case)


@st.composite
def delete_cases(draw, behavior: str) -> Case:
    """Any engine under one delete setting (``sink.ignore-delete`` = true on top of any behaviour)."""
    engines = [None, "aggregation"] + ([] if behavior == "allow" else ["first_row", "versioned"])
    engine = draw(st.sampled_from(engines))
    if behavior == "sink.ignore-delete":
        allowed = LAST_ROW_DELETES if engine in (None, "aggregation") else KEEP_DELETES
        deletes = {**draw(delete_options(allowed)), "sink.ignore-delete": "true"}
    else:
        deletes = {
            "table.delete.behavior": behavior,
            **draw(st.sampled_from([{}, {"sink.ignore-delete": "false"}])),
        }
    targets = draw(st.booleans())
    if engine is None:
        case = draw(build_case(draw(plain_columns()), {**draw(IMAGES), **deletes}, targets=targets))
    elif engine == "aggregation":
        columns, fn_options = draw(aggregation_columns(AGG_ALL))
        options = {"table.merge-engine": "aggregation", **fn_options, **deletes}
        case = draw(build_case(columns, options, targets=targets))
    elif engine == "first_row":
        case = draw(
            build_case(draw(plain_columns()), {"table.merge-engine": engine, **draw(IMAGES), **deletes})
        )
    else:
        case = draw(versioned_cases(draw(st.sampled_from(list(VERSION_POOLS))), deletes=st.just(deletes)))
    return case


@pytest.mark.parametrize("behavior", ["allow", "ignore", "disable", "sink.ignore-delete"])
@given(data=st.data())
@EXAMPLES
def test_delete_behavior(behavior, data):
    """One delete setting over every engine it is valid for, full-row or partial writes."""
    check(data.draw(delete_cases(behavior), label="case"))


@pytest.mark.parametrize("behavior", ["allow", "ignore", "disable", "sink.ignore-delete"])
@given(data=st.data())
@EXAMPLES
def test_overwrite_merge_mode(behavior, data):
    """Fluss's MergeMode.OVERWRITE over every engine and delete setting, full-row or partial writes, retraction
    tables included: the engine is bypassed (last-row rules, every delete applied, nothing retracted)."""
    case = data.draw(delete_cases(behavior), label="case")
    if data.draw(st.booleans(), label="retraction table") and case.spec.merge_engine == "aggregation":
        options = {**case.spec_dict["options"], "table.agg.retract": "true"}
        for column in case.spec.column_names:
            options[f"fields.{column}.ignore-retract"] = "true"
        for key in case.spec.primary_key:
            options.pop(f"fields.{key}.ignore-retract")
        case = dataclasses.replace(case, spec_dict={**case.spec_dict, "options": options})
    if case.target_columns is None and case.spec.merge_engine in ("first_row", "versioned"):
        # Fluss's overwrite merger takes partial writes for every engine.
        names = list(case.spec.column_names)
        chosen = data.draw(st.lists(st.sampled_from(names), unique=True), label="target columns")
        case = dataclasses.replace(
            case,
            target_columns=[*case.spec.primary_key, *[c for c in chosen if c not in case.spec.primary_key]],
        )
    check(dataclasses.replace(case, merge_mode="overwrite"))


@st.composite
def auto_increment_cases(draw, first_load: bool = False) -> Case:
    """Auto-increment ``uid`` (INT or BIGINT) on last-row or aggregation tables (rarely first_row, refused)."""
    uid = ColumnDef("uid", draw(st.sampled_from(["INT", "BIGINT"])), nullable=draw(st.booleans()))
    engine = draw(
        st.sampled_from([None, None, None, "aggregation", "aggregation", "aggregation", "first_row"])
    )
    if engine == "aggregation":
        columns, options = draw(aggregation_columns(AGG_ALL, max_size=3))
        options = {"table.merge-engine": "aggregation", **options, **draw(delete_options(AGG_DELETES))}
    else:
        columns = draw(plain_columns(max_size=2, not_null=False))
        deletes = LAST_ROW_DELETES if engine is None else KEEP_DELETES
        options = {**draw(IMAGES), **draw(delete_options(deletes))}
        if engine is not None:
            options["table.merge-engine"] = engine
    return draw(build_case(columns, options, auto_increment=uid, first_load=first_load))


@given(case=auto_increment_cases())
@EXAMPLES
def test_auto_increment(case):
    """Auto-increment INT/BIGINT ``uid``: ids to first writes only, ranges that run out or pass the maximum."""
    check(case)


FIRST_LOADS = {
    "last_row": last_row_cases(IMAGES, first_load=True),
    "last_row_partial": last_row_cases(IMAGES, targets=True, first_load=True),
    "first_row": first_row_cases(first_load=True),
    "versioned": st.sampled_from(list(VERSION_POOLS)).flatmap(
        lambda version_type: versioned_cases(version_type, first_load=True)
    ),
    "aggregation": aggregation_cases(AGG_ALL, first_load=True),
    "aggregation_partial": aggregation_cases(AGG_ALL, targets=True, first_load=True),
    "auto_increment": auto_increment_cases(first_load=True),
}


@pytest.mark.parametrize("engine", list(FIRST_LOADS))
@given(data=st.data())
@EXAMPLES
def test_first_load(engine, data):
    """The first batch into an empty bucket on one integer-like key, every record with its own key (in key
    order, shuffled, or one key twice): the path that groups without hashing keys, under every engine."""
    check(data.draw(FIRST_LOADS[engine], label="case"))


@pytest.mark.parametrize("order", ["sorted", "shuffled", "repeated"])
def test_first_load_takes_the_distinct_key_path_only_for_distinct_keys(order):
    """``test_first_load`` compares results; this pins that its batches do go the distinct-key way (and a
    repeated key does not), so the comparison covers that path."""
    from changelake.engine.columnar import _BucketMerge

    keys = list(range(0, 50, 5))
    if order == "shuffled":
        keys = keys[3:] + keys[:3]
    elif order == "repeated":
        keys[-1] = keys[0]
    case = Case(
        {
            "name": "t.first_load",
            "columns": [{"name": "k", "type": "BIGINT", "nullable": False}, {"name": "v", "type": "STRING"}],
            "primary_key": ["k"],
            "options": {},
        },
        [],
        [(seq, "+I", (key, f"v{seq}")) for seq, key in enumerate(keys)],
    )
    merge = _BucketMerge(case.spec, case.stored_table(), case.records_table(), None, None)
    merge.run()
    assert merge.distinct_keys == (order != "repeated")
    if merge.distinct_keys:
        assert (merge.key_order is None) == (order == "sorted")
    check(case)


@st.composite
def refusal_cases(draw) -> Case:
    """Batches that may be refused twice over: ids that run out or pass the INT maximum, and bitmaps that are
    no bitmaps (one value in three), so the refusal of the earliest record must be the one raised."""
    uid = ColumnDef("uid", draw(st.sampled_from(["INT", "BIGINT"])))
    columns, options = draw(aggregation_columns((("rbm32", ("BYTES",)), ("rbm64", ("BYTES",))), 2, 3))
    options = {"table.merge-engine": "aggregation", **options, **draw(delete_options(AGG_DELETES))}
    return draw(build_case(columns, options, auto_increment=uid))


@given(case=refusal_cases())
@EXAMPLES
def test_earliest_refusal_wins(case):
    """When several records would be refused, the error of the first one in ``_seq`` order is raised."""
    check(case)


# --- the comparison itself must see every kind of difference --------------------------------------------------
def _replace_values(table: pa.Table, fn, only: str | None = None) -> pa.Table:
    """``table`` with ``fn`` applied to every value (of column ``only`` when given)."""
    columns = [
        pa.array([fn(v) for v in c.to_pylist()], f.type) if only in (None, f.name) else c
        for f, c in zip(table.schema, table.columns, strict=True)
    ]
    return pa.Table.from_arrays(columns, schema=table.schema)


def _swap_first_two(table: pa.Table) -> pa.Table:
    return table.take(pa.array([1, 0, *range(2, table.num_rows)]))


SAMPLE = Case(
    {
        "name": "t.columnar",
        "columns": [
            {"name": "k", "type": "INT"},
            {"name": "uid", "type": "BIGINT"},
            {"name": "f", "type": "DOUBLE"},
            {"name": "d", "type": "DECIMAL(5,2)"},
        ],
        "primary_key": ["k"],
        "options": {"auto-increment.fields": "uid"},
    },
    stored=[(2, 1, float("nan"), None), (1, 2, -0.0, None)],
    records=[
        (3, "+U", (1, 0, float("nan"), None)),
        (1, "+I", (3, 0, -0.0, None)),
        (2, "-D", (2, 0, None, None)),
    ],
    target_columns=["k", "f", "d"],
    id_ranges=[(10, 12)],
)
MUTATIONS = {
    "-0.0 stored as 0.0": lambda r: dataclasses.replace(
        r, rows=_replace_values(r.rows, lambda v: 0.0 if isinstance(v, float) and v == 0 else v)
    ),
    "NaN replaced": lambda r: dataclasses.replace(
        r, changelog=_replace_values(r.changelog, lambda v: 1.0 if isinstance(v, float) and v != v else v)
    ),
    "decimal off by a cent": lambda r: dataclasses.replace(
        r, rows=_replace_values(r.rows, lambda v: decimal.Decimal("0.01") if v is None else v, "d")
    ),
    "changelog order": lambda r: dataclasses.replace(r, changelog=_swap_first_two(r.changelog)),
    "rows not sorted": lambda r: dataclasses.replace(r, rows=_swap_first_two(r.rows)),
    "a row missing": lambda r: dataclasses.replace(r, rows=r.rows.slice(1)),
    "a column type": lambda r: dataclasses.replace(
        r, rows=r.rows.cast(pa.schema([*r.rows.schema][:3] + [pa.field("d", pa.decimal128(6, 2))]))
    ),
    "counts": lambda r: dataclasses.replace(
        r, counts=dataclasses.replace(r.counts, ignored=r.counts.ignored + 1)
    ),
    "remaining ids": lambda r: dataclasses.replace(r, ids_remaining=(12, 12)),
}


def test_the_comparison_sees_every_kind_of_difference():
    """The reference's own result passes; each single corruption of it is reported."""
    expected = reference(SAMPLE)
    assert isinstance(expected, Expected) and expected.changelog.num_rows >= 2 and expected.rows.num_rows >= 2
    exact = columnar.MergeResult(
        rows=expected.rows,
        changelog=expected.changelog,
        counts=expected.counts,
        ids_remaining=expected.ids_remaining,
    )
    assert differences(SAMPLE, expected, exact) == []
    for name, corrupt in MUTATIONS.items():
        assert differences(SAMPLE, expected, corrupt(exact)), f"the comparison misses: {name}"
