"""Two appliers starting on a brand-new catalog (SQLite file or PostgreSQL database) race to create the
catalog's own tables."""

import multiprocessing as mp

import pytest

from changelake.config import load_settings
from changelake.storage.iceberg import Storage

pytestmark = pytest.mark.e2e  # 15 rounds of racing processes, and a PostgreSQL server: not the unit loop


def _open(home, catalog_uri, results):
    try:
        Storage(load_settings(home=home, catalog_uri=catalog_uri)).catalog.list_namespaces()
        results.put("ok")
    except Exception as e:  # reported back to the test
        results.put(f"{type(e).__name__}: {e}")


def test_processes_opening_a_new_catalog_at_once_all_succeed(tmp_path, catalog_uri, request):
    ctx = mp.get_context("fork")
    failures = []
    for i in range(15):  # without the retry, about one start in three failed here (SQLite)
        home = tmp_path / f"home{i}"
        uri = (
            f"sqlite:///{home / 'catalog.db'}"
            if catalog_uri.startswith("sqlite")
            else request.getfixturevalue("postgres").new_database()
        )
        results = ctx.Queue()
        procs = [ctx.Process(target=_open, args=(home, uri, results)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        failures += [r for r in (results.get(timeout=60), results.get(timeout=60)) if r != "ok"]
    assert failures == []
