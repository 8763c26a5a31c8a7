"""Landed batches: which files under ``<landing>/<namespace>.<table>/`` are batches, and their manifests.

A batch file is ``<batch_id>.<ext>`` with ``ext`` one of ``jsonl``, ``json``, ``parquet`` and the id a positive
integer in ASCII digits (zero padding allowed). Other names (temporary files, manifests, ``٣.jsonl``) are not
batches and are ignored. A name that looks like a batch but cannot be one (``0.jsonl``, an id beyond int64,
two files for one id such as ``1.jsonl`` beside ``01.jsonl``) is a problem of *that table from that batch on*:
:func:`scan_landing` reports it without raising, so ``status`` and the apply DAG can name it and go on with
the other tables, and the batches below it can still be applied.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from changelake.errors import ChangelakeError
from changelake.spec import TableSpec

#: Matched whole (``fullmatch``): ``$`` would also match before a trailing newline.
BATCH_FILE = re.compile(r"([0-9]+)\.(jsonl|json|parquet)")
MAX_BATCH_ID = 2**63 - 1  # batch ids are Iceberg longs
MAX_MANIFEST_BYTES = 1 << 20
#: Snapshot-summary property (``changelake.input``) in which the apply records how it read a batch
#: (:func:`input_record`), so the batch's input can be read again as applied (``ChangeLake.input_records``).
INPUT_PROPERTY = "input"


@dataclass(frozen=True)
class LandingProblem:
    """A landed file that blocks its table from ``batch_id`` on (0: from the first batch)."""

    batch_id: int
    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class Landing:
    """The landed batches of one table: those usable, and the problems that block the rest."""

    table: str
    batches: dict[int, Path] = field(default_factory=dict)  # usable: every id below the first problem
    problems: list[LandingProblem] = field(default_factory=list)

    @property
    def blocked_from(self) -> int | None:
        """The lowest batch id a problem blocks, or None."""
        return min((p.batch_id for p in self.problems), default=None)

    def error(self) -> ChangelakeError | None:
        """The first problem as the error the apply raises once the usable batches are applied."""
        if not self.problems:
            return None
        first = min(self.problems, key=lambda p: (p.batch_id, str(p.path)))
        more = f" (and {len(self.problems) - 1} more problem(s))" if len(self.problems) > 1 else ""
        return ChangelakeError(
            f"{self.table}: landed batches from {max(first.batch_id, 1)} on are blocked: {first}{more}"
        )


def scan_landing(landing_dir: Path, spec: TableSpec) -> Landing:
    """The table's landed batch files, and the problems among them, without raising for a bad file."""
    directory = Path(landing_dir) / spec.full_name
    landing = Landing(spec.full_name)
    if not directory.is_dir():
        return landing
    found: dict[int, Path] = {}
    try:
        paths = sorted(directory.iterdir())
    except OSError as e:
        landing.problems.append(LandingProblem(0, directory, f"cannot list the directory: {e.strerror or e}"))
        return landing
    for path in paths:
        m = BATCH_FILE.fullmatch(path.name)
        if not m:
            continue
        digits = m.group(1)
        batch_id = int(digits) if len(digits) <= 19 else MAX_BATCH_ID + 1
        if batch_id <= 0:
            landing.problems.append(LandingProblem(0, path, "batch ids are positive integers (1, 2, ...)"))
        elif batch_id > MAX_BATCH_ID:
            landing.problems.append(LandingProblem(MAX_BATCH_ID, path, f"batch id exceeds {MAX_BATCH_ID}"))
        elif batch_id in found:
            landing.problems.append(
                LandingProblem(batch_id, path, f"batch {batch_id} is landed twice ({found[batch_id].name})")
            )
        elif not path.is_file():
            landing.problems.append(LandingProblem(batch_id, path, "a batch must be a regular file"))
        else:
            found[batch_id] = path
    blocked = landing.blocked_from
    landing.batches = {b: p for b, p in sorted(found.items()) if blocked is None or b < blocked}
    return landing


def landed_batches(landing_dir: Path, spec: TableSpec) -> dict[int, Path]:
    """Batch files under ``<landing>/<namespace>.<table>/<batch_id>.<ext>``, keyed by batch id.

    Raises ChangelakeError for the table's first bad file name (callers that must go on use
    :func:`scan_landing`)."""
    landing = scan_landing(landing_dir, spec)
    error = landing.error()
    if error is not None:
        raise error
    return landing.batches


def landing_problems(landing_dir: Path, specs: dict[str, TableSpec]) -> dict[str, str]:
    """Per table with a problem, the message of its first one; tables without problems are left out."""
    out = {}
    for name, spec in sorted(specs.items()):
        error = scan_landing(landing_dir, spec).error()
        if error is not None:
            out[name] = str(error)
    return out


def read_manifest(path: Path) -> list[str] | None:
    """Target columns of a landed batch, from ``<batch_id>.manifest.json`` beside it (partial updates).

    Any problem with the manifest (not UTF-8, not JSON, a repeated key, not a list of names) is a
    ChangelakeError naming the file."""
    from changelake.inputs import formats

    manifest = path.with_name(f"{path.name.split('.')[0]}.manifest.json")
    if not manifest.exists():
        return None
    try:
        with open(manifest, "rb") as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
    except OSError as e:
        raise ChangelakeError(f"{manifest}: cannot read the manifest: {e.strerror or e}") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ChangelakeError(f"{manifest}: larger than {MAX_MANIFEST_BYTES} bytes; not a manifest")
    try:
        data = formats.parse_line(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ChangelakeError(f"{manifest}: not UTF-8 text (byte {e.start + 1})") from None
    except formats.FieldError as e:
        where = f" (key '{e.field}')" if e.field else ""
        raise ChangelakeError(f"{manifest}: not valid JSON{where}: {e.reason}") from None
    columns = data.get("target_columns") if isinstance(data, dict) else None
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise ChangelakeError(f'{manifest}: expected {{"target_columns": ["col", ...]}}')
    return columns


def input_record(
    spec: TableSpec,
    paths: list[Path],
    fmt: str | None,
    target_columns: list[str] | None,
    landing_dir: Path,
) -> str:
    """How a batch was read, as JSON for its snapshot summary (:data:`INPUT_PROPERTY`).

    ``columns`` and ``source`` are what decoded it (the table's columns and its ``source:`` section at that
    commit: the spec file's source may change later), ``format`` and ``target_columns`` the other inputs of
    its checksum, ``files`` the file names and ``landed`` whether they all are this table's landed files
    (a batch applied from API records or ``--file`` elsewhere is not landed input)."""
    directory = (Path(landing_dir) / spec.full_name).resolve()
    files = [Path(p) for p in paths]
    return json.dumps(
        {
            "columns": list(spec.column_names),
            "source": spec.source,
            "format": fmt,
            "target_columns": None if target_columns is None else list(target_columns),
            "files": [p.name for p in files],
            "landed": bool(files) and all(p.resolve().parent == directory for p in files),
        },
        sort_keys=True,
        default=str,
    )
