"""Opening a landed file safely: never through a link (a producer could swap one in after the scan), and
never waiting on a FIFO put where a file was. Every reader of a landed file (the landing scan, the batch
readers, the decode tasks, the formats) opens it here."""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: Opening a landed file: never through a link, and never waiting on a FIFO put where a file was.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_landed(path: str | Path):
    """A landed file opened for reading in binary, without following a link (``ELOOP``: an OSError) and
    only if it is a regular file."""
    fd = os.open(path, READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
