"""A bucket task's files, without Spark: records staged by a decode task are read back per bucket, the data
and changelog files use the table's Parquet codec, carry statistics for every column (pyiceberg derives the
partition from them) and no dictionary pages for distinct values."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelake.engine import buckets
from changelake.inputs import decode
from changelake.spec import TableSpec
from changelake.storage.taskio import TaskIO

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


def _bucket_ctx(tmp_path, threads: bool, compression: str = "zstd") -> buckets.BucketContext:
    return buckets.BucketContext(
        spec=SPEC,
        partition_columns=("_bucket",),
        files_by_partition={},
        io_properties={},
        out_dir=str(tmp_path / "data"),
        log_dir=str(tmp_path / "log"),
        batch_id=1,
        commit_micros=0,
        compression=compression,
        threads=threads,
    )


@pytest.mark.parametrize("codec, threads", [("zstd", False), ("lz4", False), ("none", False), ("zstd", True)])
def test_staged_records_merge_into_files_of_the_tables_codec(tmp_path, codec, threads):
    lines = "".join(f'{{"op": "+I", "data": {{"k": {i}, "v": "v{i % 7}"}}}}\n' for i in range(40))
    path = tmp_path / "1.jsonl"
    path.write_text(lines)
    plan = decode.plan_batch([path], SPEC, None, None)
    io = TaskIO({})
    stats = [decode.decode_range(r, SPEC, str(tmp_path / "staging"), io) for r in plan.ranges]
    summary = decode.summarize([{**s, "error": None} for s in stats])
    assert summary.records == 40 and len(summary.groups) == 3
    # threads: the in-process path (threaded read, the changelog written beside the data file)
    ctx = _bucket_ctx(tmp_path, threads, compression=codec)
    seen = []
    for key, group in summary.groups.items():
        task = buckets.BucketTask(
            key=key, bucket=group.bucket, parts=tuple(group.parts), records=group.records
        )
        writer = buckets.GroupWriter(ctx, io)
        marker = buckets.run_task(task, 0, ctx, decode.staged_schema(SPEC), io, writer)
        (marker["_log_path"],) = writer.finish()["_log_paths"]
        (data_file,) = marker["_paths"]  # 40 rows: one file per bucket
        rows = pq.read_table(data_file)
        assert set(rows.column("_bucket").to_pylist()) == {group.bucket}
        seen += rows.column("k").to_pylist()
        assert rows.column("k").to_pylist() == sorted(rows.column("k").to_pylist())
        for file in (data_file, marker["_log_path"]):
            meta = pq.ParquetFile(file).metadata
            chunks = [meta.row_group(0).column(i) for i in range(meta.num_columns)]
            assert {c.compression.lower() for c in chunks} == {"uncompressed" if codec == "none" else codec}
            assert all(c.is_stats_set for c in chunks)
            encodings = {c.path_in_schema: c.encodings for c in chunks}
            assert not any("DICTIONARY" in e or "RLE_DICTIONARY" in e for e in encodings["k"])
            assert any("DICTIONARY" in e for e in encodings["_bucket"])
            # Integer columns without a dictionary are delta-encoded, others are not.
            assert "DELTA_BINARY_PACKED" in encodings["k"]
            assert not any("DELTA" in e for e in encodings["v"] + encodings["_bucket"])
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


def test_staged_files_leave_out_columns_null_in_all_their_records(tmp_path):
    """A decode range stages only the columns some record of it holds (the source metadata of most inputs
    is null in all); a bucket task reads every staged column back, the left-out ones as nulls, across files
    that left out different columns."""
    (tmp_path / "1.jsonl").write_text("".join(f'{{"op": "+I", "data": {{"k": {i}}}}}\n' for i in range(12)))
    (tmp_path / "2.jsonl").write_text(
        "".join(f'{{"op": "+U", "data": {{"k": {i}, "v": "v{i}"}}}}\n' for i in range(12))
    )
    plan = decode.plan_batch([tmp_path / "1.jsonl", tmp_path / "2.jsonl"], SPEC, None, None)
    io = TaskIO({})
    stats = [decode.decode_range(r, SPEC, str(tmp_path / "staging"), io) for r in plan.ranges]
    staged = decode.staged_schema(SPEC)
    left_out = {f.name for f in staged} - {"_seq", "_op", "k", "v"}
    assert left_out and "_kafka_offset" in left_out
    names = [pa.ipc.open_file(pa.memory_map(s["staged"])).schema.names for s in stats]
    assert names == [["_seq", "_op", "k"], ["_seq", "_op", "k", "v"]]
    summary = decode.summarize([{**s, "error": None} for s in stats])
    read = [buckets.read_staged(tuple(g.parts), staged, io) for g in summary.groups.values()]
    records = pa.concat_tables(read)
    assert all(t.schema.equals(staged) for t in read)
    assert records.num_rows == 24
    for name in left_out:
        assert records.column(name).null_count == 24, name
    by_op = {
        op: sorted(
            zip(
                *(
                    records.filter(pa.compute.equal(records.column("_op"), op)).column(c).to_pylist()
                    for c in ("k", "v")
                ),
                strict=True,
            )
        )
        for op in ("+I", "+U")
    }
    assert by_op["+I"] == [(i, None) for i in range(12)]
    assert by_op["+U"] == [(i, f"v{i}") for i in range(12)]


def _records(keys: list[int], value: str, first_seq: int = 0) -> pa.Table:
    return pa.table(
        {
            "_seq": pa.array(range(first_seq, first_seq + len(keys)), pa.int64()),
            "_op": pa.array(["+I"] * len(keys)),
            "k": pa.array(keys, pa.int64()),
            "v": pa.array([f"{value}{k}" for k in keys]),
        }
    )


def _merge(ctx, io, records: pa.Table, files=(), rewrite: bool = True) -> tuple[dict, dict]:
    """Merge ``records`` into bucket 0 whose rows are in ``files``: the bucket's marker (with ``_log_path``,
    its changelog file) and its group's."""
    task = buckets.BucketTask(
        key="0",
        bucket=0,
        files=tuple(buckets.SourceFile(p, 0, True) for p in files),
        rewrite=rewrite,
    )
    writer = buckets.GroupWriter(ctx, io)
    marker, out = buckets.merge_bucket(task, records, ctx, io)
    writer.add(task, out)
    group = writer.finish()
    marker["_log_path"] = group["_log_paths"][0] if group["_log_paths"] else None
    return marker, group


