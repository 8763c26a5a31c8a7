"""Table maintenance: compaction, snapshot expiry and orphan-file removal, after each batch or on demand.

After every committed batch the applier runs the cheap, bounded part (:func:`maintain` with ``inline``):
compactions that are due (a full one only for partitions up to ``compact.INLINE_FULL_BYTES``), and snapshot
expiry once at least ten snapshots are due -- so a table that takes a batch a minute stays bounded with no job
to schedule (Paimon's writers compact and expire the same way). ``write-only: true`` turns that off for tables
whose maintenance runs elsewhere. ``changelake maintain`` and the Airflow ``changelake_maintenance`` DAG run
everything: every due compaction whatever its size, every due expiry, and the orphan sweep (files older than a
day by default), which lists the table's directory and so is not run after each batch. A compaction larger
than ``CHANGELAKE_SPARK_COMPACT_BYTES`` runs in Spark tasks, per bucket (engine/compact.py); the rest needs no
Spark.

Every step is its own optimistic commit; a step that loses a race to a batch leaves the table as it was and is
tried again by the next run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from changelake.engine import compact
from changelake.spec import TableSpec
from changelake.storage import maintenance, summary
from changelake.storage.iceberg import Storage

#: The orphan sweep's default safety age: files younger than this may be an apply's not yet committed.
ORPHANS_OLDER_THAN_S = 86_400.0

#: The maintenance after a batch that runs in the background (:func:`in_background`), per table (the catalog's
#: URI and the table's name): one at a time per table in this process.
_RUNNING: dict[tuple[str, str], threading.Thread] = {}
_RUNNING_LOCK = threading.Lock()


def in_background(key: tuple[str, str], run: Callable[[], None]) -> None:
    """Run ``run`` (the maintenance after a batch that is committed and reported) in a thread of its own.
    The thread is not a daemon: a process that ends (a CLI command) waits for it first, so maintenance is not
    cut off midway (a cut one would be safe, its commit being all or nothing, but its work lost). The next
    write to the table in this process waits for it (:func:`wait_for`), so it never races this process's
    own commits."""
    wait_for(key)
    thread = threading.Thread(target=run, name=f"changelake-maintain-{key[1]}", daemon=False)
    with _RUNNING_LOCK:
        _RUNNING[key] = thread
    thread.start()


def wait_for(key: tuple[str, str]) -> float:
    """Wait for the background maintenance of the table ``key`` names, if one runs; the seconds waited."""
    with _RUNNING_LOCK:
        thread = _RUNNING.get(key)
    if thread is None or thread is threading.current_thread():
        return 0.0
    started = time.monotonic()
    thread.join()
    with _RUNNING_LOCK:
        if _RUNNING.get(key) is thread:
            del _RUNNING[key]
    return time.monotonic() - started


@dataclass
class Report:
    """What maintenance did to one table (its PK table and its changelog table)."""

    table: str
    compacted: list[compact.Compaction] = field(default_factory=list)
    expired: list[maintenance.Outcome] = field(default_factory=list)
    orphans: list[maintenance.Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {
            "table": self.table,
            "compacted": [
                {
                    "table": c.table,
                    "full": c.full,
                    "minor": c.minor,
                    "files_added": c.files_added,
                    "files_removed": c.files_removed,
                    "rows_written": c.rows_written,
                }
                for c in self.compacted
            ],
            "expired_snapshots": sum(o.expired_snapshots for o in self.expired),
            "retained_snapshots": {o.table: o.retained_snapshots for o in self.expired},
            "history_batches": sum(o.history_batches for o in self.expired),
            "files_deleted": sum(o.files_deleted for o in self.expired + self.orphans),
            "bytes_deleted": sum(o.bytes_deleted for o in self.expired + self.orphans),
            "orphans_deleted": sum(o.files_deleted for o in self.orphans),
            "notes": self.notes + [n for c in self.compacted for n in c.notes],
            "seconds": round(self.seconds, 3),
        }


def maintain(
    storage: Storage,
    spec: TableSpec,
    roll_forward: Callable[[TableSpec], Table],
    *,
    inline: bool = False,
    compaction: bool = True,
    expiry: bool = True,
    full: bool = False,
    orphans_older_than_s: float | None = None,
    spark: Callable[[], Any] | None = None,
    progress: Callable[[str], None] = lambda _m: None,
    changelog_table: Table | None = None,
) -> Report:
    """Maintain one table: compactions due (``full``: every partition with deltas or deletes), expiry of the
    snapshots its retention lets go (after a batch, ``inline``, once at least ten are due), and, with
    ``orphans_older_than_s``, the orphan sweep. ``roll_forward`` first commits a committed batch's changelog
    (no snapshot of a batch whose changelog is not committed is ever expired) and returns the PK table.
    ``spark`` returns a SparkSession: a compaction larger than ``CHANGELAKE_SPARK_COMPACT_BYTES`` runs in its
    executors (:mod:`changelake.engine.compact`). ``changelog_table``: the changelog table as the caller's
    roll-forward left it (None: loaded here)."""
    started = time.monotonic()
    report = Report(spec.full_name)
    pk = roll_forward(spec)
    log_table = changelog_table if changelog_table is not None else storage.changelog_table(spec)
    if compaction:
        done = compact.compact_table(
            storage, spec, full=full, inline=inline, table=pk, spark=spark, progress=progress
        )
        pk = done.committed or pk
        report.compacted.append(done)
        done = compact.compact_changelog(storage, spec, force=full, table=log_table, progress=progress)
        log_table = done.committed or log_table
        report.compacted.append(done)
    if expiry:
        options = spec.storage
        at_least = maintenance.EXPIRE_AT_LEAST if inline else 1
        logged = Storage.changelog_state(log_table)
        # The changelog table's snapshots are not read back in time (its batches are its rows): it keeps the
        # minimum, enough for a reader in flight.
        log_options = replace(options, snapshots_max=options.snapshots_min)
        for table, with_history in ((pk, True), (log_table, False)):
            try:
                _, outcome = maintenance.expire(
                    table,
                    options if with_history else log_options,
                    keep_after_batch=(logged.batch_id if logged else 0) if with_history else None,
                    at_least=at_least,
                    with_history=with_history,
                )
            except CommitFailedException:
                report.notes.append(
                    f"{'.'.join(table.name())}: another writer committed first; expiry skipped"
                )
                continue
            report.expired.append(outcome)
            if outcome.expired_snapshots:
                progress(
                    f"[{outcome.table}] expired {outcome.expired_snapshots} snapshot(s), "
                    f"{outcome.retained_snapshots} retained; {outcome.files_deleted} file(s), "
                    f"{outcome.bytes_deleted:,} bytes deleted"
                )
    if orphans_older_than_s is not None:
        for table in (storage.pk_table(spec), storage.changelog_table(spec)):
            outcome = maintenance.remove_orphans(table, orphans_older_than_s)
            report.orphans.append(outcome)
            if outcome.files_deleted:
                progress(
                    f"[{outcome.table}] {outcome.files_deleted} orphan file(s) older than "
                    f"{orphans_older_than_s:g}s deleted ({outcome.bytes_deleted:,} bytes)"
                )
    report.seconds = time.monotonic() - started
    if not inline:
        _record_run(storage, spec, report)
    return report


def _record_run(storage: Storage, spec: TableSpec, report: Report) -> None:
    """Note a maintenance run in the PK table's properties (``status`` shows it): one small metadata commit,
    for the runs of ``changelake maintain`` and the DAG, not after every batch."""
    done = report.to_dict()
    what = {k: done[k] for k in ("expired_snapshots", "files_deleted", "orphans_deleted", "seconds")}
    value = json.dumps({"at_ms": int(time.time() * 1000), **what}, sort_keys=True)
    try:
        with storage.pk_table(spec).transaction() as tx:
            tx.set_properties({summary.MAINTENANCE: value})
    except CommitFailedException:
        report.notes.append(
            "another writer committed first: the run was not recorded in the table's properties"
        )
