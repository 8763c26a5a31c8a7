"""Crash (kill -9) at each stage of an apply, then re-run: exactly one application. Racing appliers too.

These run the real CLI in subprocesses (a JVM each), so they are the slowest tests of the suite. Each runs
against a SQLite and a PostgreSQL catalog (``catalog_uri``, see conftest.py).
"""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import land_batches
from tests.specs import kv

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPEC = kv()


def run_cli(env, *args, fault=None):
    env = dict(env, **({"CHANGELAKE_FAULT": fault} if fault else {}))
    return subprocess.run(
        [sys.executable, "-m", "changelake.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


def read_state(home, catalog_uri):
    """Rows and each key's changes, read with pyiceberg alone (no Spark): what a consumer would see.

    Checks on the way that every bucket's changelog offsets are gapless from 0 and grow with the batch id
    (the log is per bucket), so a batch logged twice or half shows up as a gap or a repeat."""
    from changelake.config import load_settings
    from changelake.storage.iceberg import Storage

    storage = Storage(load_settings(home=home, tables_dir=home / "tables", catalog_uri=catalog_uri))
    rows = storage.catalog.load_table("t.kv").scan().to_arrow()
    log = storage.catalog.load_table("t.kv__changelog").scan().to_arrow()
    entries = sorted(
        zip(
            *(
                log.column(c).to_pylist()
                for c in ("_batch_id", "_bucket", "_log_offset", "_change_type", "k")
            ),
            strict=True,
        )
    )
    offsets: dict[int, list[int]] = {}
    changes: dict[int, list[tuple[str, int]]] = {}
    for batch_id, bucket, offset, change_type, k in entries:
        offsets.setdefault(bucket, []).append(offset)
        changes.setdefault(k, []).append((change_type, batch_id))
    assert all(o == list(range(len(o))) for o in offsets.values()), offsets
    return sorted(zip(rows.column("k").to_pylist(), rows.column("v").to_pylist(), strict=True)), changes


BATCHES = {
    1: [{"op": "+I", "data": {"k": 1, "v": "a"}}, {"op": "+I", "data": {"k": 2, "v": "b"}}],
    2: [{"op": "+U", "data": {"k": 1, "v": "a2"}}, {"op": "-D", "data": {"k": 2}}],
}
EXPECTED = (
    [(1, "a2")],
    {1: [("+I", 1), ("-U", 2), ("+U", 2)], 2: [("+I", 1), ("-D", 2)]},
)


@pytest.mark.parametrize("fault", ["after-data-files", "after-pk-commit", "before-changelog-commit"])
def test_kill_9_at_each_stage_then_rerun_converges_to_one_application(
    lake, home, cli_env, catalog_uri, fault
):
    (home / "tables" / "t.kv.yaml").write_text(SPEC)
    land_batches(home, "t.kv", BATCHES)
    crashed = run_cli(cli_env, "apply", "t.kv", fault=fault)  # a real process, killed with SIGKILL mid-apply
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    # Batch 1 is all-or-nothing: before the PK commit nothing is visible; after it, the rows are, and the
    # changelog (committed second) is still empty until a re-run rolls it forward.
    pk_committed = fault != "after-data-files"
    assert read_state(home, catalog_uri) == ([(1, "a"), (2, "b")] if pk_committed else [], {})
    # Recovery runs in this process's warm Spark; the protocol is the same as the CLI's.
    lake.apply_pending("t.kv")
    assert read_state(home, catalog_uri) == EXPECTED
    (replay,) = lake.apply_pending("t.kv", from_batch=2)  # landed batch 2 again: its writer's no-op
    assert replay.status == "already-applied"
    assert read_state(home, catalog_uri) == EXPECTED


# The CLI with one test hook: a process's first PK commit waits until both racers are at theirs, so they
# really contend for the same batch (without it one JVM could start late and find everything applied).
RACER = """
import os, sys, time
from pathlib import Path
from changelake.cli import main
from changelake.storage.iceberg import Storage

barrier, commit, waited = Path(sys.argv[1]), Storage.commit_batch, []

def commit_batch(table, added, added_deletes, removed, summary):
    if not waited:
        waited.append(True)
        marker = barrier / f"{os.getpid()}.tmp"
        marker.write_text(str(summary.batch_id))
        marker.rename(marker.with_suffix(".reached"))
        deadline = time.monotonic() + 300
        while len(list(barrier.glob("*.reached"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    return commit(table, added, added_deletes, removed, summary)

Storage.commit_batch = staticmethod(commit_batch)
sys.exit(main(sys.argv[2:]))
"""


def race(barrier: Path, env: dict, *args: str) -> list[tuple[str, str]]:
    """Two :data:`RACER` processes running ``changelake <args>`` at once; both must succeed. Their
    (stdout, stderr); the barrier directory holds a ``.reached`` file per process that reached its commit."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(barrier), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n---\n".join(o[1][-2500:] for o in outs)
    return outs


def test_two_racing_appliers_apply_each_batch_once(home, cli_env, catalog_uri, tmp_path_factory):
    (home / "tables" / "t.kv.yaml").write_text(SPEC)
    land_batches(
        home,
        "t.kv",
        {
            b: [{"op": "+I", "data": {"k": b, "v": f"v{b}"}}, {"op": "+U", "data": {"k": 0, "v": f"v{b}"}}]
            for b in range(1, 5)
        },
    )
    barrier = tmp_path_factory.mktemp("barrier")
    outs = race(barrier, cli_env, "apply", "t.kv")
    # Contention really happened: both processes reached the commit of batch 1, and exactly one lost it.
    assert sorted(m.read_text() for m in Path(barrier).glob("*.reached")) == ["1", "1"]
    lost = [err for _out, err in outs if "batch 1: another writer committed first; re-checking" in err]
    assert len(lost) == 1, "\n---\n".join(o[1][-2500:] for o in outs)
    # Each batch exactly once: a +I for its new key, and +I (batch 1) or -U/+U for key 0.
    assert read_state(home, catalog_uri) == (
        [(0, "v4"), (1, "v1"), (2, "v2"), (3, "v3"), (4, "v4")],
        {
            0: [("+I", 1), ("-U", 2), ("+U", 2), ("-U", 3), ("+U", 3), ("-U", 4), ("+U", 4)],
            **{b: [("+I", b)] for b in range(1, 5)},
        },
    )


def test_out_of_order_batch_id_is_refused(lake, home, catalog_uri):
    from changelake.errors import BatchRefusedError

    (home / "tables" / "t.kv.yaml").write_text(SPEC)
    land_batches(home, "t.kv", {1: BATCHES[1], 3: BATCHES[2]})
    with pytest.raises(
        BatchRefusedError,
        match="landing batch 3 skips ahead; the last applied landing batch is 1, so the next must be 2",
    ):
        lake.apply_pending("t.kv")
    assert read_state(home, catalog_uri)[0] == [(1, "a"), (2, "b")]
