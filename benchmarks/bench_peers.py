"""What a user could pick instead of changelake, on the benchmark's data (one peer per process).

    .venv/bin/python benchmarks/bench_peers.py --peer delta --dir DATA_DIR --out result.json

Peers (each reads the same ``base.parquet`` and ``batch.parquet`` that bench_data.py wrote):
  delta    delta-rs (``deltalake``): write the table with ``delta.enableChangeDataFeed=true``, then one MERGE
           of the batch (update when matched and not -D, delete when matched and -D, insert when not matched
           and not -D), which writes the table and its change data feed; the feed is read back and counted
  duckdb   DuckDB: the table and the batch unioned, the last record per key by position kept, deletes
           dropped, the whole table written as Parquet
  iceberg  pyiceberg: append the table to a fresh Iceberg table (SQLite catalog), then ``Table.upsert`` of
           the batch's +I/+U records and a ``delete`` of its -D keys
Timings include reading the input files. Each phase's peak RSS of the peer's process is reported too.
A peer whose package is missing reports ``skipped`` (``uv sync --group bench`` installs them).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from bench_data import COLUMNS, FINGERPRINT_COLUMNS, fingerprint, settle
from bench_memory import PhaseMemory

INSTALL_HINT = "not installed: `uv sync --group bench` (make bench does)"


def timed_phase(fn: Callable[[], Any]) -> tuple[float, float | None, Any]:
    """Seconds, peak RSS (MB) of this process and the result of ``fn()``; what was written before is flushed
    first (:func:`bench_data.settle`)."""
    settle()
    mem = PhaseMemory(jvm=None).start()
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    return seconds, mem.stop()["driver_peak_mb"], result


def run_delta(data: Path, work: Path) -> dict[str, Any]:
    """delta-rs: initial write with change data feed enabled, then MERGE of the batch."""
    from deltalake import DeltaTable, write_deltalake

    path = str(work / "delta")

    def write() -> None:
        rows = pq.read_table(data / "base.parquet", columns=COLUMNS)
        write_deltalake(path, rows, configuration={"delta.enableChangeDataFeed": "true"})

    def merge() -> dict[str, Any]:
        source = pq.read_table(data / "batch.parquet")
        values = {c: f"s.{c}" for c in COLUMNS}
        return (
            DeltaTable(path)
            .merge(source, predicate="t.order_id = s.order_id", source_alias="s", target_alias="t")
            .when_matched_update(updates=values, predicate="s.op != '-D'")
            .when_matched_delete(predicate="s.op = '-D'")
            .when_not_matched_insert(updates=values, predicate="s.op != '-D'")
            .execute()
        )

    write_s, write_mb, _ = timed_phase(write)
    merge_s, merge_mb, metrics = timed_phase(merge)
    table = DeltaTable(path)
    cdf = pa.RecordBatchReader.from_stream(
        table.load_cdf(starting_version=table.version(), ending_version=table.version())
    ).read_all()
    # deltalake 1.x hands the change type back as string_view, which pyarrow's group_by cannot key on
    by_type = pc.value_counts(cdf.column("_change_type").cast(pa.string())).to_pylist()
    return {
        "write_s": round(write_s, 2),
        "merge_cdf_s": round(merge_s, 2),
        "write_peak_rss_mb": write_mb,
        "merge_peak_rss_mb": merge_mb,
        "fingerprint": fingerprint(table.to_pyarrow_dataset().to_table(columns=FINGERPRINT_COLUMNS)),
        "cdf_rows": cdf.num_rows,
        "cdf_by_type": {r["values"]: r["counts"] for r in by_type},
        "merge_metrics": {k: v for k, v in metrics.items() if isinstance(v, int)},
    }


# The last record per key wins (the table's rows come before the batch's, then file order); deletes drop.
DUCKDB_REWRITE = """
SELECT order_id, user_id, item, amount, qty, score, updated_at
FROM (
    SELECT 0 AS _src, file_row_number AS _pos, op, order_id, user_id, item, amount, qty, score, updated_at
    FROM base_in
    UNION ALL
    SELECT 1 AS _src, file_row_number AS _pos, op, order_id, user_id, item, amount, qty, score, updated_at
    FROM batch_in
)
QUALIFY row_number() OVER (PARTITION BY order_id ORDER BY _src DESC, _pos DESC) = 1 AND op <> '-D'
"""


def run_duckdb(data: Path, work: Path) -> dict[str, Any]:
    """DuckDB: latest row per key over table + batch, the whole table rewritten as Parquet."""
    import duckdb

    out = work / "duckdb.parquet"
    con = duckdb.connect()

    def rewrite() -> None:
        con.read_parquet(str(data / "base.parquet"), file_row_number=True).create_view("base_in")
        con.read_parquet(str(data / "batch.parquet"), file_row_number=True).create_view("batch_in")
        con.sql(DUCKDB_REWRITE).write_parquet(str(out))

    seconds, peak_mb, _ = timed_phase(rewrite)
    return {
        "rewrite_s": round(seconds, 2),
        "rewrite_peak_rss_mb": peak_mb,
        "fingerprint": fingerprint(pq.read_table(out, columns=FINGERPRINT_COLUMNS)),
        "threads": con.execute("SELECT current_setting('threads')").fetchone()[0],
    }


def run_iceberg(data: Path, work: Path) -> dict[str, Any]:
    """pyiceberg: append into a fresh table, then upsert the batch's +I/+U and delete its -D keys."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import In

    catalog = SqlCatalog("peer", uri=f"sqlite:///{work / 'catalog.db'}", warehouse=(work / "wh").as_uri())
    catalog.create_namespace("bench")
    schema = pq.read_schema(data / "base.parquet")
    table = catalog.create_table("bench.orders", schema=pa.schema([schema.field(c) for c in COLUMNS]))

    def append() -> None:
        table.append(pq.read_table(data / "base.parquet", columns=COLUMNS))

    def upsert_delete() -> dict[str, int]:
        batch = pq.read_table(data / "batch.parquet")
        is_delete = pc.equal(batch.column("op"), "-D")
        upserts = batch.filter(pc.invert(is_delete)).select(COLUMNS)
        result = table.upsert(upserts, join_cols=["order_id"])
        table.delete(In("order_id", batch.filter(is_delete).column("order_id").to_pylist()))
        return {"rows_updated": result.rows_updated, "rows_inserted": result.rows_inserted}

    append_s, append_mb, _ = timed_phase(append)
    upsert_s, upsert_mb, counts = timed_phase(upsert_delete)
    return {
        "append_s": round(append_s, 2),
        "upsert_delete_s": round(upsert_s, 2),
        "append_peak_rss_mb": append_mb,
        "upsert_delete_peak_rss_mb": upsert_mb,
        "fingerprint": fingerprint(
            catalog.load_table("bench.orders").scan(selected_fields=tuple(FINGERPRINT_COLUMNS)).to_arrow()
        ),
        **counts,
    }


