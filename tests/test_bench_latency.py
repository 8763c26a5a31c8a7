"""benchmarks/bench_latency.py: its output checks catch a wrong answer, and a run on a tiny table writes
the report the lead reads (figures, targets, machine, load average)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import subprocess
import sys
from pathlib import Path

import bench_latency as bl
import pyarrow as pa
import pytest

from tests.helpers import REPO

CLI = Path(sys.executable).with_name("changelake")


def _table() -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array([7, 9], pa.int64()),
            "amount": pa.array([decimal.Decimal("1.50"), decimal.Decimal("20.00")], pa.decimal128(12, 2)),
            "updated_at": pa.array(
                [dt.datetime(2026, 1, 2, 3, 4, 5, 6), dt.datetime(2026, 1, 3)], pa.timestamp("us")
            ),
        }
    )


# What `changelake scan --format jsonl` prints for _table() (decimals as strings, ISO-8601 times).
PRINTED = (
    '{"order_id": 7, "amount": "1.50", "updated_at": "2026-01-02T03:04:05.000006"}\n'
    '{"order_id": 9, "amount": "20.00", "updated_at": "2026-01-03T00:00:00"}\n'
)


def test_rows_check_accepts_the_printed_rows_and_refuses_wrong_ones():
    expected = bl.as_rows(_table())
    assert bl.rows_check(expected)(PRINTED) is None
    wrong = [dict(expected[0], amount="1.51"), expected[1]]
    assert "row 0" in bl.rows_check(wrong)(PRINTED)
    assert "1 row(s), expected 2" in bl.rows_check(expected)(PRINTED.splitlines()[0])
    assert bl.rows_check([])(PRINTED) is not None


def test_status_and_apply_checks_refuse_wrong_figures():
    printed = json.dumps({"table": "bench.orders", "exists": True, "last_batch": 2, "rows": 10})
    assert bl.status_check({"bench.orders": {"last_batch": 2, "rows": 10}})(printed) is None
    assert "rows 10, expected 11" in bl.status_check({"bench.orders": {"rows": 11}})(printed)
    assert "no status line" in bl.status_check({"bench.other": {"rows": 10}})(printed)

    applied = (
        "1 batch(es) applied, 0 already applied\n"
        "  bench.orders landing batch 3 (table batch 3): applied; inserted 20, updated 70, deleted 10, ignored 0; changelog 170 record(s)\n"
    )
    assert bl.apply_check(3, 20, 70, 10)(applied) is None
    assert "expected (3, 20, 70, 11)" in bl.apply_check(3, 20, 70, 11)(applied)
    assert "expected one applied batch" in bl.apply_check(3, 20, 70, 10)(
        "0 batch(es) applied, 1 already applied\n"
    )


def test_apply_phases_split_the_wall_time_by_the_apply_progress_lines():
    progress = [
        "[bench.orders] batch 5: decoding 7,101 bytes in 1 task(s)",
        "[bench.orders] batch 5: 100 records (+I 20, -U 0, +U 70, -D 10) from 100 messages decoded in 0.7s",
        "[bench.orders] batch 5: merged 30 of 32 bucket(s) per partition (4,689,073 rows now in them, 170 "
        "changelog records) in 4.7s",
        "[bench.orders] batch 5 committed (snapshot 5013930354482207307) in 5.7s: inserted 20, updated 70",
    ]
    phases = bl.apply_phases(progress, 7.5)
    assert phases == {
        "decode_s": 0.7,
        "merge_s": 4.7,
        "batch_s": 5.7,
        "rest_of_batch_s": 0.3,
        "outside_batch_s": 1.8,
    }
    assert bl.apply_phases(progress[:1], 7.5)["outside_batch_s"] is None


@pytest.mark.slow
def test_tiny_run_writes_the_report_and_a_wrong_expected_row_fails(tmp_path):
    home, out = tmp_path / "home", tmp_path / "latency.json"
    args = ["--rows", "2000", "--batch", "200", "--reps", "1", "--no-warm", "--no-cold"]
    args += ["--home", str(home), "--out", str(out), "--cli", str(CLI)]
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_latency.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())

    assert report["machine"]["cores"] >= 1
    assert len(report["load_average"]["start"]) == 3 and len(report["load_average"]["end"]) == 3
    assert report["table"]["rows"] == 2000 and report["table"]["last_batch"] == 2
    # batch 2 of 200 records: 140 updates, 40 inserts, 20 deletes
    assert report["table"]["rows_now"] == 2000 + 40 - 20
    for key in bl.READ_LABELS:
        m = report["reads"][key]
        assert m["ok"], m["failures"]
        assert 0 < m["median_s"] <= m["max_s"]
        assert m["runs"] and all(r["seconds"] > 0 for r in m["runs"])
    assert "bucket key" in report["reads"]["lookup_prefix"]
    targets = {t["key"]: t for t in report["targets"]}
    assert set(targets) == {key for key, *_ in bl.TARGETS} | {"apply_warm_first_vs_later"}
    assert targets["apply_warm_first_vs_later"]["status"] == "n/a"  # no warm applies in this run
    for key in ("lookup", "scan_limit", "status"):
        assert targets[key]["status"] in ("pass", "fail")
        assert targets[key]["median_s"] == report["reads"][key]["median_s"]
    assert targets["apply_warm_big"]["status"] == "n/a" and report["apply"] == {}
    assert report["checks"] and all(c["ok"] for c in report["checks"])

    # The same measurement with a wrong expected row fails; with the pyarrow read's row it passes.
    truth = bl.Truth(home, bl.TABLE)
    key = report["table"]["present_keys"][0]
    right = bl.key_rows(truth.rows(), key)
    assert len(right) == 1
    wrong = [dict(right[0], qty=right[0]["qty"] + 1)]
    args = ["lookup", bl.TABLE, f"order_id={key}", "--format", "jsonl"]
    env = bl.clean_env(home)
    bad = bl.measure("lookup", [bl.Case(args, bl.rows_check(wrong))], CLI, env, quiet=True)
    assert not bad["ok"] and "expected" in bad["failures"][0]["problem"]
    good = bl.measure("lookup", [bl.Case(args, bl.rows_check(right))], CLI, env, quiet=True)
    assert good["ok"], good["failures"]
