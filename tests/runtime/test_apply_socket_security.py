"""The apply socket against another local user, and its limits (issue 33, items 3 and 10). No Spark, no JVM.

Another user is created for the module (``useradd``; root only) and plays the impostor in a forked child
that drops to its uid. The socket's fallback directory is put in a fresh world-writable, sticky directory
(as /tmp is) through ``TMPDIR``, so every test starts with no ``changelake-<uid>`` in it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from changelake.config import load_settings
from changelake.runtime import applyservice
from tests.helpers import CLI

NOWHERE = "sc://127.0.0.1:9"  # the discard port: a Spark Connect client would fail to reach it


@pytest.fixture(scope="module")
def other_user():
    """(uid, gid) of a second, unprivileged user, created for this module and removed after it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second user (useradd) and to act as it")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("useradd/userdel are not installed: no second user to play the impostor")
    name = f"clsock{uuid.uuid4().hex[:8]}"
    home = tempfile.mkdtemp(prefix="changelake-impostor-")
    user_command(["useradd", "--no-create-home", "--home-dir", home, "--shell", "/usr/sbin/nologin", name])
    try:
        import pwd

        entry = pwd.getpwnam(name)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        yield entry.pw_uid, entry.pw_gid
    finally:
        user_command(["userdel", "--force", name])  # --force: an impostor of a failed test may linger
        shutil.rmtree(home, ignore_errors=True)


def user_command(command: list[str]) -> None:
    """useradd/userdel, retried while another process holds the lock on /etc/passwd or /etc/group."""
    for _ in range(40):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode == 0 or "lock" not in result.stderr:
            break
        time.sleep(0.25)
    assert result.returncode == 0, f"{' '.join(command)}: {result.stderr}"


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch):
    """A fresh directory like /tmp (mode 1777) as this process's and its children's temp directory (after
    pytest's own temp directory is settled: ``tmp_path`` stays where it was)."""
    base = Path(tempfile.mkdtemp(prefix="changelake-shared-tmp-", dir="/tmp"))
    base.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def deep_home(tmp_path) -> Path:
    """A home too deep for a socket path: its apply socket falls back to the temp directory."""
    home = tmp_path / ("d" * 60) / ("e" * 60)
    (home / "tables").mkdir(parents=True)
    assert not applyservice.socket_path(home).is_relative_to(home)
    return home


class Impostor:
    """A forked child that becomes ``user`` and listens on ``path``; :meth:`received` is how many bytes any
    client sent it before hanging up or going quiet for two seconds."""

    def __init__(self, user: tuple[int, int], path: Path, *, link: bool = False, bind_as_root: bool = False):
        read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: only system calls, then _exit
            code = 1
            try:
                os.close(read)
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                if (
                    bind_as_root
                ):  # the socket file is root's and 0600; the process listening on it is not root
                    os.umask(0o177)
                    server.bind(str(path))
                self._become(user)
                if not bind_as_root:
                    self._prepare(path, link)
                    server.bind(str(path))
                    os.chmod(path, 0o777)
                server.listen(8)
                os.write(write, b"ready\n")
                os.write(write, f"{self._serve(server)}\n".encode())
                code = 0
            except BaseException as e:
                os.write(write, f"failed {type(e).__name__}: {e}\n".encode())
            finally:
                os._exit(code)
        os.close(write)
        self.pipe = os.fdopen(read)
        line = self.pipe.readline().strip()
        assert line == "ready", f"the impostor did not start: {line}"

    @staticmethod
    def _become(user: tuple[int, int]) -> None:
        uid, gid = user
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    @staticmethod
    def _prepare(path: Path, link: bool) -> None:
        """The directory the socket goes in, made first by the impostor (or a link to one of its own)."""
        if path.parent.exists():
            return  # the old layout: the socket sat in the temp directory itself
        if link:
            own = path.parent.with_name(path.parent.name + "-impostor")
            os.mkdir(own, 0o700)
            os.symlink(own, path.parent)
        else:
            os.mkdir(path.parent, 0o700)

    @staticmethod
    def _serve(server: socket.socket) -> int:
        server.settimeout(20)
        try:
            conn, _ = server.accept()
        except OSError:
            return 0
        conn.settimeout(2)
        total = 0
        try:
            while chunk := conn.recv(65536):
                total += len(chunk)
        except OSError:
            pass  # quiet: an old client waits for an answer after sending its request
        conn.close()
        return total

    def received(self) -> int:
        line = self.pipe.readline().strip()
        os.waitpid(self.pid, 0)
        self.pipe.close()
        assert line.isdigit(), f"the impostor failed: {line}"
        return int(line)


