"""benchmarks/bench_spark.py's checks without Spark, jars or peers: a peer whose rows or changelog differ from
changelake's fails its check and drops out of the targets, and the result keeps issue 48's shape."""

from __future__ import annotations

import argparse
import copy

import bench_spark as bs
import render_results as render
from spark_peers import change_counts, merge_sql

FP = {"rows": 1000, "sum_order_id": 499500, "sum_qty": 10000, "sum_amount": "50000.00"}
FINGERPRINTS = {"load": FP, "batch_t1": FP, "small": FP, "aggregation_agg1": FP}
RUNS = {
    "load": [3.0, 2.0, 2.5],
    "batch": [1.0, 1.2, 0.9],
    "small": [0.1] * 17 + [0.3, 0.4, 0.5],
    "aggregation": [1.4],
}
META = {"rows": 1000, "rows_after_batch": 1000, "rows_after_small": 1000, "batch": {"records": 100}}
ARGS = argparse.Namespace(small=10, small_runs=20, reps=3)
MACHINE = {"git_commit": "abc1234", "git_worktree_dirty": False}


def contestant(scale: float, **extra) -> dict:
    runs = {w: [x * scale for x in v] for w, v in RUNS.items()}
    return {
        "runs": runs,
        "fingerprints": copy.deepcopy(FINGERPRINTS),
        "changelog": {"inserts": 20, "updates": 70, "update_befores": 70, "deletes": 10},
        "lookup_found": {"rows": 20, "sum_qty": 200},
        "spark": "4.1.4",
        **extra,
    }


def lake() -> dict:
    return contestant(1.0, spark_conf=dict(bs.SPARK_CONF))


def test_a_peer_with_changelakes_rows_counts_and_one_with_other_rows_does_not():
    fast_but_wrong = contestant(0.1)
    fast_but_wrong["fingerprints"]["small"] = {**FP, "sum_amount": "50000.01"}
    peers = {"delta": contestant(2.0), "hudi": fast_but_wrong}
    report = bs.build_report(lake(), peers, META, ARGS, MACHINE)
    assert report["same_rows"] == {"delta": True, "hudi": False}
    failed = [c["check"] for c in report["checks"] if not c["ok"]]
    assert failed == ["hudi: rows after small"]
    # hudi is ten times faster, but its rows differ: the targets compare with delta alone
    batch = next(t for t in report["targets"] if t["workload"] == "batch")
    assert batch["fastest_peer"] == "delta" and batch["value"] == 0.5 and batch["status"] == "pass"


def test_a_peer_that_failed_or_lost_a_change_fails_its_check():
    lost = contestant(1.0)
    lost["changelog"] = {"inserts": 20, "updates": 69, "update_befores": 69, "deletes": 10}
    report = bs.build_report(
        lake(), {"paimon": lost, "iceberg": {"error": "exit 1: boom"}}, META, ARGS, MACHINE
    )
    assert report["same_rows"] == {"paimon": True, "iceberg": False}
    failed = {c["check"] for c in report["checks"] if not c["ok"]}
    assert failed == {"paimon: changelog of the batch", "iceberg ran"}
    # paimon's rows count, so it is compared on the other workloads; its batch lost a change: not on that one
    targets = {t["workload"]: t for t in report["targets"]}
    assert targets["load"]["fastest_peer"] == "paimon" and targets["load"]["value"] == 1.0
    assert targets["batch"]["fastest_peer"] is None and targets["batch"]["status"] == "n/a"
    page = render.render_spark({**report, "when": "now", "command": "x"})
    assert "| batch | 1.00 s | 1.00 s (changelog not readable or incomplete: not counted) | – |" in page


def test_the_result_has_the_issues_shape_and_the_page_shows_it():
    report = bs.build_report(lake(), {"delta": contestant(2.0)}, META, ARGS, MACHINE)
    assert list(report)[:3] == ["workloads", "same_rows", "versions"]
    assert set(report["workloads"]) == {"load", "batch", "small", "aggregation"}
    assert report["workloads"]["load"] == {"changelake": 2.5, "delta": 5.0}
    assert report["workloads"]["small"]["changelake"] == 0.1
    assert report["details"]["changelake"]["small_p90_s"] == 0.31
    assert report["versions"]["changelake"] == "commit abc1234, Spark 4.1.4"
    page = render.render_spark({**report, "when": "now", "command": "x"})
    assert "| batch | 1.00 s | 2.00 s | 0.50× delta (limit 0.5: PASS) |" in page


def test_changelogs_in_every_formats_vocabulary_count_alike():
    hudi = change_counts({"u": 70, "i": 20, "d": 10})  # one row per update, both images in it
    delta = change_counts({"update_preimage": 70, "update_postimage": 70, "insert": 20, "delete": 10})
    paimon = change_counts({"-U": 70, "+U": 70, "+I": 20, "-D": 10})
    assert {k: v for k, v in hudi.items() if k != "update_befores"} == {
        k: v for k, v in delta.items() if k != "update_befores"
    }
    assert delta == paimon == {"inserts": 20, "updates": 70, "update_befores": 70, "deletes": 10}


def test_the_merges_delete_or_sum_as_changelake_does():
    last_row = merge_sql("t1", "batch_in", aggregate=False)
    assert "WHEN MATCHED AND s.op = '-D' THEN DELETE" in last_row and "t.amount = s.amount" in last_row
    agg = merge_sql("agg1", "batch_in", aggregate=True)
    assert "DELETE" not in agg and "t.amount = t.amount + s.amount" in agg and "t.item = s.item" in agg
