"""The changelog roll-forward from tables in hand (changelake.storage.rollforward.roll_forward_tables): an apply
commits its changelog from the PK table as it committed it and the changelog table as its state check read
it, without loading them again; a changelog table in hand that another writer has committed since loses the
commit and the roll-forward loads both again, so a batch's changelog is committed exactly once. No Spark."""

from __future__ import annotations

from changelake.storage.iceberg import Storage
from changelake.storage.rollforward import roll_forward_tables
from tests.helpers import sparkless_lake
from tests.specs import kv

TABLE = "t.kv"


def changelog_batches(lake, spec) -> list[int]:
    log = lake.storage.changelog_table(spec)
    return sorted(log.scan().to_arrow()["_batch_id"].to_pylist())


def test_a_stale_changelog_table_in_hand_is_loaded_again_and_no_batch_is_logged_twice(home):
    (home / "tables" / f"{TABLE}.yaml").write_text(kv(TABLE))
    lake = sparkless_lake(home)
    lake.apply(TABLE, [{"op": "+I", "data": {"k": 1, "v": "a"}}], batch_id=1)
    spec = lake.spec(TABLE)
    stale_log = lake.storage.changelog_table(spec)  # holds batch 1 only
    lake.apply(TABLE, [{"op": "+U", "data": {"k": 1, "v": "b"}}], batch_id=2)  # its changelog committed
    assert changelog_batches(lake, spec) == [1, 2, 2]  # -U and +U of batch 2
    pk, log = roll_forward_tables(lake.storage, spec, in_hand=(lake.storage.pk_table(spec), stale_log))
    assert changelog_batches(lake, spec) == [1, 2, 2]  # batch 2 was not appended again from the stale table
    assert (
        Storage.changelog_state(log).batch_id == 2
    )  # the changelog table as loaded again, not the stale one
    assert log.metadata_location == lake.storage.changelog_table(spec).metadata_location
    assert Storage.state(pk).last_batch == 2


def test_an_apply_reads_the_catalog_twice_before_its_commit_and_not_after_it(home):
    """After apply()'s spec check (the table and its changelog table), the batch's state check loads its two
    tables; its plan, its two commits and its changelog roll-forward take them in hand."""
    from sqlalchemy import event

    (home / "tables" / f"{TABLE}.yaml").write_text(kv(TABLE, **{"write-only": "true"}))
    lake = sparkless_lake(home)
    lake.apply(TABLE, [{"op": "+I", "data": {"k": 1, "v": "a"}}], batch_id=1)
    spec = lake.spec(TABLE)
    loads: list[str] = []

    def row_read(_conn, _cursor, sql, params, *_):
        if sql.lstrip().upper().startswith("SELECT") and "iceberg_tables" in sql:
            loads.append(next((p for p in params if p in ("kv", "kv__changelog")), "?"))

    event.listen(lake.storage.catalog.engine, "before_cursor_execute", row_read)
    lake.apply(TABLE, [{"op": "+U", "data": {"k": 1, "v": "b"}}], batch_id=2)
    assert loads == ["kv", "kv__changelog"] * 2, loads
    assert changelog_batches(lake, spec) == [1, 2, 2]
