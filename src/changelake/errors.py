"""Exception types. Every error a user can cause is a ChangelakeError with a message naming what is wrong."""

import decimal
from typing import Any

_FIELD_LIMIT = 200
_REASON_LIMIT = 2000


class ChangelakeError(Exception):
    """Base class: a problem the user can fix (bad spec, bad input, refused write). Permanent unless a subclass
    says otherwise: running the same command again gives the same error.

    ``exit_code`` is the CLI's exit status for the kind (docs/cli.md, "Exit codes"); ``retryable`` tells a
    scheduler whether a retry can succeed (the Airflow DAGs retry only those)."""

    exit_code = 2
    retryable = False


class BadInput(ChangelakeError):
    """The input is refused: a landed file or record that cannot be decoded or is unsafe to read, a batch the
    exactly-once protocol refuses, a write the table's semantics refuse. Nothing was applied."""

    exit_code = 2


class SpecError(ChangelakeError):
    """A table spec or option is invalid (raised when the table is created or loaded)."""

    exit_code = 3


class TableNotFound(ChangelakeError):
    """The table named is neither in the catalog nor among the spec files."""

    exit_code = 4


class ConfigError(ChangelakeError):
    """A setting (config file, environment variable, argument) is invalid, or the environment lacks what it
    needs (a catalog, Java, a server it was pointed at)."""

    exit_code = 5


class CommitConflict(ChangelakeError):
    """Other writers kept committing first (commit races lost ``MAX_COMMIT_ATTEMPTS`` times in a row). Nothing
    was applied; the same command later converges (exactly-once makes a retry safe)."""

    exit_code = 75  # EX_TEMPFAIL (sysexits.h): "try again later"
    retryable = True


class PlannedOnOldState(CommitConflict):
    """A write planned on the table as it was (an UPDATE read the row it changes, a lookup found keys missing)
    found that another batch was committed since: nothing was applied, and the write is planned again."""


class BadRecordError(BadInput):
    """A landed record cannot be decoded. Names file, line and field."""

    def __init__(self, file: str, line: int, field: str | None, reason: str):
        # Field names and reasons come from the input: kept printable and bounded, so the message can be
        # written to any terminal, log or dead-letter file.
        field = None if field is None else printable(field, _FIELD_LIMIT)
        reason = printable(reason, _REASON_LIMIT)
        self.file, self.line, self.field, self.reason = file, line, field, reason
        where = f"{file}:{line}" + (f" field '{field}'" if field else "")
        super().__init__(f"{where}: {reason}")


class BatchRefusedError(BadInput):
    """A batch id or checksum is refused by the exactly-once protocol."""


class WriteRefusedError(BadInput):
    """A write violates the table's semantics (e.g. deletes disabled); the batch is not applied."""


#: Every kind, for the CLI reference and the DAGs' retry rule (exit code -> kind).
KINDS: tuple[type[ChangelakeError], ...] = (BadInput, SpecError, TableNotFound, ConfigError, CommitConflict)


def unknown_table(table: str, where: str, known: list[str] | None = None) -> TableNotFound:
    """The one message for a table that does not exist: ``Unknown table ns.t: <where> (known: ...)``."""
    listing = f" (known: {sorted(known) or 'none'})" if known is not None else ""
    return TableNotFound(f"Unknown table {table}: {where}{listing}")


def java_list(items: Any) -> str:
    """Names as Java prints a list, ``[a, b]``: how Fluss's messages show columns (theirs are kept verbatim)."""
    return "[" + ", ".join(str(i) for i in items) + "]"


def printable(text: Any, limit: int = _REASON_LIMIT) -> str:
    """``text`` with control characters and lone surrogates escaped, cut to ``limit`` characters."""
    text = str(text)
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text)} characters)"
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text


def short_repr(value: Any, limit: int = 60) -> str:
    """A bounded description of an input value for an error message (never the repr of a huge value)."""
    if isinstance(value, dict):
        return f"a JSON object with {len(value)} field(s)"
    if isinstance(value, list):
        return f"a JSON array of {len(value)} value(s)"
    if isinstance(value, str | bytes) and len(value) > limit:
        return repr(value[:limit]) + f"... ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    text = str(value) if isinstance(value, decimal.Decimal) else repr(value)
    if len(text) > limit:
        return text[:limit] + f"... ({len(text)} characters)"
    return text


def missing_table(full_name: str, changelog: bool = False) -> TableNotFound:
    """The one message for a table with a spec that was not created yet (or its changelog table)."""
    if changelog:
        return TableNotFound(f"Changelog table of {full_name} does not exist; create the table first")
    return TableNotFound(f"Table {full_name} does not exist; create it first (changelake create)")


def lost_race(error: BaseException) -> CommitConflict | None:
    """A commit race lost outside the apply's own retries (pyiceberg's ``CommitFailedException``, matched by
    name so that this module and the CLI's start-up need not import pyiceberg) as the retryable kind it is;
    None for any other error."""
    if type(error).__name__ != "CommitFailedException":
        return None
    return CommitConflict(f"another writer committed first; retry later ({error})")
