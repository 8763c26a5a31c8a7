"""File access inside a Spark task (or the applying process) without importing pyiceberg: local files and
object stores (``s3://``) through pyarrow directly."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa

from changelake import objectstore
from changelake.lru import BoundedLRU

#: An object of at most this many bytes is read whole when a task opens it, and kept for its next open ...
SMALL_OBJECT_BYTES = 8 << 20
#: ... while the task's kept objects hold at most this many bytes.
SMALL_OBJECTS_BYTES = 128 << 20


class TaskIO:
    """File access inside a task: local files and object stores through pyarrow directly (an object store as
    the table's FileIO properties name it), any other scheme through pyiceberg's PyArrowFileIO with the
    table's properties. Importing pyiceberg costs a fresh Python worker about a second, as much as a small
    bucket's whole task."""

    def __init__(self, properties: dict[str, str], kept: Any = None):
        self.properties = properties
        self._fileio: Any = None  # a pyiceberg PyArrowFileIO, made on first use (importing it is slow)
        self._store: objectstore.Store | None = None
        self._sizes: dict[str, int] = {}  # objects' sizes, once known (a file of a table never changes)
        # Small objects' bytes, read whole once: a bucket task opens a file for its row groups' statistics and
        # again for their rows, and every bucket of a batch opens the batch's staged file; each ranged read of
        # an object is a GET, where a whole small object is one.
        self._small: BoundedLRU[pa.Buffer] = BoundedLRU(SMALL_OBJECTS_BYTES, size=len)
        # What one Spark task keeps for its buckets (an engine.buckets.StoredRows): the files they share (a batch's new rows of every bucket,
        # the partition's delete files), read once per task instead of once per bucket.
        self.kept = kept
        # Parquet files this task wrote: path -> (size, serialized footer), for the commit's description of them
        # (storage.iceberg.Storage.know_written), which then asks the store for neither.
        self.written: dict[str, tuple[int, bytes]] = {}

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

    def know(self, sizes: dict[str, int]) -> None:
        """Sizes of objects this task will open, as the table's manifests give them: an open then costs no
        request of its own (:meth:`objectstore.Store.open_input`)."""
        self._sizes.update((p, s) for p, s in sizes.items() if s > 0)

    def wrote(self, location: str, size: int, footer: Any) -> None:
        """A Parquet file this task wrote, its size and footer (a ``pyarrow.parquet.FileMetaData``), kept for
        :meth:`take_written`."""
        import pyarrow.parquet as pq  # noqa: F401 (FileMetaData.write_metadata_file needs the module loaded)

        out = pa.BufferOutputStream()
        footer.write_metadata_file(out)
        self.written[location] = (size, out.getvalue().to_pybytes())
        self._sizes[location] = size

    def take_written(self) -> dict[str, tuple[int, bytes]]:
        """The Parquet files written since the last call, with their sizes and footers (:meth:`wrote`)."""
        written, self.written = self.written, {}
        return written

    def open_input(self, location: str, whole_up_to: int | None = None):
        """A file to read. An object of at most ``whole_up_to`` bytes (default :data:`SMALL_OBJECT_BYTES`) is
        read whole, in one GET, and kept for the task's next open of it (within :data:`SMALL_OBJECTS_BYTES`); a
        larger one is read by ranges."""
        whole_up_to = SMALL_OBJECT_BYTES if whole_up_to is None else whole_up_to
        local = self.local_path(location)
        if local is not None:
            return pa.OSFile(local, "rb")
        if objectstore.is_object_location(location):
            cached = self._small.get(location)
            if cached is not None:
                return pa.BufferReader(cached)
            opened = self.store.open_input(location, self._sizes.get(location), whole_up_to)
            self._sizes[location] = size = opened.size()
            if size > whole_up_to:
                return opened
            with opened:
                data = opened.read_buffer()  # Arrow's memory (objectstore.arrow_reader), kept as it is
            self._small.put(location, data)
            return pa.BufferReader(data)
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
            if location not in self._sizes:
                info = self.store.info(location)
                if info is None:
                    raise FileNotFoundError(location)
                self._sizes[location] = info.size
            return self._sizes[location]
        return len(self._iceberg().new_input(location))
