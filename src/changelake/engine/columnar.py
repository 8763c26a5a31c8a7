"""The columnar merge of one bucket: what :func:`changelake.engine.merge.apply_sequential` computes, without a Python
loop per record.

How it works ("wavefront"): the bucket's records are grouped by primary key and numbered by their *depth* in
their key (0 = the key's first record of the batch, in ``_seq`` order). Step ``d`` applies every key's ``d``-th
record at once, with numpy operations over the keys that have one, so the number of steps is the deepest key
of the batch (usually 1-3), not the number of records. The state of a key is whether its row exists and, per
column, the index of the value it holds in that column's *value store*: the stored rows, then the records,
then one null slot, then the values aggregation steps computed (the indexes are held column by column, so a
column's indexes are one contiguous array). Rows and changelog images are gathered from the stores with
Arrow ``take`` at the end (from stores without a validity bitmap where no value is null: the null slots
then hold placeholders, nulled after the take); the rules of each engine are the ones
:mod:`changelake.engine.merge` states for one record, written over arrays.

Aggregate functions come from :mod:`changelake.engine.aggregates`: a function whose result is one of its
inputs (max, min, last/first value) points at it, the others compute over numpy arrays (integer sums and
products exact, an overflow refused in the one-record merge's words; FLOAT is float32, DECIMAL(<=18) adds and
compares as unscaled longs) or
over Arrow arrays (listagg joins strings in Arrow). DECIMAL products, wider DECIMALs and rbm32/rbm64 call the
function's one-record merge element by element (numpy ``frompyfunc``): exact, but a Python call per merged
value for those columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.arrow_keys import group_ids, increasing, key_numbers
from changelake.engine import aggregates, merge
from changelake.errors import WriteRefusedError
from changelake.spec import TableSpec
from changelake.types import INT_RANGES

CHANGE_TYPES = ("+I", "-U", "+U", "-D")
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = range(4)


@dataclass
class MergeResult:
    """A bucket after its records: all its rows (sorted by key) and the changelog each record emitted."""

    rows: pa.Table  # spec.column_names in storage types, sorted by the primary key
    changelog: pa.Table  # _seq, _sub, _change_type, spec.column_names; in (_seq, _sub) order
    counts: merge.BatchCounts
    ids_remaining: tuple[int, int] | None = None  # unused part of the auto-increment range
    # Merge-on-read writes only what changed: per stored row, whether it is still a row of the bucket with all
    # its values (not deleted, not updated); per row of ``rows``, whether it is new or changed (not such a row).
    stored_unchanged: np.ndarray | None = None
    rows_changed: np.ndarray | None = None


def value_schema(spec: TableSpec) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.type.arrow_type()) for c in spec.columns])


def changelog_schema(spec: TableSpec) -> pa.Schema:
    return pa.schema(
        [pa.field("_seq", pa.int64()), pa.field("_sub", pa.int32()), pa.field("_change_type", pa.string())]
        + list(value_schema(spec))
    )


def merge_records(
    spec: TableSpec,
    stored: pa.Table,
    records: pa.Table,
    target_columns: list[str] | None = None,
    id_ranges: list[tuple[int, int]] | None = None,
    merge_mode: str | None = None,
) -> MergeResult:
    """Apply ``records`` (``_seq``, ``_op``, columns; applied in ``_seq`` order) to a bucket's ``stored`` rows.

    Equal to :func:`changelake.engine.merge.apply_sequential` over the same rows and records: rows, changelog (types,
    images, order), counts, remaining ids, and the same :class:`WriteRefusedError` where that one raises.
    """
    return _BucketMerge(spec, stored, records, target_columns, id_ranges, merge_mode).run()


class _BucketMerge:
    def __init__(self, spec, stored, records, target_columns, id_ranges, merge_mode=None):
        self.spec = spec
        # The merger is only asked for its configuration (engine flags, target indexes): one rule source. It
        # never allocates ids (its allocator has none).
        self.m = merge.merger_for(spec, target_columns, merge.IdAllocator([], 0, ""), merge_mode)
        self.schema = value_schema(spec)
        self.names = list(spec.column_names)
        self.key_index = list(self.m.key_index)
        self.stored = stored.select(self.names).cast(self.schema) if stored.num_rows else None
        seq = records.column("_seq").to_numpy()
        # The bucket task hands the records over in _seq order already: sort only if they are not.
        self.records = records if increasing(seq) else records.sort_by("_seq")
        self._stores: dict[int, tuple[pa.Array | pa.ChunkedArray, int]] = {}
        self._bases: dict[int, list[pa.Array]] = {}
        self.id_ranges = id_ranges or []
        self.counts = merge.BatchCounts(records=records.num_rows)
        self._values: dict[int, _Values] = {}
        self.group_keys: np.ndarray | None = None  # each group's key, when found by binary search
        self.distinct_keys = False  # found without hashing: every record's key differs (then key_order holds)
        self.key_order: np.ndarray | None = None  # the records' key order; None when they are in it already
        # (_seq, column, message) of records the merge refuses: the reference stops at the first record it refuses,
        # in its first column that refuses (-1: the record's id).
        self.failures: list[tuple[int, int, str]] = []

    # --- driver ---------------------------------------------------------------------------------------
    def run(self) -> MergeResult:
        m, counts = self.m, self.counts
        op = self.records.column("_op")
        deletes = pc.equal(op, "-D").to_numpy(zero_copy_only=False)
        before = pc.equal(op, "-U").to_numpy(zero_copy_only=False)
        if m.disable_deletes and deletes.any():
            raise WriteRefusedError(merge.DELETE_DISABLED)
        if m.retracts_update_before:
            effective = np.ones(len(before), bool)
        else:
            counts.dropped_update_before = int(before.sum())
            effective = ~before
        if m.drop_deletes:
            counts.ignored += int(deletes.sum())
            effective &= ~deletes
        recs = self.records.filter(pa.array(effective)) if not effective.all() else self.records
        self.seq = recs.column("_seq").to_numpy()
        # A retraction table's -U (and -D without an explicit delete behaviour) retract (docs/semantics.md §4.7).
        retracts = before | (deletes if m.retracts_delete else np.zeros(len(deletes), bool))
        self.is_retract = retracts[effective]
        self.is_delete = (deletes & ~retracts)[effective]
        self.recs = recs.select(self.names).cast(self.schema)
        H = self.stored.num_rows if self.stored is not None else 0
        n = self.recs.num_rows
        self.H, self.n, self.NULL = H, n, H + n
        self.ID_BASE = H + n + 1  # ids allocated to first writes: one slot per record
        self._group(H, n)
        if H == 0 and len(self.levels) == 1 and m.target is None and m.auto_increment_index is None:
            if not self.is_delete.any() and not self.is_retract.any():
                return self._first_writes_only()
        self._init_state()
        for records_at_depth in self.levels:
            self._step(records_at_depth)
        self._allocate_ids()
        if self.failures:
            # The sequential merge stops at its first failing record: raise that record's error.
            raise WriteRefusedError(min(self.failures)[2])
        rows = self._final_rows()
        unchanged = self._unchanged_groups()
        return MergeResult(
            rows,
            self._changelog(),
            counts,
            self.ids_remaining,
            stored_unchanged=unchanged[self.group_of_stored],
            rows_changed=~unchanged[self._final_live],
        )

    def _first_writes_only(self) -> MergeResult:
        """Every record writes a new key into an empty bucket (an initial load, a backfill): the rows are the
        records in key order, the changelog each record's insert in record order -- for every engine (a
        first write stores the row as given), without the steps' bookkeeping."""
        n = self.n
        self.counts.inserted += n
        if self.distinct_keys:
            rows = self.recs if self.key_order is None else self.recs.take(pa.array(self.key_order))
        else:
            keys = [self.names[i] for i in self.key_index]
            rows = self.recs.take(pc.sort_indices(self.recs, sort_keys=[(k, "ascending") for k in keys]))
        change = UPDATE_AFTER if self.m.wal_shortcut else INSERT
        types = pa.DictionaryArray.from_arrays(np.full(n, change, np.int8), pa.array(CHANGE_TYPES))
        head = [pa.array(self.seq, pa.int64()), pa.array(np.zeros(n, np.int32)), types.cast(pa.string())]
        changelog = pa.Table.from_arrays(head + self.recs.columns, schema=changelog_schema(self.spec))
        return MergeResult(
            rows, changelog, self.counts, None, np.zeros(0, bool), np.ones(rows.num_rows, bool)
        )

    # --- grouping -------------------------------------------------------------------------------------
    def _group(self, H: int, n: int) -> None:
        """Group ids for stored rows and records; the records of each key, level by level."""
        gid = self._sorted_key_ids(H) if H else self._distinct_key_ids(n)
        if gid is None:
            keys = [self.names[i] for i in self.key_index]
            parts = ([self.stored.select(keys)] if self.stored is not None else []) + [self.recs.select(keys)]
            gid = group_ids(pa.concat_tables(parts) if len(parts) > 1 else parts[0])
        self.G = int(gid.max()) + 1 if len(gid) else 0
        self.stored_of_group = np.full(self.G, -1, np.int64)
        self.stored_of_group[gid[:H]] = np.arange(H)
        self.group_of_stored = gid[:H]
        rgid = gid[H:]
        self.rgid = rgid
        if n and int(np.bincount(rgid).max()) == 1:
            self.levels = [np.arange(n)]  # every key once (an initial load, most batches): one level
            return
        order = np.argsort(rgid, kind="stable")  # (key, _seq): records are in _seq order already
        sorted_g = rgid[order]
        starts = np.r_[0, np.flatnonzero(sorted_g[1:] != sorted_g[:-1]) + 1] if n else np.zeros(0, np.int64)
        depth = np.empty(n, np.int64)
        if n:
            lengths = np.diff(np.r_[starts, n])
            depth[order] = np.arange(n) - np.repeat(starts, lengths)
        by_depth = np.argsort(depth, kind="stable")  # within a depth: record order, one record per key
        bounds = np.searchsorted(depth[by_depth], np.arange(int(depth.max()) + 2 if n else 1))
        self.rgid = rgid
        self.levels = [by_depth[bounds[d] : bounds[d + 1]] for d in range(len(bounds) - 1)]

    def _sorted_key_ids(self, H: int) -> np.ndarray | None:
        """Group ids (as :func:`group_ids` numbers them) found by binary search, for a one-column numeric
        key whose stored values increase (a bucket file is written in key order): no hashing of the bucket's
        keys. None when that does not hold."""
        if len(self.key_index) != 1 or self.stored is None:
            return None
        i = self.key_index[0]
        stored, records = key_numbers(self.stored.column(i)), key_numbers(self.recs.column(i))
        if stored is None or records is None or not increasing(stored):
            return None
        self.group_keys = stored  # a group's key, for ordering the final rows (new keys appended below)
        at = np.searchsorted(stored, records)
        found = (at < H) & (stored[np.minimum(at, H - 1)] == records)
        rgid = np.where(found, at, 0)
        new = np.flatnonzero(~found)
        if len(new):
            encoded = pa.array(records[new]).dictionary_encode()
            rgid[new] = H + encoded.indices.to_numpy().astype(np.int64)
            self.group_keys = np.concatenate([stored, encoded.dictionary.to_numpy(zero_copy_only=False)])
        return np.concatenate([np.arange(H, dtype=np.int64), rgid])

    def _distinct_key_ids(self, n: int) -> np.ndarray | None:
        """Group ids for records into an empty bucket whose one integer (or date, timestamp) key is distinct
        in every record -- an initial load or a backfill: one group per record, numbered by position, as
        :func:`group_ids` would number them, found by one check of sortedness (a snapshot usually arrives in
        key order) or one sort instead of hashing every key. None when that does not hold."""
        if len(self.key_index) != 1 or n < 2:
            return None
        keys = key_numbers(self.recs.column(self.key_index[0]))
        if keys is None or keys.dtype.kind not in "iu":
            return None
        if increasing(keys):
            order = None
        else:
            order = np.argsort(keys, kind="stable")
            if not increasing(keys[order]):
                return None  # a key repeats: the general grouping
        self.distinct_keys, self.key_order, self.group_keys = True, order, keys
        return np.arange(n, dtype=np.int64)

    def _init_state(self) -> None:
        C = len(self.names)
        self.exists = self.stored_of_group >= 0
        self.takes_id = np.zeros(self.n, bool)
        self.emitted: list[tuple[np.ndarray, int, int, np.ndarray]] = []  # (seqs, sub, type, (k, C) idx rows)
        self.target = None if self.m.target is None else sorted(self.m.target)
        self.ai = self.m.auto_increment_index
        # versioned: the version column, its values, and what a null version compares as (merge.NULL_VERSIONS)
        self.version: tuple[int, _Values, int | None] | None = None
        if isinstance(self.m, merge.VersionedMerger):
            self.version = (self.m.version_index, self.values(self.m.version_index), self.m.null_version)
        self.agg = None
        if isinstance(self.m, merge.AggregationMerger):
            self.agg = {
                i: _AggColumn(self.spec, i, self)
                for i, fn in enumerate(self.m.functions)
                if fn is not None and (self.target is None or i in self.target)
            }
        # Column-major (C, G): a column's indexes are contiguous for the final gathers; the steps read and
        # write the (k, C) rows of their keys through transposes. Whole rows need one index per key (C = 1).
        # 32-bit where every index fits (the stores end with at most one id and one computed value per
        # record): half the memory to fill and gather.
        width = np.int32 if self.ID_BASE + 2 * self.n < np.iinfo(np.int32).max else np.int64
        start = np.where(self.exists, self.stored_of_group, self.NULL).astype(width)
        self.idx = np.repeat(start[None, :], 1 if self.whole_rows else C, axis=0)

    # --- one level: every key's d-th record -----------------------------------------------------------
    def _step(self, r: np.ndarray) -> None:
        counts = self.counts
        g = self.rgid[r]
        ex = self.exists[g]
        dele = self.is_delete[r]
        retract = self.is_retract[r]
        # Deletes of missing keys change nothing.
        counts.ignored += int((dele & ~ex).sum())
        self._deletes(r[dele & ex], g[dele & ex])
        self._retracts(r[retract], g[retract], ex[retract])
        first = ~dele & ~retract & ~ex
        self._first_writes(r[first], g[first])
        upd = ~dele & ~retract & ex
        self._updates(r[upd], g[upd])

    def _emit(self, r: np.ndarray, sub: int, change: int, idx: np.ndarray) -> None:
        if len(r):
            self.emitted.append((self.seq[r], sub, change, idx))

    def _emit_update(self, r, old, new) -> None:
        if self.m.wal:
            self._emit(r, 0, UPDATE_AFTER, new)
        else:
            self._emit(r, 0, UPDATE_BEFORE, old)
            self._emit(r, 1, UPDATE_AFTER, new)

    def _deletes(self, r: np.ndarray, g: np.ndarray) -> None:
        if not len(r):
            return
        old = np.take(self.idx, g, axis=1).T
        if self.target is None:
            remove = np.ones(len(r), bool)
        else:
            # A partial delete nulls the target columns, unless every other column is null already.
            rest = [i for i in range(len(self.names)) if i not in self.target]
            remove = np.ones(len(r), bool)
            for i in rest:
                remove &= self._is_null(i, old[:, i])
        gone, kept = remove, ~remove
        self.counts.deleted += int(gone.sum())
        self._emit(r[gone], 0, DELETE, old[gone])
        self.exists[g[gone]] = False
        if kept.any():
            new = old[kept].copy()
            for i in self.target or ():  # kept rows only come from a partial delete
                if i not in self.key_index:
                    new[:, i] = self.NULL
            self.idx[:, g[kept]] = new.T
            self.counts.updated += int(kept.sum())
            self._emit_update(r[kept], old[kept], new)

    def _retracts(self, r: np.ndarray, g: np.ndarray, ex: np.ndarray) -> None:
        """Retractions (:meth:`changelake.engine.merge.RowMerger._retract`): an existing row takes the values
        back (-U/+U); a retraction for a key with no row changes nothing (the key stays absent)."""
        self.counts.ignored += int((~ex).sum())
        r, g = r[ex], g[ex]
        if not len(r):
            return
        assert self.agg is not None, "only an aggregation table retracts"
        old = np.take(self.idx, g, axis=1).T
        new = old.copy()
        for i in self.key_index:
            new[:, i] = self.H + r
        for i, column in self.agg.items():
            new[:, i] = column.retract(old[:, i], r)
        self.idx[:, g] = new.T
        self.counts.updated += len(r)
        self._emit_update(r, old, new)

    def _first_writes(self, r: np.ndarray, g: np.ndarray) -> None:
        if not len(r):
            return
        new = np.repeat((self.H + r)[:, None], len(self.idx), axis=1)
        if self.target is not None and self.agg is None:
            # A partial first write leaves the non-target columns null (aggregation stores the row as given).
            for i in range(len(self.names)):
                if i not in self.target:
                    new[:, i] = self.NULL
        if self.ai is not None:
            new[:, self.ai] = self.ID_BASE + r
            self.takes_id[r] = True
        self.idx[:, g] = new.T
        self.exists[g] = True
        self.counts.inserted += len(r)
        self._emit(r, 0, UPDATE_AFTER if self.m.wal_shortcut else INSERT, new)

    def _updates(self, r: np.ndarray, g: np.ndarray) -> None:
        if not len(r):
            return
        m = self.m
        old = np.take(self.idx, g, axis=1).T
        if isinstance(m, merge.FirstRowMerger) or (
            self.target is not None and m.target_is_key and self.agg is None
        ):
            self.counts.ignored += len(r)  # first_row keeps its row; a key-only write changes nothing
            return
        if self.version is not None:
            version_index, versions, null_version = self.version
            old_v, old_null = versions.at(old[:, 0 if self.whole_rows else version_index])
            new_v, new_null = versions.at(self.H + r)
            if null_version is not None:  # a null INT/BIGINT version is the type's minimum
                replace = np.where(old_null, null_version, old_v) <= np.where(new_null, null_version, new_v)
            else:
                replace = np.where(new_null, old_null, old_null | (old_v <= new_v))
            self.counts.ignored += int((~replace).sum())
            r, g, old = r[replace], g[replace], old[replace]
            if not len(r):
                return
        new = old.copy()
        if self.agg is not None:
            for i in self.key_index:
                new[:, i] = self.H + r
            for i, column in self.agg.items():
                new[:, i] = column.fold(old[:, i], r)
        elif self.target is None:
            new[:] = (self.H + r)[:, None]
        else:
            for i in self.target:
                new[:, i] = self.H + r
        self.idx[:, g] = new.T
        self.counts.updated += len(r)
        self._emit_update(r, old, new)

    def _is_null(self, i: int, positions: np.ndarray) -> np.ndarray:
        if self.agg and i in self.agg:
            return self.agg[i].null_at(positions)
        if i == self.ai:  # an id slot always holds an id; a stored id may be null
            low = np.minimum(positions, self.NULL)
            return np.where(positions >= self.ID_BASE, False, self.values(i).at(low)[1])
        return self.values(i).at(positions)[1]

    def values(self, i: int) -> _Values:
        """Column ``i``'s stored and record values as numpy (cached: versioned and aggregation read them)."""
        if i not in self._values:
            t = self.schema.field(i).type
            parts = ([self.stored.column(i)] if self.stored is not None else []) + [self.recs.column(i)]
            chunks = [c for p in parts for c in p.chunks] + [pa.nulls(1, t)]
            self._values[i] = _Values(*_to_numpy(pa.concat_arrays([c.cast(t) for c in chunks])))
        return self._values[i]

    # --- ids, rows, changelog --------------------------------------------------------------------------
    def _allocate_ids(self) -> None:
        """Auto-increment ids to the keys' first writes, in record order (as IdAllocator hands them out)."""
        self.ids_remaining = None
        self.id_values = np.zeros(0, np.int64)
        if self.ai is None:
            return
        needed = int(self.takes_id.sum())
        supply, left = [], needed
        for lo, hi in self.id_ranges:  # only the ids this bucket hands out (a range may be huge)
            take = min(left, max(0, hi - lo + 1))
            if take:
                supply.append(np.arange(lo, lo + take, dtype=np.int64))
                left -= take
        ids = np.concatenate(supply) if supply else np.zeros(0, np.int64)
        max_id = INT_RANGES[self.spec.columns[self.ai].type.name][1]  # INT or BIGINT
        takers = np.flatnonzero(self.takes_id)  # record order = _seq order
        over = np.flatnonzero(ids[:needed] > max_id)
        if len(over):
            failing = takers[over[0]]
            message = merge.sequence_overflow(self.spec.columns[self.ai].name, max_id)
        elif needed > len(ids):
            failing = takers[len(ids)]
            message = "auto-increment ids ran out for this bucket (the driver allocates too few)"
        else:
            failing = None
        if failing is not None:
            # Raised by run() unless an earlier record failed first (the sequential merge stops there).
            self.failures.append((int(self.seq[failing]), -1, message))
            return
        self.id_values = np.zeros(self.n, np.int64)
        self.id_values[np.flatnonzero(self.takes_id)] = ids[:needed]
        self.ids_remaining = _remaining_after(self.id_ranges, needed)

    def _store(self, i: int) -> tuple[pa.Array | pa.ChunkedArray, int]:
        """Column ``i``'s values: stored rows, records, the null slot, ids or aggregated values (built once,
        after the merge steps: rows and changelog gather from the same store); and where its null slots end
        if they hold placeholders (else 0)."""
        if i not in self._stores:
            self._stores[i] = self._build_store(i)
        return self._stores[i]

    def _take(self, i: int, positions: np.ndarray) -> pa.Array | pa.ChunkedArray:
        """Column ``i``'s values at these positions of its store."""
        store, placeholders_end = self._store(i)
        taken = store.take(pa.array(positions))
        if placeholders_end:
            null = (positions >= self.NULL) & (positions < placeholders_end)
            if null.any():
                taken = _with_nulls(taken, null)
        return taken

    def base_chunks(self, i: int) -> list[pa.Array]:
        """Column ``i``'s stored values, record values and null slot: the first chunks of its store (an
        aggregated column reads its inputs from them too)."""
        if i not in self._bases:
            t = self.schema.field(i).type
            parts = ([self.stored.column(i)] if self.stored is not None else []) + [self.recs.column(i)]
            chunks = [c for p in parts for c in p.chunks] + [pa.nulls(1, t)]
            self._bases[i] = [c.cast(t) if c.type != t else c for c in chunks]
        return self._bases[i]

    def _build_store(self, i: int) -> tuple[pa.Array | pa.ChunkedArray, int]:
        t = self.schema.field(i).type
        values = self.base_chunks(i)[:-1]  # the stored and record values (the null slot is last)
        slots, tail = 1, []  # the null slot; then ids, or the id slots and the values folds computed
        if i == self.ai:
            tail = [pa.array(self.id_values, pa.int64()).cast(t)]
        elif self.agg and i in self.agg:
            slots, tail = 1 + self.n, self.agg[i].computed_arrays()
        sample = next((p for p in values + tail if len(p)), None)
        if sample is None or any(p.null_count for p in values + tail):
            chunks, end = [*values, pa.nulls(slots, t), *tail], 0
        else:
            # No value is null: the null slots hold copies of a value and the takes null them afterwards.
            # Arrow takes from values without validity bitmaps ~3x faster (no validity check per value).
            filler = pa.nulls(slots, t).fill_null(sample[0])
            chunks, end = [_no_validity(c) for c in [*values, filler, *tail]], self.NULL + slots
        if not (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)):
            # Chunks, not one concatenated array: a take resolves its indexes across them about as fast as
            # a concatenation (fresh memory, zeroed by the kernel) and a take would cost.
            return pa.chunked_array(chunks, t), end
        return pa.concat_arrays(chunks), end  # a take from string chunks concatenates them every time

    @property
    def whole_rows(self) -> bool:
        """Every row state points at one stored row or record for all its columns: no partial writes, no
        aggregated values, no ids (then a key's state is one index, for all its columns)."""
        return self.target is None and not self.agg and self.ai is None

    def _gather(self, idx: np.ndarray) -> list[pa.Array | pa.ChunkedArray]:
        """The values ``idx`` points at, per column: a 1-D ``idx`` is whole rows, a 2-D one is column-major
        (C, m). Whole rows (or rows all of whose columns point at one stored row or record) are one take."""
        first = idx if idx.ndim == 1 else idx[0]
        whole = idx.ndim == 1 or (
            len(first) > 0
            and int(first.max()) < self.NULL
            and all(np.array_equal(column, first) for column in idx[1:])
        )
        if whole:
            table = pa.concat_tables(([self.stored] if self.stored is not None else []) + [self.recs])
            return table.take(pa.array(first)).columns
        return [self._take(i, idx[i]) for i in range(len(self.names))]

    def _unchanged_groups(self) -> np.ndarray:
        """Per group: its row is a stored row, alive, every column still pointing at that stored row."""
        stored = self.stored_of_group
        if self.whole_rows:
            same = self.idx[0] == stored
        else:
            same = np.all(self.idx == stored[None, :], axis=0)
        return (stored >= 0) & self.exists & same

    def _final_rows(self) -> pa.Table:
        """The bucket's rows in key order (``self._final_live``: their groups, in that order)."""
        live = np.flatnonzero(self.exists)
        if self.group_keys is not None:
            # Stored keys increase with their group ids: merge the new keys in by binary search.
            old, new = live[live < self.H], live[live >= self.H]
            new = new[np.argsort(self.group_keys[new], kind="stable")]
            live = np.insert(old, np.searchsorted(self.group_keys[old], self.group_keys[new]), new)
            self._final_live = live
            return pa.Table.from_arrays(self._gather(self._live_idx(live)), schema=self.schema)
        idx = self._live_idx(live)
        self._final_live = live
        if len(live) and live[-1] < self.H and self._stored_in_key_order():
            # The first H group ids are the stored rows, in their order: with no new key alive, the live rows
            # are in key order already.
            return pa.Table.from_arrays(self._gather(idx), schema=self.schema)
        keys = [self.names[i] for i in self.key_index]
        if idx.ndim == 1:
            key_table = pa.Table.from_arrays(self._gather(idx), schema=self.schema).select(keys)
        else:
            key_table = pa.Table.from_arrays([self._take(i, idx[i]) for i in self.key_index], names=keys)
        order = pc.sort_indices(key_table, sort_keys=[(k, "ascending") for k in keys]).to_numpy()
        self._final_live = live[order]
        return pa.Table.from_arrays(self._gather(idx[..., order]), schema=self.schema)

    def _live_idx(self, groups: np.ndarray) -> np.ndarray:
        """The value indexes of these groups' rows: 1-D (whole rows) when every row is whole, else
        column-major (C, len(groups))."""
        return self.idx[0, groups] if self.whole_rows else np.take(self.idx, groups, axis=1)

    def _stored_in_key_order(self) -> bool:
        """Whether the stored rows are in increasing key order (a bucket file is written so; two files
        read one after the other need not be), by comparing neighbours column by column."""
        if self.H < 2 or self.stored is None:
            return True
        if not np.array_equal(self.stored_of_group[: self.H], np.arange(self.H)):
            return False  # group ids do not follow the stored order
        decided = np.zeros(self.H - 1, bool)  # neighbours already ordered by an earlier column
        for i in self.key_index:
            column = self.stored.column(i)
            a, b = column.slice(0, self.H - 1), column.slice(1)
            less = pc.fill_null(pc.less(a, b), False).to_numpy(zero_copy_only=False)
            equal = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
            if (~decided & ~less & ~equal).any():
                return False
            decided |= less
        return bool(decided.all())

    def _changelog(self) -> pa.Table:
        out = changelog_schema(self.spec)
        if not self.emitted:
            return out.empty_table()
        seqs = np.concatenate([e[0] for e in self.emitted])
        subs = np.concatenate([np.full(len(e[0]), e[1], np.int32) for e in self.emitted])
        types = np.concatenate([np.full(len(e[0]), e[2], np.int8) for e in self.emitted])
        if self.whole_rows:
            idx = np.concatenate([e[3][:, 0] for e in self.emitted])
        else:  # column-major, as _gather takes it
            idx = np.concatenate([e[3].T for e in self.emitted], axis=1)
        if len(seqs) < 2 or bool(
            np.all((seqs[1:] > seqs[:-1]) | ((seqs[1:] == seqs[:-1]) & (subs[1:] > subs[:-1])))
        ):
            order = np.arange(len(seqs))  # emitted in order already (one level of first writes, say)
        else:
            order = np.lexsort((subs, seqs))
        change = pa.DictionaryArray.from_arrays(types[order], pa.array(CHANGE_TYPES)).cast(pa.string())
        columns = [pa.array(seqs[order], pa.int64()), pa.array(subs[order], pa.int32()), change]
        return pa.Table.from_arrays(columns + self._gather(idx[..., order]), schema=out)