def test_a_large_bucket_merged_in_process_is_two_files_in_key_order(tmp_path, monkeypatch):
    """In process, a bucket of SPLIT_ROWS rows or more is written as two files of consecutive keys (one per
    core); the next merge reads them back in key order whatever order the plan lists them in, and gives what
    the one-file bucket gives."""
    monkeypatch.setattr(buckets, "SPLIT_ROWS", 100)
    io = TaskIO({})
    keys = list(range(0, 600, 3))[::-1]  # 200 keys, arriving in descending order
    first = {}
    for threads in (True, False):
        ctx = _bucket_ctx(tmp_path / str(threads), threads)
        first[threads] = _merge(ctx, io, _records(keys, "a"))[0]
    split, whole = first[True]["_paths"], first[False]["_paths"]
    assert len(split) == 2 and len(whole) == 1
    halves = [pq.read_table(p).column("k").to_pylist() for p in split]
    assert [len(h) for h in halves] == [100, 100]
    assert halves[0] + halves[1] == sorted(keys)  # by name, the first file holds the lower keys
    assert pq.read_table(whole[0]).column("k").to_pylist() == sorted(keys)

    update = _records([1, 300, 3, 597, 598], "b", first_seq=1000)  # three updates, two new keys
    results = {}
    for threads, paths in ((True, split[::-1]), (False, whole)):  # the plan may list the halves reversed
        stored = buckets.read_stored(SPEC, io, paths)
        assert stored.column("k").to_pylist() == sorted(keys)
        ctx = _bucket_ctx(tmp_path / f"next-{threads}", threads)
        marker = _merge(ctx, io, update, files=paths)[0]
        assert sorted(marker["_removed"]) == sorted(paths)  # the bucket's files, replaced
        rows = buckets.read_stored(SPEC, io, marker["_paths"])
        results[threads] = (rows, pq.read_table(marker["_log_path"]), marker["_updated"], marker["_inserted"])
    assert results[True][0].equals(results[False][0])
    assert results[True][1].equals(results[False][1])
    assert results[True][2:] == results[False][2:] == (3, 2)


