"""The warm endpoint's apply service: ``changelake apply`` runs its batches in the endpoint's own driver.

A batch applied through Spark Connect still pays, in the applying process, the imports of the apply path
(pyspark's Connect client, pyiceberg, the engine: about 1.2 s), the catalog, and a Connect round trip per
Spark job. The endpoint's driver (:mod:`changelake.runtime.server`) has all of that loaded and a classic
SparkSession whose Python workers are warm, so the CLI hands it the whole apply instead: it sends one
request over a Unix socket and prints the progress lines and results the endpoint streams back. The CLI
process imports neither pyspark nor pyiceberg on this path.

Protocol: one JSON object per line. The client sends one request
``{"version": 1, "command": "apply", "settings": {...}, "table": ..., "file": ..., "batch_id": ...,
"fmt": ..., "target_columns": ..., "merge_mode": ..., "up_to": ..., "from_batch": ...}``; the service answers with any number of
``{"progress": "..."}`` lines, then either ``{"results": [<BatchResult as a dict>, ...]}`` or
``{"error": {"type": ..., "message": ..., ...}}``. ``changelake sql`` sends ``"command": "sql"`` with
``"statement"``, ``"idempotency_key"`` and ``"batch_id"`` instead; its results are
:class:`changelake.sqlwrite.SqlResult` dicts, one per statement.

Who may use it: the endpoint's user alone, checked three ways, because the request carries the client's
settings (the catalog URI, its password included). The socket (0600) lives in a private directory (0700,
owned by that user): ``$CHANGELAKE_HOME/spark-server/``, or, when that path is too long for a Unix socket,
``<tmp>/changelake-<uid>/``, which is created 0700 and refused when it is a link, another user's, or open to
others (another user could otherwise bind the socket first and read what the client sends). Before sending
anything the client checks the directory's and the socket's owner and, once connected, the listening
process's uid (``SO_PEERCRED``); the service checks the connecting process's uid the same way and refuses any
other. The request names the client's catalog and warehouse; the service refuses one that differs from its
own rather than apply to another table.

Limits: a connection must deliver its request line within ``request_timeout`` seconds (10 by default), and
at most ``max_connections`` (16) are served at once; one more is answered "busy" and closed. So idle or
half-open connections cannot pile up threads in the endpoint's driver.

A client that goes away (Ctrl-C, a killed Airflow task) does not stop its batch: the apply runs to its commit
or fails atomically in the endpoint, exactly as a batch in a killed applier would, and the next apply of
the same batch is a no-op or finishes it.

This module is imported by the CLI on its fast path: standard library and :mod:`changelake.errors` only.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import socketserver
import stat
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from changelake import errors, objectstore

PROTOCOL_VERSION = 1
SOCKET_NAME = "apply.sock"
# Settings a request must share with the endpoint: the tables it would write. The spec and landing folders
# may differ per request (a CLI run with --tables), as they may between two cold runs.
SHARED_SETTINGS = ("warehouse", "catalog_uri", "catalog_type", "catalog_name")
PER_REQUEST_SETTINGS = ("tables_dir", "landing_dir")
# Every kind of error travels back by name, so the client raises the kind (and exits with its code) the endpoint did.
_ERRORS: dict[str, type[errors.ChangelakeError]] = {
    cls.__name__: cls
    for cls in (errors.ChangelakeError, errors.BatchRefusedError, errors.WriteRefusedError) + errors.KINDS
}
_CONNECT_TIMEOUT = 2.0
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
_MAX_REQUEST = 1 << 20  # a request is a few hundred bytes; refuse anything absurd before parsing it
#: A longer ``changelake sql`` text runs in the client's own process (it would not fit a request).
MAX_STATEMENT_BYTES = 512 << 10
#: Seconds a connection has to deliver its request line; then it is closed (its thread ends).
REQUEST_TIMEOUT = 10.0
#: Connections served at once; one more is answered "busy" and closed.
MAX_CONNECTIONS = 16
# Seconds an answer line may wait for a client that stopped reading; then the client counts as gone and the
# apply goes on without it (it would otherwise hold the apply's thread in a write forever).
_SEND_TIMEOUT = 60.0


def socket_path(home: Path) -> Path:
    """Where the endpoint of ``home`` listens for applies: next to its ``ready`` file, or, when that path is
    too long for a Unix socket (about 100 bytes), in the user's private ``<tmp>/changelake-<uid>/`` by a
    hash of ``home``."""
    path = Path(home) / "spark-server" / SOCKET_NAME
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(Path(home).resolve())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"changelake-{os.geteuid()}" / f"{digest}.sock"


class ApplyServiceError(RuntimeError):
    """The endpoint failed for a reason that is not the batch's fault (a bug, Spark, the catalog)."""


