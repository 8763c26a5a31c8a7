"""The columnar merge's shortcuts equal the sequential reference too (test_columnar.py's ``check``): every
record a first write into an empty bucket (an initial load: no steps, rows are the records in key order), and
stored rows that arrive in key order (as a bucket file is written: no sort when no new key stays alive).
No Spark here."""

from __future__ import annotations

import dataclasses

import pyarrow.compute as pc
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.engine.test_columnar import (
    AGG_ALL,
    EXAMPLES,
    IMAGES,
    VERSION_POOLS,
    aggregation_cases,
    check,
    first_row_cases,
    last_row_cases,
    versioned_cases,
)

pytestmark = [
    pytest.mark.slow,  # hypothesis over every engine and storage path: make test, not test-unit
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]


def engines() -> st.SearchStrategy:
    return st.one_of(
        last_row_cases(IMAGES),
        first_row_cases(),
        *[versioned_cases(t) for t in VERSION_POOLS],
        aggregation_cases(AGG_ALL),
    )


def _key(case, row: tuple) -> tuple:
    names = list(case.spec.column_names)
    # -0.0 and 0.0 are one key (as in the reference's dict).
    return tuple(row[names.index(k)] + 0.0 if isinstance(row[names.index(k)], float) else row[names.index(k)]
                 for k in case.spec.primary_key)  # fmt: skip


@given(case=engines(), ops=st.lists(st.sampled_from(["+I", "+U"]), min_size=1, max_size=8))
@EXAMPLES
def test_first_writes_into_an_empty_bucket(case, ops):
    seen, records = set(), []
    for (seq, _op, row), op in zip(case.records, ops * len(case.records), strict=False):
        if _key(case, row) not in seen:
            seen.add(_key(case, row))
            records.append((seq, op, row))
    assume(records)
    check(dataclasses.replace(case, stored=[], records=records, stored_cuts=()))


@given(case=engines())
@EXAMPLES
def test_stored_rows_in_key_order(case):
    assume(case.stored)
    stored = case.stored_table()
    order = pc.sort_indices(stored, sort_keys=[(k, "ascending") for k in case.spec.primary_key]).to_pylist()
    check(dataclasses.replace(case, stored=[case.stored[i] for i in order], stored_cuts=()))