def _take_chunks(chunks: list[pa.Array], arrow_type: pa.DataType, positions: np.ndarray) -> pa.Array:
    """The values at these positions of the chunks laid end to end. From the one chunk that holds them all
    when there is one (a fold reads stored rows, or records): a take across chunks concatenates string
    chunks first, and checks every value's validity once a chunk (the null slot) has a null."""
    if len(positions):
        low, high, start = int(positions.min()), int(positions.max()), 0
        for chunk in chunks:
            if start <= low and high < start + len(chunk):
                return chunk.take(pa.array(positions - start))
            start += len(chunk)
    return pa.chunked_array(chunks, arrow_type).take(pa.array(positions)).combine_chunks()


def _with_nulls(array: pa.Array | pa.ChunkedArray, null: np.ndarray) -> pa.Array:
    """``array`` (no null in it) with nulls where ``null`` is set."""
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    if array.offset == 0 and array.type.num_fields == 0 and array.null_count == 0:
        validity = pa.py_buffer(np.packbits(~null, bitorder="little"))
        count = int(null.sum())
        return pa.Array.from_buffers(array.type, len(array), [validity, *array.buffers()[1:]], count)
    return pc.if_else(pa.array(null), pa.scalar(None, array.type), array)


def _no_validity(array: pa.Array) -> pa.Array:
    """``array`` without its validity bitmap when no value is null: Arrow's kernels check each value of an
    array that has one (a concatenation or ``fill_null`` keeps an all-valid bitmap)."""
    if array.null_count or array.buffers()[0] is None or array.type.num_fields:
        return array
    return pa.Array.from_buffers(array.type, len(array), [None, *array.buffers()[1:]], 0, array.offset)


