"""Table specs: one YAML file per primary-key table, in Fluss's vocabulary, validated as Fluss validates.

Example (``$CHANGELAKE_TABLES/shop.orders.yaml``)::

    name: shop.orders
    columns:
      - {name: order_id, type: BIGINT}
      - {name: amount, type: "DECIMAL(10,2)"}
    primary_key: [order_id]
    bucket_key: [order_id]        # optional; default = primary key minus partition keys
    partition_keys: []            # optional; must be inside the primary key
    options:
      bucket.num: 4
      table.delete.behavior: allow
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from changelake.aggregate_signatures import AGGREGATE_SIGNATURES, DEFAULT_FUNCTION, retract_refused
from changelake.errors import SpecError, WriteRefusedError, java_list, short_repr
from changelake.identifiers import check_column_name, check_table_name, derived_names, split_table_name
from changelake.lru import BoundedLRU
from changelake.source_options import SourceOptions, parse_source
from changelake.types import INT_RANGES, NANOS_SUFFIX, DataType, parse_type

DELETE_BEHAVIORS = ("allow", "ignore", "disable")
CHANGELOG_IMAGES = ("full", "wal")
MERGE_ENGINES = ("first_row", "versioned", "aggregation")
#: Fluss's ``MergeMode``: how a write meets the table's merge engine (docs/semantics.md §4.5). ``default``
#: merges through it; ``overwrite`` bypasses it and replaces rows as given (engine/merge.py OverwriteMerger).
MERGE_MODES = ("default", "overwrite")


def merge_mode_of(value: str | None) -> str | None:
    """A merge mode as given by a user (any case): None for the default mode, ``"overwrite"``; refused otherwise."""
    if value is None:
        return None
    mode = str(value).strip().lower()
    if mode not in MERGE_MODES:
        raise WriteRefusedError(
            f"Unknown merge mode {short_repr(value)}; expected one of {java_list(m.upper() for m in MERGE_MODES)}."
        )
    return None if mode == "default" else mode


# Options accepted for Fluss compatibility that do not change changelake's behaviour.
_PASSTHROUGH_OPTIONS = {
    "sink.producer-id": None,
    "lookup.async": ("true", "false"),
}
# Fluss's table options (``ConfigOptions``, ``table.*``) that apply to a primary-key table and do not change
# changelake's behaviour: accepted and validated as Fluss's ``TableDescriptorValidation`` does, with its
# messages. A value kind is a tuple of enum values (case-insensitive), "int", "bool", "duration" or "string".
_FLUSS_TABLE_OPTIONS: dict[str, tuple[str, ...] | str] = {
    "table.replication.factor": "int",
    "table.log.format": ("arrow", "indexed", "compacted"),
    "table.log.arrow.compression.type": ("none", "lz4_frame", "zstd"),
    "table.log.arrow.compression.zstd.level": "int",
    "table.kv.format": ("compacted", "indexed"),
    "table.kv.format-version": "int",
    "table.kv.standby-replica.enabled": "bool",
    "table.log.ttl": "duration",
    "table.log.tiered.local-segments": "int",
    "table.log.local-ttl": "duration",
    "table.datalake.enabled": "bool",
    "table.datalake.historical-partition.enabled": "bool",
    "table.datalake.format": ("paimon", "lance", "iceberg", "hudi"),
    "table.datalake.freshness": "duration",
    "table.datalake.auto-compaction": "bool",
    "table.datalake.auto-expire-snapshot": "bool",
    "table.auto-partition.enabled": "bool",
    "table.auto-partition.key": "string",
    "table.auto-partition.time-unit": ("hour", "day", "month", "quarter", "year"),
    "table.auto-partition.time-format": "string",
    "table.auto-partition.time-zone": "string",
    "table.auto-partition.num-precreate": "int",
    "table.auto-partition.num-retention": "int",
}
#: Merge-on-read or copy-on-write (Iceberg's ``write.*.mode`` values).
WRITE_MODES = ("merge-on-read", "copy-on-write")
# changelake's storage options: how batches are written and how the table is kept, in Iceberg's and Paimon's
# words (docs/configuration.md#storage-and-maintenance). Value kinds as _FLUSS_TABLE_OPTIONS's.
_STORAGE_OPTIONS: dict[str, tuple[str, ...] | str] = {
    "write.merge.mode": WRITE_MODES,
    "write.update.mode": WRITE_MODES,
    "write.delete.mode": WRITE_MODES,
    "write-only": "bool",
    "snapshot.num-retained.min": "int",
    "snapshot.num-retained.max": "int",
    "snapshot.time-retained": "duration",
    "num-sorted-run.compaction-trigger": "int",
    "compaction.max-size-amplification-percent": "int",
    "batch-history.num-retained": "int",
}


@dataclass(frozen=True)
class StorageOptions:
    """A table's storage options with their defaults (:data:`_STORAGE_OPTIONS`)."""

    write_mode: str = "merge-on-read"  # write.merge.mode: how a batch (a MERGE of changes) is written
    write_only: bool = False  # write-only: applies never compact or expire (a maintenance job does)
    snapshots_min: int = 10  # snapshot.num-retained.min
    snapshots_max: int = 30  # snapshot.num-retained.max
    time_retained_s: float = 3600.0  # snapshot.time-retained
    compaction_trigger: int = 5  # num-sorted-run.compaction-trigger: delta files of a partition merged at
    max_amplification_percent: int = 50  # compaction.max-size-amplification-percent: full compaction at
    history_retained: int = (
        100_000  # batch-history.num-retained: batches whose input a replay is checked against
    )


_KNOWN_OPTIONS = {
    "bucket.num",
    "auto-increment.fields",
    "table.auto-increment.cache-size",
    "table.merge-engine.versioned.ver-column",
    "bucket.key",
    "table.delete.behavior",
    "table.changelog.image",
    "table.merge-engine",
    "sink.ignore-delete",
    "table.agg.retract",
    "ignore-update-before",  # Paimon's: -U records are dropped, never retracted (docs/semantics.md §13)
    *_PASSTHROUGH_OPTIONS,
    *_FLUSS_TABLE_OPTIONS,
    *_STORAGE_OPTIONS,
}
_SPEC_KEYS = {
    "name",
    "columns",
    "primary_key",
    "bucket_key",
    "partition_keys",
    "options",
    "comment",
    "source",
    "datagen",
}
_PARTITION_KEY_TYPES = {
    "CHAR",
    "STRING",
    "BOOLEAN",
    "BINARY",
    "BYTES",
    "TINYINT",
    "SMALLINT",
    "INT",
    "DATE",
    "TIME",
    "BIGINT",
    "FLOAT",
    "DOUBLE",
    "TIMESTAMP",
    "TIMESTAMP_LTZ",
}


