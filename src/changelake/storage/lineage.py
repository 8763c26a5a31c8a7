"""Whose snapshot a table's state is in, when writers other than changelake commit to its tables.

changelake's tables are plain Iceberg tables, so other writers commit to them: Iceberg's own maintenance from
Spark (``rewrite_data_files``, ``rewrite_position_delete_files``, ``expire_snapshots``, ``remove_orphan_files``)
or any engine that appends. Their snapshots carry none of changelake's ``changelake.*`` summary properties
(:mod:`changelake.storage.summary`), so "the state is in the latest snapshot" (the exactly-once protocol)
becomes: **the state is in the newest snapshot of the main branch's ancestry that carries it** -- normally the
current one, so nothing is walked. Every changelake commit also moves the tag :data:`STATE_TAG` to its new
snapshot (:mod:`changelake.storage.rowdelta`): a tagged snapshot is one Iceberg's ``expire_snapshots`` keeps,
so the state survives an expiry that removes every snapshot but a foreign current one (the ancestry then
ends at the foreign snapshot, and the tag still names changelake's).

pyiceberg-free and pyarrow-free: the JVM-free read commands use it (:mod:`changelake.storage.catalog`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from changelake.storage import summary

#: The Iceberg tag on the newest snapshot changelake committed to a table (its state's snapshot).
STATE_TAG = "changelake-state"


def carries_state(props: Mapping[str, str]) -> bool:
    """Whether a snapshot's summary holds changelake's state (a batch's or a compaction's snapshot)."""
    return summary.BATCH_ID in props


def state_snapshot(
    ancestry: Iterable[tuple[int, Mapping[str, str]]], tagged: tuple[int, Mapping[str, str]] | None
) -> tuple[int, Mapping[str, str]] | None:
    """The (snapshot id, summary) holding the table's state: the newest of ``ancestry`` (the current snapshot
    and its ancestors, newest first) that carries it, else the :data:`STATE_TAG` snapshot ``tagged`` (when an
    expiry cut the ancestry short), else None (no batch yet)."""
    for snapshot_id, props in ancestry:
        if carries_state(props):
            return snapshot_id, props
    if tagged is not None and carries_state(tagged[1]):
        return tagged
    return None


def is_changelake(props: Mapping[str, str]) -> bool:
    """Whether changelake committed the snapshot (every commit of changelake's carries ``changelake.*``)."""
    return any(key.startswith(summary.PREFIX) for key in props)


def committer(snapshot_id: int | None, props: Mapping[str, str], timestamp_ms: int | None) -> dict[str, Any]:
    """Who made a snapshot and what it did, as ``status`` shows the last commit: ``changelake`` (a batch, a
    compaction, a changelog) or the engine Iceberg's writers name in the summary (Spark's ``engine-name`` and
    ``engine-version``, the ``iceberg-version``), else ``another writer``; the Iceberg operation and, for
    Spark, the application id."""
    if snapshot_id is None:
        return {"snapshot_id": None, "by": None, "operation": None, "at_ms": None}
    what: str | None
    if is_changelake(props):
        by = "changelake"
        what = "compaction" if summary.is_compaction(props) else "batch"
    else:
        engine = " ".join(p for p in (props.get("engine-name"), props.get("engine-version")) if p)
        iceberg = props.get("iceberg-version")
        by = engine or "another writer"
        if iceberg:
            by += f" ({iceberg.split(' (')[0]})"
        what = props.get("operation")
    out: dict[str, Any] = {
        "snapshot_id": snapshot_id,
        "by": by,
        "operation": props.get("operation") if what is None else what,
        "at_ms": timestamp_ms,
    }
    if props.get("spark.app.id"):
        out["app_id"] = props["spark.app.id"]
    return out
