"""Primary keys as Arrow columns: dense group ids per key, keys as sortable numbers, a sortedness check.

Shared by the decode tasks (grouping records by partition and bucket) and the merge (grouping records by key).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def increasing(values: np.ndarray) -> bool:
    """Whether every value is greater than the one before it (sorted, no value twice)."""
    return bool(np.all(values[1:] > values[:-1]))


def key_numbers(column: pa.ChunkedArray) -> np.ndarray | None:
    """A key column as numbers numpy orders as Arrow does (integers, floats, dates, timestamps; -0.0 as 0.0),
    or None for another type or a null."""
    t = column.type
    if column.null_count:
        return None
    if pa.types.is_floating(t):
        column = pc.add(column, pa.scalar(0.0, t))
    elif pa.types.is_date32(t):
        column = column.cast(pa.int32())
    elif pa.types.is_timestamp(t):
        column = column.cast(pa.int64())
    elif not pa.types.is_integer(t):
        return None
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return array.to_numpy(zero_copy_only=False)


def group_ids(keys: pa.Table) -> np.ndarray:
    """A dense id per row, equal for equal keys, numbered in order of first appearance (floats: -0.0 and 0.0
    are one key, as in Python)."""
    codes = None
    for column in keys.columns:
        if pa.types.is_floating(column.type):
            column = pc.add(column, pa.scalar(0.0, column.type))  # -0.0 + 0.0 == 0.0
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        encoded = array.dictionary_encode(null_encoding="encode")
        code = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        if codes is None:
            codes = code
        else:
            # Pairs of dense codes -> one dense code, again in order of first appearance.
            combined = codes * np.int64(len(encoded.dictionary) + 1) + code
            codes = pa.array(combined).dictionary_encode().indices.to_numpy().astype(np.int64)
    return codes if codes is not None else np.zeros(keys.num_rows, np.int64)
