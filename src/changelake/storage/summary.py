"""The batch-summary protocol: what a committed batch records in its Iceberg snapshot's summary.

The PK table's snapshot that commits batch N is N's commit point (:mod:`changelake.engine.apply`); its
summary holds, as ``changelake.*`` string properties, everything the next batch, a replay, a read or a
quality check needs to know about N: :class:`BatchSummary`. The changelog table's snapshot of N, committed
after it from the manifest it names, records less: :class:`ChangelogSummary`.

Every property name changelake writes is a constant of this module, and only of this one; writers build the
dataclasses and call ``to_properties()``, readers call ``from_snapshot()`` / ``from_properties()``. The stored
format (names and encodings) is what tables committed earlier hold, so it does not change: integers in
decimal, the Kafka offsets JSON with sorted keys, the auto-increment state and the input record as JSON, the
target columns comma-separated, an empty string for no target columns and no dead-letter file. Keys a batch
committed before they existed default (counts 0, no input record); a value that does not decode is a
ChangelakeError naming its key.

This module imports nothing heavy: the JVM-free read commands (:mod:`changelake.storage.fastread`) use it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from changelake.errors import ChangelakeError, short_repr

PREFIX = "changelake."

# --- the PK table's snapshot of a batch ---------------------------------------------------------------------
BATCH_ID = PREFIX + "batch-id"
CHECKSUM = PREFIX + "checksum"  # of the batch's input: a replay with other input is refused
LOG_START_OFFSET = PREFIX + "log-start-offset"
LOG_END_OFFSET = PREFIX + "log-end-offset"
CHANGELOG_MANIFEST = PREFIX + "changelog-manifest"  # the changelog's files and every bucket's log end
CHANGELOG_RECORDS = PREFIX + "changelog-records"
TARGET_COLUMNS = PREFIX + "target-columns"
INPUT = PREFIX + "input"  # how the batch was read (landing.input_record), so it can be read again
KAFKA_OFFSETS = PREFIX + "kafka-offsets"  # last applied offset per topic:partition, after this batch
AUTO_INCREMENT = PREFIX + "auto-increment"  # the id counter and each bucket's unused range, after this batch
TOUCHED_BUCKETS = PREFIX + "touched-buckets"
DEAD_LETTER = PREFIX + "dead-letter"
COMMITTED_AT_MS = PREFIX + "committed-at-ms"
ROWS = PREFIX + "rows"  # the table's live rows after the batch (data files minus deleted rows)
#: "batch" (the default) or "compact": a compaction's snapshot carries the state of the batch before it.
OPERATION = PREFIX + "operation"
#: Which of the table's writers the batch came from, and its number in that writer's own sequence
#: (:class:`WriterPosition`); every writer's last number after the batch (JSON, carried forward).
WRITER = PREFIX + "writer"
WRITER_SEQ = PREFIX + "writer-seq"
WRITERS = PREFIX + "writers"
#: What the source held: messages read, skipped, quarantined, redelivered and dropped as duplicates.
SOURCE_COUNTERS = ("messages", "skipped", "quarantined", "redelivered", "deduplicated")
SOURCE_KEYS = {name: f"{PREFIX}source.{name}" for name in SOURCE_COUNTERS}
#: The same counters summed over every batch the table took (carried forward, so status reads one snapshot).
TOTAL_KEYS = {name: f"{PREFIX}total.{name}" for name in SOURCE_COUNTERS}
#: What the merge did (:class:`changelake.engine.merge.BatchCounts`, in its order).
COUNTERS = ("records", "inserted", "updated", "deleted", "ignored", "dropped_update_before")
COUNT_KEYS = {name: PREFIX + name for name in COUNTERS}

# --- the changelog table's snapshot of a batch --------------------------------------------------------------
PK_SNAPSHOT_ID = PREFIX + "pk-snapshot-id"  # the PK table's snapshot the changelog was rolled forward from

# --- table properties ---------------------------------------------------------------------------------------
SPEC = PREFIX + "spec"  # the spec a table was created from (JSON), on the PK and the changelog table
MAINTENANCE = PREFIX + "maintenance"  # when maintenance last changed the table, and what (JSON)
#: The changelog table's first batch whose records are kept: those before it are gone (table.log.ttl).
LOG_START_BATCH = PREFIX + "log-start-batch"


# --- the table's writers ------------------------------------------------------------------------------------
#: The landing directory: batch N is the landed file ``N.<ext>``.
LANDING = "landing"
#: ``changelake sql`` statements (``ChangeLake.sql``): replays are found by their idempotency key.
SQL = "sql"
#: Python API calls (``ChangeLake.apply``, ``changelake apply --file``), unless the caller names its writer.
API = "api"
#: Keys a lookup with ``insert_if_not_exists`` inserted.
LOOKUP = "lookup"
#: Names only changelake's own write paths use; an API caller names its writer otherwise. (``landing`` is not
#: reserved: applying a file as landed batch N, e.g. from an archive, is what landing it as ``N.<ext>`` does.)
RESERVED_WRITERS = (SQL, LOOKUP)
_WRITER_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def check_writer_name(name: Any, *, internal: bool = False) -> str:
    """A writer name as the API takes it: lower-case letters, digits, ``_ . -``, at most 64 characters,
    starting with a letter; the reserved names (``sql``, ``lookup``, ``kafka...``) only for changelake's own
    paths (``internal``)."""
    if not isinstance(name, str) or not _WRITER_NAME.fullmatch(name):
        raise ChangelakeError(
            f"a writer name is 1-64 lower-case letters, digits, '_', '.' or '-', starting with a letter; got "
            f"{short_repr(name)}"
        )
    if not internal and (name in RESERVED_WRITERS or name.startswith("kafka")):
        raise ChangelakeError(
            f"writer name {name!r} is reserved for changelake's own write paths ({', '.join(RESERVED_WRITERS)}, "
            "kafka...); name your writer otherwise"
        )
    return name


@dataclass(frozen=True)
class WriterPosition:
    """A batch's place in its writer's sequence: each writer of a table (the landing directory, SQL statements,
    API calls, lookup inserts, ...) numbers its batches 1, 2, 3, ... on its own, so no writer can take or
    shadow another's number; the table's batch id (``batch_id``) numbers every commit, whatever its writer."""

    writer: str
    seq: int

    def __str__(self) -> str:
        return f"{self.writer} batch {self.seq}"


@dataclass(frozen=True)
class AutoIncrementState:
    """The table-wide id counter and each bucket's cached, unused id range (docs/semantics.md §8)."""

    counter: int = 0
    buckets: dict[str, tuple[int, int]] = field(default_factory=dict)  # partition key -> (next, end)