def test_the_rows_a_process_wrote_are_kept_for_its_next_merge_of_the_bucket(tmp_path, monkeypatch):
    """In process, the rows written for a bucket are kept by their files: the next merge of the bucket takes
    them instead of reading the files, and they equal what reading the files gives (so does the merge)."""
    monkeypatch.setattr(buckets, "STORED_ROWS", buckets.StoredRows(64 << 20))
    monkeypatch.setattr(buckets, "SPLIT_ROWS", 100)
    io = TaskIO({})
    ctx = dataclasses.replace(_bucket_ctx(tmp_path / "a", threads=True), keep_rows=True)
    files = _merge(ctx, io, _records(list(range(300)), "a"))[0]["_paths"]
    read = buckets.read_stored(SPEC, io, files)
    kept = buckets.read_stored(SPEC, io, files[::-1], keep_rows=True)  # any order of the same files
    schema = buckets.row_schema(SPEC)
    assert all(buckets.STORED_ROWS.holds(f, schema) for f in files)  # not read again
    assert kept.equals(read) and kept.schema == read.schema

    for f in files:  # the proof it is not read: the files are gone, the rows are still there
        (tmp_path / "gone").mkdir(exist_ok=True)
        shutil.move(f, tmp_path / "gone")
    update = _records([5, 299, 300], "b", first_seq=1000)
    after_kept = _merge(ctx, io, update, files=files)[0]
    assert not any(buckets.STORED_ROWS.holds(f, schema) for f in files)  # replaced: forgotten at once
    with pytest.raises(FileNotFoundError):  # without keep_rows a merge reads the files
        _merge(_bucket_ctx(tmp_path / "b", threads=True), io, update, files=files)
    for f in files:
        shutil.copy(tmp_path / "gone" / f.rsplit("/", 1)[1], f)
    after_read = _merge(_bucket_ctx(tmp_path / "c", threads=True), io, update, files=files)[0]
    assert buckets.read_stored(SPEC, io, after_kept["_paths"]).equals(
        buckets.read_stored(SPEC, io, after_read["_paths"])
    )


def test_kept_rows_are_bounded_and_keyed_by_file_and_schema():
    kept = buckets.StoredRows(max_bytes=2000)
    schema = buckets.stored_schema(SPEC)
    rows = pa.table({"k": pa.array(range(100), pa.int64()), "v": pa.array(["x"] * 100)}).cast(schema)
    assert rows.nbytes < 2000 < 2 * rows.nbytes
    kept.put("a", schema, rows)
    assert kept.get("a", schema) is rows and kept.holds("a", schema)
    assert kept.get("b", schema) is None  # another file
    wider = pa.schema([*schema, pa.field("w", pa.int32())])
    assert kept.get("a", wider) is None  # a column added since: read the file
    kept.put("c", schema, rows)  # over the bound: the least recently used goes
    assert kept.get("a", schema) is None and kept.get("c", schema) is rows
    kept.put("huge", schema, pa.concat_tables([rows] * 40))  # larger than the bound: not kept
    assert kept.get("huge", schema) is None and kept.get("c", schema) is rows
    roomy = buckets.StoredRows(max_bytes=100 * rows.nbytes)
    roomy.put("c", schema, rows)
    roomy.put("d", schema, rows)
    roomy.forget(["c"], schema)  # replaced by a commit: gone at once
    assert roomy.get("c", schema) is None and roomy.get("d", schema) is rows
    assert roomy.kept_bytes == rows.nbytes
    positions = {"x.parquet": np.array([1, 5], np.int64)}
    roomy.put_deletes("d.parquet", positions)
    assert roomy.get_deletes("d.parquet") is positions
    assert roomy.kept_bytes > rows.nbytes


