"""A failed apply leaves the table as it was, at fuzz level (issue 12): mutated batches of changelog JSON go
through the real apply (Spark) into two tables of every column type, one that refuses bad records (and
deletes: ``table.delete.behavior: disable``, a refusal after the decode) and one that quarantines them.

For every refused batch the table's current snapshot, its data files, its changelog table's snapshot and the
landing directory are exactly as before, and the error is a ChangelakeError. For every batch that applies,
its quarantined records are the table's dead letters for that batch (line, field and reason as the decoder
gives them) and the rest is applied: the rows equal a last-row merge, done here in Python, of what the
decoder accepted. The decoder alone (no Spark) says which batches must be refused.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from changelake.errors import BadRecordError, ChangelakeError
from changelake.inputs.readers import read_batch
from changelake.spec import TableSpec
from changelake.storage.iceberg import Storage
from tests.inputs.test_fuzz_inputs import COLUMNS, json_lines, write_lines

pytestmark = [pytest.mark.integration, pytest.mark.slow]

APPLIES = settings(
    max_examples=int(os.environ.get("CHANGELAKE_FAILED_APPLY_EXAMPLES", 15)),
    deadline=timedelta(seconds=180),  # one Spark apply on a shared 2-core machine; a hang takes far longer
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
STRICT, QUARANTINE = "fz.strict", "fz.quarantine"


def spec_of(name: str) -> dict:
    quarantine = name == QUARANTINE
    return {
        "name": name,
        "columns": [{"name": n, "type": t} for n, t in COLUMNS.items()],
        "primary_key": ["id"],
        "options": {"bucket.num": 2, "table.delete.behavior": "allow" if quarantine else "disable"},
        "source": {"format": "changelog-json", "on-bad-record": "quarantine" if quarantine else "fail"},
    }


@pytest.fixture
def tables(lake):
    """Both tables, with a first valid batch applied (its Spark work warms the Python workers before any
    example's deadline counts)."""
    for name in (STRICT, QUARANTINE):
        (lake.settings.tables_dir / f"{name}.yaml").write_text(json.dumps(spec_of(name)))
        directory = lake.settings.landing_dir / name
        directory.mkdir(parents=True)
        (directory / "1.jsonl").write_text(json.dumps({"op": "+I", "data": {"id": 0, "s": "first"}}) + "\n")
    lake.apply_pending()
    return lake


def table_state(lake, name: str) -> tuple:
    """What a failed apply must not change: PK snapshot, its data files, changelog snapshot, landing files."""
    spec = lake.spec(name)
    pk, log = lake.storage.pk_table(spec), lake.storage.changelog_table(spec)
    landing = lake.settings.landing_dir / name
    return (
        Storage.state(pk).snapshot_id,
        sorted(f.path for f in Storage.data_files(pk)),
        log.current_snapshot().snapshot_id if log.current_snapshot() else None,
        sorted((p.name, p.read_bytes()) for p in landing.iterdir()),
    )


def rows_by_key(lake, name: str) -> dict:
    return {r["id"]: r for r in lake.rows_arrow(name).to_pylist()}


def merged(before: dict, records) -> dict:
    """Last-row merge of decoded records (docs/semantics.md §2): +I/+U replace the row, -D removes it, -U is dropped."""
    after = dict(before)
    for r in records.to_pylist():
        op = r.pop("_op")
        r.pop("_seq")
        if op in ("+I", "+U"):
            after[r["id"]] = r
        elif op == "-D":
            after.pop(r["id"], None)
    return after


def same_rows(a: dict, b: dict) -> bool:
    """Equal rows whatever the value types' Python spelling (NaN equals NaN; TINYINT/SMALLINT widths)."""
    return repr(sorted((k, sorted(v.items())) for k, v in a.items())) == repr(
        sorted((k, sorted(v.items())) for k, v in b.items())
    )


def a_batch():
    """Changelog JSON lines, valid, mutated or junk (tests/inputs/test_fuzz_inputs.py), a valid upsert among them
    (so a quarantining table always has records to apply), sometimes behind Parquet's magic bytes (a file
    that is not JSON lines at all, refused even under quarantine)."""
    lines = json_lines("changelog-json", False, {})
    return st.tuples(lines, st.integers(0, 6), st.sampled_from([False] * 9 + [True]))


@APPLIES
@given(batch=a_batch(), name=st.sampled_from([STRICT, QUARANTINE]))
# found by CI: a line starting with a lone surrogate behind Parquet's magic bytes
@example(batch=(['\ud800{"op": "+I", "data": {"id": 0}}'], 1, True), name=STRICT)
def test_a_refused_batch_changes_nothing_and_quarantine_applies_the_rest(
    tables, tmp_path_factory, batch, name
):
    lake = tables
    lines, at, parquet_magic = batch
    lines = [*lines[:at], json.dumps({"op": "+U", "data": {"id": at, "s": "valid"}}), *lines[at:]]
    if parquet_magic:
        # as write_lines encodes a line: a lone surrogate (fuzzed junk) is kept, not an error of the test
        first = lines[0] if isinstance(lines[0], bytes) else lines[0].encode("utf-8", "surrogatepass")
        lines = [b"PAR1" + first, *lines[1:]]
    spec = lake.spec(name)
    batch_id = Storage.state(lake.storage.pk_table(spec)).last_batch + 1
    scratch = tmp_path_factory.mktemp("batch")
    path = write_lines(scratch, lines)
    landed = lake.settings.landing_dir / name / f"{batch_id}.jsonl"
    shutil.copy(path, landed)

    # What the decoder alone says: refused (a bad record under 'fail', not JSON lines at all, a delete on
    # the table that disables them) or the records and dead letters the apply must commit.
    try:
        expected = read_batch([path], TableSpec.from_dict(spec_of(name)))
        refused = name == STRICT and expected.op_counts()["-D"] > 0
    except BadRecordError:
        expected, refused = None, True

    before, rows_before = table_state(lake, name), rows_by_key(lake, name)
    try:
        lake.apply_pending(name)
    except ChangelakeError as e:
        assert refused, f"refused, but the decoder accepts the batch: {e}"
        event(f"{name}: refused")
        landed.unlink()  # the next example lands its own batch under this id
        assert table_state(lake, name) == (*before[:3], [p for p in before[3] if p[0] != landed.name])
        assert rows_by_key(lake, name) == rows_before or same_rows(rows_by_key(lake, name), rows_before)
        return
    assert not refused, "the decoder refuses the batch, but it applied"
    event(f"{name}: applied, {'some' if expected.dead_letters else 'no'} records quarantined")
    assert Storage.state(lake.storage.pk_table(spec)).last_batch == batch_id
    letters = [(d["line"], d["field"], d["reason"]) for d in lake.dead_letters(name, batch_id)]
    assert letters == [(d["line"], d["field"], d["reason"]) for d in expected.dead_letters]
    assert all(Path(d["file"]).name == landed.name for d in lake.dead_letters(name, batch_id))
    assert same_rows(rows_by_key(lake, name), merged(rows_before, expected.records))
