"""The S3 set-up the small-batch and long-run benchmarks share under ``--s3`` (issue 44): the project's local S3
endpoint started and stopped by the benchmark itself, the requests each batch makes, and a warehouse's size
counted as objects under its prefix where the local runs count files.

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

from bench_s3 import REPO, requests_since, start_s3

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

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        subprocess.run(
            [str(REPO / "infra" / "s3.sh"), "stop"],
            env={**os.environ, "S3_DIR": str(self.base)},
            check=False,
            stdout=subprocess.DEVNULL,
        )

    def requests(self) -> dict[str, int]:
        """The requests the endpoint served since the last call (or its start), by kind (GET, LIST, HEAD, PUT,
        POST (multipart), POST (delete objects), DELETE)."""
        kinds, self._offset = requests_since(self.log, self._offset)
        return dict(kinds)

    def land(self, uri: str, path: Path) -> str:
        """The local file ``path`` landed as the object ``uri`` (one PUT); its location."""
        self.store.put(uri, path.read_bytes())
        return uri

    def cli_env(self, home: Path, warehouse: str) -> dict[str, str]:
        """The environment of a fresh ``changelake`` process on the lake at ``home`` with its warehouse here."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
        env.update({k: self.env[k] for k in OPTION_NAMES})
        env.update(
            CHANGELAKE_HOME=str(home),
            CHANGELAKE_TABLES=str(home / "tables"),
            CHANGELAKE_WAREHOUSE=warehouse,
        )
        return env


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
