"""The aggregation batch with 10% retractions against the same batch without (issue 36's target: <= 1.3x).

One table's rows and one change batch of bench_data's shape (70% updates, 20% inserts, 10% deletes, distinct
keys), the aggregation table of bench_apply.py (amount sum, qty max, item listagg):

  plain         the batch on the aggregation table: its deletes are ignored (the engine's default)
  as upserts    the batch with its deletes turned into updates, on the aggregation table: every record adds
  retract       the batch on the same table with ``table.agg.retract``: its deletes (10%) retract -- amount
                subtracts, the default-function columns clear; qty and item set ``ignore-retract``

By default only the merge is timed (:func:`changelake.engine.columnar.merge_records`). With ``--apply`` the
whole apply is timed instead, through the public API (``ChangeLake.apply`` of the batch as a Parquet file:
decode, merge, data, delete and changelog files, commit), in this process (the local-apply limits raised: no
Spark job), each run on a fresh table loaded with the rows as batch 1. Both check that the retraction table's
amounts are the plain table's less what the deletes took back. Every scenario runs once untimed, then ``--reps``
times in turn, and the medians are compared; run it under ``flock /tmp/changelake-bench.lock`` on a shared machine.

    .venv/bin/python benchmarks/bench_retract.py --rows 1000000 --batch 200000 --reps 5
    .venv/bin/python benchmarks/bench_retract.py --apply --rows 1000000 --batch 200000 --reps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# --apply: every apply in this process (read when changelake.engine.apply is imported).
for _name in (
    "CHANGELAKE_LOCAL_APPLY_RECORDS",
    "CHANGELAKE_LOCAL_APPLY_BYTES",
    "CHANGELAKE_LOCAL_READ_BYTES",
):
    os.environ.setdefault(_name, str(1 << 40))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from bench_apply import ENGINE_OPTIONS, SPEC  # noqa: E402
from bench_data import INSERT, change_batch, make_records  # noqa: E402

from changelake import ChangeLake  # noqa: E402
from changelake.engine import columnar  # noqa: E402
from changelake.spec import TableSpec  # noqa: E402

RETRACT_OPTIONS = {
    **ENGINE_OPTIONS["aggregation"],
    "table.agg.retract": "true",
    "fields.qty.ignore-retract": "true",
    "fields.item.ignore-retract": "true",
}
OPTIONS = {"plain": ENGINE_OPTIONS["aggregation"], "as upserts": ENGINE_OPTIONS["aggregation"]}


def spec(options: dict[str, str]) -> TableSpec:
    return TableSpec.from_dict({**SPEC, "options": {**SPEC["options"], **options}})


def with_seq(batch: pa.Table) -> pa.Table:
    """A change batch as the merge takes it: ``_seq``, ``_op`` and the columns."""
    columns = {n: batch.column(n) for n in batch.column_names if n != "op"}
    return pa.table(
        {"_seq": pa.array(np.arange(batch.num_rows, dtype=np.int64)), "_op": batch.column("op")} | columns
    )


def timed_merges(batches: dict[str, pa.Table], stored: pa.Table, reps: int) -> dict[str, list[float]]:
    """Seconds of each scenario's merge, ``reps`` times in turn; checks the retraction table's amounts."""
    specs = {name: spec(OPTIONS.get(name, RETRACT_OPTIONS)) for name in batches}
    times: dict[str, list[float]] = {name: [] for name in batches}
    amounts = {}
    for rep in range(reps + 1):  # the first round warms up (imports, allocator): not timed
        for name, records in batches.items():
            started = time.perf_counter()
            result = columnar.merge_records(specs[name], stored, with_seq(records))
            if rep:
                times[name].append(time.perf_counter() - started)
            amounts[name] = pc.sum(result.rows.column("amount")).as_py()
    check(amounts, batches["retract"])
    return times


def timed_applies(batches: dict[str, pa.Table], stored: pa.Table, reps: int) -> dict[str, list[float]]:
    """Seconds of each scenario's batch through ``ChangeLake.apply``, ``reps`` times in turn, each on a fresh
    table holding ``stored`` (applied as batch 1); checks the retraction table's amounts."""
    times: dict[str, list[float]] = {name: [] for name in batches}
    amounts = {}
    with tempfile.TemporaryDirectory(prefix="bench-retract-") as tmp:
        home = Path(tmp)
        (home / "tables").mkdir()
        lake = ChangeLake(home=home, tables_dir=home / "tables", progress=lambda m: None)
        base = home / "base.parquet"
        pq.write_table(stored, base)
        files = {}
        for name, records in batches.items():
            files[name] = home / f"{name.replace(' ', '_')}.parquet"
            pq.write_table(records, files[name])
        for rep in range(reps + 1):  # the first round warms up (imports, first files): not timed
            for name in batches:
                table = f"bench.{name.replace(' ', '_')}_{rep}"
                options = OPTIONS.get(name, RETRACT_OPTIONS)
                lake.create_table({**SPEC, "name": table, "options": {**SPEC["options"], **options}})
                lake.apply(table, file=base, batch_id=1)
                started = time.perf_counter()
                result = lake.apply(table, file=files[name], batch_id=2)
                if rep:
                    times[name].append(time.perf_counter() - started)
                assert result.status == "applied", result
                amounts[name] = pc.sum(lake.rows_arrow(table).column("amount")).as_py()
                lake.drop_table(table)
    check(amounts, batches["retract"])
    return times


def check(amounts: dict[str, object], batch: pa.Table) -> None:
    """The retraction table's amounts are the plain table's less what the batch's deletes took back."""
    taken = pc.sum(batch.filter(pc.equal(batch.column("op"), "-D")).column("amount")).as_py()
    assert amounts["retract"] == amounts["plain"] - taken, f"retract: wrong amounts {amounts}, taken {taken}"


def report(args: argparse.Namespace, share: float, times: dict[str, list[float]], what: str) -> None:
    median = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"{what}: {args.rows:,} stored rows, a {args.batch:,}-record batch, {share:.0%} of it -D; "
        f"{args.reps} runs each"
    )
    for name, t in times.items():
        print(f"  {name:<11} median {median[name]:.3f} s   runs {' '.join(f'{x:.3f}' for x in t)}")
    for base in ("plain", "as upserts"):
        ratio = median["retract"] / median[base]
        fastest = min(times["retract"]) / min(times[base])
        verdict = "met" if ratio <= 1.3 else "MISSED"
        print(
            f"  retract / {base:<10} {ratio:.2f}x median, {fastest:.2f}x fastest  (target <= 1.3x: {verdict})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--apply", action="store_true", help="time the whole apply, not only the merge")
    args = parser.parse_args()

    rng = np.random.default_rng(36)
    keys = np.arange(args.rows, dtype=np.int64)
    stored = make_records(np.full(args.rows, INSERT, np.int8), keys, rng)  # op +I: batch 1 of --apply
    batch = change_batch(keys, args.rows, args.batch, rng)
    deletes = pc.equal(batch.column("op"), "-D")
    upserts = batch.set_column(0, "op", pc.if_else(deletes, "+U", batch.column("op")))
    share = pc.sum(deletes.cast(pa.int64())).as_py() / batch.num_rows
    batches = {"plain": batch, "as upserts": upserts, "retract": batch}
    if args.apply:
        report(args, share, timed_applies(batches, stored, args.reps), "whole apply (ChangeLake.apply)")
    else:
        rows = stored.drop_columns(["op"])
        report(args, share, timed_merges(batches, rows, args.reps), "merge only (columnar.merge_records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
