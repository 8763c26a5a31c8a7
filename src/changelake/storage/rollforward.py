"""The changelog roll-forward: commit the changelog snapshot of every batch the PK table committed but the
changelog table lacks.

An apply commits a batch in two snapshots, the PK table's (the commit point, whose summary names the batch's
changelog manifest) and then the changelog table's. A crash between them leaves the changelog one batch
behind; whoever touches the table next (the next apply, a changelog read, maintenance) makes the same
deterministic commit from the manifest, so the changelog holds every committed batch exactly once. It lives
in storage so that readers roll forward without importing the engine.
"""

from __future__ import annotations

from typing import Any

from changelake.errors import CommitConflict
from changelake.faults import fault
from changelake.spec import TableSpec
from changelake.storage.iceberg import CommitFailedException, Storage
from changelake.storage.summary import BatchSummary, ChangelogSummary

#: Commit races an apply (or a roll-forward) may lose in a row before it gives up.
MAX_COMMIT_ATTEMPTS = 5


def roll_forward_changelog(storage: Storage, spec: TableSpec, attempts: int = MAX_COMMIT_ATTEMPTS) -> Any:
    """Commit changelog snapshots for batches the PK table committed but the changelog lacks; the PK table
    as this read it. A commit lost to a concurrent roll-forward is re-read and checked, ``attempts`` times."""
    return roll_forward_tables(storage, spec, attempts)[0]


def roll_forward_tables(
    storage: Storage,
    spec: TableSpec,
    attempts: int = MAX_COMMIT_ATTEMPTS,
    in_hand: tuple[Any, Any] | None = None,
) -> tuple[Any, Any]:
    """:func:`roll_forward_changelog`, returning the PK table and the changelog table as it left them.

    ``in_hand``: the two tables as the caller holds them (an apply, right after its own commit: the PK table
    as committed, the changelog table as the apply's state check read it), used for the first attempt instead
    of loading both from the catalog. A stale one is safe: a changelog commit on a changelog table that is not
    the catalog's current one fails its optimistic check, and the next attempt loads both afresh."""
    for attempt in range(attempts):
        if attempt == 0 and in_hand is not None:
            pk, log_table = in_hand
        else:
            pk, log_table = storage.pk_table(spec), storage.changelog_table(spec)
        logged = Storage.changelog_state(log_table)
        log_last = logged.batch_id if logged else 0
        lagging = [(s, BatchSummary.of_batch(s)) for s in storage.batch_snapshots_after(pk, log_last)]
        if not lagging:
            return pk, log_table
        try:
            for snap, batch in lagging:
                manifest = storage.read_json(pk, batch.changelog_manifest)
                fault("before-changelog-commit")
                log_table = storage.append_batch(
                    log_table,
                    storage.to_data_files(log_table, manifest["files"]),
                    ChangelogSummary(
                        batch_id=manifest["batch_id"],
                        log_start_offset=manifest["log_start_offset"],
                        log_end_offset=manifest["log_end_offset"],
                        pk_snapshot_id=snap.snapshot_id,
                    ),
                )
            return pk, log_table
        except CommitFailedException:
            continue  # a concurrent applier rolled forward (or the table in hand was stale); re-read and check
    raise CommitConflict(
        f"{spec.full_name}: could not commit the changelog after {attempts} attempts; retry later"
    )