@dataclass(frozen=True)
class Column:
    name: str
    type: DataType
    nullable: bool = True


@dataclass(frozen=True)
class TableSpec:
    """A validated primary-key table definition."""

    namespace: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    bucket_key: tuple[str, ...]
    partition_keys: tuple[str, ...]
    bucket_num: int
    options: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    datagen: dict[str, Any] = field(default_factory=dict)
    comment: str = ""

    @property
    def source_options(self) -> SourceOptions:
        return parse_source(self.source, self.full_name)

    @property
    def full_name(self) -> str:
        return f"{self.namespace}.{self.table}"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise SpecError(f"Table {self.full_name} has no column '{name}'")

    @property
    def merge_engine(self) -> str | None:
        return self.options.get("table.merge-engine")

    @property
    def auto_increment_column(self) -> str | None:
        return self.options.get("auto-increment.fields")

    @property
    def auto_increment_cache_size(self) -> int:
        return int(self.options.get("table.auto-increment.cache-size", 100_000))

    @property
    def version_column(self) -> str | None:
        """The versioned engine's version column (another engine ignores the option, as Fluss's does)."""
        if self.merge_engine != "versioned":
            return None
        return self.options.get("table.merge-engine.versioned.ver-column")

    def agg_function(self, column: str) -> str:
        """The aggregation function of a column (``last_value_ignore_nulls`` when none is declared); its
        parameters: :func:`changelake.engine.aggregates.of_column`."""
        return self.options.get(f"fields.{column}.agg", DEFAULT_FUNCTION)

    @property
    def delete_behavior(self) -> str:
        """Effective ``table.delete.behavior``: explicit, else allow (last-row) or ignore (other engines)."""
        return self.options.get("table.delete.behavior") or (
            "allow" if self.merge_engine is None else "ignore"
        )

    @property
    def agg_retract(self) -> bool:
        """``table.agg.retract``: an aggregation table's ``-U`` (and, unless a delete behaviour is set, ``-D``)
        records take their values back (docs/semantics.md §4.7)."""
        return self.merge_engine == "aggregation" and self.options.get("table.agg.retract") == "true"

    def ignores_retract(self, column: str) -> bool:
        """``fields.<column>.ignore-retract``: retractions leave this column as it is."""
        return self.options.get(f"fields.{column}.ignore-retract") == "true"

    @property
    def ignore_update_before(self) -> bool:
        """Paimon's ``ignore-update-before``: ``-U`` records are dropped before the table (``RowKindFilter``)."""
        return self.options.get("ignore-update-before") == "true"

    @property
    def retracts_update_before(self) -> bool:
        """Whether ``-U`` records retract (else they are dropped): a retraction table, unless
        ``sink.ignore-delete`` (Paimon's ``ignore-delete``) or Paimon's ``ignore-update-before`` drops them before
        the table, as a Flink sink and Paimon's ``RowKindFilter`` do."""
        return self.agg_retract and not self.ignore_delete and not self.ignore_update_before

    @property
    def retracts_delete(self) -> bool:
        """Whether ``-D`` records retract: a retraction table with no explicit ``table.delete.behavior`` (an
        explicit one keeps its meaning: ``allow`` -- remove-record-on-delete -- removes the row, ``ignore`` drops
        the delete, ``disable`` refuses it) and no ``sink.ignore-delete``."""
        return self.agg_retract and not self.ignore_delete and "table.delete.behavior" not in self.options

    @property
    def changelog_image(self) -> str:
        return self.options.get("table.changelog.image", "full")

    @property
    def ignore_delete(self) -> bool:
        return self.options.get("sink.ignore-delete", "false") == "true"

    @property
    def storage(self) -> StorageOptions:
        """How batches are written and the table kept (validated when the spec loaded)."""
        o, d = self.options, StorageOptions()
        return StorageOptions(
            write_mode=o.get("write.merge.mode", d.write_mode),
            write_only=o.get("write-only", "false") == "true",
            snapshots_min=int(o.get("snapshot.num-retained.min", d.snapshots_min)),
            snapshots_max=int(o.get("snapshot.num-retained.max", d.snapshots_max)),
            time_retained_s=(
                _option_value("snapshot.time-retained", o["snapshot.time-retained"]) / 1e9  # type: ignore[operator]
                if "snapshot.time-retained" in o
                else d.time_retained_s
            ),
            compaction_trigger=int(o.get("num-sorted-run.compaction-trigger", d.compaction_trigger)),
            max_amplification_percent=int(
                o.get("compaction.max-size-amplification-percent", d.max_amplification_percent)
            ),
            history_retained=int(o.get("batch-history.num-retained", d.history_retained)),
        )

    @property
    def write_mode(self) -> str:
        return self.storage.write_mode

    @property
    def log_ttl_s(self) -> float:
        """``table.log.ttl``: how long changelog records are kept (Fluss's default: 7 days)."""
        value = self.options.get("table.log.ttl")
        return 7 * 86_400.0 if value is None else _option_value("table.log.ttl", value) / 1e9  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.full_name,
            "columns": [
                {"name": c.name, "type": str(c.type), **({} if c.nullable else {"nullable": False})}
                for c in self.columns
            ],
            "primary_key": list(self.primary_key),
            "bucket_key": list(self.bucket_key),
            "partition_keys": list(self.partition_keys),
            "options": {"bucket.num": self.bucket_num, **self.options},
        }
        if self.source:
            out["source"] = dict(self.source)
        if self.datagen:
            out["datagen"] = dict(self.datagen)
        if self.comment:
            out["comment"] = self.comment
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "<dict>") -> TableSpec:
        """Validate a spec mapping (Fluss rules, docs/semantics.md §1) and return the TableSpec."""
        if not isinstance(data, dict):
            raise SpecError(f"{origin}: expected a mapping with name, columns and primary_key")
        try:
            return _build(data)
        except SpecError as e:
            raise SpecError(f"{origin}: {e}") from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> TableSpec:
        path = Path(path)
        return cls.from_dict(read_yaml(path), origin=str(path))


