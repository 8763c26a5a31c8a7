"""Text for a terminal: ``status`` fits 100 columns whatever its tables hold, and says what needs a look."""

from __future__ import annotations

import datetime as dt
import re

from changelake import terminal


def row(**changes) -> dict:
    base = {
        "table": "shop.orders", "exists": True, "last_batch": 12, "rows": 1_234_567, "snapshots": 5,
        "history_batches": 0, "files": 1_234, "bytes": 5 * 1024**3, "last_maintenance": None,
        "changelog_records": 99_999_999, "pending_batches": 0, "problem": None, "quarantined": 0,
        "redelivered": 3, "deduplicated": 3, "incomplete": None, "writers": {"landing": 12}, "kafka_lag": None,
    }  # fmt: skip
    return {**base, **changes}


def test_status_fits_100_columns_and_spells_out_problems_below():
    problem = "landed file 7.jsonl of shop.orders changed since batch 7 was applied " * 3
    rows = [
        row(),
        row(table="a_rather_long_namespace.and_a_long_table_name", pending_batches=3, quarantined=12_345),
        row(table="web.pageviews", problem=problem, incomplete="batch 13 (no final newline)"),
        row(
            table="web.new",
            exists=False,
            rows=0,
            files=0,
            bytes=0,
            last_batch=0,
            pending_batches=2,
            writers={},
        ),
        row(table="shop.many", writers={"sql": 4, "landing": 9, "api": 2, "lookup": 1}, pending_batches=1),
        row(table="broken", exists=None, problem="broken.yaml: bad type"),
    ]
    lines = terminal.status_view(rows, "/h/.changelake", "found: /h/changelake.yaml", "/h/specs")
    assert max(len(line) for line in lines) <= terminal.STATUS_WIDTH, "\n".join(lines)
    assert lines[0] == "home:   /h/.changelake  (found: /h/changelake.yaml)"
    text = "\n".join(lines)
    assert "landing 12 (+3 pending)" in text and "1,234,567" in text and "5 GiB" in text
    assert "landing 0 (+2 pending)" in text  # landed batches, none applied yet
    assert re.search(r"\nshop\.many +[\d,]+  landing 9 \(\+1 pending\),…", text)  # the rest in --wide
    assert re.search(r"\na_rather_\w*…\w*table_name ", text)  # cut in the middle, both ends kept
    assert "not created" in text and "spec broken" in text and "blocked" in text and "12,345 quar" in text
    assert "web.pageviews: problem: landed file 7.jsonl" in text  # in full, wrapped, after the table
    assert "web.pageviews: waiting for: batch 13 (no final newline)" in text
    assert text.count("changed since batch 7") == 3


def test_status_says_when_there_is_nothing_to_show(tmp_path):
    lines = terminal.status_view([], "/h", "$CHANGELAKE_HOME", str(tmp_path / "none"))
    assert lines[-1] == f"(no table specs in {tmp_path / 'none'}: no such directory)"


def test_cells():
    assert [terminal.size(n) for n in (0, 1023, 1024, 25_254, 5 * 1024**3)] == [
        "0 B", "1023 B", "1 KiB", "24.7 KiB", "5 GiB",
    ]  # fmt: skip
    now = dt.datetime(2026, 1, 2, 12, 0, tzinfo=dt.UTC)
    assert terminal.ago(None) == "-"
    assert terminal.ago("2026-01-02T11:58:30+00:00", now) == "1 min ago"
    assert terminal.ago("2026-01-02T09:00:00Z", now) == "3 h ago"
    assert terminal.ago("2025-12-30T12:00:00", now) == "3 d ago"
    assert terminal.writers_cell(row()) == "landing 12"
    assert terminal.writers_cell(row(writers={"sql": 2, "landing": 5}, pending_batches=3)) == (
        "landing 5 (+3 pending), sql 2"
    )
    assert terminal.writers_cell(row(writers={}, pending_batches=0)) == "-"
    assert terminal.writers_text({"api": 1, "landing": 2}) == "landing 2, api 1"
    assert terminal.notes_cell(row()) == "ok"
    assert terminal.notes_cell(row(kafka_lag=1200, quarantined=3)) == "3 quarantined; Kafka lag 1,200"


def test_tables_cut_the_column_that_may_shrink():
    long = ["namespace.a_table_name_of_40_characters", "y" * 50]
    shrink = [("table", 24), ("notes", 5)]
    lines = terminal.format_table(["table", "notes"], [long], width=40, shrink=shrink, middle="table")
    assert all(len(line) <= 40 for line in lines), lines
    assert lines[2] == "namespace.a…0_characters  yyyyyyyyyyyyy…"  # the name to 24, then the notes
    assert terminal.format_table(["n"], [["5"], ["10"]], right=["n"])[2:] == [" 5", "10"]