@dataclass(frozen=True)
class BatchSummary:
    """The summary of the PK table's snapshot that committed a batch."""

    batch_id: int
    checksum: str
    changelog_manifest: str
    log_start_offset: int = 0
    log_end_offset: int = 0
    changelog_records: int = 0
    target_columns: tuple[str, ...] | None = None  # a partial update's columns (docs/semantics.md §6)
    input: dict[str, Any] | None = None  # None: committed before batches recorded how they were read
    kafka_offsets: dict[str, int] = field(default_factory=dict)
    auto_increment: AutoIncrementState | None = None  # None: the table has no auto-increment column
    touched_buckets: int = 0
    dead_letter: str | None = None  # where the batch's quarantined records are
    source: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCE_COUNTERS, 0))
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    committed_at_ms: int | None = None
    rows: int | None = None  # live rows after the batch (None: committed before it was recorded)
    totals: dict[str, int] | None = None  # source counters over all batches so far (None: not recorded)
    writer: str | None = None  # the writer the batch came from (None: committed before writers were recorded)
    writer_seq: int | None = None  # the batch's number in its writer's sequence
    writers: dict[str, int] | None = None  # every writer's last number after the batch (None: not recorded)

    def __post_init__(self) -> None:
        # Every counter is stored, in a fixed order: a name outside it would be silently lost.
        for name, known in (("source", SOURCE_COUNTERS), ("counts", COUNTERS), ("totals", SOURCE_COUNTERS)):
            unknown = set(getattr(self, name) or ()) - set(known)
            if unknown:
                raise ValueError(f"BatchSummary.{name}: unknown counter(s) {sorted(unknown)}")

    @property
    def position(self) -> WriterPosition:
        """The batch's writer and number in its sequence. A batch committed before writers were recorded took
        the table's one batch sequence: it keeps its batch id as its number, and its writer is told from how it
        was read -- landed files (or no record: landed files were all there was), SQL statements (staged as
        ``sql-*``), else API records (lookup inserts among them)."""
        if self.writer is not None and self.writer_seq is not None:
            return WriterPosition(self.writer, self.writer_seq)
        how = self.input
        if how is None or how.get("landed"):
            return WriterPosition(LANDING, self.batch_id)
        files = how.get("files") or []
        return WriterPosition(SQL if files and str(files[0]).startswith("sql-") else API, self.batch_id)

    def to_properties(self) -> dict[str, str]:
        """The snapshot-summary properties, in the order and encodings tables have always been written."""
        props = {
            BATCH_ID: str(self.batch_id),
            CHECKSUM: self.checksum,
            LOG_START_OFFSET: str(self.log_start_offset),
            LOG_END_OFFSET: str(self.log_end_offset),
            CHANGELOG_MANIFEST: self.changelog_manifest,
            CHANGELOG_RECORDS: str(self.changelog_records),
            TARGET_COLUMNS: ",".join(self.target_columns) if self.target_columns else "",
        }
        if self.input is not None:
            props[INPUT] = json.dumps(self.input, sort_keys=True, default=str)
        if self.kafka_offsets:
            props[KAFKA_OFFSETS] = json.dumps(self.kafka_offsets, sort_keys=True)
        if self.auto_increment is not None:
            state = self.auto_increment
            buckets = {key: list(ids) for key, ids in state.buckets.items()}
            props[AUTO_INCREMENT] = json.dumps({"counter": state.counter, "buckets": buckets})
        props[TOUCHED_BUCKETS] = str(self.touched_buckets)
        props[DEAD_LETTER] = self.dead_letter or ""
        props.update({SOURCE_KEYS[k]: str(self.source.get(k, 0)) for k in SOURCE_COUNTERS})
        props.update({COUNT_KEYS[k]: str(self.counts.get(k, 0)) for k in COUNTERS})
        if self.committed_at_ms is not None:
            props[COMMITTED_AT_MS] = str(self.committed_at_ms)
        if self.rows is not None:
            props[ROWS] = str(self.rows)
        if self.totals is not None:
            props.update({TOTAL_KEYS[k]: str(self.totals.get(k, 0)) for k in SOURCE_COUNTERS})
        if self.writer is not None and self.writer_seq is not None:
            props[WRITER] = self.writer
            props[WRITER_SEQ] = str(self.writer_seq)
        if self.writers is not None:
            props[WRITERS] = json.dumps(self.writers, sort_keys=True)
        return props

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BatchSummary:
        """Decode a batch snapshot's summary (other properties, Iceberg's own among them, are ignored)."""
        r = _Reader(props)
        auto_increment = r.json_object(AUTO_INCREMENT)
        return cls(
            batch_id=r.integer(BATCH_ID, required=True),
            checksum=r.text(CHECKSUM, required=True),
            changelog_manifest=r.text(CHANGELOG_MANIFEST, required=True),
            log_start_offset=r.integer(LOG_START_OFFSET),
            log_end_offset=r.integer(LOG_END_OFFSET),
            changelog_records=r.integer(CHANGELOG_RECORDS),
            target_columns=r.columns(TARGET_COLUMNS),
            input=r.json_object(INPUT),
            kafka_offsets=_offsets(r.json_object(KAFKA_OFFSETS) or {}),
            auto_increment=None if auto_increment is None else _id_state(auto_increment),
            touched_buckets=r.integer(TOUCHED_BUCKETS),
            dead_letter=r.text(DEAD_LETTER) or None,
            source={k: r.integer(SOURCE_KEYS[k]) for k in SOURCE_COUNTERS},
            counts={k: r.integer(COUNT_KEYS[k]) for k in COUNTERS},
            committed_at_ms=r.optional_integer(COMMITTED_AT_MS),
            rows=r.optional_integer(ROWS),
            totals=(
                {k: r.integer(TOTAL_KEYS[k]) for k in SOURCE_COUNTERS}
                if TOTAL_KEYS[SOURCE_COUNTERS[0]] in props
                else None
            ),
            writer=r.text(WRITER) or None,
            writer_seq=r.optional_integer(WRITER_SEQ),
            writers=_positions(r.json_object(WRITERS)),
        )

    @classmethod
    def from_snapshot(cls, snapshot: Any) -> BatchSummary | None:
        """The batch a pyiceberg snapshot committed; None for no snapshot or one that committed no batch."""
        props = properties(snapshot)
        return cls.from_properties(props) if BATCH_ID in props else None

    @classmethod
    def of_batch(cls, snapshot: Any) -> BatchSummary:
        """The batch of a snapshot that is known to have committed one (e.g. from ``batch_snapshots``)."""
        summary = cls.from_snapshot(snapshot)
        if summary is None:
            raise ChangelakeError(f"snapshot {getattr(snapshot, 'snapshot_id', None)} committed no batch")
        return summary


