"""Decode speed of upsert-kafka's key/value formats beside the JSON paths (issue 37's Avro target).

    flock /tmp/changelake-bench.lock .venv/bin/python benchmarks/bench_kafka_formats.py [--records 500000]

One batch of the bench's shape (bench_data.py: order_id key, user_id, item, amount DECIMAL(12,2), qty INT,
score DOUBLE, updated_at TIMESTAMP(6); 70% updates, 20% inserts, 10% deletes) is landed as:

  changelog-json      the apply's JSON path (``make bench``'s JSON batch; decoded column-wise)
  upsert-kafka json   the same changes as Kafka records with JSON key and value (decoded per message)
  avro-confluent      Kafka records with Confluent wire-format key and value (schema ids in a directory)
  avro                Kafka records with Avro binary key and value (Flink's avro format)

and each file is decoded by the apply's decode task (``changelake.inputs.decode.decode_range``: decode,
validate, bucket and stage as Arrow IPC) ``--reps`` times in this process; the best run counts. The check
is the issue's: avro-confluent decodes at >= 0.8x the records/s of the JSON path. Both JSON paths are
reported, and the ratio to each. Writes benchmarks/results/kafka_formats.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_apply import SPEC

from changelake.inputs import decode
from changelake.inputs.formats import FORMATS, SourceEvent
from changelake.spec import TableSpec
from changelake.storage.taskio import TaskIO

HERE = Path(__file__).resolve().parent
COLUMNS = SPEC["columns"]  # the bench's shape (make bench's table)
TARGET = 0.8


def table(name: str, source: dict) -> TableSpec:
    return TableSpec.from_dict(
        {
            "name": f"bench.{name}",
            "columns": COLUMNS,
            "primary_key": ["order_id"],
            "options": {"bucket.num": "4"},
            "source": source,
        }
    )


def events(n: int, seed: int = 7) -> list[SourceEvent]:
    """The bench's mix: 70% updates, 20% inserts, 10% deletes, every key once, at Kafka offsets 0..n-1."""
    rng = np.random.default_rng(seed)
    kinds = rng.choice(["update", "insert", "delete"], n, p=[0.7, 0.2, 0.1])
    keys = rng.permutation(n * 2)[:n]
    base = dt.datetime(2026, 1, 1)
    out = []
    for i, (kind, key) in enumerate(zip(kinds.tolist(), keys.tolist(), strict=True)):
        row = {
            "order_id": key,
            "user_id": int(rng.integers(0, 1_000_000)),
            "item": f"item-{int(rng.integers(0, 50_000))}",
            "amount": decimal.Decimal(int(rng.integers(100, 10_000_000))).scaleb(-2),
            "qty": int(rng.integers(1, 20)),
            "score": float(rng.random()),
            "updated_at": base + dt.timedelta(microseconds=int(rng.integers(0, 10**12))),
        }
        kafka = ("orders", i % 3, i)
        if kind == "delete":
            out.append(SourceEvent("delete", row, None, kafka=kafka))
        else:
            out.append(SourceEvent(kind, None, row, kafka=kafka))
    return out


def timed(path: Path, spec: TableSpec, work: Path, reps: int) -> tuple[float, int]:
    """The best of ``reps`` decodes of the file by the apply's decode tasks, and the records decoded."""
    best, records = float("inf"), 0
    for rep in range(reps):
        staging = work / f"staging-{spec.table}-{rep}"
        t0 = time.perf_counter()
        plan = decode.plan_batch([path], spec, None, None)
        io = TaskIO({})
        stats = [decode.decode_range(r, spec, str(staging), io) for r in plan.ranges]
        best = min(best, time.perf_counter() - t0)
        plan.checksum  # noqa: B018 - let the checksum thread finish outside the timing
        errors = [s.get("error") for s in stats if s.get("error")]
        if errors or any(s.get("dead_letters") for s in stats):
            raise SystemExit(f"{spec.full_name}: the batch did not decode cleanly: {errors}")
        records = sum(s["records"] for s in stats)
        shutil.rmtree(staging, ignore_errors=True)
    return best, records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "kafka_formats.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="changelake-bench-kafka-"))
    try:
        schemas = str(work / "schemas")
        kafka_src = {"format": "upsert-kafka"}
        specs = {
            "changelog-json": table("cj", {"format": "changelog-json"}),
            "upsert-kafka json": table("ukj", kafka_src),
            "avro-confluent": table(
                "ukc",
                {
                    **kafka_src,
                    "key.format": "avro-confluent",
                    "key.avro-confluent.schema-dir": schemas,
                    "value.format": "avro-confluent",
                    "value.avro-confluent.schema-dir": schemas,
                },
            ),
            "avro": table("uka", {**kafka_src, "key.format": "avro", "value.format": "avro"}),
        }
        evs = events(args.records)
        results = {}
        for name, spec in specs.items():
            path = work / f"{spec.table}.jsonl"
            FORMATS[spec.source["format"]].write(spec, evs, path)
            seconds, records = timed(path, spec, work, args.reps)
            results[name] = {
                "seconds": round(seconds, 4),
                "records": records,
                "records_per_s": round(records / seconds),
                "bytes": path.stat().st_size,
            }
            print(
                f"  {name:18} {records:>9,} records  {seconds:7.3f} s  {records / seconds:>12,.0f} records/s"
            )
        rate = {k: v["records_per_s"] for k, v in results.items()}
        checks = {}
        for base in ("changelog-json", "upsert-kafka json"):
            for fmt in ("avro-confluent", "avro"):
                ratio = rate[fmt] / rate[base]
                checks[f"{fmt} vs {base}"] = round(ratio, 3)
                print(f"  {fmt} / {base}: {ratio:.2f}x")
        out = {
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, shared with other work",
            "records": args.records,
            "reps": args.reps,
            "results": results,
            "ratios": checks,
            "target": f"avro-confluent >= {TARGET}x the JSON path's records/s",
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        met = checks["avro-confluent vs changelog-json"] >= TARGET
        print(f"  target ({out['target']}, vs changelog-json): {'met' if met else 'MISSED'}")
        return 0 if met else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
