"""Where the SQL endpoint listens and clients connect (:mod:`changelake.runtime.server`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from changelake.errors import ChangelakeError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_THRIFT_PORT = 10000
DEFAULT_CONNECT_PORT = 15002


@dataclass(frozen=True)
class Endpoint:
    """Where the endpoint listens and clients connect: one host, a Thrift port and a Spark Connect port."""

    host: str = DEFAULT_HOST
    thrift_port: int = DEFAULT_THRIFT_PORT
    connect_port: int = DEFAULT_CONNECT_PORT

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Endpoint:
        """``SPARK_THRIFT_HOST`` / ``SPARK_THRIFT_PORT`` (shared with dbt's ``thrift`` target) and
        ``SPARK_CONNECT_PORT``; unset or empty values take the defaults."""
        env = os.environ if environ is None else environ
        try:
            return cls(
                host=env.get("SPARK_THRIFT_HOST") or DEFAULT_HOST,
                thrift_port=int(env.get("SPARK_THRIFT_PORT") or DEFAULT_THRIFT_PORT),
                connect_port=int(env.get("SPARK_CONNECT_PORT") or DEFAULT_CONNECT_PORT),
            )
        except ValueError as e:
            raise ChangelakeError(f"SPARK_THRIFT_PORT and SPARK_CONNECT_PORT must be integers: {e}") from e

    @property
    def connect_url(self) -> str:
        return f"sc://{self.host}:{self.connect_port}"

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:hive2://{self.host}:{self.thrift_port}/default"
