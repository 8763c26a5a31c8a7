"""listagg/string_agg's columnar merge over Arrow arrays equals its one-record merge pair by pair: every pairing
of null, empty, ASCII and multi-byte values, with the default and a declared delimiter, on sliced arrays
(docs/semantics.md §4.2). Pure Arrow (no Spark), a fraction of a second.

The whole merge is tested against the sequential reference in ``tests/engine/test_columnar.py``; this pins
the fold itself, e.g. a pair of nulls stays one null row (pyarrow's ``null_handling="skip"`` drops it).
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from changelake.engine.aggregates import AGGREGATE_FUNCTIONS
from changelake.types import parse_type

VALUES = [None, "", "a", "é", "日本", "x,y"]


@pytest.mark.parametrize("name", ["listagg", "string_agg"])
@pytest.mark.parametrize("delimiter", [",", "; ", "", "→"])
def test_the_arrow_fold_equals_the_one_record_fold(name, delimiter):
    function = AGGREGATE_FUNCTIONS[name]
    column_type = parse_type("STRING")
    assert function.arrow is not None and function.vectorized(column_type)
    parameters = {"delimiter": delimiter}
    scalar = function.scalar(column_type, parameters)
    fold = function.arrow(column_type, parameters)
    pairs = list(itertools.product(VALUES, VALUES))
    stored, inputs = ([p[j] for p in pairs] for j in (0, 1))
    # Sliced arrays: the fold must honour their offsets.
    a = pa.array(["pad", *stored], pa.string()).slice(1)
    b = pa.array(["pad", "pad", *inputs], pa.string()).slice(2)
    result = fold(a, b)
    assert result.type == pa.string()
    assert result.to_pylist() == [scalar(x, y) for x, y in pairs]
