"""The columnar merge's null slots (``changelake.engine.columnar``): when no stored or record value of a column
is null, its store holds placeholder values in the null slot (and an aggregated column's id slots) and the
gathers null them afterwards. Rows and changelog images that point there must come out null, exactly as the
sequential reference (``merge.apply_sequential``) has them. Pure Arrow (no Spark).
"""

from __future__ import annotations

import datetime as dt
import decimal

from tests.engine.columnar_strategies import Case
from tests.engine.test_columnar import check

COLUMNS = [
    {"name": "k", "type": "INT"},
    {"name": "n", "type": "BIGINT"},
    {"name": "d", "type": "DECIMAL(12,2)"},
    {"name": "s", "type": "STRING"},
    {"name": "t", "type": "TIMESTAMP(6)"},
]
#: Stored rows without a null: every column's store gets placeholders.
STORED = [(k, 10 * k, f"{k}.25", f"s{k}", f"2024-01-0{k} 00:00:00") for k in range(1, 6)]


def case(options: dict[str, str], records: list[tuple[str, tuple]], target: list[str]) -> Case:
    spec = {"name": "t.slots", "columns": COLUMNS, "primary_key": ["k"], "options": options}
    return Case(spec, stored=[_typed(r) for r in STORED], records=_numbered(records), target_columns=target)


def _typed(row: tuple) -> tuple:
    k, n, d, s, t = row
    return (k, n, decimal.Decimal(d), s, dt.datetime.fromisoformat(t))


def _numbered(records: list[tuple[str, tuple]]) -> list[tuple[int, str, tuple]]:
    return [(seq, op, _typed(row)) for seq, (op, row) in enumerate(records, 1)]


RECORDS = [
    ("+I", (7, 70, "7.50", "s7", "2024-02-01 00:00:00")),  # a new key: the other columns are null
    ("-D", (2, 0, "0.00", "x", "2024-03-01 00:00:00")),  # a partial delete nulls the target columns
    ("+U", (3, 33, "3.33", "s33", "2024-04-01 00:00:00")),
    ("-D", (7, 0, "0.00", "x", "2024-03-01 00:00:00")),
]


def test_partial_last_row_writes_and_deletes_null_the_other_columns():
    check(case({"table.delete.behavior": "allow"}, RECORDS, ["k", "n", "s"]))


def test_partial_aggregation_deletes_null_aggregated_columns():
    options = {
        "table.merge-engine": "aggregation",
        "table.delete.behavior": "allow",
        "fields.n.agg": "sum",
        "fields.d.agg": "sum",
        "fields.s.agg": "listagg",
        "fields.t.agg": "max",
    }
    check(case(options, RECORDS, ["k", "d", "s"]))
    check(case(options, RECORDS + [("+U", (2, 5, "1.00", "again", "2025-01-01 00:00:00"))], ["k", "d", "t"]))
