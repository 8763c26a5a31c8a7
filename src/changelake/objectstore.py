"""Object storage (``s3://bucket/key``): where a location is, how to reach it, and the few operations
changelake needs of a store (list a prefix, an object's size and ETag, read, write whole, delete).

The settings are a plain ``storage_options`` mapping under the standard AWS names, as delta-rs takes them:
``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``), ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``),
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``. :func:`storage_options` reads them
from the environment over the config file's ``storage_options``; missing credentials are left to the AWS SDK's
own chain (``~/.aws/credentials``, an instance role). The same settings reach pyiceberg's FileIO under its own
names (:func:`fileio_properties`), so the catalog, the tasks and the landing zone use one store.

Objects are read and written with pyarrow's S3 file system (the C++ AWS SDK pyiceberg's FileIO uses too): no
new dependency, and it imports in milliseconds where boto3 or s3fs take a third of a second of a cold read.

:class:`ObjectPath` is a location in a store with :mod:`pathlib`'s pure operations (``/``, ``name``, ``parent``,
``with_name``), so the landing code joins and names landed objects as it does files. It is not a local path:
``os.fspath`` refuses it, so no local file call can mistake ``s3://b/k`` for a relative file name.
"""

from __future__ import annotations

import functools
import io
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, ClassVar
from urllib.parse import urlparse

#: The schemes changelake reads and writes through an object store (Iceberg and Hadoop spell S3 all three ways).
SCHEMES = ("s3", "s3a", "s3n")
#: The storage options, by their AWS names, each with the environment variables that give it (first wins).
OPTION_VARIABLES: dict[str, tuple[str, ...]] = {
    "AWS_ENDPOINT_URL": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "AWS_REGION": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "AWS_ACCESS_KEY_ID": ("AWS_ACCESS_KEY_ID",),
    "AWS_SECRET_ACCESS_KEY": ("AWS_SECRET_ACCESS_KEY",),
    "AWS_SESSION_TOKEN": ("AWS_SESSION_TOKEN",),
}
#: The options that are secrets: never shown (:func:`redacted`).
SECRET_OPTIONS = frozenset({"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"})
#: The region a store behind an explicit endpoint is addressed in when none is set: without one, pyiceberg
#: asks AWS which region the bucket is in (a request to amazonaws.com, for a bucket that is not there).
DEFAULT_REGION = "us-east-1"
#: pyiceberg's FileIO properties for each option (pyiceberg.io's S3_* names).
_FILEIO_NAMES = {
    "AWS_ENDPOINT_URL": "s3.endpoint",
    "AWS_REGION": "s3.region",
    "AWS_ACCESS_KEY_ID": "s3.access-key-id",
    "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
    "AWS_SESSION_TOKEN": "s3.session-token",
}


def is_object_location(location: object) -> bool:
    """Whether ``location`` (a string, a path or an :class:`ObjectPath`) is in an object store."""
    if isinstance(location, ObjectPath):
        return True
    return isinstance(location, str) and urlparse(location).scheme in SCHEMES


def storage_options(configured: Mapping[str, str] | None = None) -> dict[str, str]:
    """The object-store settings: ``configured`` (the config file's ``storage_options``) under the environment's
    AWS variables, with a region whenever an endpoint is set (:data:`DEFAULT_REGION`)."""
    options = {str(k).upper(): str(v) for k, v in (configured or {}).items() if v not in (None, "")}
    unknown = set(options) - set(OPTION_VARIABLES)
    if unknown:
        raise ValueError(f"unknown storage options {sorted(unknown)}; known: {sorted(OPTION_VARIABLES)}")
    for option, variables in OPTION_VARIABLES.items():
        value = next((os.environ[v] for v in variables if os.environ.get(v)), None)
        if value is not None:
            options[option] = value
    if options.get("AWS_ENDPOINT_URL") and not options.get("AWS_REGION"):
        options["AWS_REGION"] = DEFAULT_REGION
    return options


