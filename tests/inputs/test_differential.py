"""Differential test: random batches applied by Spark (per-bucket tasks) equal the one-record-at-a-time
reference, for every engine: same rows, same changelog, same counts."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelake.engine.merge import apply_sequential
from changelake.spec import TableSpec
from tests.helpers import changelog_of, rows_of

pytestmark = pytest.mark.integration

record = st.tuples(
    st.sampled_from(["+I", "+U", "-U", "-D"]),
    st.integers(0, 5),  # few keys, so keys repeat inside and across batches
    st.one_of(st.none(), st.integers(-3, 3)),
    st.sampled_from(["x", "y", None]),
)
# Each batch may be a partial update of a different column set (None = full-row write).
targets = st.sampled_from([None, None, ["k", "a"], ["k", "b"], ["k"]])
batches = st.lists(st.tuples(st.lists(record, min_size=0, max_size=12), targets), min_size=1, max_size=3)


ENGINES = {
    "full": {},
    "wal": {"table.changelog.image": "wal"},
    "ignore-deletes": {"table.delete.behavior": "ignore"},
    "first_row": {"table.merge-engine": "first_row"},
    "versioned": {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "a"},
    "aggregation": {
        "table.merge-engine": "aggregation",
        "fields.a.agg": "sum",
        "fields.b.agg": "listagg",
        "table.delete.behavior": "allow",
    },
    "aggregation-retract": {  # -U and -D retract (docs/semantics.md §4.7)
        "table.merge-engine": "aggregation",
        "table.agg.retract": "true",
        "fields.a.agg": "sum",
        "fields.b.agg": "listagg",
        "fields.b.ignore-retract": "true",
    },
}


@pytest.mark.parametrize("options", list(ENGINES.values()), ids=list(ENGINES))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=batches)
def test_spark_apply_equals_sequential_reference(lake, options, data):
    spec_dict = {
        "name": "t.diff",
        "columns": [
            {"name": "k", "type": "INT"},
            {"name": "a", "type": "INT"},
            {"name": "b", "type": "STRING"},
        ],
        "primary_key": ["k"],
        "options": {"bucket.num": 3, **options},
    }
    lake.storage.drop(TableSpec.from_dict(spec_dict))
    spec = lake.create_table(spec_dict)
    expected_rows: dict = {}
    expected_log: list = []
    partial_ok = spec.merge_engine not in ("first_row", "versioned")
    for batch_id, (batch, target) in enumerate(data, start=1):
        target = target if partial_ok else None
        records = [{"op": op, "data": {"k": k, "a": a, "b": b}} for op, k, a, b in batch]
        rows = [(op, (k, a, b)) for op, k, a, b in batch]
        log, counts = apply_sequential(spec, expected_rows, rows, target)
        expected_log += log
        result = lake.apply("t.diff", records, batch_id=batch_id, target_columns=target)
        assert result.counts == counts.as_dict()
    assert rows_of(lake.rows("t.diff")) == sorted(expected_rows.values())
    # Each bucket is its own log: per key, the changelog is the reference's, in order.
    got: dict = {}
    for _offset, change, *row in changelog_of(lake, "t.diff"):
        got.setdefault(row[0], []).append((change, tuple(row)))
    want: dict = {}
    for change, row in expected_log:
        want.setdefault(row[0], []).append((change, row))
    assert got == want
