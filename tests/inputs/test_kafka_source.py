"""Kafka topics as a table's source (docs/inputs.md#kafka-topics), against a real broker (Apache Kafka's own
jars, KRaft, SASL logins, loopback; tests/conftest.py ``kafka_broker``) and records produced by an independent
client (confluent-kafka / librdkafka).

Every test compares the table, and its changelog, with a model that applies each produced record once in its
partition's offset order: a record applied twice shows as an extra ``-U``/``+U`` pair, a lost one as a missing
change.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from changelake.errors import BadInput, BadRecordError
from tests.helpers import sparkless_lake

pytestmark = [pytest.mark.integration]

_TOPICS = iter(range(1, 1_000_000))


def new_topic(broker, partitions: int = 3, **config: str) -> str:
    name = f"t{next(_TOPICS)}-{int(time.time() * 1000) % 100000}"
    broker.create_topic(name, partitions, **config)
    return name


def spec(table: str, topic: str | None, **source: object) -> str:
    """A table of upsert-kafka records from ``topic`` (None: from landed files)."""
    source = {"format": "upsert-kafka", **({"topic": topic} if topic else {}), **source}
    return json.dumps(
        {
            "name": table,
            "columns": [
                {"name": "id", "type": "BIGINT"},
                {"name": "name", "type": "STRING"},
                {"name": "n", "type": "INT"},
            ],
            "primary_key": ["id"],
            "options": {"bucket.num": 2},
            "source": source,
        }
    )


def debezium_spec(table: str, topic: str, **source: str) -> str:
    """A table of Debezium JSON change events (id, name) from ``topic``."""
    return json.dumps(
        {
            "name": table,
            "columns": [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "STRING"}],
            "primary_key": ["id"],
            "source": {"format": "debezium-json", "topic": topic, **source},
        }
    )


@pytest.fixture
def kafka_home(home, kafka_broker, monkeypatch):
    monkeypatch.setenv("CHANGELAKE_KAFKA_CONFIG", str(kafka_broker.properties))
    return home


def upserts(ids, start: int = 0, tombstone_every: int = 0) -> list[tuple]:
    """``(key, value)`` upsert-kafka records: id ``i % ...`` with name and n; every ``tombstone_every``-th a null."""
    out = []
    for n, i in enumerate(ids, start=start):
        key = json.dumps({"id": i})
        if tombstone_every and n % tombstone_every == tombstone_every - 1:
            out.append((key, None))
        else:
            out.append((key, json.dumps({"id": i, "name": f"v{n}", "n": n})))
    return out


def model(produced: list[tuple]) -> tuple[dict, list]:
    """Rows and changelog (change type, id, name) of upsert-kafka records applied once each, in produce order
    (a key's records share a partition, so produce order is their offset order)."""
    rows: dict[int, str] = {}
    log: list[tuple] = []
    for key, value in produced:
        k = json.loads(key)["id"]
        if value is None:
            if k in rows:
                log.append(("-D", k, rows.pop(k)))
            continue
        name = json.loads(value)["name"]
        if k in rows:
            log += [("-U", k, rows[k]), ("+U", k, name)]
        else:
            log.append(("+I", k, name))
        rows[k] = name
    return rows, sorted(log)


def table_of(lake, table: str) -> tuple[dict, list]:
    rows = {r["id"]: r["name"] for r in lake.rows_arrow(table).to_pylist()}
    log = sorted((r["_change_type"], r["id"], r["name"]) for r in lake.changelog_arrow(table).to_pylist())
    return rows, log


def test_upserts_and_tombstones_across_partitions_apply_once_with_their_offsets(kafka_home, kafka_broker):
    topic = new_topic(kafka_broker)
    (kafka_home / "tables" / "k.users.yaml").write_text(spec("k.users", topic))
    lake = sparkless_lake(kafka_home)
    first = upserts([i % 40 for i in range(300)], tombstone_every=11)
    kafka_broker.produce(topic, first)
    (result,) = lake.apply_pending("k.users")
    assert (result.writer, result.writer_seq, result.source["messages"]) == ("kafka", 1, 300)
    assert table_of(lake, "k.users") == model(first)
    assert lake.apply_pending("k.users") == []  # nothing new: no batch
    second = upserts([i % 50 for i in range(200)], start=300, tombstone_every=7)
    kafka_broker.produce(topic, second)
    (result,) = lake.apply_pending("k.users")
    assert result.writer_seq == 2 and table_of(lake, "k.users") == model(first + second)
    # The offsets live in the table's state: every partition's last applied offset, 500 records in all.
    (row,) = lake.status()
    assert row["writers"] == {"kafka": 2} and row["kafka_lag"] == 0
    pk = lake.storage.pk_table(lake.spec("k.users"))
    offsets = lake.storage.state(pk).batch.kafka_offsets
    assert (
        sorted(offsets) == [f"{topic}:{p}" for p in range(3)] and sum(o + 1 for o in offsets.values()) == 500
    )


def test_a_kill_9_anywhere_in_an_apply_then_a_rerun_applies_each_offset_once(
    kafka_home, kafka_broker, cli_env
):
    topic = new_topic(kafka_broker, partitions=2)
    (kafka_home / "tables" / "k.kill.yaml").write_text(spec("k.kill", topic))
    env = {**cli_env, "CHANGELAKE_KAFKA_CONFIG": str(kafka_broker.properties)}
    produced = upserts([i % 25 for i in range(120)], tombstone_every=9)
    kafka_broker.produce(topic, produced[:60])
    for fault in ("after-data-files", "after-pk-commit"):
        crashed = subprocess.run(
            [sys.executable, "-m", "changelake.cli", "apply", "k.kill"],
            env={**env, "CHANGELAKE_FAULT": fault}, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert crashed.returncode == -9, crashed.stderr[-2000:]
        kafka_broker.produce(topic, produced[60:90] if fault == "after-data-files" else produced[90:])
    done = subprocess.run(
        [sys.executable, "-m", "changelake.cli", "apply", "k.kill"], env=env, capture_output=True, text=True, timeout=300
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lake = sparkless_lake(kafka_home)
    assert table_of(lake, "k.kill") == model(produced)
    # The first crash committed nothing (its offsets were read again), the second committed batch 1.
    assert lake.writer_positions("k.kill") == {"kafka": 2}


def test_a_producer_writing_while_the_applies_run_loses_and_doubles_nothing(kafka_home, kafka_broker):
    topic = new_topic(kafka_broker)
    (kafka_home / "tables" / "k.live.yaml").write_text(spec("k.live", topic))
    lake = sparkless_lake(kafka_home)
    produced = upserts([i % 30 for i in range(600)], tombstone_every=13)
    window: dict[str, float] = {}

    def produce() -> None:
        window["start"] = time.monotonic()
        for i in range(0, len(produced), 20):
            kafka_broker.produce(topic, produced[i : i + 20])
            time.sleep(0.02)
        window["end"] = time.monotonic()

    producer = threading.Thread(target=produce)
    producer.start()
    applied = []  # (started, records)
    while "end" not in window or not applied or applied[-1][1]:
        started = time.monotonic()
        results = lake.apply_pending("k.live")
        applied.append((started, sum(r.source["messages"] for r in results)))
    producer.join()
    # Several applies took records while the producer was still writing: the runs overlapped.
    during = [n for at, n in applied if window["start"] <= at < window["end"] and n]
    assert len(during) >= 2, applied
    assert sum(n for _, n in applied) == len(produced)
    assert table_of(lake, "k.live") == model(produced)


def test_partitions_added_to_a_topic_are_read_from_their_beginning(kafka_home, kafka_broker):
    topic = new_topic(kafka_broker, partitions=1)
    (kafka_home / "tables" / "k.grow.yaml").write_text(spec("k.grow", topic))
    lake = sparkless_lake(kafka_home)
    before = upserts(range(10))
    kafka_broker.produce(topic, before)
    lake.apply_pending("k.grow")
    kafka_broker.create_partitions(topic, 3)
    after = upserts(range(10, 40), start=10)
    for partition in (1, 2):
        kafka_broker.produce(topic, after[partition - 1 :: 2], partition=partition)
    (result,) = lake.apply_pending("k.grow")
    assert result.source["messages"] == 30
    assert table_of(lake, "k.grow") == model(before + after)


def test_offsets_deleted_before_they_were_applied_are_reported_not_skipped(kafka_home, kafka_broker):
    topic = new_topic(kafka_broker, partitions=1)
    (kafka_home / "tables" / "k.lost.yaml").write_text(spec("k.lost", topic))
    lake = sparkless_lake(kafka_home)
    kafka_broker.produce(topic, upserts(range(5)))
    lake.apply_pending("k.lost")
    kafka_broker.produce(topic, upserts(range(5, 15), start=5))
    # Retention runs ahead of the table: offsets 5..9 go before any apply read them.
    kafka_broker.delete_records(topic, 0, 10)
    with pytest.raises(BadInput, match=rf"offsets 5\.\.9 of {topic} partition 0 were deleted"):
        lake.apply_pending("k.lost")
    assert sorted(lake.rows_arrow("k.lost").column("id").to_pylist()) == list(range(5))


def test_a_bad_record_names_its_topic_partition_and_offset_or_goes_to_the_dead_letters(
    kafka_home, kafka_broker
):
    topic = new_topic(kafka_broker, partitions=1)
    (kafka_home / "tables" / "k.bad.yaml").write_text(spec("k.bad", topic))
    lake = sparkless_lake(kafka_home)
    records = upserts(range(3))
    records[1] = (records[1][0], '{"id": 1, "name": "x", "n": "not a number"}')
    kafka_broker.produce(topic, records)
    with pytest.raises(BadRecordError, match=rf"kafka:{topic}/0:1 field 'n': expected an integer"):
        lake.apply_pending("k.bad")
    assert lake.writer_positions("k.bad") == {}
    (kafka_home / "tables" / "k.bad.yaml").write_text(spec("k.bad", topic, **{"on-bad-record": "quarantine"}))
    (result,) = lake.apply_pending("k.bad")
    assert result.source["quarantined"] == 1
    (letter,) = lake.dead_letters("k.bad")
    assert (letter["file"], letter["line"], letter["field"]) == (f"kafka:{topic}/0", 1, "n")
    assert sorted(lake.rows_arrow("k.bad").column("id").to_pylist()) == [0, 2]


def test_debezium_values_and_latest_offset_startup(kafka_home, kafka_broker):
    topic = new_topic(kafka_broker, partitions=1)
    (kafka_home / "tables" / "k.cdc.yaml").write_text(
        debezium_spec("k.cdc", topic, **{"scan.startup.mode": "latest-offset"})
    )
    lake = sparkless_lake(kafka_home)

    def change(op: str, before, after) -> tuple:
        return (None, json.dumps({"before": before, "after": after, "op": op}))

    kafka_broker.produce(
        topic, [change("c", None, {"id": 1, "name": "old"})]
    )  # before the table's first read
    assert lake.apply_pending("k.cdc")[0].source["messages"] == 0  # pins the partition's end, reads nothing
    kafka_broker.produce(
        topic,
        [
            change("c", None, {"id": 2, "name": "a"}),
            change("u", {"id": 2, "name": "a"}, {"id": 2, "name": "b"}),
            (None, None),  # Debezium's tombstone after a delete: no message
            change("d", {"id": 2, "name": "b"}, None),
            change("c", None, {"id": 3, "name": "c"}),
        ],
    )
    (result,) = lake.apply_pending("k.cdc")
    assert result.source["messages"] == 4
    assert lake.rows_arrow("k.cdc").to_pylist() == [{"id": 3, "name": "c"}]


def test_the_broker_refuses_a_client_without_the_login(kafka_broker):
    from confluent_kafka.admin import AdminClient

    bootstrap = kafka_broker.config["bootstrap.servers"]
    for config in (
        {"bootstrap.servers": bootstrap},
        {**kafka_broker.config, "sasl.password": "wrong"},
    ):
        with pytest.raises(Exception):  # noqa: B017 - librdkafka's KafkaException: transport or authentication
            AdminClient({**config, "socket.timeout.ms": "3000"}).list_topics(timeout=5)
    assert all(host.startswith("127.0.0.1:") for host in bootstrap.split(","))


@pytest.mark.spark
def test_a_large_batch_is_read_by_spark_tasks_per_partition(lake, kafka_broker, monkeypatch):
    monkeypatch.setenv("CHANGELAKE_KAFKA_CONFIG", str(kafka_broker.properties))
    monkeypatch.setenv("CHANGELAKE_LOCAL_APPLY_RECORDS", "0")  # every batch through Spark tasks
    topic = new_topic(kafka_broker, partitions=3)
    home = Path(lake.settings.tables_dir)
    (home / "k.big.yaml").write_text(spec("k.big", topic))
    produced = upserts([i % 500 for i in range(3000)], tombstone_every=17)
    kafka_broker.produce(topic, produced)
    (result,) = lake.apply_pending("k.big")
    assert result.source["messages"] == 3000
    assert any("task(s)" in m and "decoding" in m for m in lake.messages)  # decoded in Spark tasks
    assert table_of(lake, "k.big") == model(produced)


def test_stream_applies_what_arrives_until_it_is_stopped(kafka_home, kafka_broker, cli_env):
    import signal

    topic = new_topic(kafka_broker, partitions=2)
    (kafka_home / "tables" / "k.stream.yaml").write_text(spec("k.stream", topic))
    env = {**cli_env, "CHANGELAKE_KAFKA_CONFIG": str(kafka_broker.properties)}
    stream = subprocess.Popen(
        [sys.executable, "-m", "changelake.cli", "stream", "k.stream", "--every", "300 ms"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lake = sparkless_lake(kafka_home)
    produced: list[tuple] = []
    try:
        for round_ in range(3):
            records = upserts([i % 20 for i in range(30)], start=30 * round_, tombstone_every=8)
            kafka_broker.produce(topic, records)
            produced += records
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # visible to a lookup without anyone running apply
                if lake.storage.exists(lake.spec("k.stream")) and table_of(lake, "k.stream") == model(
                    produced
                ):
                    break
                time.sleep(0.2)
            assert table_of(lake, "k.stream") == model(produced), round_
    finally:
        stream.send_signal(signal.SIGTERM)
        out, err = stream.communicate(timeout=120)
    assert stream.returncode == 0, err[-2000:]
    assert "[stream] k.stream: stopped" in err
    applied = [line for line in out.splitlines() if " kafka batch " in line]
    assert len(applied) >= 3 and all("applied" in line for line in applied), out


@pytest.mark.unit
def test_producing_waits_while_the_local_queue_is_full():
    """librdkafka refuses a record while its local queue is full (BufferError): the producer serves delivery
    reports until there is room, then produces it, instead of failing a large datagen or benchmark run."""
    from changelake.inputs.kafka import _produce

    class Full:
        def __init__(self):
            self.refusals, self.polls, self.produced = 2, 0, []

        def produce(self, topic, **record):
            if self.refusals:
                self.refusals -= 1
                raise BufferError("Local: Queue full")
            self.produced.append((topic, record))

        def poll(self, timeout):
            self.polls += 1

    producer = Full()
    _produce(producer, "t", value=b"v", partition=0)
    assert producer.produced == [("t", {"value": b"v", "partition": 0})]
    assert producer.polls == 2


def _delivered(
    produced: dict[int, list[tuple]], batch_id: int, topic: str, first: dict[int, int]
) -> list[tuple]:
    """The input rows a batch of upsert-kafka records produced to given partitions must show: per record its
    batch, partition, offset (``first``: each partition's offset before the batch), change and key/name."""
    out = []
    for partition, records in sorted(produced.items()):
        for n, (key, value) in enumerate(records):
            offset = first.get(partition, 0) + n
            name = None if value is None else json.loads(value)["name"]
            op = "-D" if value is None else "+U"
            out.append((batch_id, topic, partition, offset, offset, op, json.loads(key)["id"], name))
    return out


def input_rows(table) -> list[tuple]:
    cols = ("_batch_id", "_topic", "_partition", "_offset", "_line", "_op", "id", "name")
    return [tuple(r[c] for c in cols) for r in table.to_pylist()]


def test_the_input_of_topic_batches_is_read_again_from_the_offsets_each_batch_committed(
    kafka_home, kafka_broker
):
    # The __input view the drift checks recompute aggregates from: for a topic batch it is the records at the
    # offsets the batch's snapshot names, in the batch's arrival order (partition, then offset), tombstones and
    # all -- not the records the topic holds now (the third lot below is produced after the second batch).
    topic = new_topic(kafka_broker)
    (kafka_home / "tables" / "k.input.yaml").write_text(spec("k.input", topic))
    lake = sparkless_lake(kafka_home)
    first = {p: upserts(range(p * 100, p * 100 + 7), tombstone_every=3) for p in range(3)}
    for p, records in first.items():
        kafka_broker.produce(topic, records, partition=p)
    lake.apply_pending("k.input")
    second = {0: upserts([1, 2, 3], start=50), 2: upserts([7], start=60, tombstone_every=1)}
    for p, records in second.items():
        kafka_broker.produce(topic, records, partition=p)
    lake.apply_pending("k.input")
    kafka_broker.produce(topic, upserts([5], start=70), partition=1)  # not applied: not input
    expected = _delivered(first, 1, topic, {}) + _delivered(second, 2, topic, {0: 7, 2: 7})
    assert input_rows(lake.input_arrow("k.input")) == expected


def test_the_input_of_cdc_values_from_a_topic_leaves_out_quarantined_records(kafka_home, kafka_broker):
    topic = new_topic(kafka_broker, partitions=1)
    (kafka_home / "tables" / "k.cdcin.yaml").write_text(
        debezium_spec("k.cdcin", topic, **{"on-bad-record": "quarantine"})
    )
    lake = sparkless_lake(kafka_home)
    kafka_broker.produce(
        topic,
        [
            (None, json.dumps({"before": None, "after": {"id": 1, "name": "a"}, "op": "c"})),
            (None, "{not json"),
            (None, None),  # a tombstone: no message
            (
                None,
                json.dumps({"before": {"id": 1, "name": "a"}, "after": {"id": 1, "name": "b"}, "op": "u"}),
            ),
        ],
    )
    (result,) = lake.apply_pending("k.cdcin")
    assert result.source["quarantined"] == 1
    got = [(r["_line"], r["_op"], r["id"], r["name"]) for r in lake.input_arrow("k.cdcin").to_pylist()]
    assert got == [(0, "+I", 1, "a"), (3, "-U", 1, "a"), (3, "+U", 1, "b")]


def test_the_input_of_a_topic_batch_whose_offsets_retention_deleted_is_an_error_naming_them(
    kafka_home, kafka_broker
):
    from changelake.errors import ChangelakeError

    topic = new_topic(kafka_broker, partitions=1)
    (kafka_home / "tables" / "k.gone.yaml").write_text(spec("k.gone", topic))
    lake = sparkless_lake(kafka_home)
    kafka_broker.produce(topic, upserts(range(5)))
    lake.apply_pending("k.gone")
    kafka_broker.produce(topic, upserts(range(5, 8), start=5))
    lake.apply_pending("k.gone")
    assert lake.input_arrow("k.gone").num_rows == 8
    kafka_broker.delete_records(topic, 0, 3)  # retention, after both batches applied
    with pytest.raises(
        ChangelakeError, match=rf"batch 1's input .* offsets 0\.\.4 of {topic} partition 0.*offsets 0\.\.2"
    ):
        lake.input_arrow("k.gone")


def test_confluent_avro_records_from_a_topic_give_the_table_their_landed_lines_give(
    kafka_home, kafka_broker, monkeypatch
):
    # A topic's Avro keys and values go to the column-wise Avro decoder as read: never through the JSON lines a
    # landed file holds them in (rendering those lines fails here), with the same rows and changelog.
    from changelake.inputs import kafka
    from changelake.inputs.formats import FORMATS, SourceEvent
    from changelake.spec import TableSpec

    topic = new_topic(kafka_broker, partitions=2)
    schemas = str(kafka_home / "schemas")
    avro = {
        "key.format": "avro-confluent",
        "key.avro-confluent.schema-dir": schemas,
        "value.format": "avro-confluent",
        "value.avro-confluent.schema-dir": schemas,
    }
    (kafka_home / "tables" / "k.avro.yaml").write_text(spec("k.avro", topic, **avro))
    (kafka_home / "tables" / "k.avrol.yaml").write_text(spec("k.avrol", None, **avro))
    lake = sparkless_lake(kafka_home)
    events = []
    for i in range(400):
        k = i % 60
        row = {"id": k, "name": f"v{i}", "n": i}
        kind = "delete" if i % 9 == 8 else ("update" if i >= 60 else "insert")
        before, after = (row, None) if kind == "delete" else (None, row)
        events.append(
            SourceEvent(kind, before, after, kafka=(topic, k % 2, i))
        )  # a key's records: one partition
    landed_spec = TableSpec.from_dict(json.loads((kafka_home / "tables" / "k.avrol.yaml").read_text()))
    lines = FORMATS["upsert-kafka"].render(landed_spec, events)
    kafka.produce_lines(kafka_broker.config, topic, lake.spec("k.avro"), lines)
    landing = kafka_home / "landing" / "k.avrol"
    landing.mkdir(parents=True)
    (landing / "1.jsonl").write_text("\n".join(lines) + "\n")
    (landed,) = lake.apply_pending("k.avrol")

    def rendered(*_args):
        raise AssertionError("a topic's Avro records were rendered as JSON lines to be decoded")

    monkeypatch.setattr(kafka, "render_lines", rendered)
    (result,) = lake.apply_pending("k.avro")
    assert result.source["messages"] == landed.source["messages"] == 400
    assert result.counts == landed.counts
    assert table_of(lake, "k.avro") == table_of(lake, "k.avrol")