#: Longest spec file read (a spec is a few hundred bytes; a limit keeps a wrong file from filling memory).
MAX_SPEC_BYTES = 1 << 20
#: Largest document a spec may expand to with its aliases resolved, counted as nodes plus scalar characters
#: (a file without aliases stays below about twice its size). An alias bomb ("billion laughs": nine lists of
#: nine aliases of the list before) is a few hundred bytes that expand to gigabytes when built or printed.
MAX_SPEC_EXPANDED = 2 * MAX_SPEC_BYTES


class _TooLarge(Exception):
    """A spec document that its aliases expand past :data:`MAX_SPEC_EXPANDED` (or into a cycle)."""


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last silently) and a
    document whose aliases expand it past :data:`MAX_SPEC_EXPANDED`, before any Python object is built."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # '<<' merges; explicit keys override merged ones, as YAML defines
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in seen
                except TypeError:
                    continue  # unhashable: the base class reports it
                if repeated:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found the key {short_repr(key)} twice",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a composed document whose aliases expand it past :data:`MAX_SPEC_EXPANDED` or refer to a node
    that contains them. Each node's expanded size is computed once (aliases share the node they name), so
    this takes time linear in the file however much the aliases would expand."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1 + len(node.value)
            continue
        children = (
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
        )
        if finished:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_SPEC_EXPANDED:
                raise _TooLarge(
                    f"its aliases expand it past {MAX_SPEC_EXPANDED:,} nodes and characters (line "
                    f"{node.start_mark.line + 1}); not a table spec"
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise _TooLarge(f"an alias at line {node.start_mark.line + 1} refers to a node that contains it")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)


