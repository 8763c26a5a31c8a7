"""The benchmark's data, generated deterministically in chunks (run as its own process by bench_apply.py).

    .venv/bin/python benchmarks/bench_data.py --dir /tmp/x --rows 200000 --batch 20000 [--huge-records N]

Writes into ``--dir``:
  warmup.parquet      10k ``+I`` records for a throwaway table applied before the timed scenarios
  base.parquet        the table: ``--rows`` ``+I`` records, keys 0..rows-1
  batch.parquet       batch 2: 70% ``+U`` of existing keys, 20% ``+I`` of new keys, 10% ``-D``, random order,
                      every key at most once (so a MERGE and a changelog apply mean the same thing)
  versioned.parquet   batch 2 for the versioned table: 30% of the records carry an older ``updated_at``
  batch4.jsonl        batch 4: another such batch over the keys alive after batch 2, as changelog JSON lines
  batch4.parquet      the same records as Parquet
  huge.parquet        (``--huge-records``) batch 5: that many records, 70/20/10, keys drawn with replacement
                      from the keys alive after batch 4, written one chunk at a time
  meta.json           the counts the run checks its results against
Nothing holds more than one chunk of a file's records at once, except the two batches (``--batch`` each).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

COLUMNS = ["order_id", "user_id", "item", "amount", "qty", "score", "updated_at"]
OPS = pa.array(["+U", "+I", "-D"], pa.string())
UPDATE, INSERT, DELETE = 0, 1, 2
SCHEMA = pa.schema(
    [
        ("op", pa.string()),
        ("order_id", pa.int64()),
        ("user_id", pa.int64()),
        ("item", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("qty", pa.int32()),
        ("score", pa.float64()),
        ("updated_at", pa.timestamp("us")),
    ]
)
BASE_TIME = np.datetime64("2026-01-01T00:00:00", "us")


def settle() -> None:
    """Flush the files earlier scenarios wrote before a timing starts, so that the kernel's write-back of them
    (it starts 30 s after a write, or when dirty pages pass 10% of memory) does not run on the 2 cores inside
    the next timing. Every timed phase of bench_apply, bench_engine and bench_peers calls it. Measured here: ten one-bucket
    batches after 1.5 GB of fresh writes took 95 ms at the median, 79 ms with those writes flushed first."""
    os.sync()


def make_records(op_codes: np.ndarray, keys: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """Records with random values for ``keys``; ``op_codes`` index ``OPS`` (0 = +U, 1 = +I, 2 = -D)."""
    n = len(keys)
    cents = rng.integers(100, 10_000_000, n)
    items = pc.binary_join_element_wise("item-", pa.array(rng.integers(0, 50_000, n)).cast(pa.string()), "")
    return pa.table(
        [
            pa.DictionaryArray.from_arrays(pa.array(op_codes, pa.int8()), OPS).dictionary_decode(),
            pa.array(keys, pa.int64()),
            pa.array(rng.integers(0, 1_000_000, n), pa.int64()),
            items,
            pa.array(cents / 100.0).cast(pa.decimal128(12, 2), safe=False),
            pa.array(rng.integers(1, 20, n), pa.int32()),
            pa.array(rng.random(n), pa.float64()),
            pa.array(BASE_TIME + rng.integers(0, 10**12, n).astype("timedelta64[us]"), pa.timestamp("us")),
        ],
        schema=SCHEMA,
    )


def split(size: int) -> tuple[int, int, int]:
    """Updates, inserts and deletes of a ``size``-record batch (70/20/10)."""
    n_upd, n_ins = int(size * 0.7), int(size * 0.2)
    return n_upd, n_ins, size - n_upd - n_ins


def change_batch(alive: np.ndarray, next_key: int, size: int, rng: np.random.Generator) -> pa.Table:
    """One batch with distinct keys: updates and deletes of ``alive`` keys, inserts from ``next_key`` on."""
    n_upd, n_ins, n_del = split(size)
    picked = rng.choice(alive, n_upd + n_del, replace=False)
    keys = np.concatenate([picked[:n_upd], np.arange(next_key, next_key + n_ins), picked[n_upd:]])
    codes = np.repeat(np.array([UPDATE, INSERT, DELETE], np.int8), [n_upd, n_ins, n_del])
    order = rng.permutation(size)
    return make_records(codes[order], keys[order], rng)


def apply_liveness(alive: np.ndarray, batch: pa.Table) -> np.ndarray:
    """The key-liveness mask after ``batch`` (index = key), grown to cover its inserted keys."""
    keys = batch.column("order_id").to_numpy()
    ops = batch.column("op")
    grown = np.zeros(max(len(alive), int(keys.max()) + 1), bool)
    grown[: len(alive)] = alive
    grown[keys[pc.equal(ops, "-D").to_numpy(zero_copy_only=False)]] = False
    grown[keys[pc.not_equal(ops, "-D").to_numpy(zero_copy_only=False)]] = True
    return grown


def write_jsonl(table: pa.Table, path: Path, chunk: int = 50_000) -> None:
    """Changelog JSON lines (``{"op", "data"}``) as Flink's JSON format writes them with its defaults, a slice
    at a time: compact (Jackson), TIMESTAMP in the SQL form (``timestamp-format.standard: SQL``:
    ``2026-01-09 09:58:40.695699``, no trailing zeros in the fraction), DECIMAL as a JSON number without
    trailing zeros (``encode.decimal-as-plain-number: false``: ``1.2345E+4`` for 12345.00), and a ``-D``
    with its whole row. (A DOUBLE is Python's shortest repr, where Java's ``Double.toString`` may spell the
    same value otherwise, e.g. ``1.0E-5``.)"""
    cols = [c for c in table.column_names if c != "op"]
    text = {"amount": jackson_decimal, "updated_at": lambda v: json.dumps(flink_timestamp(v))}
    with open(path, "w") as fh:
        for part in table.to_batches(max_chunksize=chunk):
            lines = []
            for row in part.to_pylist():
                body = ",".join(f'"{c}":{text.get(c, json.dumps)(row[c])}' for c in cols)
                lines.append(f'{{"op":"{row["op"]}","data":{{{body}}}}}')
            fh.write("\n".join(lines) + "\n")


def jackson_decimal(value: decimal.Decimal) -> str:
    """A DECIMAL as Jackson writes Flink's BigDecimal node: a JSON number without trailing zeros, in
    scientific notation where ``BigDecimal.toString`` uses it (Python's str of a Decimal follows the same
    rule), ``0`` for zero."""
    return "0" if not value else str(value.normalize())


def flink_timestamp(value: dt.datetime) -> str:
    """A TIMESTAMP as Flink's SQL timestamp format writes it: a space, then 0 to 9 fraction digits."""
    text = value.isoformat(sep=" ", timespec="microseconds")
    return text.rstrip("0").rstrip(".")