def _remaining_after(ranges: list[tuple[int, int]], used: int) -> tuple[int, int] | None:
    """IdAllocator.remaining() after ``used`` ids: the first range with ids left, from where they start."""
    for lo, hi in ranges:
        size = max(0, hi - lo + 1)
        if used < size:
            return lo + used, hi
        used -= size
    return None


# --- values as numpy arrays (versioned comparisons, aggregation) ---------------------------------------------
def _kind(arrow_type: pa.DataType) -> str:
    if pa.types.is_integer(arrow_type):
        return "int"
    if pa.types.is_floating(arrow_type):
        return "float"
    if pa.types.is_boolean(arrow_type):
        return "bool"
    if pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type):
        return "temporal"
    if pa.types.is_decimal128(arrow_type) and arrow_type.precision <= 18:
        return "decimal64"  # the unscaled value fits a long: exact int64 arithmetic at the column's scale
    return "object"  # wider decimals, string, binary


def _to_numpy(array: pa.Array | pa.ChunkedArray, objects: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Values and null mask; integers and temporals as int64, floats keep their width, DECIMAL(<=18) as its
    unscaled int64, the rest (or everything, with ``objects``: for one-record merges) as objects."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
    kind = "object" if objects else _kind(array.type)
    nulls = array.is_null().to_numpy(zero_copy_only=False)
    if kind == "object":
        values = np.empty(len(array), object)
        values[:] = array.to_pylist()
        return values, nulls
    if kind == "decimal64":
        words = np.frombuffer(array.buffers()[1], "<i8").reshape(-1, 2)[
            array.offset : array.offset + len(array)
        ]
        return np.where(nulls, 0, words[:, 0]), nulls  # the low word of a 128-bit value of at most 18 digits
    if kind == "temporal":
        array = array.cast(pa.int32() if pa.types.is_date(array.type) else pa.int64())
    if kind == "bool":
        return array.fill_null(False).to_numpy(zero_copy_only=False), nulls
    values = array.fill_null(0).to_numpy(zero_copy_only=False)
    return (values.astype(np.int64) if kind in ("int", "temporal") else values), nulls


def _from_numpy(
    values: np.ndarray, nulls: np.ndarray, arrow_type: pa.DataType, objects: bool = False
) -> pa.Array:
    kind = "object" if objects else _kind(arrow_type)
    if kind == "object":
        return pa.array([None if z else v for v, z in zip(values, nulls, strict=True)], arrow_type)
    if kind == "decimal64":
        words = np.empty((len(values), 2), np.int64)
        words[:, 0] = values
        words[:, 1] = values.astype(np.int64) >> 63  # the high word: the sign extended
        array = pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(words)])
        return pc.if_else(pa.array(nulls), pa.scalar(None, arrow_type), array) if nulls.any() else array
    if kind == "temporal":
        base = pa.int32() if pa.types.is_date(arrow_type) else pa.int64()
        return pa.array(values.astype(base.to_pandas_dtype()), base, mask=nulls).cast(arrow_type)
    if kind == "int":
        return pa.array(values.astype(arrow_type.to_pandas_dtype()), arrow_type, mask=nulls)
    return pa.array(values, arrow_type, mask=nulls)


