"""kill -9 inside merge-on-read applies, compactions, expiries and the orphan sweep, and maintenance racing an
apply (proved to overlap), on SQLite and PostgreSQL: the table always ends equal to a never-interrupted one,
pyiceberg's own scan reads it, no file a snapshot names is missing, and once the sweep has run nothing else
is left on disk.

The CLI runs in subprocesses (the batches are small: they merge in the process, no JVM); the reference is the
same batches applied in this process without a fault.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import land_batches, sparkless_lake

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPEC = """name: t.kv
columns:
  - {name: k, type: INT}
  - {name: v, type: STRING}
primary_key: [k]
options:
  bucket.num: 2
  num-sorted-run.compaction-trigger: 2
  compaction.max-size-amplification-percent: 1000000
  snapshot.num-retained.min: 1
  snapshot.num-retained.max: 2
"""


def batch(b: int) -> list[dict]:
    """Batch 1: 200 keys (buckets large enough that the next batches merge on read); then an insert of a new
    key, updates of two old ones and a delete of another."""
    if b == 1:
        return [{"op": "+I", "data": {"k": k, "v": "first"}} for k in range(200)]
    out = [{"op": "+I", "data": {"k": 1000 + b, "v": f"new{b}"}}]
    out += [{"op": "+U", "data": {"k": (b * 7 + i) % 50, "v": f"b{b}-{i}"}} for i in range(2)]
    out.append({"op": "-D", "data": {"k": 100 + b}})
    return out


BATCHES = {b: batch(b) for b in range(1, 9)}


def run_cli(env: dict, *args: str, fault: str | None = None, expect: int = 0) -> subprocess.CompletedProcess:
    env = dict(env, **({"CHANGELAKE_FAULT": fault} if fault else {}))
    done = subprocess.run(
        [sys.executable, "-m", "changelake.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == expect, (args, fault, done.returncode, done.stderr[-3000:])
    return done


def storage_of(home: Path, catalog_uri: str | None = None):
    from changelake.config import load_settings
    from changelake.storage.iceberg import Storage

    extra = {"catalog_uri": catalog_uri} if catalog_uri else {}
    return Storage(load_settings(home=home, tables_dir=home / "tables", **extra))


def state(storage) -> tuple[list, dict]:
    """Rows and each key's changes as pyiceberg's own scan reads them (deletes applied)."""
    rows = storage.catalog.load_table("t.kv").scan().to_arrow()
    log = storage.catalog.load_table("t.kv__changelog").scan().to_arrow()
    changes: dict[int, list] = {}
    for r in sorted(log.to_pylist(), key=lambda r: (r["_batch_id"], r["_bucket"], r["_log_offset"])):
        changes.setdefault(r["k"], []).append((r["_batch_id"], r["_change_type"], r["v"]))
    return sorted(zip(rows["k"].to_pylist(), rows["v"].to_pylist(), strict=True)), changes


def files_on_disk_and_named(storage) -> tuple[set[str], set[str]]:
    """(every file under the two tables' directories, every file their snapshots, metadata and history name)."""
    from changelake.storage import maintenance
    from changelake.storage.files import side_location

    disk, named = set(), set()
    for name in ("t.kv", "t.kv__changelog"):
        table = storage.catalog.load_table(name)
        for root in (
            table.location(),
            side_location(table.location()),
        ):  # the table's files and its side files
            disk |= {maintenance._canonical(p) for p, _ in maintenance.list_files(root)}
        named |= {
            maintenance._canonical(p)
            for p in maintenance.reachable(table, table.metadata.snapshots)
            | maintenance.referenced_outside_snapshots(table)
        }
    return disk, named


@pytest.fixture
def reference(tmp_path_factory):
    lake = sparkless_lake(tmp_path_factory.mktemp("reference"))
    (lake.settings.tables_dir / "t.kv.yaml").write_text(
        SPEC.replace("num-retained.max: 2", "num-retained.max: 50")
    )
    land_batches(lake.settings.home, "t.kv", BATCHES)
    lake.apply_pending("t.kv")
    return state(lake.storage)


def test_kill_9_anywhere_in_apply_compaction_expiry_and_sweep_converges(
    home, cli_env, catalog_uri, reference
):
    (home / "tables" / "t.kv.yaml").write_text(SPEC)
    land_batches(home, "t.kv", BATCHES)
    steps = [
        # (CLI arguments, where it is killed): each kill is followed by a run of the same command without one.
        (["apply", "t.kv", "--up-to", "1"], "after-data-files"),
        (["apply", "t.kv", "--up-to", "2"], "before-maintenance"),
        (["apply", "t.kv", "--up-to", "3"], "before-compaction-commit"),  # batches 2 and 3: two deltas
        (["apply", "t.kv", "--up-to", "5"], "after-compaction-commit"),
        (["apply", "t.kv", "--up-to", "8"], None),
        (["maintain", "t.kv", "--orphans-older-than", "off"], "after-expiry-commit"),
        (["maintain", "t.kv", "--full", "--orphans-older-than", "off"], "deleting-files"),
        # The kills above left unreferenced files: the sweep deletes them (killed after the first), then again.
        (["maintain", "t.kv", "--orphans-older-than", "0s"], "deleting-files"),
        (["maintain", "t.kv", "--orphans-older-than", "0s"], "before-orphan-sweep"),
    ]
    for args, fault in steps:
        if fault is not None:
            run_cli(cli_env, *args, fault=fault, expect=-9)  # really reached: killed there
        run_cli(cli_env, *args)
    storage = storage_of(home, catalog_uri)
    assert state(storage) == reference
    disk, named = files_on_disk_and_named(storage)
    assert named - disk == set()  # nothing a snapshot, the metadata or the history names was deleted
    assert disk - named == set()  # and the sweep left no orphan behind
    table = storage.catalog.load_table("t.kv")
    assert len(table.metadata.snapshots) <= 3  # expired down to the retention (+ the maintenance's own)
    # Replays: batch 8's snapshot is retained, batch 1's expired into the history; both are no-ops, and
    # batch 1 landed with other content is refused.
    for b in (1, 8):
        done = run_cli(
            cli_env, "apply", "t.kv", "--file", f"{home}/landing/t.kv/{b:04d}.jsonl", "--batch-id", str(b),
            "--writer", "landing",
        )  # fmt: skip
        assert f"landing batch {b} already applied as table batch {b} (same checksum)" in done.stderr
    other = home / "other.jsonl"
    other.write_text(json.dumps({"op": "+I", "data": {"k": 99, "v": "x"}}) + "\n")
    refused = run_cli(
        cli_env, "apply", "t.kv", "--file", str(other), "--batch-id", "1", "--writer", "landing", expect=2
    )
    assert "landing batch 1 was already applied from a different input" in refused.stderr
    assert state(storage) == reference


# A racer: the CLI with one hook. Its first commit of the kind named waits until the other process is at its
# own commit, so the two really contend (without it one could finish before the other starts).
RACER = """
import os, sys, time
from pathlib import Path
import pyiceberg.table
from changelake.cli import main
from changelake.storage.iceberg import Storage

barrier, kind, waited = Path(sys.argv[1]), sys.argv[2], []

def wait():
    if waited:
        return
    waited.append(True)
    (barrier / f"{kind}.reached").write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while len(list(barrier.glob("*.reached"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)

if kind == "batch":
    commit = Storage.commit_batch
    def commit_batch(*args):
        wait()
        return commit(*args)
    Storage.commit_batch = staticmethod(commit_batch)
elif kind == "compaction":
    commit_files = Storage.commit_files
    def compaction_commit(table, added, deletes, removed, properties, *rest):
        if properties.get("changelake.operation") == "compact" and not table.name()[-1].endswith("__changelog"):
            wait()
        return commit_files(table, added, deletes, removed, properties, *rest)
    Storage.commit_files = staticmethod(compaction_commit)
else:  # expiry: the metadata commit that removes snapshots
    from pyiceberg.table.update import RemoveSnapshotsUpdate
    commit_transaction = pyiceberg.table.Transaction.commit_transaction
    def expiry_commit(self):
        if any(isinstance(u, RemoveSnapshotsUpdate) for u in self._updates) and self._table.name() == ("t", "kv"):
            wait()
        return commit_transaction(self)
    pyiceberg.table.Transaction.commit_transaction = expiry_commit
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize("maintenance", ["compaction", "expiry"])
def test_maintenance_racing_an_apply_loses_nothing(
    home, cli_env, catalog_uri, reference, maintenance, tmp_path
):
    # write-only: the racing apply commits its batch and nothing else; the other process maintains.
    (home / "tables" / "t.kv.yaml").write_text(SPEC.replace("options:\n", "options:\n  write-only: true\n"))
    land_batches(home, "t.kv", BATCHES)
    run_cli(cli_env, "apply", "t.kv", "--up-to", "7")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    maintain = ["maintain", "t.kv", "--orphans-older-than", "off"]
    maintain += ["--full", "--no-expire"] if maintenance == "compaction" else ["--no-compact"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(barrier), kind, *args],
            env=cli_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for kind, args in (("batch", ["apply", "t.kv"]), (maintenance, maintain))
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n---\n".join(o[1][-3000:] for o in outs)
    assert sorted(p.name for p in barrier.glob("*.reached")) == ["batch.reached", f"{maintenance}.reached"]
    applied, maintained = outs[0][1], outs[1][0] + outs[1][1]
    if maintenance == "compaction":
        # Both commit a snapshot on the same parent: one loses and says so. The batch commits on the compaction's
        # snapshot without merging again (or merges again), or the compaction leaves the table as it was.
        apply_lost = (
            "committed after another writer's maintenance commit" in applied or "re-checking" in applied
        )
        assert apply_lost or "another writer committed first" in maintained, (
            applied[-2000:],
            maintained[-2000:],
        )
    # An expiry commits no snapshot: Iceberg's commit requirements let the batch's commit land on top of it, and
    # the expiry fails only if the batch's commit moved the branch first. Either way nothing the batch's
    # snapshot names is deleted, which the checks below prove.
    storage = storage_of(home, catalog_uri)
    assert state(storage) == reference
    disk, named = files_on_disk_and_named(storage)
    assert named - disk == set()
