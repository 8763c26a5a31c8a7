"""Rows written before changelake enforced declared precision (docs/semantics.md §15): a compaction cuts their
other columns, ``changelake repair`` their keys too (moving rows to their key's bucket), refusing keys that
become equal unless told which row stays. The legacy rows are written here with the cut switched off, as an
older changelake wrote them."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import numpy as np
import pytest

from changelake import types
from changelake.errors import ChangelakeError
from tests.helpers import sparkless_lake

SPEC = {
    "name": "s.p",
    "columns": [
        {"name": "k", "type": "TIMESTAMP(0)"},
        {"name": "v", "type": "TIMESTAMP(3)"},
        {"name": "t", "type": "TIME"},
        {"name": "n", "type": "INT"},
    ],
    "primary_key": ["k"],
    "options": {"bucket.num": 4},
}


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


@pytest.fixture
def lake(tmp_path, monkeypatch, request):
    lake = sparkless_lake(tmp_path)
    buckets = getattr(request, "param", 4)
    lake.create_table({**SPEC, "options": {"bucket.num": buckets}})
    with monkeypatch.context() as legacy:  # an older changelake: values kept whole
        legacy.setattr(types, "truncate_nanos", lambda nanos, precision: nanos)
        legacy.setattr(types, "truncate_time_micros", lambda micros, precision: micros)
        legacy.setattr(types, "truncate_ticks", lambda ticks, digits, p: (ticks, np.zeros(len(ticks), bool)))
        rows = [
            {"k": "2024-01-01T00:00:00.1", "v": "2024-01-01T00:00:05.123456", "t": "10:00:00.5", "n": 1},
            {"k": "2024-01-01T00:00:00.9", "v": "2024-01-01T00:00:06.999999", "t": "11:00:00.5", "n": 2},
            {"k": "2024-01-02T00:00:00", "v": None, "t": None, "n": 3},
        ]
        if buckets == 1:  # a bucket file of rows first, so the rows below land in delta files (merge-on-read)
            filler = [
                {"op": "+I", "data": {"k": f"2024-02-{d:02d}T00:00:00", "n": 100 + d}} for d in range(1, 13)
            ]
            lake.apply("s.p", filler)
        for row in rows:
            lake.apply("s.p", [{"op": "+I", "data": row}])
    return lake


def rows(lake) -> list[dict]:
    return sorted(lake.rows_arrow("s.p").to_pylist(), key=lambda r: (r["k"], r["n"]))


def test_the_legacy_rows_hold_more_than_their_precision(lake):
    assert [r["k"] for r in rows(lake)] == [
        at("2024-01-01 00:00:00.1"),
        at("2024-01-01 00:00:00.9"),
        at("2024-01-02"),
    ]
    # A write now is cut: a third key, which the two stored ones never match.
    lake.apply("s.p", [{"op": "+I", "data": {"k": "2024-01-01T00:00:00.5", "n": 4}}])
    assert lake.lookup("s.p", {"k": "2024-01-01T00:00:00.7"}) == [
        {"k": at("2024-01-01 00:00:00"), "v": None, "t": None, "n": 4}
    ]


@pytest.mark.parametrize("lake", [1], indirect=True)  # one bucket: the later batches are deltas to compact
def test_a_compaction_cuts_the_other_columns_and_keeps_every_key(lake):
    (report,) = lake.maintain("s.p", full=True, expiry=False)
    assert report.to_dict()["compacted"][0]["full"] == 1  # the partition was rewritten
    got = [r for r in rows(lake) if r["n"] < 100]
    assert [r["k"] for r in got] == [
        at("2024-01-01 00:00:00.1"),
        at("2024-01-01 00:00:00.9"),
        at("2024-01-02"),
    ]
    assert [r["v"] for r in got] == [at("2024-01-01 00:00:05.123"), at("2024-01-01 00:00:06.999"), None]
    assert [r["t"] for r in got] == ["10:00:00.000000", "11:00:00.000000", None]


def test_repair_refuses_keys_that_become_equal_and_keeps_the_chosen_row(lake):
    with pytest.raises(ChangelakeError, match=r"1 key\(s\) become equal .* --on-collision first\|last"):
        lake.repair("s.p")
    assert len(rows(lake)) == 3  # nothing changed
    (report,) = lake.repair("s.p", on_collision="last")
    assert (report.rows, report.rows_changed, report.keys_changed, report.rows_dropped) == (3, 2, 2, 1)
    assert rows(lake) == [
        {"k": at("2024-01-01 00:00:00"), "v": at("2024-01-01 00:00:06.999"), "t": "11:00:00.000000", "n": 2},
        {"k": at("2024-01-02 00:00:00"), "v": None, "t": None, "n": 3},
    ]
    # Each row is in its key's bucket: a lookup (which opens only that bucket) finds it, and a write updates it.
    assert lake.lookup("s.p", {"k": "2024-01-01T00:00:00.2"})[0]["n"] == 2
    lake.apply("s.p", [{"op": "+U", "data": {"k": "2024-01-01T00:00:00.3", "n": 7}}])
    assert [r["n"] for r in rows(lake)] == [7, 3]
    assert lake.repair("s.p")[0].notes == [
        "every value is at its column's declared precision: nothing to repair"
    ]


def test_repair_first_keeps_the_smallest_stored_key_and_runs_from_the_cli(lake, tmp_path):
    env = {
        "CHANGELAKE_HOME": str(tmp_path),
        "CHANGELAKE_TABLES": str(tmp_path / "tables"),
        "PATH": "/usr/bin",
    }
    done = subprocess.run(
        [sys.executable, "-m", "changelake.cli", "repair", "s.p", "--on-collision", "first", "--json"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    (report,) = json.loads(done.stdout)["tables"]
    assert report["rows_dropped"] == 1
    assert [r["n"] for r in rows(lake)] == [1, 3]
