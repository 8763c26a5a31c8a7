"""Inputs end to end (Spark): every format gives the same table and changelog, tombstones, Kafka redelivery
with and without offset dedup on an aggregation table, quarantine, and the demo datagen profiles."""

import collections
import decimal
import json
import shutil

import pytest
import yaml

from changelake.inputs.datagen import Profile, _Source, generate
from changelake.spec import TableSpec, load_specs
from tests.helpers import REPO, changelog_of, rows_of

pytestmark = pytest.mark.integration

ORDERS = yaml.safe_load((REPO / "examples" / "tables" / "shop.orders.yaml").read_text())


def orders_spec(name: str, source: dict) -> dict:
    data = {**ORDERS, "name": f"fmt.{name}", "source": source}
    data["datagen"] = {**ORDERS["datagen"], "records": 40, "keys": 30}
    return data


def add_spec(lake, data: dict) -> TableSpec:
    path = lake.settings.tables_dir / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return TableSpec.from_dict(data)


FORMAT_CASES = {
    "changelog_json": ({"format": "changelog-json"}, {}),
    "changelog_parquet": ({"format": "changelog-parquet"}, {}),
    "upsert_kafka": ({"format": "upsert-kafka", "dedup": "kafka-offsets"}, {}),
    "upsert_kafka_by_offset": ({"format": "upsert-kafka", "ordering": "kafka-offset"}, {}),
    "debezium": ({"format": "debezium-json", "ordering": "source.lsn"}, {"envelope": False}),
    "debezium_envelope": ({"format": "debezium-json"}, {"envelope": True}),
    "canal": ({"format": "canal-json", "database.include": "fmt"}, {}),
    "maxwell": ({"format": "maxwell-json"}, {}),
}


def test_every_format_gives_the_same_table_and_changelog(lake):
    """The same logical changes (datagen's simulated source) in each format -> identical tables/changelogs,
    equal to the simulated source's final rows."""
    results = {}
    for name, (source, profile) in FORMAT_CASES.items():
        data = orders_spec(name, source)
        data["datagen"].update(profile)
        spec = add_spec(lake, data)
        generate(spec, lake.settings.landing_dir, batches=3, seed=7, stream="orders")
        assert [r.status for r in lake.apply_pending(spec.full_name)] == ["applied"] * 3
        rows = rows_of(lake.rows(spec.full_name))
        log = changelog_of(lake, spec.full_name)
        results[name] = (rows, log)
    reference = results["changelog_json"]
    assert len(reference[0]) > 10 and {c[1] for c in reference[1]} == {"+I", "-U", "+U", "-D"}
    for name, got in results.items():
        if name == "upsert_kafka_by_offset":
            # Sorting by (partition, offset) interleaves keys differently; each key's history is the same.
            assert got[0] == reference[0]
            assert per_key(got[1]) == per_key(reference[1])
            continue
        assert got == reference, name
    # Independent check: the source the generator simulated holds exactly these rows.
    plain = TableSpec.from_dict(orders_spec("x", {}))
    source = _Source(plain, Profile.of(plain), 7, stream="orders")
    for b in (1, 2, 3):
        source.batch(b)
    cols = [c["name"] for c in ORDERS["columns"]]
    expected = sorted(tuple(r[c] for c in cols) for r in source.rows.values())
    assert reference[0] == expected


def per_key(log: list[tuple]) -> dict:
    out = collections.defaultdict(list)
    for entry in log:
        out[entry[2]].append(entry[1:])
    return dict(out)


