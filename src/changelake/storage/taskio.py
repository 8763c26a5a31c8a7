"""File access inside a Spark task (or the applying process) without importing pyiceberg: local files and
object stores (``s3://``) through pyarrow directly."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa

from changelake import objectstore


class TaskIO:
    """File access inside a task: local files and object stores through pyarrow directly (an object store as
    the table's FileIO properties name it), any other scheme through pyiceberg's PyArrowFileIO with the
    table's properties. Importing pyiceberg costs a fresh Python worker about a second, as much as a small
    bucket's whole task."""

    def __init__(self, properties: dict[str, str], kept: Any = None):
        self.properties = properties
        self._fileio: Any = None  # a pyiceberg PyArrowFileIO, made on first use (importing it is slow)
        self._store: objectstore.Store | None = None
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

    @property
    def store(self) -> objectstore.Store:
        """The object store the table's FileIO properties name."""
        if self._store is None:
            self._store = objectstore.Store(objectstore.options_of_fileio(self.properties))
        return self._store

    def open_input(self, location: str):
        local = self.local_path(location)
        if local is not None:
            return pa.OSFile(local, "rb")
        if objectstore.is_object_location(location):
            return self.store.open_input(location)
        return self._iceberg().new_input(location).open()

    def open_output(self, location: str):
        """A new file (never overwrites: every path a task writes is fresh)."""
        local = self.local_path(location)
        if local is None and objectstore.is_object_location(location):
            return self.store.open_output(location)  # fresh paths: nothing to overwrite
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
        if objectstore.is_object_location(location):
            info = self.store.info(location)
            if info is None:
                raise FileNotFoundError(location)
            return info.size
        return len(self._iceberg().new_input(location))
