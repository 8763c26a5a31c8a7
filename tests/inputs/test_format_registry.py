"""The input-format registry (``changelake.inputs.formats.FORMATS``) is the one list of formats: every format
reads back what datagen writes in it, and a format added to the registry with its declaration
(``source_options.FORMAT_DECLARATIONS``) is accepted by the spec, written by datagen and read by the reader. No Spark here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from changelake.errors import SpecError
from changelake.inputs import formats
from changelake.inputs.datagen import Profile, _Source, generate
from changelake.inputs.readers import read_batch
from changelake.source_options import FORMAT_DECLARATIONS
from changelake.spec import TableSpec

COLUMNS = [
    {"name": "id", "type": "BIGINT"},
    {"name": "name", "type": "STRING"},
    {"name": "amount", "type": "DECIMAL(10,2)"},
    {"name": "at", "type": "TIMESTAMP(3)"},
    {"name": "day", "type": "DATE"},
    {"name": "ok", "type": "BOOLEAN"},
    {"name": "n", "type": "INT"},
]


def spec(fmt: str, mode: str = "cdc", envelope: bool = False) -> TableSpec:
    return TableSpec.from_dict(
        {
            "name": "r.t",
            "columns": COLUMNS,
            "primary_key": ["id"],
            "source": {"format": fmt},
            "datagen": {"mode": mode, "records": 40, "keys": 12, "envelope": envelope},
        }
    )


def replayed(paths: list[Path], s: TableSpec) -> dict[int, dict]:
    """The table's rows after the batches' records, by key (-U before images change nothing)."""
    rows: dict[int, dict] = {}
    for path in paths:
        for record in read_batch([path], s).records.to_pylist():
            op, key = record.pop("_op"), record["id"]
            record.pop("_seq")
            if op == "-D":
                rows.pop(key, None)
            elif op != "-U":
                rows[key] = {**rows.get(key, {}), **{k: v for k, v in record.items() if v is not None}}
    return rows


CASES = [(name, "cdc", False) for name in formats.FORMATS] + [
    ("debezium-json", "cdc", True),
    ("upsert-kafka", "events", False),
]


@pytest.mark.parametrize(("fmt", "mode", "envelope"), CASES)
def test_every_format_reads_back_what_datagen_writes_in_it(tmp_path, fmt, mode, envelope):
    s = spec(fmt, mode, envelope)
    written = generate(s, tmp_path, 3, seed=5)
    source = _Source(s, Profile.of(s), 5)
    for batch_id in (1, 2, 3):
        source.batch(batch_id)
    assert [g.path.suffix for g in written] == [f".{formats.FORMATS[fmt].extension}"] * 3
    assert sum(g.changes["delete"] for g in written) > 0 or mode == "events"
    assert replayed([g.path for g in written], s) == {key[0]: row for key, row in source.rows.items()}


def test_the_default_format_of_a_file_is_by_its_suffix():
    assert formats.default_format(Path("1.parquet")) == "changelog-parquet"
    assert formats.default_format(Path("1.jsonl")) == formats.DEFAULT_FORMAT == "changelog-json"
    assert formats.default_format(Path("1.json")) == "changelog-json"


class PairsJson(formats.JsonLinesFormat):
    """A format the library does not have: ``[op, {row}]`` per line."""

    name = "pairs-json"

    def decode(self, obj: Any, spec: TableSpec, opts) -> formats.Message:
        if not (
            isinstance(obj, list) and len(obj) == 2 and obj[0] in formats.OPS and isinstance(obj[1], dict)
        ):
            raise formats.FieldError(None, "expected [op, {row}]")
        return formats.Message([(obj[0], obj[1])])

    def render(self, spec: TableSpec, events: list[formats.SourceEvent], envelope: bool = False) -> list[str]:
        return [json.dumps([op, row]) for e in events for op, row in e.records()]


def test_a_format_added_to_the_registry_and_declared_is_specified_written_and_read(tmp_path, monkeypatch):
    """A new format is its class in FORMATS plus its declaration below the spec (the options only it takes,
    whether it has Kafka metadata), which is what a spec is checked against."""
    with pytest.raises(SpecError, match=r"'format' must be one of \[.*'maxwell-json'\], got 'pairs-json'"):
        spec("pairs-json")
    monkeypatch.setitem(FORMAT_DECLARATIONS, "pairs-json", (frozenset({"table.include"}), False))
    monkeypatch.setitem(formats.FORMATS, "pairs-json", PairsJson())
    assert PairsJson().options == {"table.include"}  # the class reads its declaration
    s = TableSpec.from_dict(
        {
            "name": "r.t",
            "columns": [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "STRING"}],
            "primary_key": ["id"],
            "source": {"format": "pairs-json", "table.include": "t"},
            "datagen": {"records": 30, "keys": 8},
        }
    )
    written = generate(s, tmp_path, 2, seed=3)
    source = _Source(s, Profile.of(s), 3)
    for batch_id in (1, 2):
        source.batch(batch_id)
    assert replayed([g.path for g in written], s) == {key[0]: row for key, row in source.rows.items()}
    # Its options are its own: another format refuses them, naming the formats that take them.
    with pytest.raises(
        SpecError, match=r"'table.include' applies to \['debezium-json', .*'pairs-json'\] only"
    ):
        TableSpec.from_dict(
            {"name": "r.t", "columns": COLUMNS, "primary_key": ["id"], "source": {"table.include": "t"}}
        )