@dataclass(frozen=True)
class ChangelogSummary:
    """The summary of the changelog table's snapshot that committed a batch's changelog."""

    batch_id: int
    log_start_offset: int
    log_end_offset: int
    pk_snapshot_id: int

    def to_properties(self) -> dict[str, str]:
        return {
            BATCH_ID: str(self.batch_id),
            LOG_START_OFFSET: str(self.log_start_offset),
            LOG_END_OFFSET: str(self.log_end_offset),
            PK_SNAPSHOT_ID: str(self.pk_snapshot_id),
        }

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ChangelogSummary:
        r = _Reader(props)
        return cls(
            batch_id=r.integer(BATCH_ID, required=True),
            log_start_offset=r.integer(LOG_START_OFFSET, required=True),
            log_end_offset=r.integer(LOG_END_OFFSET, required=True),
            pk_snapshot_id=r.integer(PK_SNAPSHOT_ID, required=True),
        )

    @classmethod
    def from_snapshot(cls, snapshot: Any) -> ChangelogSummary | None:
        """The batch a changelog snapshot committed; None for no snapshot or one that committed no batch."""
        props = properties(snapshot)
        return cls.from_properties(props) if BATCH_ID in props else None


def properties(snapshot: Any) -> dict[str, str]:
    """A pyiceberg snapshot's summary properties (empty for no snapshot)."""
    return dict(snapshot.summary.additional_properties) if snapshot and snapshot.summary else {}