@pytest.mark.parametrize("behavior", ["allow", "ignore"])
def test_upsert_kafka_tombstone_deletes_or_is_ignored(lake, tmp_path, behavior):
    spec = {
        "name": f"k.t_{behavior}",
        "columns": [{"name": "id", "type": "BIGINT"}, {"name": "v", "type": "STRING"}],
        "primary_key": ["id"],
        "options": {"table.delete.behavior": behavior},
        "source": {"format": "upsert-kafka"},
    }
    add_spec(lake, spec)
    first = tmp_path / "1.jsonl"
    first.write_text(
        '{"key": {"id": 1}, "value": {"id": 1, "v": "a"}}\n{"key": {"id": 2}, "value": {"v": "b"}}\n'
    )
    second = tmp_path / "2.jsonl"
    second.write_text('{"key": {"id": 1}, "value": {"v": "a2"}}\n{"key": {"id": 2}, "value": null}\n')
    lake.apply(spec["name"], file=first, batch_id=1)
    result = lake.apply(spec["name"], file=second, batch_id=2)
    rows = rows_of(lake.rows(spec["name"]))
    if behavior == "allow":
        assert rows == [(1, "a2")] and result.counts["deleted"] == 1
        assert [c[1:] for c in changelog_of(lake, spec["name"])][-3:] == [
            ("-U", 1, "a"),
            ("+U", 1, "a2"),
            ("-D", 2, "b"),
        ]
    else:
        assert (
            rows == [(1, "a2"), (2, "b")] and result.counts["ignored"] == 1 and result.counts["deleted"] == 0
        )


STATS = yaml.safe_load((REPO / "examples" / "tables" / "shop.shop_user_stats.yaml").read_text())


def exact_stats(paths, distinct: bool) -> dict:
    """Aggregate the order events directly: once per Kafka offset (distinct) or once per delivery."""
    seen, out = set(), collections.defaultdict(lambda: [0, decimal.Decimal(0), None])
    for path in paths:
        for line in path.read_text().splitlines():
            m = json.loads(line)
            ident = (m["topic"], m["partition"], m["offset"])
            if distinct and ident in seen:
                continue
            seen.add(ident)
            v, acc = m["value"], out[(m["key"]["shop_id"], m["key"]["user_id"])]
            acc[0] += v["num_orders"]
            acc[1] += decimal.Decimal(v["total_amount"])
            acc[2] = max(filter(None, [acc[2], v["last_order_at"]]))
    return {k: (a[0], a[1]) for k, a in out.items()}


def test_redeliveries_change_nothing_with_offset_dedup_and_drift_without(lake):
    tables = {}
    for dedup in ("kafka-offsets", "none"):
        data = {**STATS, "name": f"drift.stats_{dedup.replace('-', '_')}"}
        data["source"] = {**STATS["source"], "dedup": dedup}
        data["datagen"] = {**STATS["datagen"], "records": 60, "redelivery": 0.2}
        spec = add_spec(lake, data)
        generated = generate(spec, lake.settings.landing_dir, batches=3, seed=3, stream="stats")
        results = lake.apply_pending(spec.full_name)
        got = {
            (r["shop_id"], r["user_id"]): (r["num_orders"], r["total_amount"])
            for r in lake.rows(spec.full_name).collect()
        }
        tables[dedup] = (got, [g.path for g in generated], results)
    dedup_rows, paths, dedup_results = tables["kafka-offsets"]
    plain_rows, _, plain_results = tables["none"]
    assert dedup_rows == exact_stats(paths, distinct=True)
    assert plain_rows == exact_stats(paths, distinct=False) != dedup_rows
    redelivered = [r.source["redelivered"] for r in dedup_results]
    assert sum(redelivered) >= 20 and [r.source["deduplicated"] for r in dedup_results] == redelivered
    assert [r.source["redelivered"] for r in plain_results] == redelivered
    assert all(r.source["deduplicated"] == 0 for r in plain_results)
    # The applied offsets travel with each batch: a replay is a no-op and keeps the table exact.
    name = "drift.stats_kafka_offsets"
    assert lake.apply(name, file=paths[-1], batch_id=3, writer="landing").status == "already-applied"
    status = {s["table"]: s for s in lake.status()}[name]
    assert status["redelivered"] == status["deduplicated"] == sum(redelivered)


