"""Deterministic landing-batch generator for the demo tables (``changelake datagen``).

Like Flink's datagen connector, but changelog-aware: it simulates the source (a database table or an
event stream), so updates and deletes hit live keys and carry true before images, and renders each batch
in any input format. Batch ``k`` of a table depends only on the profile, the seed and ``k`` (earlier batches
are re-simulated in memory), so re-running writes identical files and new runs continue where landing ends.

A profile lives in the table spec under ``datagen:`` (every field optional)::

    datagen:
      mode: cdc              # cdc: a database table (insert/update/delete of live keys)
                             # events: every record a new event for a key drawn from `keys`
                             # refunds: the CDC stream of orders that an aggregation table sums per key
                             #   drawn from `keys`: orders inserted, corrected (update) or refunded (delete)
      records: 200           # records per batch
      keys: 100              # key cardinality
      mix: {insert: 0.6, update: 0.3, delete: 0.1}   # cdc mode
      out_of_order: 0.2      # share of updates that arrive with an older version (versioned tables)
      redelivery: 0.05       # share of records repeated later with their original Kafka offsets
      partitions: 3          # Kafka partitions (upsert-kafka)
      partial: [[id, name], [id, tier]]   # target-column groups, one per batch in turn (manifest written)
      envelope: true         # debezium-json with the schema/payload envelope
      columns: {shop_id: {min: 1, max: 5}, status: {values: [NEW, PAID]}, name: {template: "user-{}"}}
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import random
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from changelake.atomic import atomic_write_text
from changelake.errors import ChangelakeError, short_repr
from changelake.inputs.formats import DEFAULT_FORMAT, FORMATS, JsonLinesFormat, SourceEvent
from changelake.objectstore import ObjectPath
from changelake.spec import TableSpec

BASE_TIME = dt.datetime(2026, 1, 1)
_PROFILE_KEYS = {
    "mode", "records", "keys", "mix", "out_of_order", "redelivery", "partitions", "partial", "envelope",
    "columns", "format",
}  # fmt: skip


@dataclass
class Profile:
    mode: str = "cdc"
    records: int = 100
    keys: int = 100
    mix: dict[str, float] = field(default_factory=lambda: {"insert": 0.6, "update": 0.3, "delete": 0.1})
    out_of_order: float = 0.0
    redelivery: float = 0.0
    partitions: int = 3
    partial: list[list[str]] = field(default_factory=list)
    envelope: bool = False
    columns: dict[str, dict] = field(default_factory=dict)
    format: str | None = None

    @classmethod
    def of(cls, spec: TableSpec, **overrides: Any) -> Profile:
        data = {**spec.datagen, **{k: v for k, v in overrides.items() if v is not None}}
        unknown = sorted(map(str, set(data) - _PROFILE_KEYS))
        if unknown:
            raise ChangelakeError(f"{spec.full_name}: unknown datagen setting '{unknown[0]}'")
        _check_types(spec, data)
        profile = cls(**data)
        if profile.mode not in ("cdc", "events", "refunds"):
            raise ChangelakeError(
                f"{spec.full_name}: datagen mode must be cdc, events or refunds, got {profile.mode!r}"
            )
        for name in ("out_of_order", "redelivery"):
            if not 0 <= getattr(profile, name) <= 1:
                raise ChangelakeError(f"{spec.full_name}: datagen {name} must be within [0, 1]")
        if profile.records < 0 or profile.keys < 1 or profile.partitions < 1:
            raise ChangelakeError(f"{spec.full_name}: datagen records/keys/partitions must be positive")
        for group in profile.partial:
            for column in group:
                spec.column(column)
        for column in profile.columns:
            spec.column(column)
        return profile


_HINT_KEYS = {"min", "max", "values", "template"}


def _check_types(spec: TableSpec, data: dict[str, Any]) -> None:
    """The YAML types of a datagen profile, so a wrong one is a ChangelakeError, not a TypeError later."""

    def fail(name: str, expected: str) -> None:
        raise ChangelakeError(
            f"{spec.full_name}: datagen setting '{name}' must be {expected}, got {short_repr(data[name])}"
        )

    for name in ("records", "keys", "partitions"):
        if name in data and not (_integer(data[name]) and data[name] <= 10_000_000):
            fail(name, "an integer up to 10,000,000")
    for name in ("out_of_order", "redelivery"):
        if name in data and not _number(data[name]):
            fail(name, "a number")
    if "mode" in data and not isinstance(data["mode"], str):
        fail("mode", "cdc, events or refunds")
    if "envelope" in data and not isinstance(data["envelope"], bool):
        fail("envelope", "true or false")
    if "format" in data and data["format"] not in FORMATS:
        fail("format", f"one of {list(FORMATS)}")
    mix = data.get("mix", {})
    if not (isinstance(mix, dict) and set(mix) <= {"insert", "update", "delete"}):
        fail("mix", "a mapping of insert/update/delete to shares")
    if not all(_number(v) and v >= 0 for v in mix.values()) or (mix and sum(mix.values()) <= 0):
        fail("mix", "non-negative shares, not all zero")
    partial = data.get("partial", [])
    if not (isinstance(partial, list) and all(isinstance(g, list) for g in partial)):
        fail("partial", "a list of column-name lists")
    if not all(isinstance(c, str) for g in partial for c in g):
        fail("partial", "a list of column-name lists")
    columns = data.get("columns", {})
    if not isinstance(columns, dict):
        fail("columns", "a mapping of column names to hints")
    for name, hint in columns.items():
        if not isinstance(name, str) or not isinstance(hint, dict) or not set(hint) <= _HINT_KEYS:
            fail("columns", f"a mapping of column names to hints ({sorted(_HINT_KEYS)})")
        if _hint_problem(spec, name, hint):
            fail("columns", f"valid hints for '{name}': {_hint_problem(spec, name, hint)}")


def _hint_problem(spec: TableSpec, name: str, hint: dict) -> str | None:
    numeric = spec.column(name).type.name in ("FLOAT", "DOUBLE", "DECIMAL") and "template" not in hint
    bounds = [hint[k] for k in ("min", "max") if k in hint]
    if not all(_number(b) if numeric else _integer(b) for b in bounds):
        return "min and max are " + ("numbers" if numeric else "integers")
    if "min" in hint and "max" in hint and hint["min"] > hint["max"]:
        return "min <= max"
    if "values" in hint and not (isinstance(hint["values"], list) and hint["values"]):
        return "values is a non-empty list"
    template = hint.get("template")
    # Exactly one '{}' and no other brace: str.format would otherwise read attributes or pad to any width.
    if template is not None and not (
        isinstance(template, str)
        and template.count("{}") == 1
        and template.replace("{}", "").isprintable()
        and "{" not in template.replace("{}", "")
        and "}" not in template.replace("{}", "")
    ):
        return "template contains '{}' once and no other brace"
    return None


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class _Source:
    """The simulated source of one table: live rows, a clock, Kafka offsets; a batch is its events."""

    def __init__(self, spec: TableSpec, profile: Profile, seed: int, stream: str | None = None):
        self.spec, self.profile, self.seed = spec, profile, seed
        self.stream = stream or spec.full_name  # names the random stream: same stream, same data
        self.rows: dict[tuple, dict] = {}
        self.next_key = 1
        self.lsn = 0
        self.offsets = [0] * profile.partitions
        self.previous: list[SourceEvent] = []  # the last batch's events, without redelivered copies
        self.ai = spec.auto_increment_column
        self.version = spec.version_column
        self.orders: dict[int, dict] = {}  # mode refunds: the live orders by order number

    def batch(self, batch_id: int) -> list[SourceEvent]:
        rng = random.Random(f"{self.seed}:{self.stream}:{batch_id}")
        p = self.profile
        target = p.partial[(batch_id - 1) % len(p.partial)] if p.partial else None
        events = []
        for i in range(p.records):
            self.lsn += 1
            clock = BASE_TIME + dt.timedelta(hours=batch_id, seconds=i)
            event = self._next(rng, clock, target)
            event.lsn, event.ts_ms = self.lsn, int((clock - dt.datetime(1970, 1, 1)).total_seconds() * 1000)
            events.append(event)
        for event in events:
            row = event.after or event.before
            assert row is not None, "every source event has a before or an after image"
            partition = zlib.crc32(repr(self._key(row)).encode()) % p.partitions
            event.kafka = (f"{self.spec.full_name}", partition, self.offsets[partition])
            self.offsets[partition] += 1
        delivered = list(events)
        if p.redelivery:
            # At-least-once: a producer retry / consumer restart re-sends an earlier record, original offset kept.
            pool = self.previous + events
            for _ in range(round(p.redelivery * len(events))):
                copy = pool[rng.randrange(len(pool))]
                # A copy arrives after its original (it is a re-send), anywhere later in the batch.
                earliest = next((i + 1 for i, c in enumerate(delivered) if c is copy), 0)
                delivered.insert(rng.randint(earliest, len(delivered)), copy)
        self.previous = events
        return delivered

    def _key(self, row: dict) -> tuple:
        return tuple(row[k] for k in self.spec.primary_key)

    def _next(self, rng: random.Random, clock: dt.datetime, target: list[str] | None) -> SourceEvent:
        p = self.profile
        if p.mode == "refunds":
            return self._order_event(rng, clock)
        if p.mode == "events" or target is not None:
            key_row = self._key_values(rng, rng.randrange(1, p.keys + 1))
            row = {**key_row, **self._values(rng, clock, skip=set(key_row))}
            if target is not None:
                row = {c: row[c] for c in target}
            old = self.rows.get(self._key(row))
            self.rows[self._key(row)] = {**(old or {}), **row}
            # An event stream knows no before image: a repeat key is an upsert (+U), not -U/+U.
            return SourceEvent("insert" if old is None else "update", None, row)
        kind = rng.choices(list(p.mix), weights=list(p.mix.values()))[0]
        if kind == "insert" and len(self.rows) >= p.keys:
            kind = "update"
        if kind != "insert" and not self.rows:
            kind = "insert"
        if kind == "insert":
            row = {
                **self._key_values(rng, self.next_key),
                **self._values(rng, clock, skip=set(self.spec.primary_key)),
            }
            self.next_key += 1
            self.rows[self._key(row)] = row
            return SourceEvent("insert", None, row)
        key = rng.choice(sorted(self.rows))
        old = self.rows[key]
        if kind == "delete":
            del self.rows[key]
            return SourceEvent("delete", old, None)
        new = {**old, **self._values(rng, clock, skip=set(self.spec.primary_key))}
        if self.version and rng.random() < p.out_of_order:
            # A stale version arriving late: the versioned engine must ignore it, so the source keeps `old`.
            stale = old[self.version] - dt.timedelta(seconds=rng.randint(1, 3600))
            return SourceEvent("update", old, {**new, self.version: stale})
        self.rows[key] = new
        return SourceEvent("update", old, new)

    def _order_event(self, rng: random.Random, clock: dt.datetime) -> SourceEvent:
        """mode refunds: one change of an orders table whose rows carry the aggregation table's columns, its
        key (a shop) drawn from ``keys``. A new order is an insert; a corrected one an update whose before
        image is the old order; a refund deletes the order (its before image). Fed to a ``table.agg.retract``
        table, the before images take their values back, so its rows equal the live orders' sums per key."""
        p = self.profile
        kind = rng.choices(list(p.mix), weights=list(p.mix.values()))[0]
        if kind != "insert" and not self.orders:
            kind = "insert"
        keys = set(self.spec.primary_key)
        if kind == "insert":
            row = {**self._key_values(rng, rng.randrange(1, p.keys + 1)), **self._values(rng, clock, keys)}
            self.orders[self.next_key] = row
            self.next_key += 1
            return SourceEvent("insert", None, row)
        order = rng.choice(sorted(self.orders))
        old = self.orders[order]
        if kind == "delete":
            del self.orders[order]
            return SourceEvent("delete", old, None)
        self.orders[order] = new = {**old, **self._values(rng, clock, keys)}
        return SourceEvent("update", old, new)

    def _key_values(self, rng: random.Random, n: int) -> dict:
        out = {}
        for k in self.spec.primary_key:
            hint = self.profile.columns.get(k, {})
            if len(self.spec.primary_key) > 1 and ("min" in hint or "values" in hint):
                out[k] = self._value(rng, self.spec.column(k), hint, BASE_TIME)
            else:
                out[k] = _render_key(self.spec.column(k).type.name, hint, n)
        return out

    def _values(self, rng: random.Random, clock: dt.datetime, skip: set[str]) -> dict:
        return {
            c.name: self._value(rng, c, self.profile.columns.get(c.name, {}), clock)
            for c in self.spec.columns
            if c.name not in skip and c.name != self.ai
        }

    def _value(self, rng: random.Random, column, hint: dict, clock: dt.datetime) -> Any:
        t = column.type
        if "values" in hint:
            return rng.choice(hint["values"])
        if "template" in hint:
            return hint["template"].format(rng.randint(hint.get("min", 1), hint.get("max", 1000)))
        if t.name in ("TIMESTAMP", "TIMESTAMP_LTZ"):
            return clock
        if t.name == "DATE":
            return clock.date()
        if t.name == "TIME":
            return clock.time().isoformat()
        if t.name == "BOOLEAN":
            return rng.random() < 0.5
        if t.name == "DECIMAL":
            lo, hi = hint.get("min", 1), hint.get("max", 100)
            return decimal.Decimal(rng.uniform(lo, hi)).quantize(decimal.Decimal(1).scaleb(-t.scale))
        if t.name in ("FLOAT", "DOUBLE"):
            return round(rng.uniform(hint.get("min", 0), hint.get("max", 1)), 6)
        if t.is_integer:
            return rng.randint(hint.get("min", 1), hint.get("max", 100))
        if t.name in ("BINARY", "BYTES"):
            return rng.randbytes(4)
        return f"{column.name}-{rng.randint(1, hint.get('max', 1000))}"