class UnsafeSocketError(errors.ChangelakeError):
    """The apply socket, its directory or the process behind it is not this user's alone: nothing is sent."""


def private_directory(directory: Path) -> Path:
    """Create ``directory`` (0700) if it is missing and make sure it is this user's alone: a real directory,
    not a link, owned by this user, 0700. Raises UnsafeSocketError otherwise; the endpoint calls this before
    it binds its socket there."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        directory.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(directory, 0o700)
    info = os.lstat(directory)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
        os.chmod(directory, 0o700)  # ours: whatever was open about it is closed before the socket exists
    _check_private(directory, os.lstat(directory), "directory")
    return directory


def _check_private(path: Path, info: os.stat_result, what: str) -> None:
    """Refuse ``path`` unless it is the expected kind of file, this user's, and closed to everyone else."""
    kind = stat.S_ISDIR if what == "directory" else stat.S_ISSOCK
    problem = None
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symbolic link"
    elif not kind(info.st_mode):
        problem = f"is not a {what}"
    elif info.st_uid != os.geteuid():
        problem = f"is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    elif stat.S_IMODE(info.st_mode) & 0o077:
        problem = f"has mode {stat.S_IMODE(info.st_mode):04o}; only its owner may use it (0700/0600)"
    if problem is not None:
        label = "socket directory" if what == "directory" else "socket"
        raise UnsafeSocketError(
            f"refusing the apply {label} {path}: it {problem}. Another user may be waiting for this apply's "
            "settings there; nothing was sent. Remove it (or fix its owner and mode) and restart the endpoint, "
            "or unset CHANGELAKE_SPARK_REMOTE to apply without it"
        )


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a connected Unix socket (Linux ``SO_PEERCRED``, macOS
    ``LOCAL_PEERCRED``), or None where the platform cannot tell."""
    if hasattr(socket, "SO_PEERCRED"):
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        return uid
    if sys.platform == "darwin":
        # struct xucred {u_int cr_version; uid_t cr_uid; ...} at SOL_LOCAL (0), LOCAL_PEERCRED (1)
        return struct.unpack_from("=II", sock.getsockopt(0, 1, 76))[1]
    return None


# --- the client (the CLI) ---------------------------------------------------------------------------------
def connect(home: Path) -> socket.socket | None:
    """A connection to the apply service of ``home``'s endpoint, or None when none listens there (no socket
    file, or a stale one a stopped endpoint left behind) or this platform cannot tell who listens.

    Raises UnsafeSocketError, having sent nothing, unless the socket's directory and the socket are this
    user's alone and the process listening runs as this user."""
    path = socket_path(home)
    if not os.path.lexists(path):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(_CONNECT_TIMEOUT)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    try:
        # The directory first: only if it is ours alone is the socket in it the one we just reached.
        _check_private(path.parent, os.lstat(path.parent), "directory")
        _check_private(path, os.lstat(path), "socket")
        uid = peer_uid(sock)
        if uid is None:  # cannot tell who listens: apply in this process instead
            sock.close()
            return None
        if uid != os.geteuid():
            raise UnsafeSocketError(
                f"refusing the apply socket {path}: the process listening on it runs as uid {uid}, not as "
                f"this user (uid {os.geteuid()}); nothing was sent"
            )
    except FileNotFoundError:  # the endpoint went away meanwhile
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)  # an apply takes as long as it takes; progress lines keep coming meanwhile
    return sock


def request_apply(
    sock: socket.socket, request: dict[str, Any], progress: Callable[[str], None], command: str = "apply"
) -> list[dict[str, Any]]:
    """Send one apply request (``command`` ``sql``: statements of ``changelake sql``) on ``sock`` (closed
    afterwards); relay the progress lines; return the batch (statement) results as dicts. Raises the batch's
    ChangelakeError as the endpoint raised it, ApplyServiceError for anything else."""
    with sock, sock.makefile("rwb") as stream:
        stream.write(json.dumps({"version": PROTOCOL_VERSION, "command": command, **request}).encode())
        stream.write(b"\n")
        stream.flush()
        for line in stream:
            message = json.loads(line)
            if "progress" in message:
                progress(message["progress"])
            elif "results" in message:
                return message["results"]
            elif "error" in message:
                raise _error_of(message["error"])
    raise ApplyServiceError("the endpoint closed the connection before the apply finished; see its log")


