"""SQL writes applied through Spark (the bucket merge in Spark tasks, not in process): each statement kind
against each merge engine equals the reference merge, as tests/test_sqlwrite.py checks the in-process path."""

from __future__ import annotations

import pytest

from changelake.errors import WriteRefusedError
from tests.test_sqlwrite import ENGINES, SCENARIOS, _actual, _expected, make_spec


@pytest.mark.parametrize("engine", list(SCENARIOS))
def test_statements_through_spark_equal_the_reference_merge(lake, monkeypatch, engine):
    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "0")  # every batch decoded and merged by Spark tasks
    spec = make_spec(f"sq.{engine}", options=ENGINES[engine])
    lake.create_table(spec)
    applied = []
    for text, records, target in SCENARIOS[engine]:
        text = text.replace("s.t", spec.full_name)
        if records is None:
            with pytest.raises(WriteRefusedError):
                lake.sql(text)
            continue
        (result,) = lake.sql(text)
        if not records:  # a DELETE of a missing key: nothing to write
            assert (result.status, result.batch_id) == ("nothing to write", None)
            continue
        assert (result.status, result.batch_id) == ("applied", len(applied) + 1)
        applied.append((records, target))
    assert any("decoding" in m for m in lake.messages)
    assert not any("in this process" in m for m in lake.messages)  # Spark decoded and merged every batch
    assert _actual(lake, spec) == _expected(spec, applied)
    # and Spark's own reads agree with the reader the comparison used
    names = list(spec.column_names)
    assert (
        sorted(tuple(r[c] for c in names) for r in lake.rows(spec.full_name).collect())
        == _expected(spec, applied)[0]
    )