def test_quarantine_commits_the_good_records_and_keeps_exactly_the_bad_lines(lake, tmp_path):
    spec = {
        "name": "q.t",
        "columns": [{"name": "id", "type": "BIGINT"}, {"name": "amount", "type": "DECIMAL(6,2)"}],
        "primary_key": ["id"],
        "source": {"format": "debezium-json", "on-bad-record": "quarantine"},
    }
    add_spec(lake, spec)
    good = [json.dumps({"op": "c", "after": {"id": i, "amount": f"{i}.5"}}) for i in range(1, 6)]
    bad = [
        '{"op": "c", "after": {"id": 7, "amount": "12345.67"}}',  # does not fit DECIMAL(6,2)
        '{"op": "q", "after": {"id": 8}}',
        '{"op": "c", "after": ',
    ]
    lines = [good[0], bad[0], good[1], good[2], bad[1], good[3], bad[2], good[4]]
    path = tmp_path / "1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = lake.apply("q.t", file=path, batch_id=1)
    assert sorted(r[0] for r in rows_of(lake.rows("q.t"))) == [1, 2, 3, 4, 5]
    assert result.source["quarantined"] == 3 and result.counts["inserted"] == 5
    letters = lake.dead_letters("q.t")
    assert [(d["line"], d["field"], d["raw"]) for d in letters] == [
        (2, "amount", bad[0]),
        (5, "op", bad[1]),
        (7, None, bad[2]),
    ]
    assert all(d["file"] == str(path) and d["batch_id"] == 1 and d["reason"] for d in letters)
    assert {s["table"]: s for s in lake.status()}["q.t"]["quarantined"] == 3
    # Replaying the batch is a no-op: the dead letters are not duplicated.
    assert lake.apply("q.t", file=path, batch_id=1).status == "already-applied"
    assert len(lake.dead_letters("q.t")) == 3


def test_datagen_is_deterministic_and_continues_after_the_last_landed_batch(home, tmp_path):
    specs = load_specs(REPO / "examples" / "tables")
    assert set(specs) == {
        "shop.orders", "shop.shop_user_stats", "shop.customers", "web.user_profiles", "web.pageviews",
        "web.uid_mapping", "shop.shop_revenue",
    }  # fmt: skip
    for spec in specs.values():
        a = generate(spec, tmp_path / "a", batches=3)
        b = generate(spec, tmp_path / "b", batches=2)
        b += generate(spec, tmp_path / "b", batches=1)
        assert [g.batch_id for g in a] == [g.batch_id for g in b] == [1, 2, 3]
        for x, y in zip(a, b, strict=True):
            assert x.path.read_bytes() == y.path.read_bytes(), spec.full_name
    shutil.rmtree(tmp_path / "b")
    a = generate(specs["shop.orders"], tmp_path / "c", batches=1)
    other = generate(specs["shop.orders"], tmp_path / "b", batches=1, seed=1)
    assert other[0].path.read_bytes() != a[0].path.read_bytes()  # a different seed, different data
    with pytest.raises(Exception, match="unknown datagen setting 'recrods'"):
        Profile.of(specs["shop.orders"], recrods=3)


def test_demo_tables_apply_cleanly(lake):
    """Every demo spec with its datagen profile applies with no quarantined records, and each engine shows."""
    for path in sorted((REPO / "examples" / "tables").glob("*.yaml")):
        shutil.copy(path, lake.settings.tables_dir / path.name)
    for spec in lake.specs().values():
        generate(spec, lake.settings.landing_dir, batches=2, records=30)
    results = lake.apply_pending()
    assert len(results) == 14 and all(r.source["quarantined"] == 0 for r in results)
    by_table = {r.table: r for r in results}
    assert by_table["web.user_profiles"].counts["ignored"] > 0  # stale versions ignored by `versioned`
    assert by_table["web.pageviews"].counts["ignored"] > 0  # redelivered events collapse under first_row
    assert by_table["shop.shop_user_stats"].source["deduplicated"] > 0
    revenue = by_table["shop.shop_revenue"].counts  # refunds and corrections retract (table.agg.retract)
    assert revenue["dropped_update_before"] == revenue["deleted"] == 0 and revenue["updated"] > 0
    customers = {r["customer_id"]: r for r in lake.rows("shop.customers").collect()}
    assert any(r["name"] and r["tier"] for r in customers.values())  # both streams merged into one row
    uids = [r["uid"] for r in lake.rows("web.uid_mapping").collect()]
    assert len(uids) == len(set(uids)) and None not in uids
