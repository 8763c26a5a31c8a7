"""benchmarks/s3_lake.py, the S3 set-up of bench-small and bench-longrun under ``--s3``: a warehouse on the S3
endpoint is counted as its objects, the way a local one is counted as its files, and the requests per batch
are summed up per kind with the batches that listed."""

from __future__ import annotations

import pytest
import s3_lake

LAYOUT = {
    "db/t/metadata/00001-a.metadata.json": b"{}",
    "db/t/metadata/00002-b.metadata.json": b"{ }",
    "db/t/metadata/snap-1.avro": b"x" * 300,
    "db/t/data/_bucket=0/f.parquet": b"y" * 1000,
}


def test_request_summary_gives_each_kinds_median_and_largest_and_the_batches_that_listed():
    per_batch = [
        {"GET": 4, "PUT": 10},
        {"GET": 6, "PUT": 12, "LIST": 3},
        {"GET": 5, "PUT": 11, "HEAD": 2},
    ]
    q = s3_lake.request_summary(per_batch)
    assert q["median"] == {"GET": 5, "HEAD": 0, "LIST": 0, "PUT": 11}
    assert q["max"] == {"GET": 6, "HEAD": 2, "LIST": 3, "PUT": 12}
    assert (q["median_total"], q["max_total"]) == (18, 21)
    assert q["batches_with_list"] == 1 and q["list_batches"] == [1]
    assert q["all"] == {"GET": 15, "PUT": 33, "LIST": 3, "HEAD": 2}


@pytest.mark.integration  # the S3 endpoint is a JVM
def test_a_warehouse_on_s3_counts_its_objects_as_a_local_one_counts_its_files(
    s3_endpoint, s3_prefix, tmp_path
):
    from changelake import objectstore
    from tests.helpers import storage_options_of

    store = objectstore.Store(storage_options_of(s3_endpoint))
    local = tmp_path / "warehouse"
    for key, data in LAYOUT.items():
        (local / key).parent.mkdir(parents=True, exist_ok=True)
        (local / key).write_bytes(data)
        store.put(f"{s3_prefix}/warehouse/{key}", data)
    store.put(f"{s3_prefix}/warehouse-other/db/t/metadata/00003-c.metadata.json", b"{}")  # beside, not under

    expected = {"files": 4, "bytes": 2 + 3 + 300 + 1000, "metadata_files": 2}
    assert s3_lake.usage(local) == expected
    assert s3_lake.usage(f"{s3_prefix}/warehouse", store) == expected
    assert s3_lake.usage(f"{s3_prefix}/warehouse/", store) == expected