def read_yaml(path: Path) -> Any:
    """Parse a spec file: UTF-8 YAML, bounded size, no repeated keys; any problem is a SpecError."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise SpecError(f"{path}: cannot read the spec: {e.strerror or e}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: larger than {MAX_SPEC_BYTES} bytes; not a table spec")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start + 1})") from None
    try:
        return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except _TooLarge as e:
        raise SpecError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    except RecursionError:
        raise SpecError(f"{path}: not valid YAML: nested too deep") from None


#: The fields of a ``status`` row (docs/cli.md), for the rows of specs that did not load.
_STATUS_FIELDS = (
    "table", "exists", "last_batch", "rows", "snapshots", "history_batches", "files", "bytes",
    "last_maintenance", "last_commit", "changelog_records", "pending_batches", "problem", "quarantined", "redelivered",
    "deduplicated",
)  # fmt: skip


class SpecDirectory(dict[str, TableSpec]):
    """The specs of a spec directory that loaded, by ``namespace.table``, and in ``problems`` the error of
    each spec file that did not (unreadable, too large, not YAML, an alias bomb, invalid) under the table it
    declares (else its file name without the extension when that is a table name, else the file name).

    One broken file does not hide the other tables. Looking a broken table up (``in``, ``[]``, ``get``)
    raises its error rather than treating the table as absent, so a command addressed to it fails naming
    the file; iterating yields the tables that loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: dict[str, SpecError] = {}

    def _refuse_broken(self, table: object) -> None:
        error = self.problems.get(table) if isinstance(table, str) else None
        if error is not None:
            raise SpecError(str(error))

    def __contains__(self, table: object) -> bool:
        self._refuse_broken(table)
        return super().__contains__(table)

    def __getitem__(self, table: str) -> TableSpec:
        self._refuse_broken(table)
        return super().__getitem__(table)

    def get(self, table: str, default: Any = None) -> Any:
        self._refuse_broken(table)
        return super().get(table, default)

    def copy(self) -> SpecDirectory:
        """A copy the caller may change (its specs are frozen, shared)."""
        copied = SpecDirectory()
        copied.update(dict.items(self))
        copied.problems = dict(self.problems)
        return copied

    def check(self) -> None:
        """Raise a SpecError naming every spec file that did not load (after a command did the others)."""
        if self.problems:
            raise SpecError(
                f"{len(self.problems)} table spec(s) did not load; their tables were skipped: "
                + "; ".join(f"{table}: {error}" for table, error in sorted(self.problems.items()))
            )

    def status_rows(self, like: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """A ``status`` row per spec file that did not load, shaped as ``like`` (another table's row): its
        ``problem`` the error naming the file, its numbers 0, the rest (``exists`` too) unknown (None)."""
        shape = like or dict.fromkeys(_STATUS_FIELDS, 0)
        blank = {k: 0 if type(v) is int else None for k, v in shape.items()}
        return [{**blank, "table": t, "problem": str(e)} for t, e in sorted(self.problems.items())]


def _table_of_broken_spec(path: Path, data: Any, taken: dict[str, SpecError]) -> str:
    """Under which name a spec file that did not load is reported: the table it declares, else its file name
    without the extension when that is a table name (``shop.orders.yaml``), else its file name."""
    declared = data.get("name") if isinstance(data, dict) else None
    for name in (declared, path.stem):
        try:
            split_table_name(name)
        except SpecError:
            continue
        if name not in taken:
            return str(name)
    return path.name


def load_specs(tables_dir: str | Path) -> SpecDirectory:
    """Load every ``*.yaml``/``*.yml`` spec in ``tables_dir``, keyed by ``namespace.table``; a file that
    does not load is kept in ``problems`` (:class:`SpecDirectory`) and does not stop the others.

    Refuses two specs whose derived names collide (``a__b.c`` and ``a.b__c`` both give the view
    ``a__b__c``; names compare case-insensitively, as Spark's do): the whole directory is ambiguous then."""
    directory = Path(tables_dir)
    if not directory.is_dir():
        return SpecDirectory()
    started = time.time_ns()
    paths = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    identities = tuple(_file_identity(p) for p in paths)
    key = (str(directory.resolve()), identities)
    cached = _LOADED.get(key)
    if cached is None:
        cached = _load_spec_files(directory, paths)
        # A file changed within a clock tick of this read could change again with the same times and size
        # ("racy" as git calls it): kept only once every file is older than that.
        if all(i[-1] is not None and i[-1] < started - _RACY_NS for i in identities):
            _LOADED.put(key, cached)
    return cached.copy()


#: Spec directories as last loaded, by their files' identities: an apply reads its table's spec, and a
#: process applying batch after batch (the endpoint, a DAG's worker, ``changelake stream``) re-parsed every
#: spec file each time (1.2 ms for one file; a directory of 50 specs took ~60 ms a batch).
_LOADED: BoundedLRU[SpecDirectory] = BoundedLRU(8)
#: File times come from a coarse clock (a few ms a tick): a file changed this recently is read every time.
_RACY_NS = 100_000_000


def _file_identity(path: Path) -> tuple:
    """What changes when a spec file does (any write changes its ctime; an editor's save, its inode too); a
    file that cannot be read is read again each time, to report its error as it is now."""
    try:
        st = path.stat()
    except OSError:
        return (path.name, None)
    return (path.name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _load_spec_files(directory: Path, paths: list[Path]) -> SpecDirectory:
    specs = SpecDirectory()
    owners: dict[str, tuple[str, Path]] = {}
    for path in paths:
        data = None
        try:
            data = read_yaml(path)
            spec = TableSpec.from_dict(data, origin=str(path))
        except SpecError as e:
            specs.problems[_table_of_broken_spec(path, data, specs.problems)] = e
            continue
        if spec.full_name in specs.keys():  # the keys: a broken file naming the table is not a second one
            raise SpecError(f"{path}: table {spec.full_name} is defined twice in {directory}")
        check_collisions(spec, {n: owner for n, (owner, _) in owners.items()}, str(path))
        for name in derived_names(spec.namespace, spec.table):
            owners[name] = (spec.full_name, path)
        specs[spec.full_name] = spec
    return specs


def check_new_table(spec: TableSpec, existing: Iterable[str], origin: str) -> None:
    """The one naming rule for a table about to be created beside the tables ``existing`` (full names: those
    in the catalog and those with spec files): a name that may be declared (no reserved suffix; a TableSpec
    built by hand never went through :func:`check_table_name`), and no derived name another table has."""
    check_table_name(spec.full_name)
    taken: dict[str, str] = {}
    for full_name in existing:
        namespace, _, table = full_name.partition(".")
        for name in derived_names(namespace, table):
            taken.setdefault(name, full_name)
    check_collisions(spec, taken, origin)


def check_collisions(spec: TableSpec, taken: dict[str, str], origin: str) -> None:
    """Refuse ``spec`` if a name derived from it (view, changelog table, Airflow task) is already
    derived from another table; ``taken`` maps derived names (case-folded) to the table they belong to."""
    for name in derived_names(spec.namespace, spec.table):
        other = taken.get(name)
        if other is not None and other != spec.full_name:
            raise SpecError(
                f"{origin}: table {spec.full_name} collides with table {other}: both derive the name "
                f"'{name}' (views <namespace>__<table>[__changelog|__input], tables <table>__changelog; "
                "compared case-insensitively)"
            )


def _key_list(data: dict[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"'{key}' must be a list of column names, got {short_repr(value)}")
    return tuple(value)


_DIGITS = re.compile(r"[0-9]{1,10}")


def _refuse_log_table(data: dict[str, Any]) -> None:
    """A spec without a primary key is a Fluss log table, which changelake does not keep. What Fluss 0.9.1 refuses
    such a table for comes first, in Fluss's order and words: an auto-increment column (``Schema``'s check), a
    merge engine and a delete behaviour (``TableDescriptorValidation.checkMergeEngine``/``checkDeleteBehavior``)."""
    options = _normalize_options(data.get("options") or {})
    if options.get("auto-increment.fields"):
        raise SpecError("Auto increment column can only be used in primary-key table.")
    if "table.merge-engine" in options:
        raise SpecError("Merge engine is only supported in primary key table.")
    if "table.delete.behavior" in options:
        raise SpecError("The 'table.delete.behavior' configuration is only supported for primary key tables.")
    raise SpecError("a changelake table needs a primary_key (log tables are not supported)")


def _normalize_options(raw: Any) -> dict[str, str]:
    """Lower-case enum values, map the seed documents' option names to Fluss's (docs/semantics.md §13)."""
    if not isinstance(raw, dict):
        raise SpecError(f"'options' must be a mapping of option names to values, got {short_repr(raw)}")
    for k, v in raw.items():
        if not isinstance(k, str) or isinstance(v, dict | list | set) or v is None:
            raise SpecError(
                f"Option {short_repr(k)}: expected a name with a single value, got {short_repr(v)}"
            )
    opts = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in raw.items()}
    # On a retraction table, remove-record-on-delete false means what Paimon's does: a delete retracts (no
    # delete behaviour is set), not "deletes are errors".
    retract = opts.get("table.agg.retract", "").lower() == "true"
    out: dict[str, str] = {}
    aliases: dict[str, str] = {}  # released name -> alias it came from

    def put(key: str, value: str, alias: str | None = None) -> None:
        if key in out and out[key] != value:
            first = aliases.get(key, key)
            raise SpecError(
                f"Option '{alias or key}' = '{value}' conflicts with '{first}' = '{out[key]}' "
                f"(both set '{key}')"
            )
        out[key] = value
        if alias:
            aliases[key] = alias

    for key, value in opts.items():
        if key.startswith("table.merge-engine.aggregate."):
            rest = key[len("table.merge-engine.aggregate.") :]
            if rest.endswith(".listagg-delimiter"):
                put(f"fields.{rest[: -len('.listagg-delimiter')]}.listagg.delimiter", value, key)
            else:
                put(f"fields.{rest}.agg", value, key)
        elif key == "ignore-delete":  # Paimon's name: drops -D and -U before the table (§4.7)
            if value.lower() not in ("true", "false"):
                raise SpecError(f"Option '{key}' must be true or false, got '{value}'")
            put("sink.ignore-delete", value.lower(), key)
        elif key in ("table.agg.remove-record-on-delete", "aggregation.remove-record-on-delete"):
            if value.lower() not in ("true", "false"):
                raise SpecError(f"Option '{key}' must be true or false, got '{value}'")
            if value.lower() == "true" or not retract:
                put("table.delete.behavior", "allow" if value.lower() == "true" else "disable", key)
            if value.lower() == "true":
                _refuse_ignore_retract_with(key, opts)
        else:
            put(key, value)
    return out


def _check_key_functions(options: dict[str, str], primary_key: tuple[str, ...]) -> None:
    """Fluss's ``Schema`` refuses an aggregate function on a primary-key column whatever the merge engine, as the
    schema is built: before any table option is validated."""
    for key in options:
        column = (
            key[len("fields.") : -len(".agg")] if key.startswith("fields.") and key.endswith(".agg") else None
        )
        if column in primary_key:
            raise SpecError(
                f"Cannot set aggregation function for primary key column '{column}'. Primary key columns "
                "automatically use 'primary-key' aggregation."
            )


def _refuse_ignore_retract_with(remove_record_on_delete: str, opts: dict[str, str]) -> None:
    """Paimon's ``FieldAggregatorFactory`` refuses remove-record-on-delete together with a column's
    ``ignore-retract`` (changelake takes both of its names for the first, docs/semantics.md §13)."""
    for key, value in opts.items():
        if key.startswith("fields.") and key.endswith(".ignore-retract") and value.lower() == "true":
            raise SpecError(
                f"{remove_record_on_delete} and {key} have conflicting behavior so should not be enabled at the "
                "same time."
            )


def _build(data: dict[str, Any]) -> TableSpec:
    unknown = set(data) - _SPEC_KEYS
    if unknown:
        raise SpecError(f"unknown keys {sorted(map(str, unknown))}; allowed: {sorted(_SPEC_KEYS)}")
    namespace, table = check_table_name(data.get("name"))
    raw_columns = data.get("columns")
    if not isinstance(raw_columns, list) or not raw_columns:
        raise SpecError("'columns' must be a non-empty list of {name, type} mappings")
    columns: list[Column] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_columns):
        if not isinstance(raw, dict) or "name" not in raw or "type" not in raw:
            raise SpecError(f"columns[{i}] must be a mapping with 'name' and 'type', got {short_repr(raw)}")
        extra = set(raw) - {"name", "type", "nullable", "comment"}
        if extra:
            raise SpecError(f"columns[{i}] has unknown keys {sorted(map(str, extra))}")
        name = check_column_name(raw["name"])
        if name.lower() in seen:
            raise SpecError(f"Duplicate column name '{name}'")
        seen.add(name.lower())
        nullable = raw.get("nullable", True)
        if not isinstance(nullable, bool):
            raise SpecError(f"Column '{name}': 'nullable' must be true or false")
        columns.append(Column(name, parse_type(raw["type"], name), nullable))
    names = [c.name for c in columns]
    # A nanosecond timestamp shows as two view columns, <c> and <c>__nanos (types.view_spark_columns).
    for c in columns:
        if c.type.is_nanos and (c.name + NANOS_SUFFIX).lower() in seen:
            raise SpecError(
                f"Column '{c.name}{NANOS_SUFFIX}' collides with the view column that shows {c.type} column "
                f"'{c.name}' exactly; rename it"
            )

    primary_key = _key_list(data, "primary_key")
    if not primary_key:
        _refuse_log_table(data)
    for k in primary_key:
        if k not in names:
            raise SpecError(f"Primary key column '{k}' does not exist in the schema {names}")
    if len(set(primary_key)) != len(primary_key):
        raise SpecError(f"Primary key {list(primary_key)} repeats a column")
    # Fluss forces PK columns to NOT NULL.
    columns = [Column(c.name, c.type, False) if c.name in primary_key else c for c in columns]

    partition_keys = _key_list(data, "partition_keys")
    for p in partition_keys:
        if p not in names:
            raise SpecError(f"Partition key '{p}' does not exist in the schema {names}")
        if p not in primary_key:
            raise SpecError(
                f"Partitioned Primary Key Table requires partition key {java_list(partition_keys)} "
                f"is a subset of the primary key {java_list(primary_key)}."
            )
        t = next(c.type for c in columns if c.name == p)
        if t.name not in _PARTITION_KEY_TYPES:
            raise SpecError(f"Partition key '{p}' has type {t}, which cannot be a partition key")
    if partition_keys and set(partition_keys) == set(primary_key):
        raise SpecError(
            f"Primary Key constraint {java_list(primary_key)} should not be same with partition fields "
            f"{java_list(partition_keys)}."
        )

    options = _normalize_options(data.get("options") or {})
    _check_key_functions(options, primary_key)
    bucket_key = _key_list(data, "bucket_key")
    if "bucket.key" in options:
        from_option = tuple(k.strip() for k in options.pop("bucket.key").split(",") if k.strip())
        if bucket_key and bucket_key != from_option:
            raise SpecError(
                f"bucket_key {list(bucket_key)} conflicts with option bucket.key {list(from_option)}"
            )
        bucket_key = from_option
    physical_pk = tuple(k for k in primary_key if k not in partition_keys)
    if not bucket_key:
        bucket_key = physical_pk
    else:
        in_partition = [k for k in bucket_key if k in partition_keys]
        if in_partition:
            raise SpecError(
                f"Bucket key {java_list(bucket_key)} shouldn't include any column in partition keys "
                f"{java_list(partition_keys)}."
            )
        if not set(bucket_key) <= set(physical_pk):
            raise SpecError(
                "Bucket keys must be a subset of primary keys excluding partition keys for primary-key tables. "
                f"The primary keys are {java_list(primary_key)}, the partition keys are {java_list(partition_keys)}, "
                f"but the user-defined bucket keys are {java_list(bucket_key)}."
            )

    bucket_text = options.pop("bucket.num", "1")
    if not _DIGITS.fullmatch(bucket_text):  # ASCII digits: int() would also read other scripts' digits
        raise SpecError(f"Option 'bucket.num' must be a positive integer, got {short_repr(bucket_text)}")
    bucket_num = int(bucket_text)
    if not 1 <= bucket_num <= 1024:
        raise SpecError(f"Option 'bucket.num' must be between 1 and 1024, got {bucket_num}")

    _validate_options(options, columns, primary_key, partition_keys)
    source = data.get("source") or {}
    if not isinstance(source, dict):
        raise SpecError("'source' must be a mapping")
    source_options = parse_source(source, f"{namespace}.{table}")
    if (
        source_options.format == "upsert-kafka"
        and options.get("table.agg.retract") == "true"
        and "table.delete.behavior" not in options
    ):
        # An upsert-kafka tombstone holds the key only: it has no before image to take back (§4.7).
        raise SpecError(
            f"{namespace}.{table}: the upsert-kafka format has no before image, so its tombstones cannot "
            "retract; a 'table.agg.retract' table fed by it must say what a tombstone does with "
            "'table.delete.behavior' (ignore, allow or disable)."
        )
    datagen = data.get("datagen") or {}
    if not isinstance(datagen, dict):
        raise SpecError("'datagen' must be a mapping")
    return TableSpec(
        namespace=namespace,
        table=table,
        columns=tuple(columns),
        primary_key=primary_key,
        bucket_key=bucket_key,
        partition_keys=partition_keys,
        bucket_num=bucket_num,
        options=options,
        source=dict(source),
        datagen=dict(datagen),
        comment=str(data.get("comment") or ""),
    )


def _validate_options(
    options: dict[str, str],
    columns: list[Column],
    primary_key: tuple[str, ...],
    partition_keys: tuple[str, ...] = (),
) -> None:
    for key in list(options):
        if key not in _KNOWN_OPTIONS and key.startswith("table."):
            raise SpecError(
                f"'{key}' is not a recognized Fluss table property in the current cluster version. "
                "You may be using an older Fluss cluster that does not support this property."
            )
        if key not in _KNOWN_OPTIONS and not key.startswith("fields."):
            raise SpecError(
                f"'{key}' is not a Fluss table property. changelake's table options are "
                f"{java_list(sorted(_KNOWN_OPTIONS))} and fields.*"
            )
        allowed = _PASSTHROUGH_OPTIONS.get(key)
        if allowed and options[key].lower() not in allowed:
            raise SpecError(f"Option '{key}' must be one of {list(allowed)}, got '{options[key]}'")
    enums = (
        ("table.delete.behavior", DELETE_BEHAVIORS),
        ("table.changelog.image", CHANGELOG_IMAGES),
        ("sink.ignore-delete", ("true", "false")),
        ("table.agg.retract", ("true", "false")),
        ("ignore-update-before", ("true", "false")),
        ("table.merge-engine", MERGE_ENGINES),
    )
    for key, choices in enums:
        if key in options:
            value = options[key].lower()
            if value not in choices:
                hint = " (omit it for the default last-row engine)" if key == "table.merge-engine" else ""
                raise SpecError(
                    f"Invalid value for config '{key}'. Reason: Could not parse value '{options[key]}' for key "
                    f"'{key}'. Expected one of {java_list(choices)}{hint}."
                )
            options[key] = value
    _validate_fluss_table_options(options, partition_keys)
    _validate_storage_options(options)
    _validate_engine(options, columns, primary_key)
    _validate_auto_increment(options, columns, primary_key)


_JAVA_INT = re.compile(r"[+-]?[0-9]{1,10}")
# Fluss's duration units (``TimeUtils``) in nanoseconds; a duration is digits and one of these labels.
_DURATION_UNITS = {
    **dict.fromkeys(("d", "day", "days"), 86_400 * 10**9),
    **dict.fromkeys(("h", "hour", "hours"), 3_600 * 10**9),
    **dict.fromkeys(("min", "m", "minute", "minutes"), 60 * 10**9),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 10**9),
    **dict.fromkeys(("ms", "milli", "millis", "millisecond", "milliseconds"), 10**6),
    **dict.fromkeys(("\u00b5s", "micro", "micros", "microsecond", "microseconds"), 10**3),
    **dict.fromkeys(("ns", "nano", "nanos", "nanosecond", "nanoseconds"), 1),
}
_DURATION = re.compile(r"([0-9]+)(.*)", re.DOTALL)


