"""Issue 42, "nothing left behind": what applies and maintenance leave under $CHANGELAKE_HOME stays bounded.

Staged API records go when their call returns, and the directories of apply attempts that expiry, compaction
or the orphan sweep emptied go with their files, however recently they were emptied. No Spark.
"""

from __future__ import annotations

import os
import time

from tests.helpers import sparkless_lake
from tests.specs import kv

TABLE = "t.kv"


def empty_dirs(root) -> list[str]:
    return [d for d, dirs, files in os.walk(root) if not dirs and not files]


def test_applies_and_maintenance_leave_no_files_or_directories_behind(home):
    (home / "tables" / f"{TABLE}.yaml").write_text(
        kv(
            TABLE,
            **{
                "snapshot.num-retained.min": 2,
                "snapshot.num-retained.max": 2,
                "snapshot.time-retained": "1s",
            },
        )
    )
    lake = sparkless_lake(home)
    for n in range(1, 31):
        lake.apply(TABLE, [{"op": "+U", "data": {"k": n % 7, "v": f"v{n}"}}], batch_id=n)
    assert not any(p.is_file() for p in (home / "staging").rglob("*"))
    time.sleep(1.1)
    lake.maintain(TABLE, full=True, orphans_older_than_s=1.0)
    leftover = [d for d in empty_dirs(home / "warehouse") if "batch-" in d]
    assert leftover == [], leftover
    # What is left is what the two retained snapshots and the metadata name: it does not grow with the batches.
    files = sum(len(f) for _, _, f in os.walk(home / "warehouse"))
    assert files < 60, files
    assert sorted(r["k"] for r in lake.rows_arrow(TABLE).to_pylist()) == list(range(7))
