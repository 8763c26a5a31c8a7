"""A bucket task's files, without Spark: records staged by a decode task are read back per bucket, the data
and changelog files use the table's Parquet codec, carry statistics for every column (pyiceberg derives the
partition from them) and no dictionary pages for distinct values."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changelake.engine import buckets
from changelake.inputs import decode
from changelake.spec import TableSpec

SPEC = TableSpec.from_dict(
    {
        "name": "f.t",
        "columns": [{"name": "k", "type": "BIGINT"}, {"name": "v", "type": "STRING"}],
        "primary_key": ["k"],
        "options": {"bucket.num": 3},
    }
)


def test_compression_properties():
    assert buckets.compression_of({}) == ("zstd", None)
    assert buckets.compression_of({"write.parquet.compression-codec": "UNCOMPRESSED"}) == ("none", None)
    assert buckets.compression_of(
        {"write.parquet.compression-codec": "snappy", "write.parquet.compression-level": "3"}
    ) == ("snappy", 3)


@pytest.mark.parametrize("codec, threads", [("zstd", False), ("lz4", False), ("none", False), ("zstd", True)])
def test_staged_records_merge_into_files_of_the_tables_codec(tmp_path, codec, threads):
    lines = "".join(f'{{"op": "+I", "data": {{"k": {i}, "v": "v{i % 7}"}}}}\n' for i in range(40))
    path = tmp_path / "1.jsonl"
    path.write_text(lines)
    plan = decode.plan_batch([path], SPEC, None, None)
    io = buckets.TaskIO({})
    stats = [decode.decode_range(r, SPEC, str(tmp_path / "staging"), io) for r in plan.ranges]
    summary = decode.summarize([{**s, "error": None} for s in stats])
    assert summary.records == 40 and len(summary.groups) == 3
    ctx = buckets.BucketContext(
        spec=SPEC,
        partition_columns=("_bucket",),
        files_by_partition={},
        io_properties={},
        out_dir=str(tmp_path / "data"),
        log_dir=str(tmp_path / "log"),
        batch_id=1,
        commit_micros=0,
        compression=codec,
        threads=threads,  # the in-process path: threaded read, the changelog written beside the data file
    )
    seen = []
    for key, group in summary.groups.items():
        task = buckets.BucketTask(
            key=key, bucket=group.bucket, parts=tuple(group.parts), records=group.records
        )
        marker = buckets.run_task(task, 0, ctx, decode.staged_schema(SPEC), io)
        rows = pq.read_table(marker["_path"])
        assert set(rows.column("_bucket").to_pylist()) == {group.bucket}
        seen += rows.column("k").to_pylist()
        assert rows.column("k").to_pylist() == sorted(rows.column("k").to_pylist())
        for file in (marker["_path"], marker["_log_path"]):
            meta = pq.ParquetFile(file).metadata
            chunks = [meta.row_group(0).column(i) for i in range(meta.num_columns)]
            assert {c.compression.lower() for c in chunks} == {"uncompressed" if codec == "none" else codec}
            assert all(c.is_stats_set for c in chunks)
            encodings = {c.path_in_schema: c.encodings for c in chunks}
            assert not any("DICTIONARY" in e or "RLE_DICTIONARY" in e for e in encodings["k"])
            assert any("DICTIONARY" in e for e in encodings["_bucket"])
        log = pq.read_table(marker["_log_path"])
        assert log.column("_log_offset").to_pylist() == list(range(group.records))
        offsets = (
            pq.ParquetFile(marker["_log_path"])
            .metadata.row_group(0)
            .column(log.schema.get_field_index("_log_offset"))
        )
        assert "DELTA_BINARY_PACKED" in offsets.encodings  # a run of offsets costs a few bytes
    assert sorted(seen) == list(range(40))
    assert pa.types.is_timestamp(log.schema.field("_commit_timestamp").type)
