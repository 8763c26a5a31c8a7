"""Opening a landed file safely: never through a link (a producer could swap one in after the scan), and
never waiting on a FIFO put where a file was. Every reader of a landed file (the landing scan, the batch
readers, the decode tasks, the formats) opens it here.

A landed object in an object store (an :class:`~changelake.objectstore.ObjectPath`) has no links nor FIFOs: it
is read as the store serves it, through a 1 MiB buffer (each buffer fill is one ranged GET)."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path, PurePath

from changelake.objectstore import ObjectPath

#: Opening a landed file: never through a link, and never waiting on a FIFO put where a file was.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: What one read of a landed object fetches.
OBJECT_BUFFER_BYTES = 1 << 20

#: A landed file: a local path, or an object in a store.
LandedPath = Path | ObjectPath


def open_landed(path: str | PurePath):
    """A landed file opened for reading in binary, without following a link (``ELOOP``: an OSError) and
    only if it is a regular file; a landed object through a buffer (FileNotFoundError if there is none)."""
    if isinstance(path, ObjectPath):
        return io.BufferedReader(path.store.open_input(path), OBJECT_BUFFER_BYTES)
    fd = os.open(path, READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def as_landed(path: str | PurePath) -> LandedPath:
    """A landed file's path as the readers take it: an object's path as it is, anything else a local Path."""
    return path if isinstance(path, ObjectPath) else Path(path)


def location(path: str | Path | ObjectPath) -> str | ObjectPath:
    """What a decode range keeps of its file: an object's path (it carries its store to the task), else the
    local path as text."""
    return path if isinstance(path, ObjectPath) else str(path)


def landed_exists(path: LandedPath) -> bool:
    """Whether a landed file (a regular file) or object is there."""
    if isinstance(path, ObjectPath):
        return path.store.info(path) is not None
    return path.is_file()


def size_of(path: str | Path | ObjectPath) -> int:
    """A landed file's size (an object's by a HEAD request)."""
    if isinstance(path, ObjectPath):
        info = path.store.info(path)
        if info is None:
            raise FileNotFoundError(f"{path}: no such object")
        return info.size
    return os.path.getsize(path)
