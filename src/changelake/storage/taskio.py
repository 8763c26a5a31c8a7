"""File access inside a Spark task (or the applying process) without importing pyiceberg for local files."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa


class TaskIO:
    """File access inside a task: local files through pyarrow directly, any other scheme through pyiceberg's
    PyArrowFileIO with the table's properties. Importing pyiceberg costs a fresh Python worker about a
    second, as much as a small bucket's whole task."""

    def __init__(self, properties: dict[str, str], kept: Any = None):
        self.properties = properties
        self._fileio: Any = None  # a pyiceberg PyArrowFileIO, made on first use (importing it is slow)
        # What one Spark task keeps for its buckets (an engine.buckets.StoredRows): the files they share (a batch's new rows of every bucket,
        # the partition's delete files), read once per task instead of once per bucket.
        self.kept = kept

    @staticmethod
    def local_path(location: str) -> str | None:
        """The local path of a ``file:`` URI or a plain path (as PyArrowFileIO parses it), else None."""
        uri = urlparse(location)
        if not uri.scheme:
            return os.path.abspath(location)
        if uri.scheme == "file":
            return f"{uri.netloc}{uri.path}"
        return None

    def _iceberg(self):
        if self._fileio is None:
            from pyiceberg.io.pyarrow import PyArrowFileIO

            self._fileio = PyArrowFileIO(self.properties)
        return self._fileio

    def open_input(self, location: str):
        local = self.local_path(location)
        if local is not None:
            return pa.OSFile(local, "rb")
        return self._iceberg().new_input(location).open()

    def open_output(self, location: str):
        """A new file (never overwrites: every path a task writes is fresh)."""
        local = self.local_path(location)
        if local is None:
            return self._iceberg().new_output(location).create(overwrite=False)
        if os.path.exists(local):
            raise FileExistsError(f"Cannot create file, already exists: {location}")
        os.makedirs(os.path.dirname(local), exist_ok=True)
        return pa.OSFile(local, "wb")

    def size(self, location: str) -> int:
        local = self.local_path(location)
        if local is not None:
            return os.path.getsize(local)
        return len(self._iceberg().new_input(location))
