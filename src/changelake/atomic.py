"""Writes that a crash cannot cut short: a reader sees the old file or the new one, never a part.

Each write goes to a temporary file in the target's directory (same file system, so the rename is atomic),
is flushed to disk, then renamed over the target with :func:`os.replace`. A process killed mid-write leaves
the target as it was plus, at worst, a stray ``.<name>.<token>.tmp`` next to it
(:func:`remove_stale_temporaries` clears those). Standard library only: any layer may use it.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".tmp"


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")


@contextmanager
def atomic_open(
    path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8"
) -> Iterator[IO[Any]]:
    """Open a temporary file for writing that replaces ``path`` when the block ends without an exception.

    ``mode`` is ``"w"`` (text, ``encoding``) or ``"wb"``. On an exception the temporary file is removed and
    ``path`` is untouched. The new file gets the permissions a plain ``open(path, "w")`` would give it.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', not {mode!r}")
    target = Path(path)
    tmp = _temporary(target)
    # O_EXCL: the name is ours alone; 0o666 less the umask, as open() would create it.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_open(path, "w", encoding=encoding) as f:
        f.write(text)


def atomic_copy(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Copy the contents of ``source`` to ``target`` atomically (the target's parent must exist)."""
    with open(source, "rb") as src, atomic_open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)


def remove_stale_temporaries(directory: str | os.PathLike[str], min_age: float = 60.0) -> list[Path]:
    """Delete the temporary files killed writers left under ``directory``; returns what was removed.

    Only names this module makes (``.<name>.<pid>-<token>.tmp``) whose process is gone and that are older
    than ``min_age`` seconds are touched: a write in progress (here, or in another container sharing the
    directory, whose pids this one cannot see) is left alone.
    """
    import time

    removed = []
    for tmp in Path(directory).rglob(f".*{TEMP_SUFFIX}"):
        pid = tmp.name.removesuffix(TEMP_SUFFIX).rpartition(".")[2].partition("-")[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            if time.time() - tmp.stat().st_mtime < min_age:
                continue
        except FileNotFoundError:
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def create_private(path: str | os.PathLike[str], chunks: Iterable[bytes]) -> None:
    """Create ``path`` (mode 0600, never a link followed) with ``chunks`` as its whole content, or fail with
    :class:`FileExistsError` if it exists: the write goes to a temporary file that is hard-linked into place
    only when complete, so a killed writer leaves no partial file and two racing creators cannot both win."""
    target = Path(path)
    tmp = _temporary(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with open(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, target)  # exclusive like O_EXCL: an existing target is never replaced
    finally:
        tmp.unlink(missing_ok=True)
