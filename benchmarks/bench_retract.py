"""The aggregation batch with 10% retractions against the same batch without (issue 36's target: <= 1.3x).

The merge of the apply (:func:`changelake.engine.columnar.merge_records`) on one table's rows and one change
batch of bench_data's shape (70% updates, 20% inserts, 10% deletes, distinct keys), the aggregation table of
bench_apply.py (amount sum, qty max, item listagg):

  plain         the batch on the aggregation table: its deletes are ignored (the engine's default)
  as upserts    the batch with its deletes turned into updates, on the aggregation table: every record adds
  retract       the batch on the same table with ``table.agg.retract``: its deletes (10%) retract -- amount
                subtracts, the default-function columns clear; qty and item set ``ignore-retract``

Only the merge is timed (decode, files and commit are the same work with or without retractions). Every
scenario runs ``--reps`` times in turn, the median is compared; run it under
``flock /tmp/changelake-bench.lock`` on a shared machine.

    .venv/bin/python benchmarks/bench_retract.py --rows 1000000 --batch 200000 --reps 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from bench_apply import ENGINE_OPTIONS, SPEC
from bench_data import UPDATE, change_batch, make_records

from changelake.engine import columnar
from changelake.spec import TableSpec

RETRACT_OPTIONS = {
    **ENGINE_OPTIONS["aggregation"],
    "table.agg.retract": "true",
    "fields.qty.ignore-retract": "true",
    "fields.item.ignore-retract": "true",
}


def spec(options: dict[str, str]) -> TableSpec:
    return TableSpec.from_dict({**SPEC, "options": {**SPEC["options"], **options}})


def with_seq(batch: pa.Table) -> pa.Table:
    """A change batch as the merge takes it: ``_seq``, ``_op`` and the columns."""
    ops = batch.column("op")
    return pa.table(
        {"_seq": pa.array(np.arange(batch.num_rows, dtype=np.int64)), "_op": ops}
        | {n: batch.column(n) for n in batch.column_names if n != "op"}
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    rng = np.random.default_rng(36)
    keys = np.arange(args.rows, dtype=np.int64)
    stored = make_records(np.ones(args.rows, np.int8), keys, rng).drop_columns(["op"])
    batch = with_seq(change_batch(keys, args.rows, args.batch, rng))
    deletes = pc.equal(batch.column("_op"), "-D")
    upserts = batch.set_column(1, "_op", pc.if_else(deletes, "+U", batch.column("_op")))
    assert UPDATE == 0  # bench_data's op codes: +U, +I, -D
    share = pc.sum(deletes.cast(pa.int64())).as_py() / batch.num_rows
    scenarios = {
        "plain": (spec(ENGINE_OPTIONS["aggregation"]), batch),
        "as upserts": (spec(ENGINE_OPTIONS["aggregation"]), upserts),
        "retract": (spec(RETRACT_OPTIONS), batch),
    }
    times: dict[str, list[float]] = {name: [] for name in scenarios}
    for _ in range(args.reps):
        for name, (s, records) in scenarios.items():
            started = time.perf_counter()
            result = columnar.merge_records(s, stored, records)
            times[name].append(time.perf_counter() - started)
            assert result.rows.num_rows >= args.rows
    # The check: the retraction table's amounts are the plain table's less what the deletes retracted.
    plain = columnar.merge_records(scenarios["plain"][0], stored, batch).rows
    retracted = columnar.merge_records(scenarios["retract"][0], stored, batch).rows
    taken = pc.sum(batch.filter(deletes).column("amount")).as_py()
    total = pc.sum(plain.column("amount")).as_py() - taken
    assert pc.sum(retracted.column("amount")).as_py() == total, "retract: wrong amounts"
    median = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"{args.rows:,} stored rows, a {args.batch:,}-record batch, {share:.0%} of it -D; {args.reps} runs each"
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