def redacted(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` fit to show: secrets replaced by ``***``."""
    return {k: ("***" if k in SECRET_OPTIONS else v) for k, v in options.items()}


def fileio_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The storage options as pyiceberg's FileIO properties (``s3.endpoint``, ``s3.region``, ...)."""
    return {_FILEIO_NAMES[k]: v for k, v in options.items() if k in _FILEIO_NAMES}


#: Iceberg's Java S3FileIO (``iceberg-aws``) properties for each option: the JVM side of the same store.
_JAVA_FILEIO_NAMES = {
    "AWS_ENDPOINT_URL": "s3.endpoint",
    "AWS_REGION": "client.region",
    "AWS_ACCESS_KEY_ID": "s3.access-key-id",
    "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
    "AWS_SESSION_TOKEN": "s3.session-token",
}
JAVA_S3_FILEIO = "org.apache.iceberg.aws.s3.S3FileIO"


def java_fileio_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The storage options as Iceberg's Java catalog properties (its ``S3FileIO``, from ``iceberg-aws-bundle``):
    what Spark's Iceberg catalog reads s3:// tables with, in the driver and, serialized with each table, in the
    executors. A store behind an explicit endpoint is addressed path-style (``http://host/bucket/key``), as
    pyarrow addresses it: a local or private endpoint has no per-bucket host names."""
    out = {"io-impl": JAVA_S3_FILEIO}
    out.update({_JAVA_FILEIO_NAMES[k]: v for k, v in options.items() if k in _JAVA_FILEIO_NAMES})
    if options.get("AWS_ENDPOINT_URL"):
        out["s3.path-style-access"] = "true"
    return out


def options_of_fileio(properties: Mapping[str, str]) -> dict[str, str]:
    """The storage options a pyiceberg FileIO's properties carry (the inverse of :func:`fileio_properties`):
    a task gets a table's FileIO properties and reaches the same store."""
    names = {v: k for k, v in _FILEIO_NAMES.items()}
    return {names[k]: str(v) for k, v in properties.items() if k in names and v not in (None, "")}


@dataclass(frozen=True)
class ObjectInfo:
    """An object as a listing or a HEAD request sees it. ``etag`` is None from a listing of pyarrow's (which
    gives sizes and times only); :meth:`Store.info` fills it."""

    path: ObjectPath
    size: int
    mtime_ns: int
    etag: str | None = None


class Store:
    """One object store, as its storage options reach it. Cheap to make; the pyarrow file system behind it is
    made on first use and shared by every :class:`Store` with the same options (it pools connections)."""

    def __init__(self, options: Mapping[str, str]):
        self.options = dict(options)
        self._key = tuple(sorted(self.options.items()))

    def __repr__(self) -> str:
        return f"Store({redacted(self.options)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Store) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    @property
    def filesystem(self) -> Any:
        """The pyarrow S3 file system (``pyarrow.fs.S3FileSystem``)."""
        filesystem = _filesystem(self._key)
        _STORES.setdefault(id(filesystem), (filesystem, self))
        return filesystem

    def path(self, uri: str) -> ObjectPath:
        """``uri`` (``s3://bucket/key``) as an :class:`ObjectPath` of this store."""
        parsed = urlparse(uri)
        if parsed.scheme not in SCHEMES or not parsed.netloc:
            raise ValueError(f"not an object-store location (s3://bucket/key): {uri!r}")
        return _path_type(self, parsed.scheme)(f"/{parsed.netloc}{parsed.path}")

    # --- operations; ``path`` is an ObjectPath or an s3:// string -----------------------------------------
    def list(self, prefix: ObjectPath | str, recursive: bool = False) -> list[ObjectInfo]:
        """The objects under ``prefix`` (a directory-like prefix: ``prefix/…``), by name; none if it is empty or
        missing. One LIST request per 1,000 objects."""
        import pyarrow.fs as pafs

        base = self._as_path(prefix)
        selector = pafs.FileSelector(base.key_path, allow_not_found=True, recursive=recursive)
        out = []
        for info in self.filesystem.get_file_info(selector):
            if info.type == pafs.FileType.File:
                out.append(ObjectInfo(self._under(base, info.path), info.size, info.mtime_ns or 0))
        return sorted(out, key=lambda i: i.path.key_path)

    def info(self, path: ObjectPath | str) -> ObjectInfo | None:
        """The object's size, time and ETag (one HEAD request), or None when there is none."""
        p = self._as_path(path)
        try:
            with self.filesystem.open_input_file(p.key_path) as f:
                meta = f.metadata()
                size = f.size()
        except FileNotFoundError:
            return None
        except OSError as e:
            if _not_found(e):
                return None
            raise
        etag = meta.get(b"ETag") or meta.get("ETag")
        modified = meta.get(b"Last-Modified") or meta.get("Last-Modified")
        return ObjectInfo(p, size, _time_ns(modified), _text(etag).strip('"') if etag else None)

    def open_input(self, path: ObjectPath | str, size: int | None = None, whole_up_to: int = 0) -> Any:
        """The object for reading (a pyarrow random-access file: ``read``, ``read_at``, ``seek``, ``size``); an
        object of at most ``whole_up_to`` bytes comes read whole (a ``pyarrow.BufferReader``). Raises
        FileNotFoundError when there is none.

        pyarrow's Python binding opens an object by path only, and each open is a HEAD request for its size
        (its C++ API takes the size, the binding does not pass it). Where the store is reached by an endpoint
        and keys of its own (:meth:`direct`), the object is read by signed GETs instead: with ``size`` known
        (an Iceberg manifest gives it) a small object is one GET and a larger one is read by ranges, its
        footer the first; with ``size`` unknown, one GET of its last bytes gives the size and the footer, or
        the whole object when it is small. Elsewhere (the AWS SDK's credential chain) pyarrow opens it."""
        p = self._as_path(path)
        direct = self.direct
        if direct is not None:
            return direct.open(p.bucket, p.key, str(p), size, whole_up_to)
        try:
            opened = self.filesystem.open_input_file(p.key_path)
        except OSError as e:
            if _not_found(e):
                raise FileNotFoundError(f"{p}: no such object") from None
            raise
        if opened.size() > whole_up_to:
            return opened

        with opened:
            return arrow_reader(opened.read())

    @property
    def direct(self) -> _DirectReads | None:
        """Signed GETs to this store (:class:`_DirectReads`) when it has an endpoint and an access key of its
        own, else None."""
        return _direct_reads(self._key)

    def open_output(self, path: ObjectPath | str) -> Any:
        """A new object's writer (``write``, ``tell``, ``close``; a context manager): the object appears, whole,
        when it is closed. Where the store is reached directly (:meth:`direct`), the bytes are held in memory
        and written by one PUT (:class:`_ObjectWriter`) up to :data:`PUT_WHOLE_BYTES`, past which they go on as
        a multipart upload; a writer left by an exception writes nothing. Elsewhere pyarrow's stream (one PUT
        below its part size, else a multipart upload that completes at close)."""
        p = self._as_path(path)
        if self.direct is not None:
            return _ObjectWriter(self, p)
        return self.filesystem.open_output_stream(p.key_path)

    def put(self, path: ObjectPath | str, data: bytes | Iterable[bytes]) -> None:
        """Write an object whole (replacing one of that name)."""
        with self.open_output(path) as out:
            for chunk in [data] if isinstance(data, bytes | bytearray | memoryview) else data:
                out.write(chunk)

    def read(self, path: ObjectPath | str) -> bytes:
        """A whole object: one GET where the store is read directly (:meth:`open_input`), else pyarrow's stream
        (a HEAD, then GETs)."""
        p = self._as_path(path)
        direct = self.direct
        if direct is not None:
            return direct.read(p.bucket, p.key, str(p))
        try:
            with self.filesystem.open_input_stream(p.key_path) as f:
                return f.read()
        except OSError as e:
            if _not_found(e):
                raise FileNotFoundError(f"{p}: no such object") from None
            raise

    def delete(self, path: ObjectPath | str) -> bool:
        """Delete an object; False when there was none."""
        try:
            self.filesystem.delete_file(self._as_path(path).key_path)
        except FileNotFoundError:
            return False
        except OSError as e:
            if _not_found(e):
                return False
            raise
        return True

    def delete_many(self, paths: Iterable[ObjectPath | str]) -> None:
        """Delete objects (a missing one is fine). Where the store is reached directly (:meth:`direct`), in one
        S3 DeleteObjects request per 1,000 objects, and nothing else: pyarrow's delete asks for each object
        (a HEAD) and then writes an empty marker object for its "directory" (a PUT). Elsewhere one by one.
        Raises OSError naming the first object the store did not delete."""
        direct = self.direct
        if direct is None:
            for path in paths:
                self.delete(path)
            return
        by_bucket: dict[str, list[str]] = {}
        for path in paths:
            p = self._as_path(path)
            by_bucket.setdefault(p.bucket, []).append(p.key)
        for bucket, keys in by_bucket.items():
            for start in range(0, len(keys), DELETE_BATCH):
                direct.delete_objects(bucket, keys[start : start + DELETE_BATCH])

    def _as_path(self, path: ObjectPath | str) -> ObjectPath:
        return path if isinstance(path, ObjectPath) else self.path(path)

    @staticmethod
    def _under(base: ObjectPath, key_path: str) -> ObjectPath:
        return type(base)(f"/{key_path}")


class ObjectPath(PurePosixPath):
    """``s3://bucket/key`` with :class:`pathlib.PurePosixPath`'s operations; ``str()`` is the URI and
    ``store`` the :class:`Store` it is in (every path derived from it keeps both). Made by :meth:`Store.path`."""

    store: ClassVar[Store]
    scheme: ClassVar[str] = "s3"

    def __str__(self) -> str:
        return f"{self.scheme}:/{super().__str__()}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __fspath__(self) -> str:
        raise TypeError(f"{self} is in an object store, not a local path")

    def __reduce__(self):
        return _object_path, (str(self), self.store.options)

    @property
    def bucket(self) -> str:
        return self.parts[1] if len(self.parts) > 1 else ""

    @property
    def key(self) -> str:
        return "/".join(self.parts[2:])

    @property
    def key_path(self) -> str:
        """``bucket/key``, as pyarrow's file system names it."""
        return PurePosixPath.__str__(self).lstrip("/")

    def is_relative_to(self, *other: Any) -> bool:
        return all(isinstance(o, ObjectPath) for o in other) and super().is_relative_to(*other)


def _object_path(uri: str, options: Mapping[str, str]) -> ObjectPath:
    return Store(options).path(uri)


_TYPES: dict[tuple[Store, str], type[ObjectPath]] = {}
_TYPES_LOCK = threading.Lock()


def _path_type(store: Store, scheme: str) -> type[ObjectPath]:
    """The :class:`ObjectPath` class of one store: pathlib makes every derived path of its own class, so the
    store travels with the paths joined from a landing prefix."""
    with _TYPES_LOCK:
        made = _TYPES.get((store, scheme))
        if made is None:
            made = _TYPES[(store, scheme)] = type(
                "ObjectPath", (ObjectPath,), {"store": store, "scheme": scheme}
            )
        return made


#: The store each file system :attr:`Store.filesystem` gave is of (by id; the file system kept with it).
_STORES: dict[int, tuple[Any, Store]] = {}


def store_of_filesystem(filesystem: Any) -> Store | None:
    """The :class:`Store` whose :attr:`~Store.filesystem` ``filesystem`` is, else None (another S3 client)."""
    entry = _STORES.get(id(filesystem))
    return entry[1] if entry is not None and entry[0] is filesystem else None


@functools.lru_cache(maxsize=16)
def _filesystem(key: tuple[tuple[str, str], ...]) -> Any:
    from pyarrow.fs import S3FileSystem

    options = dict(key)
    # allow_delayed_open: an object smaller than one part is written with one PUT when closed, where pyarrow
    # otherwise starts a multipart upload at open (three requests for every small file).
    kwargs: dict[str, Any] = {
        "region": options.get("AWS_REGION") or DEFAULT_REGION,
        "allow_delayed_open": True,
    }
    if options.get("AWS_ENDPOINT_URL"):
        kwargs["endpoint_override"] = options["AWS_ENDPOINT_URL"]
    if options.get("AWS_ACCESS_KEY_ID"):
        kwargs["access_key"] = options["AWS_ACCESS_KEY_ID"]
        kwargs["secret_key"] = options.get("AWS_SECRET_ACCESS_KEY", "")
        if options.get("AWS_SESSION_TOKEN"):
            kwargs["session_token"] = options["AWS_SESSION_TOKEN"]
    return S3FileSystem(**kwargs)


#: The bytes one GET asks for of an object whose size is not known: the end of it, where a Parquet or Arrow
#: file's footer is (the whole object when it is no larger), and the object's size in its Content-Range. Also
#: what a ranged read fetches of a file's end at its first read there, so a footer's length and the footer
#: itself are one request.
TAIL_BYTES = 64 << 10
#: Attempts of a GET that failed on the connection or with a 5xx (a restarted server, a dropped keep-alive).
_GET_ATTEMPTS = 3
#: Objects one S3 DeleteObjects request may name (the API's limit).
DELETE_BATCH = 1000
#: An object a writer of :meth:`Store.open_output` holds at most this many bytes of before it is sent as one
#: PUT; a larger one goes as a multipart upload. A bucket task's data and changelog files and a decode task's
#: staged records are 5-30 MB each: as pyarrow's multipart upload (parts of 10 MB) each was three to four
#: requests, and S3's single PUT takes up to 5 GB.
PUT_WHOLE_BYTES = 64 << 20


@functools.lru_cache(maxsize=16)
def _direct_reads(key: tuple[tuple[str, str], ...]) -> _DirectReads | None:
    options = dict(key)
    if not options.get("AWS_ENDPOINT_URL") or not options.get("AWS_ACCESS_KEY_ID"):
        return None  # AWS itself, or the SDK's credential chain: pyarrow's client knows both
    return _DirectReads(options)


def arrow_reader(data: bytes) -> Any:
    """``data`` as a pyarrow file over a buffer Arrow allocated (a copy: ~1 ms for 8 MiB), not over the Python
    bytes. Arrow's threads free the buffers they read from; freeing a Python object takes the GIL, and a thread
    that asks for it while the interpreter shuts down is ended by ``pthread_exit``, whose unwinding through
    Arrow's destructors aborts the process ("terminate called without an active exception", exit 134) after a
    command has printed its result: seen once in ~80 cold ``scan --limit 10`` on the S3 endpoint. Landed files
    are opened as Arrow's own files for the same reason (``inputs/formats/changelog_parquet._open``)."""
    import pyarrow as pa

    buffer = pa.allocate_buffer(len(data))
    if data:
        memoryview(buffer).cast("B")[:] = data
    return pa.BufferReader(buffer)


class _DirectReads:
    """GET requests (and PUT and DeleteObjects) to a store behind an explicit endpoint (path-style, as pyarrow
    addresses it there), signed with AWS Signature Version 4 from the store's own keys, on one keep-alive
    connection per thread.

    Why not pyarrow: its Python binding cannot open an object without a HEAD request (above), and deletes an
    object with a HEAD before and a directory marker PUT after. Why not boto3: it takes a third of a second to
    import in every cold read and Spark worker, for one signed GET. The signature is the published algorithm
    (a GET's payload ``UNSIGNED-PAYLOAD``, a POST's its SHA-256)."""

    def __init__(self, options: Mapping[str, str]):
        endpoint = urlparse(options["AWS_ENDPOINT_URL"])
        self._https = endpoint.scheme == "https"
        self._host = endpoint.netloc
        self._base = endpoint.path.rstrip("/")
        self._region = options.get("AWS_REGION") or DEFAULT_REGION
        self._key_id = options["AWS_ACCESS_KEY_ID"]
        self._secret = options.get("AWS_SECRET_ACCESS_KEY", "")
        self._token = options.get("AWS_SESSION_TOKEN")
        self._local = threading.local()
        self._day_key: tuple[str, bytes] | None = None

    def __repr__(self) -> str:
        return f"_DirectReads({self._host})"

    def read(self, bucket: str, key: str, uri: str) -> bytes:
        """The whole object, in one GET."""
        return self.get(bucket, key, uri)[2]

    def open(self, bucket: str, key: str, uri: str, size: int | None, whole_up_to: int) -> Any:
        """The object as a pyarrow random-access file (:meth:`Store.open_input`)."""
        import pyarrow as pa

        if size is not None:
            if size <= whole_up_to:
                return arrow_reader(self.read(bucket, key, uri))
            return pa.PythonFile(_RangedObject(self, bucket, key, uri, size), mode="r")
        status, headers, body = self.get(bucket, key, uri, f"bytes=-{TAIL_BYTES}")
        if status == 416:  # a range of an empty object is not satisfiable
            return arrow_reader(b"")
        start, total = 0, len(body)
        if status == 206:
            start, total = _content_range(headers.get("Content-Range"), uri)
        if start == 0:
            return arrow_reader(body)
        if total <= whole_up_to:  # the rest of it: two GETs, as a HEAD and a GET were
            _, _, head = self.get(bucket, key, uri, f"bytes=0-{start - 1}")
            return arrow_reader(head + body)
        return pa.PythonFile(_RangedObject(self, bucket, key, uri, total, (start, body)), mode="r")

    def put(self, bucket: str, key: str, uri: str, body: bytes) -> None:
        """One PUT of a whole object. Its payload is signed (its SHA-256 in the signature, which the store
        checks against the bytes it gets). PermissionError when the store refuses the keys; OSError otherwise."""
        from urllib.parse import quote

        path = f"{self._base}/{quote(bucket)}/{quote(key)}"
        response, answer = self._request("PUT", path, "", body, {})
        if response.status == 200:
            return
        code = _error_code(answer)
        if response.status == 403:
            raise PermissionError(f"{uri}: the store refused the request (HTTP 403 {code})")
        raise OSError(f"{uri}: PUT failed: HTTP {response.status} {code}")

    def get(self, bucket: str, key: str, uri: str, byte_range: str | None = None) -> tuple[int, Any, bytes]:
        """One GET (``byte_range``: an HTTP Range value): its status (200, 206; 416 for an unsatisfiable
        range), headers and body. FileNotFoundError when there is no such object; PermissionError when the
        store refuses the keys; OSError otherwise."""
        from urllib.parse import quote

        path = f"{self._base}/{quote(bucket)}/{quote(key)}"  # each segment encoded once, as S3 signs it
        response, body = self._request("GET", path, "", b"", {"Range": byte_range} if byte_range else {})
        status = response.status
        if status in (200, 206, 416):
            return status, response.headers, body
        code = _error_code(body)
        if status == 404 or code == "NoSuchKey":
            raise FileNotFoundError(f"{uri}: no such object")
        if status == 403:
            raise PermissionError(f"{uri}: the store refused the request (HTTP 403 {code})")
        raise OSError(f"{uri}: GET failed: HTTP {status} {code}")

    def delete_objects(self, bucket: str, keys: list[str]) -> None:
        """One DeleteObjects request (quiet: the store answers with failures only) for at most
        :data:`DELETE_BATCH` keys of ``bucket``; a key with no object counts as deleted, as S3 has it. OSError
        naming the first key not deleted, or the request's failure."""
        import base64
        import hashlib
        from urllib.parse import quote
        from xml.sax.saxutils import escape

        if not keys:
            return
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            "<Quiet>true</Quiet>"
            + "".join(f"<Object><Key>{escape(k)}</Key></Object>" for k in keys)
            + "</Delete>"
        ).encode()
        # S3 requires a body checksum on DeleteObjects: Content-MD5 is the one every implementation takes.
        md5 = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()
        path = f"{self._base}/{quote(bucket)}"
        response, answer = self._request(
            "POST", path, "delete=", body, {"Content-MD5": md5, "Content-Type": "application/xml"}
        )
        where = f"s3://{bucket}/{keys[0]}" + (f" (and {len(keys) - 1} more)" if len(keys) > 1 else "")
        if response.status == 403:
            raise PermissionError(f"{where}: the store refused the delete (HTTP 403 {_error_code(answer)})")
        if response.status != 200:
            raise OSError(f"{where}: delete failed: HTTP {response.status} {_error_code(answer)}")
        failed = _first_failed_key(answer)
        if failed is not None:
            raise OSError(f"s3://{bucket}/{failed[0]}: the store did not delete it ({failed[1]})")

    def _request(
        self, method: str, path: str, query: str, body: bytes, extra: Mapping[str, str]
    ) -> tuple[Any, bytes]:
        """One signed request, retried (:data:`_GET_ATTEMPTS` in all) when the connection fails or the store
        answers 5xx; the response and its body."""
        import http.client

        target = f"{path}?{query}" if query else path
        for attempt in range(1, _GET_ATTEMPTS + 1):
            headers = self._signed(path, method, query, body)
            headers.update(extra)
            connection = self._connection()
            try:
                connection.request(method, target, body=body or None, headers=headers)
                response = connection.getresponse()
                answer = response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                self._local.connection = None
                if attempt == _GET_ATTEMPTS:
                    raise
                continue
            if response.status >= 500 and attempt < _GET_ATTEMPTS:
                continue
            return response, answer
        raise AssertionError("unreachable")

    def _connection(self) -> Any:
        import http.client

        connection = getattr(self._local, "connection", None)
        if connection is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            connection = self._local.connection = kind(self._host, timeout=60)
        return connection

    def _signed(self, path: str, method: str = "GET", query: str = "", body: bytes = b"") -> dict[str, str]:
        """The headers of a request for ``path`` signed with Signature Version 4. ``query``: its canonical
        query string (names sorted, values encoded; ``delete=`` for DeleteObjects). A GET's payload is
        ``UNSIGNED-PAYLOAD``, a body's its SHA-256."""
        import hashlib
        import hmac
        from datetime import UTC, datetime

        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        day = stamp[:8]
        payload = hashlib.sha256(body).hexdigest() if body else "UNSIGNED-PAYLOAD"
        headers = {"host": self._host, "x-amz-content-sha256": payload, "x-amz-date": stamp}
        if self._token:
            headers["x-amz-security-token"] = self._token
        names = sorted(headers)
        signed = ";".join(names)
        canonical = "\n".join(
            [method, path, query, *(f"{n}:{headers[n]}" for n in names), "", signed, payload]
        )
        scope = f"{day}/{self._region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        if self._day_key is None or self._day_key[0] != day:
            key = f"AWS4{self._secret}".encode()
            for part in (day, self._region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._day_key = (day, key)
        signature = hmac.new(self._day_key[1], to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self._key_id}/{scope}, SignedHeaders={signed}, Signature={signature}"
        )
        return headers


class _ObjectWriter(io.RawIOBase):
    """A new object written by one PUT when it is closed (:meth:`Store.open_output`): the written bytes are
    held until then, or, once they pass :data:`PUT_WHOLE_BYTES`, handed to pyarrow's multipart stream. Used as
    a context manager, an exception inside writes nothing (the bytes are dropped; a multipart upload already
    started completes, as pyarrow's stream has no abort, at a fresh path nothing refers to).

    Why not pyarrow's stream alone: it sends an object over 10 MB as a multipart upload (a request to start, one
    per part, one to complete), and every PUT of its AWS SDK as a signed chunked stream; one plain PUT with a
    signed payload is one request, and took the local endpoint half the CPU per byte (measured, profiles.md)."""

    def __init__(self, store: Store, path: ObjectPath):
        super().__init__()
        self._store, self._path = store, path
        self._chunks: list[bytes] = []
        self._size = 0
        self._stream: Any = None  # pyarrow's multipart stream, past PUT_WHOLE_BYTES

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.closed:
            raise ValueError(f"{self._path}: write to a closed object writer")
        # A copy of anything but bytes: the caller may reuse its buffer.
        chunk = data if isinstance(data, bytes) else bytes(memoryview(data))
        if self._stream is None and self._size + len(chunk) > PUT_WHOLE_BYTES:
            self._stream = self._store.filesystem.open_output_stream(self._path.key_path)
            for held in self._chunks:
                self._stream.write(held)
            self._chunks = []
        if self._stream is not None:
            self._stream.write(chunk)
        else:
            self._chunks.append(chunk)
        self._size += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._size

    def close(self) -> None:
        """Write the object (one PUT, or the multipart upload completed); a second close does nothing."""
        if self.closed:
            return
        try:
            if self._stream is not None:
                self._stream.close()
            else:
                direct = self._store.direct
                assert direct is not None  # Store.open_output makes this writer only then
                body, self._chunks = b"".join(self._chunks), []
                direct.put(self._path.bucket, self._path.key, str(self._path), body)
        finally:
            super().close()

    def discard(self) -> None:
        """Close without writing the held bytes."""
        self._chunks = []
        if self._stream is not None:
            self._stream.close()
        super().close()

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is None:
            self.close()
        else:
            self.discard()

    def __del__(self) -> None:
        # io's finalizer closes an object left open, which here would write what is held: only close() writes.
        if not self.closed and self._stream is None:
            self._chunks = []
            io.RawIOBase.close(self)


class _RangedObject(io.RawIOBase):
    """An object of known size read by ranged GETs (wrapped in ``pyarrow.PythonFile``): each read one GET,
    except that the first read within the last :data:`TAIL_BYTES` fetches them all (a footer's length, then
    the footer), and a tail already fetched is served from memory."""

    def __init__(
        self,
        reads: _DirectReads,
        bucket: str,
        key: str,
        uri: str,
        size: int,
        tail: tuple[int, bytes] | None = None,
    ):
        super().__init__()
        self._reads, self._bucket, self._key, self._uri = reads, bucket, key, uri
        self._size = size
        self._pos = 0
        self._tail = tail

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        start = self._pos
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        if end <= start:
            return b""
        tail_start = max(0, self._size - TAIL_BYTES)
        if self._tail is None and start >= tail_start:
            self._tail = (tail_start, self._get(tail_start, self._size))
        if self._tail is not None and start >= self._tail[0]:
            data = self._tail[1][start - self._tail[0] : end - self._tail[0]]
        else:
            data = self._get(start, end)
        self._pos = start + len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def _get(self, start: int, end: int) -> bytes:
        status, _, body = self._reads.get(self._bucket, self._key, self._uri, f"bytes={start}-{end - 1}")
        if status == 200:  # a server that ignores ranges sends the whole object
            body = body[start:end]
        if len(body) != end - start:
            raise OSError(f"{self._uri}: asked for bytes {start}-{end - 1}, got {len(body)} bytes")
        return body


def _content_range(value: str | None, uri: str) -> tuple[int, int]:
    """The first byte and the object's size from a ``Content-Range: bytes FIRST-LAST/SIZE`` header."""
    import re

    match = re.fullmatch(r"bytes (\d+)-\d+/(\d+)", (value or "").strip())
    if match is None:
        raise OSError(f"{uri}: a ranged GET came back without a Content-Range (got {value!r})")
    return int(match.group(1)), int(match.group(2))


def _error_code(body: bytes) -> str:
    """The ``<Code>`` of an S3 error response, else empty."""
    import re

    match = re.search(rb"<Code>([^<]*)</Code>", body)
    return match.group(1).decode("utf-8", "replace") if match else ""


def _first_failed_key(answer: bytes) -> tuple[str, str] | None:
    """The key and the code of the first ``<Error>`` in a DeleteObjects answer, else None."""
    import re
    from xml.sax.saxutils import unescape

    match = re.search(rb"<Error>(.*?)</Error>", answer, re.S)
    if match is None:
        return None
    key = re.search(rb"<Key>([^<]*)</Key>", match.group(1))
    code = re.search(rb"<Code>([^<]*)</Code>", match.group(1))
    return (
        unescape(key.group(1).decode("utf-8", "replace")) if key else "?",
        code.group(1).decode("utf-8", "replace") if code else "an error",
    )


def _not_found(error: OSError) -> bool:
    text = str(error)
    return "NoSuchKey" in text or "Path does not exist" in text or "404" in text or "NOT_FOUND" in text


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _time_ns(value: bytes | str | None) -> int:
    """``Last-Modified`` as pyarrow reports it (ISO 8601, or the HTTP date), in nanoseconds; 0 if unknown."""
    if not value:
        return 0
    from datetime import datetime
    from email.utils import parsedate_to_datetime

    text = _text(value)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return 0
    return int(when.timestamp() * 1_000_000_000)


def store_of(location: ObjectPath | str, options: Mapping[str, str] | None = None) -> Store:
    """The store of ``location``: an :class:`ObjectPath`'s own, else one made from ``options`` (default: the
    environment's, :func:`storage_options`)."""
    if isinstance(location, ObjectPath):
        return location.store
    return Store(storage_options() if options is None else options)