def parse_duration(text: str, what: str) -> float:
    """A duration in Fluss's notation ("1 d", "12h", "30 min", "500 ms") in seconds; refused naming ``what``."""
    value = _fluss_value(what, text, "duration")
    if value is None:
        raise SpecError(f"{what}: cannot parse '{text}' as a duration (e.g. 1 d, 12 h, 30 min, 90 s)")
    return value / 1e9  # type: ignore[operator]


def _option_value(key: str, value: str) -> int | bool | str | None:
    """A Fluss table option or a storage option parsed (:func:`_fluss_value`)."""
    return _fluss_value(key, value, _STORAGE_OPTIONS.get(key))


def _fluss_value(key: str, value: str, kind: tuple[str, ...] | str | None = None) -> int | bool | str | None:
    """Parse a Fluss table option as Fluss's ``Configuration`` does (ints, booleans, durations in
    nanoseconds, enums lower-cased); None when it cannot be parsed."""
    kind = kind or _FLUSS_TABLE_OPTIONS[key]
    if isinstance(kind, tuple):
        return value.lower() if value.lower() in kind else None
    if kind == "int":
        number = int(value) if _JAVA_INT.fullmatch(value) else None
        lo, hi = INT_RANGES["INT"]  # a Java int
        return number if number is not None and lo <= number <= hi else None
    if kind == "bool":
        return {"true": True, "false": False}.get(value.lower())
    if kind == "duration":
        match = _DURATION.fullmatch(value.strip())
        if match is None:
            return None
        unit = _DURATION_UNITS.get(match.group(2).strip().lower())
        return None if unit is None or len(match.group(1)) > 18 else int(match.group(1)) * unit
    return value


