"""The warm endpoint's apply service: ``changelake apply`` runs its batches in the endpoint's own driver.

A batch applied through Spark Connect still pays, in the applying process, the imports of the apply path
(pyspark's Connect client, pyiceberg, the engine: about 1.2 s), the catalog, and a Connect round trip per
Spark job. The endpoint's driver (:mod:`changelake.runtime.server`) has all of that loaded and a classic
SparkSession whose Python workers are warm, so the CLI hands it the whole apply instead: it sends one
request over a Unix socket and prints the progress lines and results the endpoint streams back. The CLI
process imports neither pyspark nor pyiceberg on this path.

Protocol: one JSON object per line. The client sends one request
``{"version": 1, "command": "apply", "settings": {...}, "table": ..., "file": ..., "batch_id": ...,
"fmt": ..., "target_columns": ..., "up_to": ..., "from_batch": ...}``; the service answers with any number of
``{"progress": "..."}`` lines, then either ``{"results": [<BatchResult as a dict>, ...]}`` or
``{"error": {"type": ..., "message": ..., ...}}``.

Who may use it: the socket lives in ``$CHANGELAKE_HOME/spark-server/`` and is created owner-only (0600), so
only the user who runs the endpoint can apply through it. The request names the client's catalog and
warehouse; the service refuses one that differs from its own rather than apply to another table.

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
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from changelake import errors

PROTOCOL_VERSION = 1
SOCKET_NAME = "apply.sock"
# Settings a request must share with the endpoint: the tables it would write. The spec and landing folders
# may differ per request (a CLI run with --tables), as they may between two cold runs.
SHARED_SETTINGS = ("warehouse", "catalog_uri", "catalog_type", "catalog_name")
PER_REQUEST_SETTINGS = ("tables_dir", "landing_dir")
_ERRORS = {
    cls.__name__: cls
    for cls in (
        errors.ChangelakeError,
        errors.SpecError,
        errors.BatchRefusedError,
        errors.WriteRefusedError,
    )
}
_CONNECT_TIMEOUT = 2.0
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
_MAX_REQUEST = 1 << 20  # a request is a few hundred bytes; refuse anything absurd before parsing it


def socket_path(home: Path) -> Path:
    """Where the endpoint of ``home`` listens for applies: next to its ``ready`` file, or, when that path is
    too long for a Unix socket (about 100 bytes), under the temp directory by a hash of ``home``."""
    path = Path(home) / "spark-server" / SOCKET_NAME
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(Path(home).resolve())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"changelake-{os.getuid()}-{digest}.sock"


class ApplyServiceError(RuntimeError):
    """The endpoint failed for a reason that is not the batch's fault (a bug, Spark, the catalog)."""


# --- the client (the CLI) ---------------------------------------------------------------------------------
def connect(home: Path) -> socket.socket | None:
    """A connection to the apply service of ``home``'s endpoint, or None when none listens there (no socket
    file, or a stale one a stopped endpoint left behind)."""
    path = socket_path(home)
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(_CONNECT_TIMEOUT)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    sock.settimeout(None)  # an apply takes as long as it takes; progress lines keep coming meanwhile
    return sock


def request_apply(
    sock: socket.socket, request: dict[str, Any], progress: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Send one apply request on ``sock`` (closed afterwards); relay the progress lines; return the batch
    results as dicts. Raises the batch's ChangelakeError as the endpoint raised it, ApplyServiceError for
    anything else."""
    with sock, sock.makefile("rwb") as stream:
        stream.write(json.dumps({"version": PROTOCOL_VERSION, "command": "apply", **request}).encode())
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
        line = self.rfile.readline(_MAX_REQUEST)
        if not line.endswith(b"\n"):
            return  # a client that hung up, or an oversized request: nothing was started
        send = _Sender(self.wfile)
        try:
            request = json.loads(line)
            results = self.server.run(request, send.progress)
        except errors.BadRecordError as e:
            send({"error": {"type": "BadRecordError", "message": str(e), **_bad_record(e)}})
        except errors.ChangelakeError as e:
            send({"error": {"type": type(e).__name__, "message": str(e)}})
        except Exception as e:  # reported to the client; the service keeps serving
            self.server.log(f"[apply-service] request failed: {type(e).__name__}: {e}")
            send({"error": {"type": "internal", "message": f"{type(e).__name__}: {e}"}})
        else:
            send({"results": results})


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
    ``lake_for(settings, progress)`` (a :class:`changelake.api.ChangeLake` on the endpoint's SparkSession)."""

    daemon_threads = True

    def __init__(self, settings, lake_for: Callable[..., Any], log: Callable[[str], None] = print):
        self.settings = settings
        self.lake_for = lake_for
        self.log = log
        self.path = socket_path(settings.home)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # a stale socket of an endpoint that died
        old = os.umask(0o177)  # owner-only from the start: no window in which others could connect
        try:
            super().__init__(str(self.path), _Handler)
        finally:
            os.umask(old)
        self._thread: threading.Thread | None = None

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

    def run(self, request: dict[str, Any], progress: Callable[[str], None]) -> list[dict[str, Any]]:
        """Apply what ``request`` asks for, as ``changelake apply`` would in the client's process."""
        from dataclasses import replace

        if request.get("version") != PROTOCOL_VERSION or request.get("command") != "apply":
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
            self.settings, **{k: Path(client[k]) for k in PER_REQUEST_SETTINGS if client.get(k)}
        )
        columns = request.get("target_columns")
        if columns is not None and not (
            isinstance(columns, list) and all(isinstance(c, str) for c in columns)
        ):
            raise errors.ChangelakeError("apply request: target_columns must be a list of column names")
        lake = self.lake_for(settings, progress)
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
                )
            ]
        else:
            results = lake.apply_pending(
                table, up_to=_int(request, "up_to"), from_batch=_int(request, "from_batch")
            )
        return [asdict(r) for r in results]


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
