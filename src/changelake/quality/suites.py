"""changelake's Great Expectations suites, defined in code (GX Core 1.x).

Three suites, each instantiated per table (or mart) it applies to, validated on Spark DataFrames:

* ``pk_uniqueness``: the primary key (or a mart's grain) is unique and never null.
* ``tombstone_handling``: deletes stay deleted, every ``-U`` is immediately followed by its ``+U``, change
  types take only the four values; tables that ignore deletes keep their tombstoned rows.
* ``duplicate_drift``: the share of redelivered records per batch, and the drift between an aggregation
  engine's table and its exact dbt recomputation, per key and in total.

Each :class:`Check` names the DataFrame it validates (built from the table's current snapshot and
changelog), the expectations and the key columns a failure reports. Derived DataFrames turn a rule GX has
no built-in expectation for (for example "the latest change of a key agrees with its presence") into a
column a built-in expectation can check, so no custom expectation classes are needed.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Any

import great_expectations as gx

SUITES = ("pk_uniqueness", "tombstone_handling", "duplicate_drift")
CHANGE_TYPES = ["+I", "-U", "+U", "-D"]
#: Allowed (latest change of a key, presence in the table) pairs when deletes reach the table.
TOMBSTONE_STATES = ["+I/present", "+U/present", "-D/absent"]


@dataclass
class Check:
    """One validation: a suite's expectations on one DataFrame."""

    suite: str
    asset: str  # what is validated, e.g. "shop.orders" or "shop.orders latest change per key"
    frame: Any  # a Spark DataFrame
    expectations: list = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # columns that identify an offending row in the report
    # what the run checked, e.g. "shop.orders at batch 12": the run's name in the Data Docs
    checked: str = ""

    @property
    def name(self) -> str:
        return f"{self.suite}__{self.asset}".replace(" ", "_")


def key_columns(spec) -> list[str]:
    """The view columns that identify a row: the primary key, with a nanosecond timestamp's exact
    ``<col>__nanos`` in place of its microsecond TIMESTAMP (two keys 1 ns apart are distinct rows)."""
    from changelake.types import NANOS_SUFFIX

    types = {c.name: c.type for c in spec.columns}
    return [k + NANOS_SUFFIX if types[k].is_nanos else k for k in spec.primary_key]


def pk_uniqueness(asset: str, frame, keys: list[str]) -> Check:
    """The key is unique (compound keys together) and no key column is null."""
    unique = (
        gx.expectations.ExpectColumnValuesToBeUnique(column=keys[0], severity="critical")
        if len(keys) == 1
        else gx.expectations.ExpectCompoundColumnsToBeUnique(column_list=keys, severity="critical")
    )
    not_null = [gx.expectations.ExpectColumnValuesToNotBeNull(column=k, severity="critical") for k in keys]
    return Check("pk_uniqueness", asset, frame, [unique, *not_null], keys)


def tombstone_handling(spec, rows, changelog) -> list[Check]:
    """Deletes that reach the table stay deleted; changelog pairs and values are well formed."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from changelake.engine.merge import deletes_dropped_before_table

    keys = key_columns(spec)
    newest = Window.partitionBy(*keys).orderBy(F.col("_log_offset").desc())
    latest = (
        changelog.withColumn("_rank", F.row_number().over(newest))
        .filter("_rank = 1")
        .select(*keys, F.col("_change_type").alias("latest_change_type"), "_log_offset")
    )
    present = rows.select(*keys).withColumn("_present", F.lit(True))
    states = (
        latest.join(present, keys, "full_outer")
        .withColumn("present", F.coalesce(F.col("_present"), F.lit(False)))
        .withColumn(
            "state",
            F.concat_ws(
                "/",
                F.coalesce("latest_change_type", F.lit("none")),
                F.when(F.col("present"), "present").otherwise("absent"),
            ),
        )
        .drop("_present")
    )
    # Each (partition, bucket) is one log: a -U's +U follows it in that log.
    log_id = [*spec.partition_keys, "_bucket"]
    following = Window.partitionBy(*log_id).orderBy("_log_offset")
    pairs = (
        changelog.select(
            *keys,
            "_log_offset",
            "_change_type",
            F.lead("_change_type").over(following).alias("next_change_type"),
            *[F.lead(k).over(following).alias(f"_next_{k}") for k in keys],
        )
        .filter("_change_type = '-U'")
        .withColumn(
            "followed_by",
            F.when(
                # Column objects, not SQL text: a key named `null` or `current_date` stays a column.
                functools.reduce(
                    operator.and_,
                    [F.col("next_change_type").eqNullSafe("+U")]
                    + [F.col(k).eqNullSafe(F.col(f"_next_{k}")) for k in keys],
                ),
                "+U of the same key",
            ).otherwise(
                F.concat_ws(" ", F.coalesce("next_change_type", F.lit("nothing")), F.lit("(orphan -U)"))
            ),
        )
    )
    checks = [
        Check(
            "tombstone_handling",
            f"{spec.full_name} latest change per key",
            states,
            [
                gx.expectations.ExpectColumnValuesToBeInSet(
                    column="state", value_set=TOMBSTONE_STATES, severity="critical"
                )
            ],
            [*keys, "_log_offset"],
        ),
        Check(
            "tombstone_handling",
            f"{spec.full_name} update pairs",
            pairs,
            [
                gx.expectations.ExpectColumnValuesToBeInSet(
                    column="followed_by", value_set=["+U of the same key"], severity="critical"
                )
            ],
            [*keys, "_log_offset"],
        ),
    ]
    log_expectations = [
        gx.expectations.ExpectColumnValuesToBeInSet(
            column="_change_type", value_set=CHANGE_TYPES, severity="critical"
        ),
        gx.expectations.ExpectCompoundColumnsToBeUnique(
            column_list=[*log_id, "_log_offset"], severity="critical"
        ),
    ]
    if deletes_dropped_before_table(spec):
        # Tombstones are counted as ignored and never reach the table: no -D in its changelog.
        log_expectations.append(
            gx.expectations.ExpectColumnValuesToNotBeInSet(
                column="_change_type", value_set=["-D"], severity="critical"
            )
        )
    checks.append(
        Check(
            "tombstone_handling",
            f"{spec.full_name} changelog",
            changelog,
            log_expectations,
            [*keys, "_log_offset"],
        )
    )
    return checks


def redelivery(frame, max_share: float) -> Check:
    """Share of redelivered records per batch (from Kafka offsets) stays at or below ``max_share``."""
    return Check(
        "duplicate_drift",
        "redelivery per batch",
        frame,
        [
            gx.expectations.ExpectColumnValuesToBeBetween(
                column="redelivered_share", min_value=0, max_value=max_share, severity="warning"
            )
        ],
        ["table", "batch_id"],
    )


def drift(asset: str, frame, keys: list[str], threshold: float) -> Check:
    """The engine's aggregates equal the exact recomputation: per key and in total, drift <= threshold."""
    return Check(
        "duplicate_drift",
        asset,
        frame,
        [
            gx.expectations.ExpectColumnValuesToBeBetween(
                column="drift", max_value=threshold, severity="critical"
            ),
            gx.expectations.ExpectColumnSumToBeBetween(
                column="drift", max_value=threshold, severity="critical"
            ),
        ],
        keys,
    )