def _validate_storage_options(options: dict[str, str]) -> None:
    """changelake's storage options (:data:`_STORAGE_OPTIONS`): each parses, and the numbers make sense."""
    parsed: dict[str, Any] = {}
    for key in [k for k in options if k in _STORAGE_OPTIONS]:
        value = _option_value(key, options[key])
        kind = _STORAGE_OPTIONS[key]
        if value is None:
            expected = f"one of {java_list(kind)}" if isinstance(kind, tuple) else f"a {kind}"
            raise SpecError(
                f"Invalid value for config '{key}'. Reason: Could not parse value '{options[key]}' for key "
                f"'{key}'. Expected {expected}."
            )
        if kind in ("bool",) or isinstance(kind, tuple):
            options[key] = str(value).lower()
        parsed[key] = value
    least = {
        "snapshot.num-retained.min": 1,
        "snapshot.num-retained.max": 1,
        "num-sorted-run.compaction-trigger": 2,
        "compaction.max-size-amplification-percent": 1,
        "batch-history.num-retained": 1,
    }
    for key, low in least.items():
        if key in parsed and parsed[key] < low:
            raise SpecError(f"Option '{key}' must be at least {low}, got {parsed[key]}")
    low = parsed.get("snapshot.num-retained.min", StorageOptions.snapshots_min)
    high = parsed.get("snapshot.num-retained.max", StorageOptions.snapshots_max)
    if low > high:
        raise SpecError(
            f"Option 'snapshot.num-retained.min' ({low}) must not be greater than 'snapshot.num-retained.max' "
            f"({high})"
        )


