"""benchmarks/bench_apply.py's repetitions without Spark or peers: a repeated peer's result is the median of
its runs with every run listed, and the page shows a repeated time with its runs."""

from __future__ import annotations

import bench_apply as ba
import render_results as render


def test_a_repeated_peer_is_the_median_of_its_runs_with_each_run_and_the_largest_peak():
    runs = [
        {"write_s": 2.6, "merge_cdf_s": 3.1, "write_peak_rss_mb": 900, "cdf_rows": 850},
        {"write_s": 1.7, "merge_cdf_s": 2.4, "write_peak_rss_mb": 950, "cdf_rows": 850},
        {"write_s": 1.9, "merge_cdf_s": 2.2, "write_peak_rss_mb": 880, "cdf_rows": 850},
    ]
    merged = ba.median_runs(runs, ba.REPEATED_PEER_TIMES["delta"])
    assert merged["write_s"] == 1.9 and merged["merge_cdf_s"] == 2.4
    assert merged["write_runs_s"] == [2.6, 1.7, 1.9] and merged["merge_cdf_runs_s"] == [3.1, 2.4, 2.2]
    assert merged["write_peak_rss_mb"] == 950 and merged["runs"] == 3 and merged["cdf_rows"] == 850
    single = ba.median_runs(runs[:1], ())
    assert single == runs[0]


def test_the_page_lists_the_runs_of_a_repeated_time_and_not_of_a_single_one():
    r = {"initial_load_s": 3.1, "runs_s": {"initial_load": [3.9, 3.1, 3.0]}, "apply_json_s": 2.0}
    assert render.lake_time(r, "initial_load") == "3.10 s (median of 3.90, 3.10, 3.00)"
    assert render.lake_time(r, "apply_json") == "2.00 s"
    peers = {"delta": {"write_s": 1.9, "write_runs_s": [1.9, 1.7, 2.6]}, "duckdb": {"skipped": "no"}}
    assert render.peer_time(peers, "delta", "write_s") == "1.90 s (median of 1.90, 1.70, 2.60)"
    assert render.peer_time(peers, "duckdb", "rewrite_s") == "not run: no"


def test_a_peer_phase_flushes_earlier_writes_before_its_clock_starts(monkeypatch):
    """Every timed phase starts with the files written before it flushed (bench_data.settle), so a peer's
    merge does not pay for its own write's write-back, as changelake's scenarios do not."""
    import bench_peers as bp

    events: list[str] = []
    monkeypatch.setattr(bp, "settle", lambda: events.append("settle"))
    real_clock = bp.time.perf_counter
    monkeypatch.setattr(bp.time, "perf_counter", lambda: events.append("clock") or real_clock())
    seconds, _peak, result = bp.timed_phase(lambda: events.append("phase") or 7)
    assert result == 7 and seconds >= 0
    assert events[:3] == ["settle", "clock", "phase"]
