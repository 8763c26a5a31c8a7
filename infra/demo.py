"""`make demo`: land a few sample changelog batches for the demo tables, apply them exactly once, summarise.

Idempotent: every run lands three new batches after the highest landed id (deterministic per id), applies
everything pending, and replays the last batch to show that a replay is a no-op.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from changelake import ChangeLake


def orders_batch(batch_id: int, n: int = 200) -> list[dict]:
    """Changelog records for shop.orders: inserts of new orders, status updates, some cancellations."""
    rng = random.Random(batch_id)
    first_new = (batch_id - 1) * n
    records = []
    for i in range(n):
        kind = rng.random()
        if batch_id == 1 or kind < 0.4:
            order_id, op = first_new + i, "+I"
        elif kind < 0.9:
            order_id, op = rng.randrange(0, first_new), "+U"
        else:
            records.append({"op": "-D", "data": {"order_id": rng.randrange(0, first_new)}})
            continue
        records.append(
            {
                "op": op,
                "data": {
                    "order_id": order_id,
                    "shop_id": rng.randrange(1, 6),
                    "user_id": rng.randrange(1, 400),
                    "item_id": rng.randrange(1, 50),
                    "amount": f"{rng.randrange(100, 50000) / 100:.2f}",
                    "address": rng.choice(["Berlin", "Lisbon", "Oslo", "Kyiv", "Lima"]),
                    "status": "CREATED" if op == "+I" else rng.choice(["PAID", "SHIPPED", "DELIVERED"]),
                    "updated_at": f"2026-11-{1 + batch_id % 28:02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00.000",
                },
            }
        )
    return records


def main() -> int:
    started = time.monotonic()
    lake = ChangeLake()
    s = lake.settings
    print(f"changelake demo\n  home:   {s.home}\n  tables: {s.tables_dir}\n  landing: {s.landing_dir}\n")
    landing = s.landing_dir / "shop.orders"
    landing.mkdir(parents=True, exist_ok=True)
    landed = sorted(int(p.stem) for p in landing.glob("*.jsonl"))
    start = (landed[-1] if landed else 0) + 1
    for batch_id in range(start, start + 3):
        path = landing / f"{batch_id:06d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in orders_batch(batch_id)))
        print(f"landed {path.relative_to(s.home) if path.is_relative_to(s.home) else path}")
    lake.create_all()
    results = lake.apply_pending()
    last = results[-1] if results else None
    if last is not None:
        replay = lake.apply(
            "shop.orders", file=landing / f"{last.batch_id:06d}.jsonl", batch_id=last.batch_id
        )
        print(f"\nreplayed batch {last.batch_id}: {replay.status} (exactly once)")

    print("\nbatches applied this run:")
    for r in results:
        c = r.counts
        print(
            f"  {r.table} batch {r.batch_id}: {c['records']} records -> +{c['inserted']} inserted, "
            f"{c['updated']} updated, {c['deleted']} deleted, {c['ignored']} ignored; "
            f"{r.changelog_records} changelog records (offsets {r.log_start_offset}..{r.log_end_offset - 1})"
        )
    print("\nstatus:")
    for row in lake.status():
        print("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
    print("\nlatest changelog of shop.orders:")
    lake.changelog("shop.orders").orderBy("_log_offset", ascending=False).limit(5).select(
        "_log_offset", "_change_type", "order_id", "status", "amount", "_batch_id"
    ).show(truncate=False)
    print(f"warehouse: {s.warehouse}\ncatalog:   {s.catalog_uri}\ndone in {time.monotonic() - started:.0f}s")
    print("try: .venv/bin/changelake scan shop.orders --limit 5  |  .venv/bin/changelake status")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark_apps"))
    sys.exit(main())
