"""Exception types. Every error a user can cause is a ChangelakeError with a message naming what is wrong."""


class ChangelakeError(Exception):
    """Base class: a problem the user can fix (bad spec, bad input, refused write)."""


class SpecError(ChangelakeError):
    """A table spec or option is invalid (raised when the table is created or loaded)."""


class BadRecordError(ChangelakeError):
    """A landed record cannot be decoded. Names file, line and field."""

    def __init__(self, file: str, line: int, field: str | None, reason: str):
        self.file, self.line, self.field, self.reason = file, line, field, reason
        where = f"{file}:{line}" + (f" field '{field}'" if field else "")
        super().__init__(f"{where}: {reason}")


class BatchRefusedError(ChangelakeError):
    """A batch id or checksum is refused by the exactly-once protocol."""


class WriteRefusedError(ChangelakeError):
    """A write violates the table's semantics (e.g. deletes disabled); the batch is not applied."""
