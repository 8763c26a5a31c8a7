"""Files changelake writes are its user's alone: 0600 files in 0700 directories, whatever the caller's umask.

Table files, staged records, dead letters, the SQLite catalog and Spark's scratch files hold landed records,
so every entrypoint narrows the process umask: the CLI (restored when ``main`` returns), each ``spark_apps/``
entrypoint and the SQL endpoint (for the process's life), the Python API around each method that writes
(:func:`private_files`), and the Python workers of changelake's Spark tasks at the start of each task (a worker
inherits the umask of the JVM, which ``spark-submit`` may have started under any). The umask only narrows:
a caller's stricter one stays.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

#: The permission bits no file or directory changelake creates gives to group or others.
PRIVATE = 0o077

F = TypeVar("F", bound=Callable[..., Any])


def restrict() -> int:
    """Narrow the process umask to at least :data:`PRIVATE`; return the previous one."""
    previous = os.umask(PRIVATE)
    os.umask(previous | PRIVATE)
    return previous


def restrict_worker() -> None:
    """:func:`restrict` in a Python worker Spark started (it has the umask of its JVM, which ``spark-submit`` may
    have started under any); nothing where a task function runs in the applying process, whose umask its
    caller decides (the CLI and the Python API narrow it around their work)."""
    if "pyspark.worker" in sys.modules:
        restrict()


_LOCK = threading.Lock()
_inside = 0  # blocks of private_files running now, in any thread
_caller_umask = 0  # the umask before the first of them


@contextmanager
def private_files() -> Iterator[None]:
    """Create files 0600 and directories 0700 inside the block; the caller's umask is restored after it. The
    umask is the process's: with blocks running at once in several threads, the last to end restores it
    (each restoring what it found left the umask narrowed when two overlapped)."""
    global _inside, _caller_umask
    with _LOCK:
        previous = restrict()
        if _inside == 0:
            _caller_umask = previous
        _inside += 1
    try:
        yield
    finally:
        with _LOCK:
            _inside -= 1
            if _inside == 0:
                os.umask(_caller_umask)


def writes_private(method: F) -> F:
    """A method (of the Python API) that creates its files under :func:`private_files`."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with private_files():
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