def test_delta_encoding_goes_to_integer_stored_columns_without_a_dictionary():
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("small", pa.int16()),
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("clock", pa.time64("us")),
            ("amount", pa.decimal128(12, 2)),
            ("score", pa.float64()),
            ("name", pa.string()),
            ("flag", pa.bool_()),
            ("region", pa.int32()),
            ("_bucket", pa.int32()),
        ]
    )
    assert buckets.delta_columns(schema, ["region", "_bucket"]) == {
        c: "DELTA_BINARY_PACKED" for c in ("id", "small", "day", "at", "clock")
    }


def test_a_shared_file_is_read_by_the_row_groups_of_a_bucket(tmp_path):
    """A file of several buckets (a merge-on-read batch's new rows), in small row groups: a bucket task that
    does not keep rows reads only the row groups holding its bucket, and finds the same rows at the same file
    positions as reading the whole file; deleted positions are marked alike."""
    io = TaskIO({})
    ctx = _bucket_ctx(tmp_path, threads=False)
    keys = list(range(60))
    rows = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([f"v{k}" for k in keys])})
    rows = rows.append_column("_bucket", pa.array([k // 20 for k in keys], pa.int32()))  # buckets 0, 1, 2
    path = str(tmp_path / "delta-shared.parquet")
    buckets.write_file(io, path, rows.cast(buckets.row_schema(SPEC)), ["_bucket"], ctx, row_group_size=7)
    assert pq.ParquetFile(path).metadata.num_row_groups == 9
    deletes = str(tmp_path / "deletes.parquet")
    with io.open_output(deletes) as sink:
        buckets.write_position_deletes(sink, buckets.position_deletes([path], [np.array([3, 25, 26, 59])]))
    for bucket in range(3):
        task = buckets.BucketTask(
            key="0", bucket=bucket, files=(buckets.SourceFile(path, 60, False),), deletes=(deletes,)
        )
        read = {}
        for keep in (False, True):
            (piece,) = buckets.bucket_pieces(task, dataclasses.replace(ctx, keep_rows=keep), io)
            read[keep] = (piece.offset, piece.rows.column("k").to_pylist(), list(piece.live_positions()))
        assert read[False] == read[True]
        offset, got, live = read[False]
        assert offset == 20 * bucket and got == list(range(20 * bucket, 20 * bucket + 20))
        assert live == [p for p in range(20 * bucket, 20 * bucket + 20) if p not in (3, 25, 26, 59)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sets(st.integers(0, 300), max_size=40), max_size=5), st.booleans(), st.booleans())
def test_merge_positions_is_the_sorted_distinct_positions_of_its_parts(parts, in_order, as_arrow):
    """Parts sorted (a delete file's order) or not, overlapping, numpy or Arrow: the sorted distinct positions,
    in a new array (the parts, which the kept rows share, are left as they were)."""
    arrays = [np.array(sorted(p, reverse=not in_order), np.int64) for p in parts]
    before = [a.copy() for a in arrays]
    merged = buckets.merge_positions([pa.array(a) for a in arrays] if as_arrow else arrays)
    expected = sorted(set().union(*parts))
    assert merged.dtype == np.int64 and merged.tolist() == expected
    assert all(a.tolist() == b.tolist() for a, b in zip(arrays, before, strict=True))
