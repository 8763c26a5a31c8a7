"""A forced merge of many small changelog files holds at most CHANGELOG_GROUP_BYTES of them at a time: one
file per group, each in the changelog's order, no record lost or repeated (in the process, no JVM)."""

from __future__ import annotations

from unittest import mock

import pyarrow.parquet as pq

from changelake.engine import compact
from changelake.storage.fastread import FastReader
from tests.helpers import local, sparkless_lake

SPEC = {
    "name": "g.t",
    "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
    "primary_key": ["k"],
    "options": {"bucket.num": "2", "write-only": "true"},
}
ORDER = ["_batch_id", "_bucket", "_log_offset"]


def test_a_forced_changelog_merge_writes_one_file_per_group(tmp_path):
    lake = sparkless_lake(tmp_path)
    spec = lake.create_table(SPEC)
    for b in range(1, 7):
        lake.apply(spec.full_name, [{"op": "+I", "data": {"k": b * 10 + i, "v": f"b{b}"}} for i in range(5)])
    before = FastReader(lake.settings).changelog_arrow(spec.full_name).to_pylist()
    files = lake.storage.data_files(lake.storage.changelog_table(spec))
    assert len(files) == 6
    limit = sum(sorted(f.size for f in files)[-2:])  # two files fit, not three (about the same size)
    with mock.patch.object(compact, "CHANGELOG_GROUP_BYTES", limit):
        done = compact.compact_changelog(lake.storage, spec, force=True)
    after = lake.storage.data_files(lake.storage.changelog_table(spec))
    assert (done.files_removed, done.files_added, len(after)) == (6, 3, 3)
    for f in after:  # each merged file in the changelog's order
        keys = [tuple(r.values()) for r in pq.read_table(local(f.path), columns=ORDER).to_pylist()]
        assert keys == sorted(keys)
    assert FastReader(lake.settings).changelog_arrow(spec.full_name).to_pylist() == before


def test_changelog_rows_are_put_in_order_and_rows_in_order_are_not_copied():
    """A changelog merge sorts its rows by (batch, bucket, offset); rows that arrive sorted come back as they
    are (no reordering copy), rows that do not are sorted."""
    import pyarrow as pa

    from changelake.engine.compact import _in_order

    order = ["_batch_id", "_bucket", "_log_offset"]
    sorted_rows = pa.table({"_batch_id": [1, 1, 2, 2], "_bucket": [0, 1, 0, 0], "_log_offset": [0, 0, 0, 1]})
    assert _in_order(sorted_rows, order) is sorted_rows
    shuffled = sorted_rows.take([2, 0, 3, 1])
    assert _in_order(shuffled, order).equals(sorted_rows)