def last_batch_of(props: Mapping[str, str]) -> int:
    """The last batch a snapshot's table state includes (a batch's snapshot or a compaction's after it; 0:
    none yet)."""
    return _Reader(props).optional_integer(BATCH_ID) or 0


def is_compaction(props: Mapping[str, str]) -> bool:
    """Whether a snapshot is a compaction's (it carries the state of the batch before it, and commits none)."""
    return props.get(OPERATION) == "compact"


def batch_of(props: Mapping[str, str]) -> int | None:
    """The batch id a snapshot's summary (PK or changelog table) says it committed, None if it committed
    none (a compaction's snapshot carries the last batch's state but commits no batch): all the readers that
    only follow the batch sequence need."""
    return None if is_compaction(props) else _Reader(props).optional_integer(BATCH_ID)


class _Reader:
    """Typed access to summary properties; a malformed value is a ChangelakeError naming its key."""

    def __init__(self, props: Mapping[str, str]):
        self.props = props

    def text(self, key: str, required: bool = False) -> str:
        """The value; a missing optional one is empty (how "none" has always been written)."""
        value = self.props.get(key)
        if value is None and required:
            raise ChangelakeError(f"malformed batch summary: {key} is missing")
        return "" if value is None else value

    def integer(self, key: str, required: bool = False) -> int:
        """The value as an integer; a missing optional one is 0 (a counter not yet recorded then)."""
        if key not in self.props and not required:
            return 0
        value = self.text(key, required)
        try:
            return int(value)
        except ValueError:
            raise _malformed(key, value, "not an integer") from None

    def optional_integer(self, key: str) -> int | None:
        return self.integer(key) if key in self.props else None

    def columns(self, key: str) -> tuple[str, ...] | None:
        value = self.text(key)
        return tuple(value.split(",")) if value else None

    def json_object(self, key: str) -> dict | None:
        """The value decoded as a JSON object, None if missing."""
        value = self.props.get(key)
        if value is None:
            return None
        try:
            decoded = json.loads(value)
        except ValueError:
            raise _malformed(key, value, "not JSON") from None
        if not isinstance(decoded, dict):
            raise _malformed(key, value, "not a JSON object")
        return decoded


def _malformed(key: str, value: Any, why: str) -> ChangelakeError:
    return ChangelakeError(f"malformed batch summary: {key} is {why} ({short_repr(value)})")


def _offsets(decoded: dict) -> dict[str, int]:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in decoded.values()):
        raise _malformed(KAFKA_OFFSETS, json.dumps(decoded), "not a JSON object of integer offsets")
    return decoded


def _positions(decoded: dict | None) -> dict[str, int] | None:
    if decoded is None:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in decoded.values()):
        raise _malformed(WRITERS, json.dumps(decoded), "not a JSON object of writer positions")
    return decoded


def may_hold(props: Mapping[str, str], position: WriterPosition) -> bool:
    """Whether a batch snapshot's properties can be ``position``'s batch, without decoding them: its recorded
    writer and number, or (committed before writers were recorded) its batch id, the number it keeps."""
    writer = props.get(WRITER)
    if writer is not None:
        return writer == position.writer and props.get(WRITER_SEQ) == str(position.seq)
    return props.get(BATCH_ID) == str(position.seq)


def writer_positions(batches: Iterable[BatchSummary]) -> dict[str, int]:
    """Every writer's last number over ``batches`` (a table's batch history): the writers' positions of a table
    whose latest batch did not record them yet (committed before writers were; see
    :attr:`BatchSummary.position`)."""
    out: dict[str, int] = {}
    for batch in batches:
        position = batch.position
        out[position.writer] = max(out.get(position.writer, 0), position.seq)
    return out


def _id_state(decoded: dict) -> AutoIncrementState:
    counter, buckets = decoded.get("counter", 0), decoded.get("buckets", {})
    ranges_ok = isinstance(buckets, dict) and all(
        isinstance(r, list) and len(r) == 2 and all(isinstance(i, int) for i in r) for r in buckets.values()
    )
    if not isinstance(counter, int) or not ranges_ok:
        raise _malformed(AUTO_INCREMENT, json.dumps(decoded), "not a counter and [next, end] ranges")
    return AutoIncrementState(counter, {key: (r[0], r[1]) for key, r in buckets.items()})
