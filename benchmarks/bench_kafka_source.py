"""Kafka topics as a source beside the same records landed as files, and freshness with `changelake stream`
(issue 45's targets).

    flock -x /tmp/changelake-cpu.lock .venv/bin/python benchmarks/bench_kafka_source.py [--records 2000000]

A local broker is started with the project's own infra/kafka.sh (Apache Kafka's jars, KRaft, loopback) in a
scratch directory. Throughput: one batch of the bench's shape (bench_kafka_formats.events: order_id key, six
more columns; 70% updates, 20% inserts, 10% deletes) as upsert-kafka records with JSON key and value, and with
Confluent wire-format Avro key and value (schema ids in a directory), is

  landed   as one upsert-kafka JSON-lines file (the Avro parts in base64, as landed upsert-kafka lines hold them)
  topic    produced into a topic of 4 partitions (the same keys, values and partitions)

and each is applied to a fresh table by ``ChangeLake.apply_pending`` in this process (one warm local[2] Spark,
Spark tasks decoding: the batch is above CHANGELAKE_LOCAL_APPLY_RECORDS), best of ``--reps``. Both tables must
end with the same rows (count and sums) or the figure does not count. The target: records/s from the topic
>= 0.8x from the files.

Freshness: `changelake stream --every 5s` runs on a small topic-sourced table while a producer sends one
record every 200 ms for ``--freshness-seconds``; a poller looks each record's key up (no JVM) until it is
there. Reported: median, p95 and max of produce-to-visible seconds; the target p95 <= 10 s.

Writes benchmarks/results/kafka_source.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_kafka_formats import COLUMNS, events

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGET_THROUGHPUT, TARGET_P95 = 0.8, 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """A broker of infra/kafka.sh in a scratch directory, on free loopback ports."""

    def __init__(self, directory: Path):
        self.env = {
            **os.environ,
            "KAFKA_DIR": str(directory),
            "KAFKA_PORT": str(free_port()),
            "KAFKA_CONTROLLER_PORT": str(free_port()),
            "STOP_HINT": "0",
        }
        self.properties = directory / "client.properties"

    def __enter__(self) -> Broker:
        run = subprocess.run(
            [REPO / "infra" / "kafka.sh", "start"], env=self.env, capture_output=True, text=True
        )
        if run.returncode:
            raise SystemExit(f"the broker did not start:\n{run.stdout}{run.stderr}")
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run([REPO / "infra" / "kafka.sh", "stop"], env=self.env, capture_output=True)

    @property
    def config(self) -> dict[str, str]:
        from changelake.inputs.kafka import read_properties

        return read_properties(self.properties)


def spec(name: str, source: dict) -> dict:
    return {
        "name": f"bench.{name}",
        "columns": COLUMNS,
        "primary_key": ["order_id"],
        "options": {"bucket.num": "4"},
        "source": source,
    }


def fingerprint(lake, table: str) -> tuple:
    """Rows, and sums of the numeric columns: two tables that took the same records agree on it."""
    import pyarrow.compute as pc

    rows = lake.rows_arrow(table)
    return (
        rows.num_rows,
        pc.sum(rows.column("order_id")).as_py(),
        str(pc.sum(rows.column("amount")).as_py()),
        pc.sum(rows.column("qty")).as_py(),
    )


def throughput(lake, home: Path, broker: Broker, records: int, reps: int) -> dict:
    from changelake.inputs.formats import FORMATS
    from changelake.inputs.kafka import ensure_topic, produce_lines
    from changelake.spec import TableSpec

    schemas = str(home / "schemas")
    parts = {
        "json": {},
        "avro-confluent": {
            "key.format": "avro-confluent",
            "key.avro-confluent.schema-dir": schemas,
            "value.format": "avro-confluent",
            "value.avro-confluent.schema-dir": schemas,
        },
    }
    evs = events(records)
    out = {}
    for name, options in parts.items():
        tag = name.replace("-", "_")
        landed = TableSpec.from_dict(spec(f"landed_{tag}", {"format": "upsert-kafka", **options}))
        lines = FORMATS["upsert-kafka"].render(landed, evs)
        topic = f"orders-{tag}"
        ensure_topic(broker.config, topic, 4)
        t0 = time.perf_counter()
        produce_lines(broker.config, topic, landed, lines)
        produce_s = time.perf_counter() - t0
        result: dict = {"records": records, "produce_s": round(produce_s, 2)}
        for how in ("landed", "topic"):
            best = float("inf")
            for rep in range(reps):
                table = f"{how}_{tag}_{rep}"
                source = {"format": "upsert-kafka", **options}
                if how == "topic":
                    source["topic"] = topic
                (home / "tables" / f"bench.{table}.yaml").write_text(json.dumps(spec(table, source)))
                if how == "landed":
                    directory = home / "landing" / f"bench.{table}"
                    directory.mkdir(parents=True)
                    (directory / "1.jsonl").write_text("\n".join(lines) + "\n")
                lake.create_table(lake.specs()[f"bench.{table}"])
                t0 = time.perf_counter()
                (applied,) = lake.apply_pending(f"bench.{table}")
                best = min(best, time.perf_counter() - t0)
                assert applied.source["messages"] == records, applied
                result.setdefault("fingerprints", {})[how] = fingerprint(lake, f"bench.{table}")
            result[f"{how}_s"] = round(best, 3)
            result[f"{how}_records_per_s"] = round(records / best)
            print(
                f"  {name:15} {how:7} {records:>9,} records  {best:7.2f} s  {records / best:>10,.0f} records/s"
            )
        result["same_rows"] = result["fingerprints"]["landed"] == result["fingerprints"]["topic"]
        result["ratio"] = round(result["topic_records_per_s"] / result["landed_records_per_s"], 3)
        out[name] = result
    return out


def freshness(home: Path, broker: Broker, seconds: float) -> dict:
    from confluent_kafka import Producer

    from changelake.config import load_settings
    from changelake.inputs.kafka import ensure_topic
    from changelake.storage.fastread import FastReader

    topic = "fresh"
    ensure_topic(broker.config, topic, 2)
    table = spec("fresh", {"format": "upsert-kafka", "topic": topic})
    (home / "tables" / "bench.fresh.yaml").write_text(json.dumps(table))
    env = {
        **os.environ,
        "CHANGELAKE_HOME": str(home),
        "CHANGELAKE_TABLES": str(home / "tables"),
        "CHANGELAKE_KAFKA_CONFIG": str(broker.properties),
    }
    stream = subprocess.Popen(
        [sys.executable, "-m", "changelake.cli", "stream", "bench.fresh", "--every", "5 s"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    producer = Producer({**broker.config, "linger.ms": "0"})
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}
    done = threading.Event()

    def produce() -> None:
        key = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            key += 1
            value = {"order_id": key, "user_id": 1, "item": "x", "amount": "1.00", "qty": 1, "score": 0.5,
                     "updated_at": "2026-01-01T00:00:00"}  # fmt: skip
            producer.produce(topic, key=json.dumps({"order_id": key}), value=json.dumps(value))
            producer.flush(10)
            sent[key] = time.monotonic()
            time.sleep(0.2)
        done.set()

    thread = threading.Thread(target=produce)
    try:
        time.sleep(3)  # the stream's first (empty) apply
        thread.start()
        reader = FastReader(load_settings(home=home, tables_dir=home / "tables"), progress=lambda _m: None)
        deadline = time.monotonic() + seconds + 60
        while time.monotonic() < deadline and not (done.is_set() and len(seen) == len(sent)):
            for key in [k for k in list(sent) if k not in seen]:
                try:
                    if reader.lookup("bench.fresh", {"order_id": key}):
                        seen[key] = time.monotonic()
                except Exception:  # noqa: BLE001 - the table may not exist before the first batch
                    break
            time.sleep(0.05)
    finally:
        thread.join()
        stream.terminate()
        stream.wait(60)
    delays = sorted(seen[k] - sent[k] for k in seen)
    if not delays or len(seen) != len(sent):
        raise SystemExit(f"freshness: {len(seen)} of {len(sent)} records became visible")
    pick = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))]  # noqa: E731
    return {
        "records": len(delays),
        "every_s": 5.0,
        "median_s": round(pick(0.5), 2),
        "p95_s": round(pick(0.95), 2),
        "max_s": round(delays[-1], 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--freshness-seconds", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "kafka_source.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="changelake-bench-kafka-source-"))
    try:
        home = work / "home"
        (home / "tables").mkdir(parents=True)
        with Broker(work / "kafka") as broker:
            os.environ["CHANGELAKE_KAFKA_CONFIG"] = str(broker.properties)
            from changelake import ChangeLake

            lake = ChangeLake(home=home, tables_dir=home / "tables", progress=lambda _m: None)
            lake.spark.range(1).collect()  # the session is warm before anything is timed
            rates = throughput(lake, home, broker, args.records, args.reps)
            (work / "fresh" / "tables").mkdir(parents=True)
            result = {
                "command": " ".join(["benchmarks/bench_kafka_source.py", *sys.argv[1:]]),
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "throughput": rates,
                "freshness": freshness(work / "fresh", broker, args.freshness_seconds),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["targets"] = {
        "throughput": {
            name: r["ratio"] >= TARGET_THROUGHPUT and r["same_rows"]
            for name, r in result["throughput"].items()
        },
        "freshness_p95": result["freshness"]["p95_s"] <= TARGET_P95,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"throughput": {k: v["ratio"] for k, v in result["throughput"].items()},
                      "freshness": result["freshness"], "targets": result["targets"]}, indent=2))  # fmt: skip
    return 0 if all(result["targets"]["throughput"].values()) and result["targets"]["freshness_p95"] else 1


if __name__ == "__main__":
    sys.exit(main())