def _render_key(type_name: str, hint: dict, n: int) -> Any:
    if "template" in hint:
        return hint["template"].format(n)
    if type_name in ("STRING", "CHAR"):
        return f"k{n}"
    return n


@dataclass
class Generated:
    table: str
    batch_id: int
    path: Path | ObjectPath
    messages: int
    changes: dict[str, int]


def produce(
    spec: TableSpec,
    config: dict[str, str],
    state: Path,
    batches: int,
    seed: int = 42,
    stream: str | None = None,
    **overrides: Any,
) -> list[Generated]:
    """Produce ``batches`` batches of the table's simulated source into its Kafka topic (a table whose
    ``source:`` names one), created if missing with the profile's partitions (upsert-kafka; one for the CDC
    formats, whose order is the partition's). ``state`` (a JSON file) remembers how many were produced, so the
    next call continues the same deterministic stream; a redelivered record is produced again, at a new offset,
    as an at-least-once producer's retry is."""
    from changelake.inputs import kafka

    kafka_options = spec.source_options.kafka
    profile = Profile.of(spec, **overrides)
    if kafka_options is None or kafka_options.pattern is not None or len(kafka_options.topics) != 1:
        raise ChangelakeError(f"{spec.full_name}: datagen produces into a source of one named Kafka topic")
    if profile.partial:
        raise ChangelakeError(
            f"{spec.full_name}: a Kafka topic carries no target columns: a datagen profile with 'partial' updates "
            "cannot produce into it (land those batches as files with their manifests)"
        )
    fmt = str(spec.source.get("format"))
    (topic,) = kafka_options.topics
    kafka.ensure_topic(config, topic, profile.partitions if fmt == "upsert-kafka" else 1)
    done = int(json.loads(state.read_text())["batches"]) if state.is_file() else 0
    source = _Source(spec, profile, seed, stream)
    out = []
    for batch_id in range(1, done + batches + 1):
        events = source.batch(batch_id)
        if batch_id <= done:
            continue
        writer = FORMATS[fmt]
        assert isinstance(writer, JsonLinesFormat), "every topic format is a JSON-lines format"
        lines = writer.render(spec, events, envelope=profile.envelope)
        messages = kafka.produce_lines(config, topic, spec, lines)
        state.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(state, json.dumps({"batches": batch_id}) + "\n")
        kinds = {"insert": 0, "update": 0, "delete": 0}
        for c in source.previous:
            kinds[c.kind] += 1
        kinds["redelivered"] = len(events) - len(source.previous)
        out.append(Generated(spec.full_name, batch_id, Path(f"{kafka.PREFIX}{topic}"), messages, kinds))
    return out