def cli_apply(home: Path, shared_tmp: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
    env.update(CHANGELAKE_HOME=str(home), CHANGELAKE_SPARK_REMOTE=NOWHERE, TMPDIR=str(shared_tmp))
    return subprocess.run([*CLI, "apply"], env=env, capture_output=True, text=True, timeout=120)


# --- the client: nothing is sent to another user -------------------------------------------------------------
@pytest.mark.parametrize(
    ("case", "link", "bind_as_root", "refusal"),
    [
        ("its directory", False, False, "is owned by uid"),
        ("a link to its directory", True, False, "is a symbolic link"),
        ("its process on our socket", False, True, "the process listening on it runs as uid"),
    ],
)
def test_the_client_sends_nothing_to_another_users_socket(
    other_user, shared_tmp, deep_home, case, link, bind_as_root, refusal
):
    path = applyservice.socket_path(deep_home)
    if bind_as_root:  # our private directory, done right; the listener behind the socket is the impostor
        os.makedirs(path.parent, mode=0o700, exist_ok=True)
    impostor = Impostor(other_user, path, link=link, bind_as_root=bind_as_root)

    result = cli_apply(deep_home, shared_tmp)

    assert impostor.received() == 0, (
        f"{case}: the client's request (settings, catalog URI) reached the impostor"
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "refusing the apply socket" in result.stderr and refusal in result.stderr, result.stderr[-2000:]
    assert "nothing was sent" in result.stderr


def test_the_endpoint_refuses_a_socket_directory_another_user_made(other_user, shared_tmp, deep_home):
    path = applyservice.socket_path(deep_home)
    impostor = Impostor(other_user, path)
    with pytest.raises(applyservice.UnsafeSocketError, match="is owned by uid"):
        applyservice.ApplyService(load_settings(home=deep_home), lambda *_: None, log=lambda _m: None)
    assert os.lstat(path).st_uid == other_user[0]  # the impostor's socket was left alone, not replaced
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as release:  # the impostor waits for a connection
        release.connect(str(path))
    assert impostor.received() == 0


def test_the_fallback_directory_is_private(shared_tmp, deep_home):
    service = applyservice.ApplyService(load_settings(home=deep_home), lambda *_: None, log=lambda _m: None)
    try:
        directory = os.lstat(service.path.parent)
        assert service.path.parent.parent == shared_tmp
        assert stat.S_ISDIR(directory.st_mode) and stat.S_IMODE(directory.st_mode) == 0o700
        assert directory.st_uid == os.geteuid()
        assert stat.S_IMODE(os.lstat(service.path).st_mode) == 0o600
    finally:
        service.server_close()


# --- the service: only its own user ------------------------------------------------------------------------------
class Refusing:
    """The service's ChangeLake factory: records that a request got as far as being run, and fails it."""

    def __init__(self):
        self.calls = 0

    def __call__(self, settings, progress):
        self.calls += 1
        raise RuntimeError("a request was run")


def as_user(user: tuple[int, int], path: Path, payload: bytes) -> bytes:
    """Connect to ``path`` as ``user`` (a forked child), send ``payload``, and return what came back."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            Impostor._become(user)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(10)
            client.connect(str(path))
            try:
                client.sendall(payload)
            except BrokenPipeError:
                pass  # a service that refuses at once may have answered and hung up already
            answer = b""
            try:
                while chunk := client.recv(65536):
                    answer += chunk
            except ConnectionResetError:
                pass  # the service hung up on the unread request, after its answer
            os.write(write, answer or b"(closed)")
        except BaseException as e:
            os.write(write, f"failed {type(e).__name__}: {e}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return answer


def test_the_service_refuses_a_process_of_another_user(other_user, shared_tmp):
    home = shared_tmp / "home"  # reachable by the other user, as a home under /tmp is
    home.mkdir(mode=0o755)
    settings = load_settings(home=home)
    runner, log = Refusing(), []
    service = applyservice.ApplyService(settings, runner, log=log.append)
    service.start()
    try:
        # The file modes are the first guard; open them, as a careless chmod would, to reach the second.
        os.chmod(service.path.parent, 0o711)
        os.chmod(service.path, 0o666)
        request = {
            "version": applyservice.PROTOCOL_VERSION,
            "command": "apply",
            "settings": {k: str(getattr(settings, k)) for k in applyservice.SHARED_SETTINGS},
        }
        answer = as_user(other_user, service.path, json.dumps(request).encode() + b"\n")
    finally:
        service.stop()
    assert b"serves only its own user" in answer, answer
    assert runner.calls == 0
    assert any(f"refused a connection from uid {other_user[0]}" in m for m in log), log


# --- limits: idle connections do not keep threads --------------------------------------------------------------
def handler_threads() -> int:
    return sum(1 for t in threading.enumerate() if "process_request_thread" in t.name)


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_idle_connections_are_closed_and_leave_no_threads(home):
    service = applyservice.ApplyService(
        load_settings(home=home), Refusing(), log=lambda _m: None, request_timeout=2.0, max_connections=400
    )
    service.start()
    clients = []
    try:
        started = time.monotonic()
        for _ in range(300):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(service.path))
            clients.append(client)  # connected, and silent
        peak = 0

        def drained() -> bool:
            nonlocal peak
            peak = max(peak, handler_threads())
            return handler_threads() == 0

        assert wait_for(drained, 20), f"{handler_threads()} handler threads still alive"
        assert peak > 100, f"only {peak} connections were ever served at once"  # the test held many
        assert time.monotonic() - started >= 2.0  # closed by the timeout, not at once
        for client in clients:
            client.settimeout(5)
            assert client.recv(1) == b""  # the service hung up
    finally:
        for client in clients:
            client.close()
        service.stop()


def test_connections_beyond_the_bound_are_refused_at_once(home):
    runner = Refusing()
    service = applyservice.ApplyService(
        load_settings(home=home), runner, log=lambda _m: None, request_timeout=30, max_connections=4
    )
    service.start()
    idle, extra = [], []
    try:
        for _ in range(4):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(service.path))
            idle.append(client)
        assert wait_for(lambda: handler_threads() == 4, 5)
        for _ in range(20):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(service.path))
            client.settimeout(5)
            extra.append(client)
        for client in extra:
            answer = client.makefile("rb").readline()
            assert "busy (4 connections)" in json.loads(answer)["error"]["message"]
            assert client.recv(1) == b""
        assert handler_threads() == 4
        for client in idle:
            client.close()
        assert wait_for(lambda: handler_threads() == 0, 5)
        # A slot is free again: the next request is served (and run).
        settings = load_settings(home=home)
        request = {"settings": {k: str(getattr(settings, k)) for k in applyservice.SHARED_SETTINGS}}
        with pytest.raises(applyservice.ApplyServiceError, match="a request was run"):
            applyservice.request_apply(applyservice.connect(home), request, lambda _m: None)
        assert runner.calls == 1
    finally:
        for client in idle + extra:
            client.close()
        service.stop()
