"""What a table spec may say about aggregate functions: their names, the column types each accepts, their
parameters and whether they can retract (docs/semantics.md §4.2, §4.7).

The spec's create-time checks (:mod:`changelake.spec`) read this; the merges themselves are the engine's
(:data:`changelake.engine.aggregates.AGGREGATE_FUNCTIONS`, one entry per signature here, checked equal by
tests/engine/test_aggregate_signatures.py). Kept below the spec so that the spec does not import the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from changelake.errors import java_list
from changelake.types import DataType

NUMERIC = ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL")
ORDERED = ("CHAR", "STRING", *NUMERIC, "DATE", "TIME", "TIMESTAMP", "TIMESTAMP_LTZ")
DELIMITER = {"delimiter": ","}


@dataclass(frozen=True)
class AggregateSignature:
    """An aggregate function as a spec sees it."""

    name: str
    types: tuple[str, ...] | None  # the column type names it accepts; None = every type
    parameters: Mapping[str, str] = field(default_factory=dict)  # name -> default
    retractable: bool = False  # whether a -U/-D can take its contribution back (table.agg.retract)

    def accepts(self, column_type: DataType) -> bool:
        """Whether a column of this type may use the function (Fluss's create-time check)."""
        return self.types is None or column_type.name in self.types


def _registry(*signatures: AggregateSignature) -> dict[str, AggregateSignature]:
    return {s.name: s for s in signatures}


#: Fluss's aggregate functions by name. listagg/string_agg follow Fluss's code, which refuses CHAR when the
#: merger is built (§12 #2).
AGGREGATE_SIGNATURES: dict[str, AggregateSignature] = _registry(
    AggregateSignature("sum", NUMERIC, retractable=True),
    AggregateSignature("product", NUMERIC, retractable=True),
    AggregateSignature("max", ORDERED),
    AggregateSignature("min", ORDERED),
    AggregateSignature("last_value", None, retractable=True),
    AggregateSignature("last_value_ignore_nulls", None, retractable=True),
    AggregateSignature("first_value", None),
    AggregateSignature("first_value_ignore_nulls", None),
    AggregateSignature("listagg", ("STRING",), DELIMITER),
    AggregateSignature("string_agg", ("STRING",), DELIMITER),
    AggregateSignature("bool_and", ("BOOLEAN",)),
    AggregateSignature("bool_or", ("BOOLEAN",)),
    AggregateSignature("rbm32", ("BYTES",)),
    AggregateSignature("rbm64", ("BYTES",)),
)
#: The function of a column that declares none.
DEFAULT_FUNCTION = "last_value_ignore_nulls"


def retract_refused(function: str, column: str) -> str:
    """Why a retraction table cannot have this column (its function cannot retract), in Fluss's words where
    its PR has them and with Paimon's way out (``ignore-retract``)."""
    return (
        f"Aggregation function '{function}' of column '{column}' does not support retract, but "
        f"'table.agg.retract' is true. Set 'fields.{column}.ignore-retract' = 'true' to keep the column "
        "unchanged by retractions, or use a function that supports retract: "
        f"{java_list(sorted(n for n, s in AGGREGATE_SIGNATURES.items() if s.retractable))}."
    )
