"""Render a benchmark result (benchmarks/results/latest.json) as Markdown tables into docs/benchmarks.md.

    .venv/bin/python benchmarks/render_results.py [--results FILE] [--doc FILE]

Only the text between the doc's ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` markers is replaced;
``make bench`` runs this after the benchmark. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def seconds(value: Any) -> str:
    return "–" if value is None else f"{value:.2f} s"


def times(value: Any) -> str:
    return "–" if value is None else f"{value:.2f}×"


def peer_time(peers: dict[str, Any], peer: str, key: str) -> str:
    """A peer's time, or why there is none (skipped, failed)."""
    result = peers.get(peer, {})
    if key in result:
        return seconds(result[key])
    if "skipped" in result or "error" in result:
        return "not run: " + (result.get("skipped") or result["error"]).replace("|", "/")
    return "not run"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render(r: dict[str, Any]) -> str:
    """The Markdown for one result."""
    peers = r.get("peers", {})
    delta, duckdb, iceberg = (peers.get(p, {}) for p in ("delta", "duckdb", "iceberg"))
    batch, rows = r.get("batch_records", 0), r.get("rows", 0)
    changes = r.get("batch_changelog_rows")
    out = [
        f"Run of {r.get('when', '?')} on {r.get('machine', '?')}, produced by:",
        "",
        "```bash",
        r.get("command", ".venv/bin/python benchmarks/bench_apply.py"),
        "```",
        "",
        f"Table: {rows:,} rows, 7 columns, 32 buckets. Batch: {batch:,} records (70% updates, 20% inserts, "
        f"10% deletes, random keys){f', {changes:,} change rows' if changes else ''}.",
        "",
        "### changelake and its peers (changelake / peer: below 1× means changelake is faster)",
        "",
    ]
    out += table(
        ["what", "changelake", "peer", "peer's time", "changelake / peer"],
        [
            [
                "apply the batch: table + changelog",
                seconds(r.get("apply_parquet_s")),
                f"delta-rs ({delta.get('package', 'deltalake')}) MERGE with change data feed",
                peer_time(peers, "delta", "merge_cdf_s"),
                times(r.get("apply_vs_delta_merge_cdf")),
            ],
            [
                "initial load of the table",
                seconds(r.get("initial_load_s")),
                "delta-rs write (feed enabled)",
                peer_time(peers, "delta", "write_s"),
                times(r.get("initial_load_vs_delta_write")),
            ],
            [
                "apply the batch",
                seconds(r.get("apply_parquet_s")),
                f"{duckdb.get('package', 'DuckDB')} latest-row-per-key rewrite of the whole table",
                peer_time(peers, "duckdb", "rewrite_s"),
                times(r.get("apply_vs_duckdb_rewrite")),
            ],
            [
                "apply the batch",
                seconds(r.get("apply_parquet_s")),
                f"{iceberg.get('package', 'pyiceberg')} `Table.upsert` + `delete`",
                peer_time(peers, "iceberg", "upsert_delete_s"),
                times(r.get("apply_vs_iceberg_upsert_delete")),
            ],
            [
                "initial load of the table",
                seconds(r.get("initial_load_s")),
                f"{iceberg.get('package', 'pyiceberg')} `Table.append`",
                peer_time(peers, "iceberg", "append_s"),
                times(r.get("initial_load_vs_iceberg_append")),
            ],
        ],
    )
    for name, result in peers.items():
        for failure in result.get("failed_attempts", []):
            out += ["", f"{name}: an attempt failed before this result: `{failure['error']}`"]
    out += ["", "### changelake scenarios", ""]
    scenario_rows = [
        [
            "warm-up: 10k rows into a throwaway table",
            seconds(r.get("warmup_s")),
            "starts JVM code paths and workers",
        ],
        ["initial load: the table as batch 1 (last-row)", seconds(r.get("initial_load_s")), ""],
        ["initial load of the versioned table", seconds(r.get("initial_load_versioned_s")), ""],
        ["initial load of the aggregation table", seconds(r.get("initial_load_aggregation_s")), ""],
        ["raw Spark copy of the table", seconds(r.get("raw_copy_s")), "the floor for rewriting every bucket"],
        [
            "naive rewrite (union + last row per key, Spark)",
            seconds(r.get("naive_rewrite_s")),
            f"naive / apply {times(r.get('naive_vs_apply'))}",
        ],
        [
            "**apply the batch, Parquet, last-row**",
            f"**{seconds(r.get('apply_parquet_s'))}**",
            f"{r.get('apply_records_per_s', 0):,} records/s; apply / raw copy {times(r.get('apply_vs_raw_copy'))}",
        ],
        [
            "same batch, versioned (30% older versions)",
            seconds(r.get("apply_versioned_s")),
            f"{times(r.get('versioned_vs_last_row'))} last-row",
        ],
        [
            "same batch, aggregation (sum, max, listagg)",
            seconds(r.get("apply_aggregation_s")),
            f"{times(r.get('aggregation_vs_last_row'))} last-row",
        ],
        [
            "a batch of the same shape as changelog JSON",
            seconds(r.get("apply_json_s")),
            f"{r.get('apply_json_records_per_s', 0):,} records/s; {times(r.get('json_vs_parquet'))} Parquet",
        ],
        [
            f"{r.get('small_batch_records', 0):,} updates in one bucket",
            seconds(r.get("apply_one_bucket_s")),
            f"{r.get('small_batch_touched_buckets')} bucket(s) rewritten; "
            f"{100 * (r.get('one_bucket_vs_full_batch') or 0):.1f}% of the full batch",
        ],
    ]
    huge = r.get("huge") or {}
    if huge:
        note = huge.get("error") or f"{huge.get('records_per_s', 0):,} records/s"
        scenario_rows.append([f"huge batch: {huge['records']:,} records", seconds(huge.get("apply_s")), note])
    out += table(["scenario", "time", "note"], scenario_rows)
    out += ["", "### Targets", ""]
    out += table(
        ["target", "this run", "limit", "result"],
        [[t["target"], str(t["value"]), str(t["limit"]), t["status"].upper()] for t in r.get("targets", [])],
    )
    out += ["", "### Peak RSS per scenario (MB)", ""]
    out += [
        "Driver = the benchmark's own Python process (the Spark driver); workers = the JVM's Python "
        "processes (largest single one, and the largest sum sampled at one moment).",
        "",
    ]
    out += table(
        ["scenario", "driver", "JVM", "largest worker", "workers together"],
        [
            [
                name,
                *(
                    str(m.get(k))
                    for k in ("driver_peak_mb", "jvm_peak_mb", "worker_peak_mb", "workers_total_peak_mb")
                ),
            ]
            for name, m in r.get("memory", {}).items()
        ],
    )
    failed = [c for c in r.get("checks", []) if not c["ok"]]
    out += ["", f"Checks: {len(r.get('checks', [])) - len(failed)} of {len(r.get('checks', []))} passed"]
    out += [f"- FAILED {c['check']}: {c['detail']}" for c in failed]
    return "\n".join(out) + "\n"


def replace_between_markers(doc: str, body: str) -> str:
    """``doc`` with everything between the markers replaced by ``body``."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"markers {BEGIN} ... {END} not found (in this order)")
    return doc[: start + len(BEGIN)] + "\n" + body + doc[end:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "latest.json")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = ap.parse_args()
    result = json.loads(args.results.read_text())
    args.doc.write_text(replace_between_markers(args.doc.read_text(), render(result)))
    print(f"rendered {args.results} into {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
