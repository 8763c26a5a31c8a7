"""The input formats, one module each, behind one registry: :data:`FORMATS`, name -> :class:`InputFormat`.

A format's module holds both directions: decoding its landed files into changelog records (used by
:mod:`changelake.inputs.readers` and :mod:`changelake.inputs.decode`) and rendering datagen's
:class:`SourceEvent` s as a batch file (:mod:`changelake.inputs.datagen`). The names a table's
``source.format`` accepts and the format of a file by its suffix come from here; the source options only
some formats take and their Kafka metadata are each format's declaration in
:data:`changelake.source_options.FORMAT_DECLARATIONS`, below the spec, which checks a ``source:`` section
against them. To add a format: its declaration there, and a module with a :class:`JsonLinesFormat` (or
:class:`RowsFormat`) subclass, listed in :data:`FORMATS`.
"""

from __future__ import annotations

from pathlib import PurePath

from changelake.inputs.formats.base import (
    MAX_DEPTH,
    OPS,
    ChangelogRecord,
    Coerce,
    FieldError,
    InputFormat,
    JsonLinesFormat,
    Message,
    RowsFormat,
    SourceEvent,
    parse_line,
)
from changelake.inputs.formats.canal_json import CanalJson
from changelake.inputs.formats.changelog_json import ChangelogJson
from changelake.inputs.formats.changelog_parquet import ChangelogParquet
from changelake.inputs.formats.debezium_json import DebeziumJson
from changelake.inputs.formats.maxwell_json import MaxwellJson
from changelake.inputs.formats.upsert_kafka import UpsertKafka

__all__ = [
    "FORMATS", "DEFAULT_FORMAT", "MAX_DEPTH", "OPS", "ChangelogRecord", "Coerce", "FieldError", "InputFormat",
    "JsonLinesFormat", "Message", "RowsFormat", "SourceEvent", "default_format", "parse_line",
]  # fmt: skip

#: Every input format by name, in the order messages list them.
FORMATS: dict[str, InputFormat] = {
    f.name: f
    for f in (ChangelogJson(), ChangelogParquet(), UpsertKafka(), DebeziumJson(), CanalJson(), MaxwellJson())
}
#: The format of a landed file whose suffix no format claims, when the table names none.
DEFAULT_FORMAT = ChangelogJson.name


def default_format(path: PurePath) -> str:
    """The format of a landed file when the table names none: by its suffix."""
    return next((f.name for f in FORMATS.values() if path.suffix in f.suffixes), DEFAULT_FORMAT)
