"""The S3 set-up the small-batch and long-run benchmarks share under ``--s3`` (issue 44): the project's local S3
endpoint started and stopped by the benchmark itself (and, with ``--catalog rest``, Iceberg's REST catalog on
it), the requests each batch makes, and a warehouse's size counted as objects under its prefix where the local
runs count files.

The endpoint is bench_s3.py's (``start_s3``: infra/s3.sh with its request log on) and so is the reading of that
log (``requests_since``); the objects are listed through changelake's own :mod:`changelake.objectstore`, the
store the lake itself writes through, not a second S3 client.
"""

from __future__ import annotations

import os
import statistics
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from bench_s3 import REPO, REQUEST, requests_since, start_s3

#: The bucket infra/s3.sh creates.
BUCKET = "changelake"
#: The storage options the lakes are given (the AWS names), taken from the endpoint's own env file.
OPTION_NAMES = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


class Endpoint:
    """The local S3 endpoint for one benchmark run: started in ``base`` (its objects, keys and request log
    there), stopped by :meth:`stop` (or leaving the ``with`` block). ``env`` holds the variables that reach it
    (for a CLI process), ``options`` the storage options a :class:`changelake.ChangeLake` takes."""

    def __init__(self, base: Path):
        from changelake import objectstore

        for variables in objectstore.OPTION_VARIABLES.values():
            for (
                name
            ) in variables:  # the lakes get this endpoint explicitly, never one from the caller's shell
                os.environ.pop(name, None)
        self.base = base
        self.env = start_s3(base)
        self.options = {k: self.env[k] for k in OPTION_NAMES}
        self.store = objectstore.Store(self.options)
        self.log = base / "server.log"
        self._offset = requests_since(self.log, 0)[1]
        self._catalogs: list[Path] = []
        self.listed: list[str] = []

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the REST catalogs started here, then the endpoint."""
        for rest in self._catalogs:
            subprocess.run(
                [str(REPO / "infra" / "rest_catalog.sh"), "stop"],
                env={**os.environ, "REST_DIR": str(rest)},
                check=False,
                stdout=subprocess.DEVNULL,
            )
        subprocess.run(
            [str(REPO / "infra" / "s3.sh"), "stop"],
            env={**os.environ, "S3_DIR": str(self.base)},
            check=False,
            stdout=subprocess.DEVNULL,
        )

    def rest_catalog(self, name: str, warehouse: str) -> dict[str, str]:
        """A fresh Iceberg REST catalog on this endpoint (infra/rest_catalog.sh; its state in ``base/rest-<name>``,
        stopped with the endpoint) whose tables go under ``warehouse``: its variables (CHANGELAKE_CATALOG_TYPE/URI,
        the bearer token)."""
        rest = self.base / f"rest-{name}"
        env = {**os.environ, "REST_DIR": str(rest), "S3_DIR": str(self.base), "REST_WAREHOUSE": warehouse}
        subprocess.run(
            [str(REPO / "infra" / "rest_catalog.sh"), "start"], env=env, check=True, stdout=subprocess.DEVNULL
        )
        self._catalogs.append(rest)
        out = {}
        for line in (rest / "rest.env").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            if key.startswith(("CHANGELAKE_CATALOG_", "PYICEBERG_CATALOG__")):
                out[key] = value
        return out

    def lake(self, home: Path, warehouse: str, rest: str | None = None) -> tuple[Any, dict[str, str] | None]:
        """A :class:`changelake.ChangeLake` at ``home`` (its spec files in ``home/tables``) with its warehouse here,
        its tables behind a fresh :meth:`rest_catalog` named ``rest`` (else the home's SQLite catalog); the lake
        and that catalog's variables (None without one)."""
        from changelake import ChangeLake

        catalog = self.rest_catalog(rest, warehouse) if rest else None
        lake = ChangeLake(
            home=home,
            tables_dir=home / "tables",
            warehouse=warehouse,
            storage_options=self.options,
            progress=lambda m: None,
            **lake_settings(catalog),
        )
        return lake, catalog

    def requests(self) -> dict[str, int]:
        """The requests the endpoint served since the last call (or its start), by kind (GET, LIST, HEAD, PUT,
        POST (multipart), POST (delete objects), DELETE); the prefixes they listed are kept in :attr:`listed`."""
        start = self._offset
        kinds, self._offset = requests_since(self.log, start)
        self.listed = listed_prefixes(self.log, start, self._offset)
        return dict(kinds)

    def land(self, uri: str, path: Path) -> str:
        """The local file ``path`` landed as the object ``uri`` (one PUT); its location."""
        self.store.put(uri, path.read_bytes())
        return uri

    def cli_env(self, home: Path, warehouse: str, catalog: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a fresh ``changelake`` process on the lake at ``home`` with its warehouse here (and
        its tables behind ``catalog``, a :meth:`rest_catalog`'s variables; else the home's SQLite catalog)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CHANGELAKE_", "PYICEBERG_"))}
        env.update({k: self.env[k] for k in OPTION_NAMES})
        env.update(catalog or {})
        env.update(
            CHANGELAKE_HOME=str(home),
            CHANGELAKE_TABLES=str(home / "tables"),
            CHANGELAKE_WAREHOUSE=warehouse,
        )
        return env


def listed_prefixes(log: Path, start: int, end: int) -> list[str]:
    """The ``s3://bucket/prefix`` of every LIST request logged between bytes ``start`` and ``end`` of the
    endpoint's log (the requests bench_s3.requests_since counts as LIST)."""
    with open(log, "rb") as fh:
        fh.seek(start)
        text = fh.read(end - start).decode("utf-8", "replace")
    out = []
    for method, url in REQUEST.findall(text):
        if method == "GET" and "list-type=" in url:
            parsed = urlparse(url)
            prefix = parse_qs(parsed.query).get("prefix", [""])[0]
            out.append(f"s3:/{parsed.path.rstrip('/')}/{prefix}")
    return out


def lists_whole_table(prefix: str, tables: list[str]) -> bool:
    """Whether a LIST of ``prefix`` lists the whole of one of ``tables`` (their locations): the prefix is the
    table's location or above it, where a LIST under it (one apply attempt's prefix) is not."""
    return any(f"{t.rstrip('/')}/".startswith(prefix) for t in tables)


def lake_settings(catalog: dict[str, str] | None) -> dict[str, Any]:
    """The :class:`changelake.ChangeLake` settings of a :meth:`Endpoint.rest_catalog`'s variables (none: the
    home's SQLite catalog). pyiceberg reads its ``PYICEBERG_CATALOG__*`` variables once, at import: in the
    benchmark's own process the token goes in as a catalog property."""
    if not catalog:
        return {}
    return {
        "catalog_type": catalog["CHANGELAKE_CATALOG_TYPE"],
        "catalog_uri": catalog["CHANGELAKE_CATALOG_URI"],
        "catalog_properties": {"token": catalog["PYICEBERG_CATALOG__CHANGELAKE__TOKEN"]},
    }


def usage(location: Path | str, store: Any = None) -> dict[str, int]:
    """What a warehouse holds: files (objects), bytes, and Iceberg metadata JSON files. ``location`` is a local
    directory, or an ``s3://`` prefix read through ``store`` (a :class:`changelake.objectstore.Store`), where the
    objects under it count as the files do."""
    if isinstance(location, Path):
        named = [(p.name, p.stat().st_size) for p in location.rglob("*") if p.is_file()]
    else:
        named = [(i.path.name, i.size) for i in store.list(location.rstrip("/"), recursive=True)]
    return {
        "files": len(named),
        "bytes": sum(size for _, size in named),
        "metadata_files": sum(1 for name, _ in named if name.endswith(".metadata.json")),
    }


def request_summary(per_batch: list[dict[str, int]]) -> dict[str, Any]:
    """Requests per batch over ``per_batch`` (one dict of kinds each): the median and the largest of each kind
    and of all, and which batches made a LIST request (their indexes in ``per_batch``)."""
    kinds = sorted({k for r in per_batch for k in r})
    totals = [sum(r.values()) for r in per_batch]
    return {
        "batches": len(per_batch),
        "median": {k: statistics.median(r.get(k, 0) for r in per_batch) for k in kinds},
        "max": {k: max(r.get(k, 0) for r in per_batch) for k in kinds},
        "median_total": statistics.median(totals) if totals else None,
        "max_total": max(totals) if totals else None,
        "batches_with_list": sum(1 for r in per_batch if r.get("LIST")),
        "list_batches": [i for i, r in enumerate(per_batch) if r.get("LIST")],  # indexes into per_batch
        "all": dict(sum((Counter(r) for r in per_batch), Counter())),
    }