def older_versions(batch: pa.Table, rng: np.random.Generator, share: float = 0.3) -> pa.Table:
    """The batch for the versioned table: ``share`` of the records older than the table, the rest newer."""
    older = rng.random(batch.num_rows) < share
    ts = batch.column("updated_at").to_numpy()
    shifted = np.where(older, np.datetime64("2020-01-01T00:00:00", "us"), ts + np.timedelta64(365, "D"))
    index = batch.schema.get_field_index("updated_at")
    return batch.set_column(index, "updated_at", pa.array(shifted, pa.timestamp("us")))


def fingerprint(table: pa.Table) -> dict:
    """Row count and column sums of a table's rows: equal fingerprints mean the same merge result here
    (every record of a batch carries fresh random values)."""
    return {
        "rows": table.num_rows,
        "sum_order_id": pc.sum(table.column("order_id")).as_py(),
        "sum_qty": pc.sum(table.column("qty")).as_py(),
        "sum_amount": str(pc.sum(table.column("amount")).as_py()),
    }


FINGERPRINT_COLUMNS = ["order_id", "qty", "amount"]


def generate(
    out: Path, rows: int, batch_size: int, huge_records: int = 0, chunk: int = 1_000_000, seed: int = 42
) -> dict:
    """Write every input file of the run into ``out`` and return (and write) its ``meta.json``."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with pq.ParquetWriter(out / "base.parquet", SCHEMA) as writer:
        for start in range(0, rows, chunk):
            keys = np.arange(start, min(rows, start + chunk))
            writer.write_table(make_records(np.full(len(keys), INSERT, np.int8), keys, rng))

    warm = min(rows, 10_000)
    warm_rng = np.random.default_rng(seed + 2)
    pq.write_table(
        make_records(np.full(warm, INSERT, np.int8), np.arange(warm), warm_rng), out / "warmup.parquet"
    )
    batch = change_batch(np.arange(rows), rows, batch_size, rng)
    pq.write_table(batch, out / "batch.parquet")
    pq.write_table(older_versions(batch, rng), out / "versioned.parquet")
    alive = apply_liveness(np.ones(rows, bool), batch)
    n_upd, n_ins, n_del = split(batch_size)
    meta = {
        "rows": rows,
        "batch": {"records": batch_size, "updates": n_upd, "inserts": n_ins, "deletes": n_del},
        "rows_after_batch": rows + n_ins - n_del,
        # Full changelog: -U and +U per update, +I per insert, -D per delete.
        "changes_of_batch": 2 * n_upd + n_ins + n_del,
    }
    del batch

    # Batch 3 (one bucket) only updates live keys, so batch 4 can be drawn from the keys alive now.
    batch4 = change_batch(np.flatnonzero(alive), len(alive), batch_size, rng)
    write_jsonl(batch4, out / "batch4.jsonl")
    pq.write_table(batch4, out / "batch4.parquet")  # the same records: the JSON batch's Parquet baseline
    alive = apply_liveness(alive, batch4)
    meta["rows_after_batch4"] = int(alive.sum())
    del batch4

    if huge_records:
        meta["huge"] = write_huge(out / "huge.parquet", alive, huge_records, chunk, seed + 1)
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def write_huge(path: Path, alive: np.ndarray, records: int, chunk: int, seed: int) -> dict:
    """The large batch, one chunk at a time: keys repeat within the batch (updates and deletes are drawn
    with replacement from the live keys), as they do in a long CDC backlog."""
    rng = np.random.default_rng(seed)
    live = np.flatnonzero(alive)
    next_key = len(alive)
    with pq.ParquetWriter(path, SCHEMA) as writer:
        for start in range(0, records, chunk):
            size = min(chunk, records - start)
            n_upd, n_ins, n_del = split(size)
            keys = np.concatenate(
                [rng.choice(live, n_upd), np.arange(next_key, next_key + n_ins), rng.choice(live, n_del)]
            )
            next_key += n_ins
            codes = np.repeat(np.array([UPDATE, INSERT, DELETE], np.int8), [n_upd, n_ins, n_del])
            order = rng.permutation(size)
            writer.write_table(make_records(codes[order], keys[order], rng))
    return {"records": records, "chunk": chunk}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--huge-records", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=1_000_000)
    args = ap.parse_args()
    generate(args.dir, args.rows, args.batch, args.huge_records, args.chunk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
