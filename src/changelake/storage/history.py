"""A table's batch history: every batch it took, readable after its snapshot has expired.

A batch's snapshot summary (:class:`~changelake.storage.summary.BatchSummary`) says what the batch was: its
input checksum (a replay with other input is refused), its source counters, its dead letters, how it was read.
Snapshots expire (:mod:`changelake.storage.maintenance`); before a batch's snapshot goes, its summary is
written to the table's **history**: gzip JSON-lines chunk files under ``<ns>/.changelake/<table>/history/``
(:func:`changelake.storage.files.side_location`; older chunks stay under ``metadata/changelake/``), named by the
table property ``changelake.history`` (a JSON list of chunks with their first and last batch), set in the same
metadata commit that removes the snapshots. The table's state itself (last batch, Kafka offsets, log ends,
auto-increment ids, running totals) is in its latest snapshot and never needs the history.

The history keeps the last ``batch-history.num-retained`` batches (100,000 by default, about ten weeks of
minute batches in a few MB); older ones are dropped with their dead-letter files. A replay of a batch older
than that is still never applied twice (batch ids only go forward), but its input can no longer be checked:
the apply says so and changes nothing.

pyarrow-free and pyiceberg-free: the JVM-free read commands (status, dead letters) read it too.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from changelake.storage import summary
from changelake.storage.summary import BatchSummary

HISTORY = summary.PREFIX + "history"  # table property: the history's chunk files
#: Keys a history entry leaves out: state only the latest snapshot needs (the next batch continues from it).
_STATE_ONLY = (summary.KAFKA_OFFSETS, summary.AUTO_INCREMENT, summary.WRITERS)
#: Chunks the history keeps before they are merged into one.
MAX_CHUNKS = 8


@dataclass(frozen=True)
class Chunk:
    path: str
    first: int  # first and last batch id in the file
    last: int
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "first": self.first, "last": self.last, "count": self.count}


@dataclass(frozen=True)
class Entry:
    """One batch of the history: the snapshot that committed it (expired since) and its summary."""

    snapshot_id: int
    batch: BatchSummary


def chunks(properties: Mapping[str, str]) -> list[Chunk]:
    """The history's chunk files, oldest first, from the table's properties."""
    raw = properties.get(HISTORY)
    if not raw:
        return []
    try:
        return [Chunk(c["path"], int(c["first"]), int(c["last"]), int(c["count"])) for c in json.loads(raw)]
    except (ValueError, KeyError, TypeError) as e:
        from changelake.errors import ChangelakeError

        raise ChangelakeError(f"malformed table property {HISTORY}: {e}") from None


def chunks_property(items: Iterable[Chunk]) -> str:
    return json.dumps([c.to_dict() for c in items])


def read(open_bytes: Callable[[str], bytes], properties: Mapping[str, str]) -> list[Entry]:
    """Every batch in the history, oldest first (``open_bytes`` reads a file's bytes by location)."""
    out: list[Entry] = []
    for chunk in chunks(properties):
        out += decode(open_bytes(chunk.path))
    return out


def decode(data: bytes) -> list[Entry]:
    out = []
    for line in gzip.decompress(data).splitlines():
        if line.strip():
            record = json.loads(line)
            out.append(Entry(int(record["snapshot_id"]), BatchSummary.from_properties(record["properties"])))
    return out


def encode(entries: Iterable[tuple[int, Mapping[str, str]]]) -> bytes:
    """A chunk file's bytes: (snapshot id, batch snapshot summary) per batch; only changelake's properties,
    without the state only the latest snapshot needs."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as out:
        for snapshot_id, props in entries:
            kept = {k: v for k, v in props.items() if k.startswith(summary.PREFIX) and k not in _STATE_ONLY}
            out.write(
                (json.dumps({"snapshot_id": snapshot_id, "properties": kept}, sort_keys=True) + "\n").encode()
            )
    return buffer.getvalue()


def batches(
    entries: list[Entry], snapshots: Sequence[tuple[int, Mapping[str, str]]]
) -> list[tuple[int, BatchSummary]]:
    """The table's batches, oldest first, as (snapshot id, summary): the history's, then those of the retained
    snapshots (``snapshots``: the batch snapshots of the main branch, oldest first), each batch once."""
    out = {e.batch.batch_id: (e.snapshot_id, e.batch) for e in entries}
    for snapshot_id, props in snapshots:
        batch = BatchSummary.from_properties(props)
        out[batch.batch_id] = (snapshot_id, batch)
    return [out[b] for b in sorted(out)]
