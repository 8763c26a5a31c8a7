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


def _logged(method: str, url: str) -> str:
    """A request line as S3Proxy's debug log writes it (infra/s3/logback.xml with S3_REQUEST_LOG=1)."""
    return (
        "12:29:20.920 DEBUG S3ProxyHandler - request: ServletApiRequest@38c9fda2{ShutdownTrackingRequest@349a988c"
        f"{{{method}@5fe7a734 http://127.0.0.1:59579{url} HTTP/1.1}}}}\n"
    )


def test_the_prefixes_listed_are_read_from_the_log_and_only_a_list_above_a_table_lists_it_whole(tmp_path):
    table = "s3://changelake/w/lr/events"
    log = tmp_path / "server.log"
    lines = [
        _logged("GET", "/changelake?list-type=2&max-keys=1000&prefix=w%2Flr%2Fevents%2Fdata%2Fbatch-7-ab%2F"),
        _logged("GET", "/changelake/w/lr/events/metadata/v1.metadata.json"),
        _logged("PUT", "/changelake/w/lr/events/data/x.parquet"),
        _logged("GET", "/changelake?list-type=2&max-keys=1000&prefix=w%2Flr%2Fevents%2F"),
    ]
    log.write_text("".join(lines))
    skip = len(lines[0])
    listed = s3_lake.listed_prefixes(log, 0, log.stat().st_size)
    assert listed == ["s3://changelake/w/lr/events/data/batch-7-ab/", "s3://changelake/w/lr/events/"]
    assert s3_lake.listed_prefixes(log, skip, log.stat().st_size) == listed[1:]
    assert not s3_lake.lists_whole_table(listed[0], [table])  # one attempt's prefix, under the table
    assert s3_lake.lists_whole_table(listed[1], [table])
    assert s3_lake.lists_whole_table("s3://changelake/w/", [table])  # above it: the table and more
    assert not s3_lake.lists_whole_table("s3://changelake/w/lr/events__changelog/", [table])


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
