"""The driver never holds a batch: its peak RSS stays flat while the batch grows far beyond the headroom.

The apply runs in a child process (its own driver, its own JVM). After a small batch has warmed every code
path, the driver's data segment is capped (RLIMIT_DATA: Python and Arrow allocations, not the JVM, which is
another process) at its current size plus a headroom much smaller than the next batch decoded in Python
would need. The large batch must apply under that cap, and the driver's peak RSS may grow only a little.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEADROOM_MB = 48
LARGE = 300_000  # records; as Python objects on the driver this batch alone would need several hundred MB

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    from changelake import ChangeLake

    home, large, headroom = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    lake = ChangeLake(home=home, tables_dir=home / "tables", progress=lambda m: None)
    lake.create_table({
        "name": "mem.t",
        "columns": [{"name": "k", "type": "BIGINT"}, {"name": "s", "type": "STRING"},
                    {"name": "d", "type": "DECIMAL(12,2)"}],
        "primary_key": ["k"],
        "options": {"bucket.num": 4},
    })

    def land(batch_id, n, offset):
        path = home / f"{batch_id}.jsonl"
        with open(path, "w") as f:
            for i in range(n):
                row = {"k": offset + i, "s": f"value-{i:08d}-" + "x" * 120, "d": f"{i % 9999}.25"}
                f.write(json.dumps({"op": "+I", "data": row}) + "\\n")
        return path

    lake.apply("mem.t", file=land(1, 2_000, 0), batch_id=1)
    big = land(2, large, 10_000_000)

    def status(name):
        for line in open("/proc/self/status"):
            if line.startswith(name + ":"):
                return int(line.split()[1]) // 1024  # MB
        raise AssertionError(name)

    cap = (status("VmData") + headroom) << 20
    resource.setrlimit(resource.RLIMIT_DATA, (cap, resource.RLIM_INFINITY))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    result = lake.apply("mem.t", file=big, batch_id=2)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps({"before_mb": before, "after_mb": after, "file_mb": big.stat().st_size >> 20,
                      "inserted": result.counts["inserted"], "rows": lake.rows("mem.t").count()}))
    """
)


def test_a_batch_far_larger_than_the_drivers_headroom_applies(home):
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), str(LARGE), str(HEADROOM_MB)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["inserted"] == LARGE and report["rows"] == LARGE + 2_000
    assert report["file_mb"] > HEADROOM_MB, report  # the landed batch alone exceeds what the driver may add
    assert report["after_mb"] - report["before_mb"] < HEADROOM_MB, report