def generate(
    spec: TableSpec,
    landing_dir: Path | ObjectPath,
    batches: int,
    seed: int = 42,
    fmt: str | None = None,
    start: int | None = None,
    stream: str | None = None,
    applied: int = 0,
    **overrides: Any,
) -> list[Generated]:
    """Write ``batches`` landing batches for ``spec`` after the last landed one (or from ``start``).

    ``applied`` is the table's landing writer's last applied number: numbering continues after it too, so
    batches whose files were cleaned up after their apply are not landed again under their numbers (other
    writers -- SQL statements, API calls -- have sequences of their own and do not count). ``stream`` names the
    random stream (default: the table name); two tables with the same stream, seed and profile get the same
    logical changes.
    """
    from changelake.inputs.landing import landed_batches

    profile = Profile.of(spec, **overrides)
    fmt = fmt or profile.format or spec.source.get("format") or DEFAULT_FORMAT
    if fmt not in FORMATS:
        raise ChangelakeError(f"unknown format {fmt!r}; formats: {list(FORMATS)}")
    writer = FORMATS[fmt]
    landed = landed_batches(landing_dir, spec)
    first = start if start is not None else max([*landed, applied]) + 1
    directory = landing_dir / spec.full_name
    remote = isinstance(directory, ObjectPath)
    scratch = tempfile.TemporaryDirectory(prefix="changelake-datagen-") if remote else None
    if not isinstance(directory, ObjectPath):
        directory.mkdir(parents=True, exist_ok=True)
    source = _Source(spec, profile, seed, stream)
    out = []
    for batch_id in range(1, first + batches):
        events = source.batch(batch_id)
        if batch_id < first:
            continue
        path = directory / f"{batch_id}.{writer.extension}"
        # Written beside the batch and renamed into place, or written locally and PUT (an object appears whole).
        tmp = (
            Path(scratch.name) / path.name
            if scratch is not None
            else Path(path.with_name(f".{path.name}.tmp"))
        )
        messages = writer.write(spec, events, tmp, envelope=profile.envelope)
        if profile.partial:
            target = profile.partial[(batch_id - 1) % len(profile.partial)]
            manifest = path.with_name(f"{batch_id}.manifest.json")
            text = json.dumps({"target_columns": target}) + "\n"
            if isinstance(manifest, ObjectPath):
                manifest.store.put(manifest, text.encode())
            else:
                atomic_write_text(manifest, text)
        # the batch file appears whole (after its manifest): appliers never see half a batch
        if isinstance(path, ObjectPath):
            path.store.put(path, tmp.read_bytes())
            tmp.unlink()
        else:
            tmp.replace(path)
        kinds = {"insert": 0, "update": 0, "delete": 0}
        for c in source.previous:
            kinds[c.kind] += 1
        kinds["redelivered"] = len(events) - len(source.previous)
        out.append(Generated(spec.full_name, batch_id, path, messages, kinds))
    if scratch is not None:
        scratch.cleanup()
    return out