PEERS: dict[str, tuple[str, Callable[[Path, Path], dict[str, Any]]]] = {
    "delta": ("deltalake", run_delta),
    "duckdb": ("duckdb", run_duckdb),
    "iceberg": ("pyiceberg", run_iceberg),
}


def run_peer(name: str, data: Path, work: Path) -> dict[str, Any]:
    """Run one peer; a missing package gives ``{"skipped": ...}`` instead of an error."""
    import importlib.metadata as md

    package, fn = PEERS[name]
    try:
        version = md.version(package)
    except md.PackageNotFoundError:
        return {"skipped": f"{package} {INSTALL_HINT}"}
    work.mkdir(parents=True, exist_ok=True)
    return {"package": f"{package} {version}", **fn(data, work)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer", choices=sorted(PEERS), required=True)
    ap.add_argument("--dir", type=Path, required=True, help="bench_data.py's output directory")
    ap.add_argument("--work", type=Path, help="where the peer writes its table (default: DIR/peer-NAME)")
    ap.add_argument("--out", type=Path, help="write the result JSON here (default: stdout)")
    args = ap.parse_args()
    faulthandler.enable()  # a native crash (abort, segfault) still leaves the Python stacks in stderr
    result = run_peer(args.peer, args.dir, args.work or args.dir / f"peer-{args.peer}")
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