def _error_of(error: dict[str, Any]) -> Exception:
    """The exception an error message describes: the changelake error type it names, else ApplyServiceError."""
    kind, message = error.get("type"), str(error.get("message"))
    if kind == "BadRecordError":
        return errors.BadRecordError(error["file"], error["line"], error.get("field"), error["reason"])
    cls = _ERRORS.get(str(kind))
    return cls(message) if cls is not None else ApplyServiceError(f"the endpoint's apply failed: {message}")


# --- the service (the endpoint's driver) -------------------------------------------------------------------
class _Handler(socketserver.StreamRequestHandler):
    server: ApplyService

    def handle(self) -> None:
        line = _read_request(self.request, time.monotonic() + self.server.request_timeout)
        if line is None:
            return  # a client that hung up, stayed silent too long, or sent too much: nothing was started
        self.request.settimeout(_SEND_TIMEOUT)
        send = _Sender(self.wfile)
        try:
            request = json.loads(line)
            results = self.server.run(request, send.progress)
        except errors.BadRecordError as e:
            send({"error": {"type": "BadRecordError", "message": str(e), **_bad_record(e)}})
        except errors.ChangelakeError as e:
            send({"error": {"type": _kind_of(e).__name__, "message": str(e)}})
        except Exception as e:  # reported to the client; the service keeps serving
            if (conflict := errors.lost_race(e)) is not None:
                send({"error": {"type": "CommitConflict", "message": str(conflict)}})
                return
            self.server.log(f"[apply-service] request failed: {type(e).__name__}: {e}")
            send({"error": {"type": "internal", "message": f"{type(e).__name__}: {e}"}})
        else:
            send({"results": results})


def _kind_of(error: errors.ChangelakeError) -> type[errors.ChangelakeError]:
    """The nearest kind the client knows for an error class it does not (a subclass of a kind)."""
    return next((k for k in type(error).__mro__ if k.__name__ in _ERRORS), errors.ChangelakeError)


def _read_request(sock: socket.socket, deadline: float) -> bytes | None:
    """The request line, or None when the client hangs up, sends more than a request can be, or has not
    finished the line by ``deadline`` (a whole-request deadline: a byte now and then does not extend it)."""
    data = bytearray()
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or len(data) > _MAX_REQUEST:
            return None
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except OSError:  # the timeout among them
            return None
        if not chunk:
            return None
        data += chunk
    return bytes(data) if len(data) <= _MAX_REQUEST else None


def _bad_record(e: errors.BadRecordError) -> dict[str, Any]:
    return {"file": e.file, "line": e.line, "field": e.field, "reason": e.reason}


class _Sender:
    """Writes answer lines; once the client is gone it stops writing and the apply goes on regardless."""

    def __init__(self, out):
        self.out = out
        self.gone = False
        self.lock = threading.Lock()  # progress may come from several of the apply's threads

    def __call__(self, message: dict[str, Any]) -> None:
        with self.lock:
            if self.gone:
                return
            try:
                self.out.write(json.dumps(message, default=str).encode() + b"\n")
                self.out.flush()
            except OSError:
                self.gone = True

    def progress(self, text: str) -> None:
        self({"progress": text})