def _validate_fluss_table_options(options: dict[str, str], partition_keys: tuple[str, ...]) -> None:
    """Fluss's create-time checks of its table options on a primary-key table, in Fluss's order and with
    its messages (``TableDescriptorValidation.validateTableDescriptor``)."""
    parsed: dict[str, int | bool | str] = {}
    for key in [k for k in options if k in _FLUSS_TABLE_OPTIONS]:
        value = _fluss_value(key, options[key])
        if value is None:
            raise SpecError(
                f"Invalid value for config '{key}'. Reason: Could not parse value '{options[key]}' for key '{key}'."
            )
        parsed[key] = value
        if isinstance(_FLUSS_TABLE_OPTIONS[key], tuple):
            options[key] = str(value)

    def number(key: str, default: int) -> int:
        value = parsed.get(key, default)
        assert isinstance(value, int), f"{key} parses to a number"  # _fluss_value: int for these keys
        return value

    if number("table.replication.factor", 1) <= 0:
        raise SpecError("'table.replication.factor' must be greater than 0.")
    if parsed.get("table.kv.format", "compacted") == "compacted" and parsed.get(
        "table.log.format", "arrow"
    ) not in ("arrow", "compacted"):
        raise SpecError(
            "Currently, Primary Key Table supports ARROW or COMPACTED log format when kv format is COMPACTED."
        )
    level = number("table.log.arrow.compression.zstd.level", 3)
    if not 1 <= level <= 22:
        raise SpecError(f"Invalid ZSTD compression level: {level}. Expected a value between 1 and 22.")
    if number("table.log.tiered.local-segments", 2) <= 0:
        raise SpecError("'table.log.tiered.local-segments' must be greater than 0.")
    local_ttl, ttl = number("table.log.local-ttl", 0), number("table.log.ttl", 7 * 86_400 * 10**9)
    if local_ttl > 0 and ttl > 0 and local_ttl > ttl:
        raise SpecError("'table.log.local-ttl' must be less than or equal to 'table.log.ttl'.")
    if parsed.get("table.datalake.historical-partition.enabled", False):
        unmet = [
            f"'{key}' must be set to true"
            for key in ("table.auto-partition.enabled", "table.datalake.enabled")
            if not parsed.get(key, False)
        ]
        lake = parsed.get("table.datalake.format")
        if lake != "paimon":
            unmet.append(
                "'table.datalake.format' must be set to 'paimon' "
                + (f"(currently '{lake}')" if lake else "(currently not set)")
            )
        if len(partition_keys) != 1:
            unmet.append(f"the table must define exactly one partition key (found {len(partition_keys)})")
        if unmet:
            raise SpecError(
                "'table.datalake.historical-partition.enabled' has unmet requirements: "
                + "; ".join(unmet)
                + "."
            )
    if parsed.get("table.auto-partition.enabled", False):
        if not partition_keys:
            raise SpecError(
                "Currently, auto partition is only supported for partitioned table, please set table property "
                "'table.auto-partition.enabled' to false."
            )
        raise SpecError(
            "Option 'table.auto-partition.enabled' = true is not supported by changelake: a partition is created "
            "when its first row is written and is never expired by time (set it to false or remove it)."
        )


def _validate_auto_increment(
    options: dict[str, str], columns: list[Column], primary_key: tuple[str, ...]
) -> None:
    """docs/semantics.md §8: one INT/BIGINT column outside the primary key; the cache size is a positive integer."""
    size = options.get("table.auto-increment.cache-size")
    if size is not None and (not _DIGITS.fullmatch(size) or int(size) < 1):
        raise SpecError(f"Option 'table.auto-increment.cache-size' must be a positive integer, got '{size}'")
    fields = options.get("auto-increment.fields")
    if fields is None:
        return
    names = [f.strip() for f in fields.split(",") if f.strip()]
    if len(names) > 1:
        raise SpecError("Multiple auto increment columns are not supported yet.")
    types = {c.name: c.type for c in columns}
    if not names or names[0] not in types:
        missing = names[0] if names else ""
        raise SpecError(
            f"Auto increment column {missing} does not exist in table columns {java_list(types)}."
        )
    if names[0] in primary_key:
        raise SpecError("Auto increment column can not be used as the primary key.")
    if types[names[0]].name not in ("INT", "BIGINT"):
        raise SpecError("The data type of auto increment column must be INT or BIGINT.")
    options["auto-increment.fields"] = names[0]


_VERSION_TYPES = ("INT", "BIGINT", "TIMESTAMP", "TIMESTAMP_LTZ")
# Fluss's DataTypeRoot names where they differ from the SQL type names: its messages list roots.
_TYPE_ROOTS = {
    "INT": "INTEGER",
    "TIME": "TIME_WITHOUT_TIME_ZONE",
    "TIMESTAMP": "TIMESTAMP_WITHOUT_TIME_ZONE",
    "TIMESTAMP_LTZ": "TIMESTAMP_WITH_LOCAL_TIME_ZONE",
}


def _fluss_type_root(name: str) -> str:
    return _TYPE_ROOTS.get(name, name)


#: Fluss's precision for a type written without one (Flink's defaults).
_FLUSS_DEFAULT_PRECISION = {"TIME": 0, "TIMESTAMP": 6, "TIMESTAMP_LTZ": 6, "CHAR": 1, "BINARY": 1}


def fluss_type_text(column: Column, primary_key: tuple[str, ...]) -> str:
    """A column's type as Fluss's messages print it (``DataType.toString``): ``DECIMAL(10, 2)``, ``TIME(0)``,
    ``TIMESTAMP_LTZ(6)``, ``STRING NOT NULL`` (a primary key column is NOT NULL)."""
    t = column.type
    if t.name == "DECIMAL":
        text = f"DECIMAL({t.precision}, {t.scale})"
    elif t.name in _FLUSS_DEFAULT_PRECISION:
        text = f"{t.name}({_FLUSS_DEFAULT_PRECISION[t.name] if t.precision is None else t.precision})"
    else:
        text = t.name
    return text if column.nullable and column.name not in primary_key else f"{text} NOT NULL"


