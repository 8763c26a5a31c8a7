"""Maintenance after a batch in the background (ChangeLake(background_maintenance=...)): the apply returns with its batch committed and visible while the maintenance runs; the table's next
write waits for it; a failing maintenance is reported and leaves the batch committed. No Spark."""

from __future__ import annotations

import threading

from changelake import ChangeLake
from changelake.engine import compact
from changelake.storage.iceberg import Storage
from tests.helpers import NoSpark
from tests.specs import kv

TABLE = "t.kv"


def lake_of(home, log: list[str]) -> ChangeLake:
    (home / "tables").mkdir(exist_ok=True)
    (home / "tables" / f"{TABLE}.yaml").write_text(kv(TABLE))
    return ChangeLake(
        home=home,
        tables_dir=home / "tables",
        spark=NoSpark(),
        progress=log.append,
        background_maintenance=log.append,
    )


def last_batch(lake) -> int:
    return Storage.state(lake.storage.pk_table(lake.spec(TABLE))).last_batch


def test_the_apply_returns_before_its_maintenance_and_the_next_write_waits_for_it(home, monkeypatch):
    log: list[str] = []
    lake = lake_of(home, log)
    release, entered = threading.Event(), threading.Event()
    real = compact.compact_table
    seen: list[int] = []

    def held(storage, spec, **kw):
        seen.append(Storage.state(kw["table"]).last_batch)
        entered.set()
        assert release.wait(30)
        return real(storage, spec, **kw)

    monkeypatch.setattr(compact, "compact_table", held)
    result = lake.apply(TABLE, [{"op": "+I", "data": {"k": 1, "v": "a"}}], batch_id=1)
    assert entered.wait(30)  # the maintenance runs, held ...
    assert result.status == "applied" and last_batch(lake) == 1  # ... and the batch is committed and visible
    second = threading.Thread(
        target=lambda: lake.apply(TABLE, [{"op": "+U", "data": {"k": 1, "v": "b"}}], batch_id=2)
    )
    second.start()
    second.join(1.0)
    assert second.is_alive() and last_batch(lake) == 1  # the next write waits for the maintenance
    release.set()
    second.join(30)
    lake.wait_for_maintenance(TABLE)
    assert last_batch(lake) == 2 and seen == [1, 2]
    assert any("maintenance after the batch:" in m for m in log)


def test_a_failing_background_maintenance_leaves_the_batch_committed_and_is_reported(home, monkeypatch):
    log: list[str] = []
    lake = lake_of(home, log)

    def broken(*_a, **_kw):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(compact, "compact_table", broken)
    lake.apply(TABLE, [{"op": "+I", "data": {"k": 1, "v": "a"}}], batch_id=1)
    lake.wait_for_maintenance(TABLE)
    assert last_batch(lake) == 1
    assert any("maintenance after the batch failed" in m and "disk on fire" in m for m in log)
    lake.apply(TABLE, [{"op": "+U", "data": {"k": 1, "v": "b"}}], batch_id=2)  # the next batch goes in
    lake.wait_for_maintenance(TABLE)
    assert last_batch(lake) == 2