class _Values:
    """One column's stored + record values as numpy (index space of the value store, null slot included)."""

    def __init__(self, values: np.ndarray, nulls: np.ndarray):
        self.values, self.nulls = values, nulls

    def at(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.values[positions], self.nulls[positions]


class _AggColumn:
    """An aggregated column: the current value of every key, and the values each step computed."""

    def __init__(self, spec: TableSpec, i: int, bm: _BucketMerge):
        self.bm = bm
        column = spec.columns[i]
        self.type = bm.schema.field(i).type
        self.function, parameters = aggregates.of_column(spec, column.name)
        # Point at the input ``pick`` chooses, or compute values with ``arrow`` (the function's merge over
        # Arrow arrays) or ``array``: its numpy merge, or its one-record merge called per value (then the values
        # are Python objects).
        self.pick: aggregates.Pick | None = None
        self.array: aggregates.ArrayFold | None = None
        self.arrow: aggregates.ArrowFold | None = None
        self.objects = not self.function.vectorized(column.type)
        # A retraction table's retraction: clear to null where ``clears`` says (functions that clear, columns
        # that ignore retractions: never), else compute with ``retract_array`` like ``array``.
        self.clears: aggregates.Clear | None = None
        self.retract_array: aggregates.ArrayFold | None = None
        # The one-record merges: what an array fold's refused values are refused with (the reference's words).
        self.scalar = aggregates.scalar_fold(spec, column.name)
        self.scalar_retract: aggregates.Fold | None = None
        if bm.m.retracts_update_before or bm.m.retracts_delete:
            self.scalar_retract = aggregates.scalar_retract(spec, column.name)
            if spec.ignores_retract(column.name):
                self.clears = aggregates.never_clears
            elif self.function.retract_clears is not None:
                self.clears = self.function.retract_clears
            elif self.objects:
                self.retract_array = _per_value(self.scalar_retract)
            else:
                assert self.function.retract_array is not None, (
                    "spec.py refuses a function that cannot retract"
                )
                self.retract_array = self.function.retract_array(column.type, parameters)
        if self.objects:
            self.array = _per_value(self.scalar)
        elif self.function.arrow is not None:
            self.arrow = self.function.arrow(column.type, parameters)
        elif self.function.array is not None:
            self.array = self.function.array(column.type, parameters)
        else:
            self.pick = self.function.pick
        # A key's current value is where its idx points: the stored row, a record, the null slot or a value
        # a fold computed. Only the positions a fold reads are converted to numpy (an initial load folds
        # nothing and converts nothing).
        self.i = i
        self.offset = bm.ID_BASE + bm.n  # computed values come after the id slots in the store
        # (values, nulls) of each fold: numpy values (``array``) or an Arrow array (``arrow``).
        self.computed: list[tuple[np.ndarray | pa.Array, np.ndarray]] = []
        self._base: pa.ChunkedArray | None = None
        self._base_null: np.ndarray | None = None

    def base(self) -> pa.ChunkedArray:
        """The column's stored values, record values and null slot, in the store's order (the store's first
        chunks, not copied)."""
        if self._base is None:
            self._base = pa.chunked_array(self.bm.base_chunks(self.i), self.type)
        return self._base

    def arrow_at(self, positions: np.ndarray) -> pa.Array:
        """The values at these positions as one Arrow array (an ``arrow`` fold's input): the base, the id
        slots and the Arrow values folds computed are the store's chunks so far."""
        computed = [v for v, _ in self.computed]
        chunks = self.bm.base_chunks(self.i) + [pa.nulls(self.bm.n, self.type)] + computed
        return _take_chunks(chunks, self.type, positions)

    def value_at(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        low = positions < self.offset
        taken = _take_chunks(self.bm.base_chunks(self.i), self.type, np.where(low, positions, 0))
        values, nulls = _to_numpy(taken, objects=self.objects)
        if (~low).any():
            values = values.astype(np.result_type(values.dtype, self.computed[0][0].dtype))  # a copy
            nulls = nulls.copy()
            all_values = np.concatenate([v for v, _ in self.computed])
            all_nulls = np.concatenate([z for _, z in self.computed])
            values[~low] = all_values[positions[~low] - self.offset]
            nulls[~low] = all_nulls[positions[~low] - self.offset]
        return values, nulls

    def null_at(self, positions: np.ndarray) -> np.ndarray:
        low = positions < self.offset
        if self.base().null_count == 1:
            # Only the null slot (and the id slots after it) are null: no mask of the whole base.
            nulls = positions >= self.bm.NULL
        else:
            if self._base_null is None:
                self._base_null = self.base().is_null().to_numpy(zero_copy_only=False)
            nulls = self._base_null[np.where(low, positions, 0)]
        if (~low).any():
            all_nulls = np.concatenate([z for _, z in self.computed])
            nulls[~low] = all_nulls[positions[~low] - self.offset]
        return nulls

    def fold(self, old_positions: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Aggregate record ``r``'s value into the values at ``old_positions``; returns the new positions."""
        if self.pick is not None:
            return self._select(self.pick, old_positions, self.bm.H + r)
        start = self.offset + sum(len(v) for v, _ in self.computed)
        if self.arrow is not None:
            result = self.arrow(self.arrow_at(old_positions), self.arrow_at(self.bm.H + r))
            result = result.combine_chunks() if isinstance(result, pa.ChunkedArray) else result
            result = result.cast(self.type) if result.type != self.type else result
            self.computed.append((result, result.is_null().to_numpy(zero_copy_only=False)))
            return np.arange(start, start + len(r))
        assert self.array is not None, "a column that picks no input computes its values"
        return self._compute(self.array, old_positions, r, self.scalar)

    def retract(self, old_positions: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Retract record ``r``'s value from the values at ``old_positions``; returns the new positions."""
        if self.clears is not None:
            cleared = self.clears(self.null_at(old_positions), self.null_at(self.bm.H + r))
            return np.where(cleared, self.bm.NULL, old_positions)
        assert self.retract_array is not None and self.scalar_retract is not None, (
            "a retraction table's column clears or computes"
        )
        return self._compute(self.retract_array, old_positions, r, self.scalar_retract)

    def _compute(
        self, fn: aggregates.ArrayFold, old_positions: np.ndarray, r: np.ndarray, scalar: aggregates.Fold
    ) -> np.ndarray:
        """Store ``fn`` of the values at ``old_positions`` and record ``r``'s; returns where they are. A value
        the fold marks refused (an integer overflow) is refused with the one-record merge ``scalar``'s words."""
        start = self.offset + sum(len(v) for v, _ in self.computed)
        old, old_null = self.value_at(old_positions)
        new, new_null = self.value_at(self.bm.H + r)
        value, null, refused = fn(old, old_null, new, new_null)
        if self.objects:  # only the one-record merge refuses a value
            for j in [j for j, v in enumerate(value) if isinstance(v, _Refused)]:
                self.bm.failures.append((int(self.bm.seq[r[j]]), self.i, value[j].message))
                value[j], null[j] = None, True
        if refused is not None and refused.any():
            null = null.copy()
            for k in np.flatnonzero(refused).tolist():
                stored = None if old_null[k] else old[k].item()
                given = None if new_null[k] else new[k].item()
                try:
                    scalar(stored, given)
                except WriteRefusedError as e:
                    self.bm.failures.append((int(self.bm.seq[r[k]]), self.i, str(e)))
                else:
                    raise AssertionError(
                        f"the array fold refuses {stored!r}, {given!r}; the one-record merge not"
                    )
                null[k] = True
        self.computed.append((value, null))
        return np.arange(start, start + len(r))

    def _select(self, pick: aggregates.Pick, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """A function whose result is one of its inputs points at it (no value computed or converted, but for
        the pairs max/min compare)."""

        def values(at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return self.value_at(old[at])[0], self.value_at(new[at])[0]

        take_new = pick(self.null_at(old), self.null_at(new), values)
        return np.where(take_new, new, old)

    def computed_arrays(self) -> list[pa.Array]:
        """The values the folds computed, in store order (they follow the null slot and the id slots: an id
        column never aggregates)."""
        return [
            v if isinstance(v, pa.Array) else _from_numpy(v, z, self.type, self.objects)
            for v, z in self.computed
        ]


class _Refused:
    """A scalar fold that refused a value (e.g. bytes that are no roaring bitmap): kept, raised later."""

    def __init__(self, message: str):
        self.message = message


def _per_value(fn: aggregates.Fold) -> aggregates.ArrayFold:
    """A one-record merge over object arrays (numpy ``frompyfunc``: a Python call per value); a refusal becomes
    a :class:`_Refused` value, so the earliest refused record can be found afterwards."""

    def fold(acc, value):
        try:
            return fn(acc, value)
        except WriteRefusedError as e:
            return _Refused(str(e))

    ufunc = np.frompyfunc(fold, 2, 1)

    def merge(a, a_null, b, b_null):
        left = np.asarray(np.where(a_null, None, a), dtype=object)
        right = np.asarray(np.where(b_null, None, b), dtype=object)
        out = np.asarray(ufunc(left, right) if len(left) else np.zeros(0, object), dtype=object)
        return out, np.array([v is None for v in out], bool), None  # refusals are _Refused values

    return merge