_IGNORE_RETRACT = ".ignore-retract"


def _validate_retract(
    options: dict[str, str],
    types: dict[str, DataType],
    primary_key: tuple[str, ...],
    functions: dict[str, str],
) -> None:
    """``table.agg.retract`` and ``fields.<c>.ignore-retract`` (docs/semantics.md §4.7): only on aggregation
    tables, and every column of a retraction table retracts or ignores retractions."""
    engine = options.get("table.merge-engine")
    retract = options.get("table.agg.retract") == "true"
    if retract and engine != "aggregation":
        raise SpecError(
            "'table.agg.retract' is only supported for aggregation merge engine table, but the merge engine is "
            f"'{engine or 'default (last row)'}'."
        )
    for key in [k for k in options if k.startswith("fields.") and k.endswith(_IGNORE_RETRACT)]:
        column = key[len("fields.") : -len(_IGNORE_RETRACT)]
        if column not in types:
            raise SpecError(f"Option '{key}': column '{column}' does not exist in the schema {list(types)}")
        if engine != "aggregation":
            raise SpecError(
                f"Option '{key}' is only supported for aggregation merge engine table, but column '{column}' "
                "is in a table without it."
            )
        if column in primary_key:
            raise SpecError(
                f"Option '{key}': primary key column '{column}' is never aggregated or retracted."
            )
        value = options[key].lower()
        if value not in ("true", "false"):
            raise SpecError(f"Option '{key}' must be true or false, got '{options[key]}'")
        options[key] = value
    if not retract:
        return
    for column in types:
        if column in primary_key or options.get(f"fields.{column}{_IGNORE_RETRACT}") == "true":
            continue
        fn = functions.get(column, DEFAULT_FUNCTION)
        if not AGGREGATE_SIGNATURES[fn].retractable:
            raise SpecError(retract_refused(fn, column))


def _validate_engine(options: dict[str, str], columns: list[Column], primary_key: tuple[str, ...]) -> None:
    """Fluss's create-time checks for merge engines, aggregate functions and delete behaviour (docs/semantics.md §3-§5).

    The functions, their column types and parameters are :data:`changelake.aggregate_signatures.AGGREGATE_SIGNATURES`.
    """
    engine = options.get("table.merge-engine")
    named = {c.name: c for c in columns}
    types = {name: c.type for name, c in named.items()}
    if engine in ("first_row", "versioned") and options.get("table.delete.behavior") == "allow":
        raise SpecError(
            f"Table with '{engine.upper()}' merge engine does not support delete operations. The "
            "'table.delete.behavior' config must be set to 'ignore' or 'disable', but got 'allow'."
        )
    version = options.get("table.merge-engine.versioned.ver-column")
    if engine == "versioned":
        if not version:
            raise SpecError(
                "'table.merge-engine.versioned.ver-column' must be set for versioned merge engine."
            )
        if version not in types:
            raise SpecError(
                f"The version column '{version}' for versioned merge engine doesn't exist in schema."
            )
        if types[version].name not in _VERSION_TYPES:
            shown = fluss_type_text(named[version], primary_key)  # only for the message
            raise SpecError(
                f"The version column '{version}' for versioned merge engine must be one type of "
                f"[INT, BIGINT, TIMESTAMP, TIMESTAMP_LTZ], but got {shown}."
            )
    # Any other engine ignores a version column, as Fluss's does (it reads the option for versioned only).
    if engine == "aggregation" and options.get("table.changelog.image") == "wal":
        raise SpecError(
            "Table with 'AGGREGATION' merge engine does not support 'WAL' changelog image mode. Aggregation merge "
            "engine tables require FULL changelog image mode for correct UNDO recovery. Please set "
            "'table.changelog.image' to 'FULL' or remove the setting."
        )
    functions: dict[str, str] = {}
    for key in [k for k in options if k.startswith("fields.") and k.endswith(".agg")]:
        column = key[len("fields.") : -len(".agg")]
        fn = options[key].strip().lower().replace("-", "_")
        if engine != "aggregation":
            continue  # Fluss 0.9.1 keeps a function of a table without the aggregation engine, unused (§16)
        if column not in types:
            raise SpecError(f"Option '{key}': column '{column}' does not exist in the schema {list(types)}")
        if not fn:
            raise SpecError(f"Empty aggregation function name for column '{column}'")
        function = AGGREGATE_SIGNATURES.get(fn)
        if function is None:
            raise SpecError(
                f"Unknown aggregation function '{options[key]}' for column '{column}'; supported: "
                f"{sorted(AGGREGATE_SIGNATURES)}"
            )
        if not function.accepts(types[column]):
            shown = fluss_type_text(named[column], primary_key)
            raise SpecError(
                f"Invalid aggregation function for column '{column}': Data type for {fn} column must be part of "
                f"{java_list(_fluss_type_root(t) for t in function.types or ())} but was '{shown}'."
            )
        options[key] = fn
        functions[column] = fn
    _validate_retract(options, types, primary_key, functions)
    for key in [k for k in options if k.startswith("fields.") and not k.endswith((".agg", _IGNORE_RETRACT))]:
        if engine != "aggregation":
            continue  # unused, as its function (§16)
        parts = key.split(".")
        if len(parts) != 4 or parts[1] not in types:
            raise SpecError(
                f"Unsupported table option '{key}'; expected fields.<column>.<function>.<parameter>"
            )
        _, column, fn, param = parts
        fn = fn.lower().replace("-", "_")
        declared = functions.get(column, DEFAULT_FUNCTION)
        if fn != declared:
            raise SpecError(f"Option '{key}' configures '{fn}', but column '{column}' uses '{declared}'")
        parameters = AGGREGATE_SIGNATURES[fn].parameters
        if param not in parameters:
            raise SpecError(
                f"Parameter '{param}' is not supported for aggregation function '{fn}'. Supported parameters: "
                f"{java_list(parameters) if parameters else 'none'}"
            )
        if options[key] == "":
            raise SpecError(f"Parameter '{param}' for aggregation function '{fn}' must be a non-empty string")
        options[f"fields.{column}.{fn}.{param}"] = options.pop(key)
