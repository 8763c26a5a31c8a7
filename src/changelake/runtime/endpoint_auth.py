"""Who may use the SQL endpoint, and how its clients prove it (docs/sql-endpoint.md, "Security").

The endpoint's secrets live in ``$CHANGELAKE_HOME/spark-server/endpoint.secrets``, a Java properties file
changelake generates on the endpoint's first start (mode 0600 in a 0700 directory, never in the repo):

- ``connect.token``: Spark Connect's pre-shared token (``spark.connect.authenticate.token``). Whoever holds it
  is the endpoint's owner: Spark Connect runs Python UDFs, so a token is as good as the endpoint's OS user.
- ``thrift.user.<name>.password`` / ``.role``: the Thrift/JDBC users. ``changelake`` (role ``owner``) is what
  dbt's ``thrift`` target and the pipeline use; ``reader`` (role ``read``) is the login to hand to a BI tool or
  another person: queries and SHOW/DESCRIBE only.

HiveServer2 checks a password with :file:`java/changelake/endpoint/PasswordAuthenticator.java` (its CUSTOM
authentication); every Thrift statement passes :file:`java/changelake/endpoint/Guard.java`, a Spark session
extension that admits a statement only if every node and expression of its analysed plan is on its allowlist
for the user's role: queries over changelake's catalog, the server's views and dbt's managed tables,
SHOW/DESCRIBE/EXPLAIN/USE and a few settings for the ``read`` role, and for the ``owner`` besides what dbt-spark's
materializations send. Both are compiled with
the JDK's ``javac`` into changelake's jar (:mod:`changelake.runtime.jvm`, cached by the sources' hash): Spark
offers no way to plug either in without a JVM class.

The file is read and written with the owner and mode checked and without following links: a secrets file
another user could have planted or read is refused, not used.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from changelake.atomic import create_private
from changelake.config import Settings
from changelake.errors import ChangelakeError

SECRETS_FILE = "endpoint.secrets"
OWNER_USER = "changelake"
READER_USER = "reader"
AUTHENTICATOR_CLASS = "changelake.endpoint.PasswordAuthenticator"
GUARD_CLASS = "changelake.endpoint.Guard"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@dataclass(frozen=True)
class EndpointSecrets:
    path: Path
    connect_token: str
    users: dict[str, tuple[str, str]]  # name -> (role, password)

    def password(self, user: str = OWNER_USER) -> str:
        return self.users[user][1]


def private_dir(path: Path) -> Path:
    """``path`` as a directory only this user can enter (created 0700; an existing one must be ours, not a
    link, and is narrowed to 0700)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ChangelakeError(f"{path} must be a directory, not a link: the endpoint keeps its secrets there")
    if info.st_uid != os.getuid():
        raise ChangelakeError(
            f"{path} belongs to uid {info.st_uid}, not to this user ({os.getuid()}): refused"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def secrets_path(settings: Settings) -> Path:
    return settings.home / "spark-server" / SECRETS_FILE


def _parse(path: Path, text: str) -> EndpointSecrets:
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    users: dict[str, tuple[str, str]] = {}
    for key, value in values.items():
        if key.startswith("thrift.user.") and key.endswith(".password"):
            name = key[len("thrift.user.") : -len(".password")]
            users[name] = (values.get(f"thrift.user.{name}.role", "read"), value)
    token = values.get("connect.token", "")
    if not token or OWNER_USER not in users:
        raise ChangelakeError(
            f"{path}: no connect.token or no {OWNER_USER} user; delete it to generate a new one"
        )
    return EndpointSecrets(path, token, users)


def load_secrets(settings: Settings) -> EndpointSecrets | None:
    """The endpoint's secrets, or None when the endpoint never started. Refused (ChangelakeError) when the file
    is a link, is not ours, or others may read it."""
    path = secrets_path(settings)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ChangelakeError(
            f"{path}: cannot open the endpoint's secrets without following a link: {e}"
        ) from e
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise ChangelakeError(f"{path} is not a file of this user (uid {os.getuid()}): refused")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise ChangelakeError(
                f"{path} is readable by others (mode {stat.S_IMODE(info.st_mode):o}): its passwords are known; "
                "delete it and restart the endpoint to generate new ones"
            )
        return _parse(path, f.read(1 << 16))


def ensure_secrets(settings: Settings) -> EndpointSecrets:
    """The endpoint's secrets, generated on first use (random, 192 bits each)."""
    private_dir(secrets_path(settings).parent)
    found = load_secrets(settings)
    if found is not None:
        return found
    path = secrets_path(settings)
    token = secrets.token_urlsafe(24)
    owner, reader = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    text = (
        "# changelake SQL endpoint secrets (generated; docs/sql-endpoint.md). Delete to rotate.\n"
        f"connect.token={token}\n"
        f"thrift.user.{OWNER_USER}.role=owner\n"
        f"thrift.user.{OWNER_USER}.password={owner}\n"
        f"thrift.user.{READER_USER}.role=read\n"
        f"thrift.user.{READER_USER}.password={reader}\n"
    )
    create_private(path, [text.encode()])  # whole or not at all; a racing creator's file wins
    return _parse(path, text)


def compiled_classes(settings: Settings) -> Path:
    """The jar of changelake's Java classes, the authenticator and guard among them
    (:func:`changelake.runtime.jvm.compiled_jar`, built once per version of the sources); it goes on the
    endpoint driver's class path."""
    from changelake.runtime import jvm

    return jvm.compiled_jar(settings)


def with_token(url: str, settings: Settings) -> str:
    """``url`` (``sc://host:port``) with the endpoint's token, for a Spark Connect client of the endpoint of
    ``settings.home``. pyspark sends a token without TLS only to ``localhost`` (gRPC's local credentials), so a
    loopback host is written so; a URL that already carries parameters, or no secrets file, is left alone."""
    found = load_secrets(settings)
    if found is None or ";" in url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host in LOOPBACK:
        url = f"sc://localhost:{parts.port}" if parts.port else "sc://localhost"
    return f"{url.rstrip('/')}/;token={found.connect_token}"


def thrift_env(settings: Settings) -> dict[str, str]:
    """The environment dbt's ``thrift`` target logs in with, as the endpoint's owner ({} before the
    endpoint's first start)."""
    found = load_secrets(settings)
    return (
        {} if found is None else {"SPARK_THRIFT_USER": OWNER_USER, "SPARK_THRIFT_PASSWORD": found.password()}
    )


def hive_login(settings: Settings, user: str = READER_USER) -> dict[str, str]:
    """PyHive's ``hive.connect`` arguments for ``user`` of the endpoint of ``settings.home``."""
    found = load_secrets(settings)
    if found is None:
        raise ChangelakeError(f"no SQL endpoint secrets under {settings.home}: start the endpoint first")
    return {"username": user, "password": found.password(user), "auth": "CUSTOM"}