class ApplyService(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Serves apply requests on ``socket_path(settings.home)``, each in its own thread, with
    ``lake_for(settings, progress)`` (a :class:`changelake.api.ChangeLake` on the endpoint's SparkSession).

    Only processes of this user are served; a connection has ``request_timeout`` seconds to send its request,
    and at most ``max_connections`` are served at once."""

    daemon_threads = True
    request_queue_size = 64  # connections waiting to be accepted; a client gives up after _CONNECT_TIMEOUT

    def __init__(
        self,
        settings,
        lake_for: Callable[..., Any],
        log: Callable[[str], None] = print,
        *,
        request_timeout: float = REQUEST_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ):
        self.settings = settings
        self.lake_for = lake_for
        self.log = log
        self.request_timeout = request_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self.max_connections = max_connections
        self.path = socket_path(settings.home)
        private_directory(self.path.parent)
        self.path.unlink(missing_ok=True)  # a stale socket of an endpoint that died
        old = os.umask(0o177)  # owner-only from the start: no window in which others could connect
        try:
            super().__init__(str(self.path), _Handler)
        finally:
            os.umask(old)
        self._thread: threading.Thread | None = None

    def verify_request(self, request, client_address) -> bool:
        """Serve only processes of this user (the socket's mode is the first guard, this the second)."""
        uid = peer_uid(request)
        if uid == os.geteuid():
            return True
        self.log(
            f"[apply-service] refused a connection from uid {uid}: only uid {os.geteuid()} may apply here"
        )
        _refuse(request, f"the apply service of uid {os.geteuid()} serves only its own user, not uid {uid}")
        return False

    def process_request(self, request, client_address) -> None:
        """A thread for the connection while fewer than ``max_connections`` are served; else "busy"."""
        if not self._slots.acquire(blocking=False):
            self.log(f"[apply-service] busy: {self.max_connections} connection(s) served; one more refused")
            _refuse(request, f"the endpoint is busy ({self.max_connections} connections); try again shortly")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever, name="changelake-apply-service", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.path.unlink(missing_ok=True)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _folder(self, text: str) -> Path | objectstore.ObjectPath:
        """A request's folder: a local path, or an object-store prefix (a landing zone on ``s3://``) in the
        endpoint's own object store."""
        if objectstore.is_object_location(text):
            return objectstore.Store(self.settings.storage_options).path(text)
        return Path(text)

    def run(self, request: dict[str, Any], progress: Callable[[str], None]) -> list[dict[str, Any]]:
        """Apply what ``request`` asks for, as ``changelake apply`` would in the client's process."""
        from dataclasses import replace

        if request.get("version") != PROTOCOL_VERSION or request.get("command") not in ("apply", "sql"):
            raise errors.ChangelakeError(
                f"the endpoint speaks apply protocol {PROTOCOL_VERSION}; this client sent "
                f"{request.get('version')!r}/{request.get('command')!r}: use the same changelake for both"
            )
        client = request.get("settings") or {}
        for key in SHARED_SETTINGS:
            if str(client.get(key)) != str(getattr(self.settings, key)):
                raise errors.ChangelakeError(
                    f"this apply's {key} is {client.get(key)!r} but the endpoint at {self.path.parent} serves "
                    f"{getattr(self.settings, key)!r}; unset CHANGELAKE_SPARK_REMOTE to apply without it"
                )
        settings = replace(
            self.settings, **{k: self._folder(client[k]) for k in PER_REQUEST_SETTINGS if client.get(k)}
        )
        columns = request.get("target_columns")
        if columns is not None and not (
            isinstance(columns, list) and all(isinstance(c, str) for c in columns)
        ):
            raise errors.ChangelakeError("apply request: target_columns must be a list of column names")
        lake = self.lake_for(settings, progress)
        if request["command"] == "sql":  # changelake sql: each statement one batch (changelake.sqlwrite)
            statement = _text(request, "statement")
            if statement is None:
                raise errors.ChangelakeError("sql request: no statement")
            idempotency_key, batch_id = _text(request, "idempotency_key"), _int(request, "batch_id")
            merge_mode = _text(request, "merge_mode")
            return [
                r.to_dict()
                for r in lake.sql(
                    statement, idempotency_key=idempotency_key, batch_id=batch_id, merge_mode=merge_mode
                )
            ]
        table, file = _text(request, "table"), _text(request, "file")
        if file is not None:
            if table is None or request.get("batch_id") is None:
                raise errors.ChangelakeError("apply --file needs a table and --batch-id")
            results = [
                lake.apply(
                    table,
                    file=Path(file),
                    batch_id=_int(request, "batch_id"),
                    fmt=_text(request, "fmt"),
                    target_columns=columns,
                    writer=_text(request, "writer") or "api",
                    merge_mode=_text(request, "merge_mode"),
                )
            ]
        else:
            results = lake.apply_pending(
                table, up_to=_int(request, "up_to"), from_batch=_int(request, "from_batch")
            )
        return [asdict(r) for r in results]


def _refuse(request: socket.socket, message: str) -> None:
    """Tell a refused client why (one error line, never waiting on it); the caller closes the connection."""
    try:
        request.settimeout(0)
        request.send(json.dumps({"error": {"type": "ChangelakeError", "message": message}}).encode() + b"\n")
    except OSError:
        pass


def _text(request: dict[str, Any], key: str) -> str | None:
    value = request.get(key)
    if value is not None and not isinstance(value, str):
        raise errors.ChangelakeError(f"apply request: {key} must be a string, got {type(value).__name__}")
    return value


def _int(request: dict[str, Any], key: str) -> int | None:
    value = request.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise errors.ChangelakeError(f"apply request: {key} must be an integer, got {value!r}")
    return value
