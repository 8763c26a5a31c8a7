"""Landed batches: which files under ``<landing>/<namespace>.<table>/`` are batches, and their manifests.

A batch file is ``<batch_id>.<ext>`` with ``ext`` one of ``jsonl``, ``json``, ``parquet``, ``avro`` and the id a positive
integer in ASCII digits (zero padding allowed). Other names (temporary files, manifests, ``٣.jsonl``) are not
batches and are ignored. A name that looks like a batch but cannot be one (``0.jsonl``, an id beyond int64,
two files for one id such as ``1.jsonl`` beside ``01.jsonl``, a symbolic link or anything else that is not a
regular file) is a problem of *that table from that batch on*: :func:`scan_landing` reports it without
raising, so ``status`` and the apply DAG can name it and go on with the other tables, and the batches below it
can still be applied. Links are never followed, neither to list nor to read: a link could make the apply copy
any file its user can read into a table or its dead letters.

The completion rule producers rely on (docs/operations.md#landing-files): a batch is complete when a JSON-lines
file ends with a newline, or a Parquet file ends with its footer. An incomplete batch is *waiting*: not applied
and not an error, and the batches after it wait too. A landed file that changes after its batch was applied
is reported (:func:`changed_inputs`) by ``apply`` and ``status`` instead of being skipped as applied.

The landing zone may be an object store (``CHANGELAKE_LANDING=s3://bucket/landing``; the paths are then
:class:`~changelake.objectstore.ObjectPath`). There the rules have their object-store meaning: a table's batches
are one LIST of its prefix (``<landing>/<ns>.<table>/``, not of the whole zone); an object appears whole when
its PUT (or multipart upload) completes, so a listed batch is complete and nothing waits; an object is changed
when its ETag is (a new PUT of the same name), which is what ``stat`` records; and links do not exist in an
object store, so the link rules have nothing to refuse.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from changelake.atomic import create_private
from changelake.errors import BatchRefusedError, ChangelakeError, printable
from changelake.inputs.landed import READ_FLAGS, LandedPath, open_landed
from changelake.objectstore import ObjectPath
from changelake.spec import TableSpec
from changelake.storage.summary import LANDING, BatchSummary

#: Matched whole (``fullmatch``): ``$`` would also match before a trailing newline.
BATCH_FILE = re.compile(r"([0-9]+)\.(jsonl|json|parquet|avro)")
MAX_BATCH_ID = 2**63 - 1  # batch ids are Iceberg longs
MAX_MANIFEST_BYTES = 1 << 20
#: Snapshot-summary property (``changelake.input``) in which the apply records how it read a batch
#: (:func:`input_record`), so the batch's input can be read again as applied (``ChangeLake.input_records``).
INPUT_PROPERTY = "input"
_PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True)
class LandingProblem:
    """A landed file that blocks its table from ``batch_id`` on (0: from the first batch)."""

    batch_id: int
    path: LandedPath
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class Landing:
    """The landed batches of one table: those usable, the problems that block the rest, and the incomplete
    batches the rest wait for."""

    table: str
    batches: dict[int, LandedPath] = field(
        default_factory=dict
    )  # usable: every id below the first problem/wait
    problems: list[LandingProblem] = field(default_factory=list)
    waiting: list[LandingProblem] = field(default_factory=list)  # incomplete batches: not errors
    # an object-store landing zone: each listed batch object's (size, last-modified time in ns), from the listing
    listed: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def blocked_from(self) -> int | None:
        """The lowest batch id a problem blocks, or None."""
        return min((p.batch_id for p in self.problems), default=None)

    @property
    def waiting_for(self) -> LandingProblem | None:
        """The lowest incomplete batch (the batches after it wait for it too), or None."""
        return min(self.waiting, key=lambda p: p.batch_id, default=None)

    def error(self) -> ChangelakeError | None:
        """The first problem as the error the apply raises once the usable batches are applied."""
        if not self.problems:
            return None
        first = min(self.problems, key=lambda p: (p.batch_id, str(p.path)))
        more = f" (and {len(self.problems) - 1} more problem(s))" if len(self.problems) > 1 else ""
        return ChangelakeError(
            f"{self.table}: landed batches from {max(first.batch_id, 1)} on are blocked: {first}{more}"
        )


class LandedFileChanging(ChangelakeError):
    """A landed file changed while its batch was being read: nothing was committed; applied once it is still."""


def scan_landing(landing_dir: LandedPath, spec: TableSpec, after: int | None = None) -> Landing:
    """The table's landed batch files, and the problems among them, without raising for a bad file.

    With ``after`` (the table's last applied batch), the batches above it are checked for completeness: the
    lowest incomplete one and those after it are left out of ``batches`` and named in ``waiting``. Nothing
    here follows a symbolic link: the table's directory is opened without following one, and a batch name
    that is a link is a problem."""
    if isinstance(landing_dir, ObjectPath):
        return _scan_objects(landing_dir, spec)
    directory = Path(landing_dir) / spec.full_name
    landing = Landing(spec.full_name)
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        return landing
    except OSError as e:
        landing.problems.append(LandingProblem(0, directory, f"cannot list the directory: {e.strerror or e}"))
        return landing
    if stat.S_ISLNK(info.st_mode):
        where = _link_note(directory, Path(landing_dir), None)
        landing.problems.append(LandingProblem(0, directory, f"the table's landing directory is {where}"))
        return landing
    if not stat.S_ISDIR(info.st_mode):
        return landing
    found: dict[int, Path] = {}
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        landing.problems.append(LandingProblem(0, directory, f"cannot list the directory: {e.strerror or e}"))
        return landing
    try:
        with os.scandir(fd) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        for entry in entries:
            m = BATCH_FILE.fullmatch(entry.name)
            if not m:
                continue
            path = directory / entry.name
            digits = m.group(1)
            batch_id = int(digits) if len(digits) <= 19 else MAX_BATCH_ID + 1
            if batch_id <= 0:
                landing.problems.append(
                    LandingProblem(0, path, "batch ids are positive integers (1, 2, ...)")
                )
            elif batch_id > MAX_BATCH_ID:
                landing.problems.append(
                    LandingProblem(MAX_BATCH_ID, path, f"batch id exceeds {MAX_BATCH_ID}")
                )
            elif batch_id in found:
                landing.problems.append(
                    LandingProblem(
                        batch_id, path, f"batch {batch_id} is landed twice ({found[batch_id].name})"
                    )
                )
            elif entry.is_symlink():
                where = _link_note(path, Path(landing_dir), fd)
                landing.problems.append(
                    LandingProblem(batch_id, path, f"a batch must be a regular file, and this is {where}")
                )
            elif not entry.is_file(follow_symlinks=False):
                landing.problems.append(LandingProblem(batch_id, path, "a batch must be a regular file"))
            else:
                found[batch_id] = path
                if after is not None and batch_id > after:
                    try:
                        reason = _incomplete(fd, path, spec)
                    except OSError as e:  # unreadable (its mode), or a link by now: blocks until mended
                        landing.problems.append(
                            LandingProblem(batch_id, path, f"cannot read the batch file: {e.strerror or e}")
                        )
                        continue
                    if reason is not None:
                        landing.waiting.append(LandingProblem(batch_id, path, reason))
    except OSError as e:
        landing.problems.append(LandingProblem(0, directory, f"cannot list the directory: {e.strerror or e}"))
        return landing
    finally:
        os.close(fd)
    waiting = landing.waiting_for
    limits = [
        b for b in (landing.blocked_from, None if waiting is None else waiting.batch_id) if b is not None
    ]
    limit = min(limits, default=None)
    landing.batches = {b: p for b, p in sorted(found.items()) if limit is None or b < limit}
    return landing


def _batch_number(name: str) -> int | None:
    """The batch id a landed name holds (beyond int64: MAX_BATCH_ID + 1), or None for a name that is no batch."""
    m = BATCH_FILE.fullmatch(name)
    if not m:
        return None
    digits = m.group(1)
    return int(digits) if len(digits) <= 19 else MAX_BATCH_ID + 1


def _scan_objects(landing_dir: ObjectPath, spec: TableSpec) -> Landing:
    """:func:`scan_landing` of an object-store landing zone: one LIST of the table's prefix. A listed object is
    whole (PUT is atomic), so none waits; the naming rules are the directory's."""
    directory = landing_dir / spec.full_name
    landing = Landing(spec.full_name)
    try:
        listed = directory.store.list(directory)
    except OSError as e:
        landing.problems.append(LandingProblem(0, directory, f"cannot list the prefix: {e}"))
        return landing
    found: dict[int, LandedPath] = {}
    for info in listed:
        batch_id = _batch_number(info.path.name)
        if batch_id is None:
            continue
        if batch_id <= 0:
            landing.problems.append(
                LandingProblem(0, info.path, "batch ids are positive integers (1, 2, ...)")
            )
        elif batch_id > MAX_BATCH_ID:
            landing.problems.append(
                LandingProblem(MAX_BATCH_ID, info.path, f"batch id exceeds {MAX_BATCH_ID}")
            )
        elif batch_id in found:
            landing.problems.append(
                LandingProblem(
                    batch_id, info.path, f"batch {batch_id} is landed twice ({found[batch_id].name})"
                )
            )
        else:
            found[batch_id] = info.path
            landing.listed[batch_id] = (info.size, info.mtime_ns)
    limit = landing.blocked_from
    landing.batches = {b: p for b, p in sorted(found.items()) if limit is None or b < limit}
    return landing


def _link_note(path: Path, landing_dir: Path, dir_fd: int | None) -> str:
    """What a link found in the landing directory is, for the problem naming it."""
    try:
        target = os.readlink(path.name if dir_fd is not None else path, dir_fd=dir_fd)
    except OSError:
        return "a symbolic link; links in the landing directory are not followed"
    resolved = Path(os.path.normpath(path.parent / target))
    outside = not resolved.is_relative_to(Path(os.path.normpath(landing_dir.absolute())))
    where = ", outside the landing directory" if outside else ""
    return (
        f"a symbolic link (to '{printable(target, 200)}'{where}); links in the landing directory are not "
        "followed: land the file itself"
    )


def _incomplete(dir_fd: int, path: Path, spec: TableSpec) -> str | None:
    """Why a landed batch file is not complete yet, or None when it is (the completion rule: a JSON-lines
    file ends with a newline, a Parquet file with its footer, an Avro container with its sync marker). A file
    of another format than the table reads is complete: its batch's read names the mistake. A file that
    cannot be opened (its mode, or a link by now) raises the OSError: a problem, not a wait."""
    from changelake.inputs import formats
    from changelake.inputs.formats import kafka_container

    configured = spec.source.get("format")
    fmt = formats.FORMATS.get(str(configured) if configured else formats.default_format(path))
    try:
        fd = os.open(path.name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return "removed while the directory was listed"
    try:
        size = os.fstat(fd).st_size
        if kafka_container.is_container(path):
            return kafka_container.incomplete(fd, size)
        head = os.pread(fd, len(_PARQUET_MAGIC), 0)
        if isinstance(fmt, formats.RowsFormat):
            if size < 12:
                return "incomplete: shorter than a Parquet file's header and footer"
            if head != _PARQUET_MAGIC:
                return None
            tail = os.pread(fd, 8, size - 8)
            footer = int.from_bytes(tail[:4], "little")
            if tail[4:] != _PARQUET_MAGIC or footer > size - 12:
                return "incomplete: does not end with a Parquet footer yet"
            return None
        if size == 0:
            return "incomplete: empty (a batch without records is a file holding one newline)"
        if head == _PARQUET_MAGIC:
            return None  # a Parquet file where JSON lines are read: the read says so
        if os.pread(fd, 1, size - 1) != b"\n":
            return "incomplete: does not end with a newline yet"
        return None
    finally:
        os.close(fd)


def landed_batches(landing_dir: LandedPath, spec: TableSpec) -> dict[int, LandedPath]:
    """Batch files under ``<landing>/<namespace>.<table>/<batch_id>.<ext>``, keyed by batch id.

    Raises ChangelakeError for the table's first bad file name (callers that must go on use
    :func:`scan_landing`)."""
    landing = scan_landing(landing_dir, spec)
    error = landing.error()
    if error is not None:
        raise error
    return landing.batches


def landing_problems(landing_dir: LandedPath, specs: dict[str, TableSpec]) -> dict[str, str]:
    """Per table with a problem, the message of its first one; tables without problems are left out."""
    out = {}
    for name, spec in sorted(specs.items()):
        error = scan_landing(landing_dir, spec).error()
        if error is not None:
            out[name] = str(error)
    return out


def read_manifest(path: LandedPath) -> list[str] | None:
    """Target columns of a landed batch, from ``<batch_id>.manifest.json`` beside it (partial updates)."""
    return read_batch_manifest(path)[0]


def read_batch_manifest(path: LandedPath) -> tuple[list[str] | None, str | None]:
    """How a landed batch is written, from ``<batch_id>.manifest.json`` beside it: its target columns (a
    partial update) and its merge mode (``"overwrite"``, docs/semantics.md §4.5); (None, None) without one.

    Any problem with the manifest (not UTF-8, not JSON, a repeated key, not a list of names, an unknown merge
    mode) is a ChangelakeError naming the file."""
    from changelake.inputs import formats
    from changelake.spec import merge_mode_of

    manifest = path.with_name(f"{path.name.split('.')[0]}.manifest.json")
    try:
        with open_landed(manifest) as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        return None, None
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
    shape = (
        f'{manifest}: expected {{"target_columns": ["col", ...], "merge_mode": "overwrite"}} (either or both)'
    )
    if not isinstance(data, dict) or not data or set(data) - {"target_columns", "merge_mode"}:
        raise ChangelakeError(shape)
    columns = data.get("target_columns")
    if "target_columns" in data and (
        not isinstance(columns, list) or not all(isinstance(c, str) for c in columns)
    ):
        raise ChangelakeError(shape)
    mode = data.get("merge_mode")
    if "merge_mode" in data and not isinstance(mode, str):
        raise ChangelakeError(shape)
    try:
        return columns, merge_mode_of(mode)
    except ChangelakeError as e:
        raise ChangelakeError(f"{manifest}: {e}") from None


#: What the checksum reads of a landed file at a time.
CHECKSUM_CHUNK_BYTES = 8 << 20


def batch_checksum(
    paths: Sequence[LandedPath],
    fmt: str | None,
    target_columns: list[str] | None,
    merge_mode: str | None = None,
) -> str:
    """A batch's input checksum: sha256 of format, target columns and merge mode (the default mode adds nothing:
    batches committed before merge modes keep their checksums), then every file's bytes and a separator."""
    how = [fmt, target_columns] if merge_mode is None else [fmt, target_columns, merge_mode]
    h = hashlib.sha256(json.dumps(how).encode())
    for path in paths:
        try:
            fh = open_landed(path)  # never through a link (a producer could swap one in mid-apply)
        except OSError as e:
            raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None
        with fh:
            # A landed object is read by one GET per chunk (inputs/landed.py): 8 MiB, not 1, made the 18 MB
            # batch of the S3 benchmark 3 requests instead of 18.
            for chunk in iter(functools.partial(fh.read, CHECKSUM_CHUNK_BYTES), b""):
                h.update(chunk)  # hashlib releases the GIL on large updates
        h.update(b"\x00")
    return h.hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """What tells a file changed without reading it: size, modification time and inode; for an object, its
    size, last-modified time and ETag (``version``)."""

    size: int
    mtime_ns: int
    inode: int
    version: str | None = None  # an object's ETag

    @property
    def stat(self) -> list:
        """What ``input_record`` keeps of it: [size, mtime_ns] for a file, [size, mtime_ns, ETag] for an object."""
        return (
            [self.size, self.mtime_ns] if self.version is None else [self.size, self.mtime_ns, self.version]
        )


def fingerprints(paths: Sequence[LandedPath], landed: LandedPath | None = None) -> tuple[Fingerprint, ...]:
    """The files' fingerprints, taken before a batch reads them: after the read (:func:`input_record`), a
    different one means a producer was still writing and what was read may be a mix. A file in ``landed``
    (the table's landing directory) that is a link now is refused, as the scan refuses it; a link given
    explicitly elsewhere (``apply --file``) is the file it points to. An object's is one HEAD request."""
    out = []
    for path in paths:
        if isinstance(path, ObjectPath):
            try:
                info = path.store.info(path)
            except OSError as e:
                raise ChangelakeError(f"{path}: cannot read the landed object: {e}") from None
            if info is None:
                raise ChangelakeError(f"{path}: cannot read the landed object: there is none")
            out.append(Fingerprint(info.size, info.mtime_ns, 0, info.etag or ""))
            continue
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                if isinstance(landed, Path) and Path(os.path.abspath(path)).parent == Path(
                    os.path.abspath(landed)
                ):
                    where = _link_note(Path(path), landed.parent, None)
                    raise ChangelakeError(f"{path}: a batch must be a regular file, and this is {where}")
                st = os.stat(path)
        except OSError as e:
            raise ChangelakeError(f"{path}: cannot read the landed file: {e.strerror or e}") from None
        out.append(Fingerprint(st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def input_record(
    spec: TableSpec,
    paths: Sequence[LandedPath],
    fmt: str | None,
    target_columns: list[str] | None,
    landing_dir: LandedPath,
    read_as: Sequence[Fingerprint] | None = None,
    merge_mode: str | None = None,
) -> str:
    """How a batch was read, as JSON for its snapshot summary (:data:`INPUT_PROPERTY`).

    ``columns`` and ``source`` are what decoded it (the table's columns and its ``source:`` section at that
    commit: the spec file's source may change later), ``format``, ``target_columns`` and ``merge_mode`` (only
    when not the default) the other inputs of its checksum, ``files`` the file names and ``landed`` whether they all are this table's landed files
    (a batch applied from API records or ``--file`` elsewhere is not landed input).

    ``read_as`` are the files' fingerprints from before the batch read them; called once the read (and its
    checksum) is done, this raises :class:`LandedFileChanging` if a file changed meanwhile, and records them
    as ``stat`` ([size, mtime_ns] per file): a later change shows as a different size or time
    (:func:`changed_inputs`)."""
    landed_dir = _table_dir(landing_dir, spec)
    files = [p if isinstance(p, ObjectPath) else Path(p) for p in paths]
    if read_as is not None:
        for path, before, now in zip(files, read_as, fingerprints(files, landed_dir), strict=True):
            if before != now:
                raise LandedFileChanging(
                    f"{path}: changed while it was being read ({before.size:,} -> {now.size:,} bytes); "
                    "nothing was committed, and the batch is applied once the file stays as it is"
                )
    return json.dumps(
        {
            "columns": list(spec.column_names),
            "source": spec.source,
            "format": fmt,
            "target_columns": None if target_columns is None else list(target_columns),
            **({} if merge_mode is None else {"merge_mode": merge_mode}),
            "files": [p.name for p in files],
            "landed": bool(files) and all(_resolved(p).parent == _resolved(landed_dir) for p in files),
            "stat": None if read_as is None else [f.stat for f in read_as],
        },
        sort_keys=True,
        default=str,
    )


def _table_dir(landing_dir: LandedPath, spec: TableSpec) -> LandedPath:
    """The table's landing directory (prefix)."""
    return (
        landing_dir / spec.full_name
        if isinstance(landing_dir, ObjectPath)
        else Path(landing_dir) / spec.full_name
    )


def _resolved(path: LandedPath) -> LandedPath:
    return path if isinstance(path, ObjectPath) else path.resolve()


@dataclass(frozen=True)
class ChangedInput:
    """A landed file that is not what its batch was applied from: ``current`` is its checksum now (or what
    it has become, such as a symbolic link); ``applied_from`` names the file(s) the batch was applied from when
    this file has another name (the number landed again under another extension)."""

    batch_id: int
    path: LandedPath
    recorded: str
    current: str
    applied_from: str | None = None

    def __str__(self) -> str:
        if self.applied_from is not None:
            return (
                f"{self.path}: landed batch {self.batch_id} was applied from {self.applied_from}, not from this "
                "file"
            )
        return (
            f"{self.path}: changed after batch {self.batch_id} was applied from it (checksum at the apply "
            f"{self.recorded}, now {self.current})"
        )


def changed_error(table: str, changed: list[ChangedInput]) -> BatchRefusedError:
    """What ``apply`` raises for landed files changed after their batch: nothing more of the table is
    applied until the file is restored (or moved away, and its new records landed as a new batch)."""
    more = f" (and {len(changed) - 1} more changed file(s))" if len(changed) > 1 else ""
    return BatchRefusedError(
        f"{table}: {changed[0]}{more}. The rest of the file was never applied: restore the file as it was, "
        "or move it away and land what it should add as a new batch"
    )


def changed_inputs(
    landing_dir: LandedPath,
    spec: TableSpec,
    landing: Landing,
    last_landed: int,
    retained: list[BatchSummary],
    expired: Callable[[set[int]], Iterable[BatchSummary]],
) -> list[ChangedInput]:
    """The applied landed batches whose file changed since (their ``stat`` differs and their checksum too), or
    whose number is now landed under another name (``1.parquet`` after ``1.jsonl`` was applied).

    ``last_landed`` is the landing writer's last applied number; ``retained`` are the batches of the table's
    retained snapshots (every writer's: those of the landing writer are checked, all: their summaries are at
    hand); ``expired(numbers)`` gives the history's summaries of expired landed batches, asked only for the files
    changed after the oldest retained batch was committed (reading the history costs seconds for 100,000
    batches). A missing file is not a change: producers may clean up applied files."""
    directory = _table_dir(landing_dir, spec)
    applied = {b: p for b, p in landing.batches.items() if b <= last_landed}
    landed = [b for b in retained if b.position.writer == LANDING]
    by_seq = {b.position.seq: b for b in landed if b.position.seq in applied}
    committed = [b.committed_at_ms for b in retained if b.committed_at_ms is not None]
    if committed and landed:
        since_ns = min(committed) * 1_000_000
        oldest = min(b.position.seq for b in landed)
        later = {b for b, p in applied.items() if b < oldest and _ctime_ns(p, landing, b) > since_ns}
        if later:
            by_seq.update({b.position.seq: b for b in expired(later) if b.position.seq in later})
    out = []
    for seq, batch in sorted(by_seq.items()):
        how = batch.input or {}
        if not how.get("landed") or not how.get("files"):
            continue  # not landed input
        if applied[seq].name not in how["files"]:
            out.append(ChangedInput(seq, applied[seq], batch.checksum, "", ", ".join(how["files"])))
            continue
        if not how.get("stat"):
            continue  # applied before files were fingerprinted
        paths = [directory / name for name in how["files"]]
        current = _current_checksum(paths, how, batch.checksum, landing.listed.get(seq))
        if current is not None:
            out.append(ChangedInput(seq, paths[0], batch.checksum, current))
    return out


def _ctime_ns(path: LandedPath, landing: Landing, batch_id: int) -> int:
    """When the file last changed (an object: its listed last-modified time)."""
    if isinstance(path, ObjectPath):
        return landing.listed.get(batch_id, (0, 0))[1]
    try:
        return os.lstat(path).st_ctime_ns
    except OSError:
        return 0


def _current_checksum(
    paths: list[LandedPath], how: dict[str, Any], recorded: str, listed: tuple[int, int] | None = None
) -> str | None:
    """The files' checksum now if they differ from what was applied, else None (unchanged, or missing).
    Files are compared by size and modification time. An object whose listing (``listed``: the batch's one
    object, as the scan saw it) shows the size and last-modified time recorded is unchanged without a request;
    otherwise its size and ETag decide (a HEAD request)."""
    stats: list[list] = []
    for i, path in enumerate(paths):
        if isinstance(path, ObjectPath):
            then = how["stat"][i] if i < len(how["stat"]) else None
            if listed is not None and len(paths) == 1 and then is not None and list(listed) == then[:2]:
                stats.append(then)
                continue
            info = path.store.info(path)
            if info is None:
                return None
            same = then is not None and [info.size, info.etag or ""] == [then[0], then[-1]]
            stats.append(then if same and then is not None else [info.size, info.mtime_ns, info.etag or ""])
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return "a symbolic link"
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        stats.append([st.st_size, st.st_mtime_ns])
    if stats == how["stat"]:
        return None
    try:
        current = batch_checksum(paths, how.get("format"), how.get("target_columns"), how.get("merge_mode"))
    except ChangelakeError:
        return None  # gone meanwhile
    return None if current == recorded else current


def landing_status(reader: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``status`` rows (:meth:`changelake.storage.fastread.FastReader.status`) with what the landing
    directory says of each table: ``pending_batches`` (landed, not applied by the table's landing writer),
    ``problem`` (a bad or unreadable landed file, and the applied landed files that changed since) and
    ``incomplete`` (the batch the table waits for, and why). A row's ``writers`` (every writer's last number)
    says how far the landing writer got."""
    specs = dict(reader.specs())  # the tables whose spec loaded: the ones status has rows of
    landing_dir = reader.settings.landing_dir
    for i, row in enumerate(rows):
        spec = specs.get(row["table"])
        # Usable landed batches; a bad file name blocks its table from that batch on, not the status.
        last_landed = (row.get("writers") or {}).get(LANDING, 0)
        # Every landed batch (the pending count), and those the next apply would take: a pending file that
        # cannot be read is a problem too.
        scan = scan_landing(landing_dir, spec) if spec is not None else Landing(row["table"])
        landing = scan_landing(landing_dir, spec, after=last_landed) if spec is not None else scan
        row = rows[i] = _with_landing(row, scan, landing, last_landed)
        row["incomplete"] = None
        if spec is None:
            continue
        waiting = landing.waiting_for
        if waiting is not None:
            age = time.time() - _mtime(waiting.path)
            row["incomplete"] = f"{waiting} (last written {age:.0f}s ago)"
        if not row.get("exists") or not last_landed:
            continue
        from changelake.identifiers import split_table_name

        # The reader's own table access (direct SQLite or pyiceberg), as its status row was read.
        source = reader._source(*split_table_name(spec.full_name))
        if source is None:
            continue
        retained = [BatchSummary.from_properties(props) for _, props in source.batch_snapshots()]

        def expired(seqs: set[int], source: Any = source) -> list[BatchSummary]:
            return [
                b
                for _, b in reader._history(source)
                if b.position.writer == LANDING and b.position.seq in seqs
            ]

        changed = changed_inputs(landing_dir, spec, landing, last_landed, retained, expired)
        if changed:
            message = str(changed_error(spec.full_name, changed))
            row["problem"] = message if not row.get("problem") else f"{message}; {row['problem']}"
    return rows


def _with_landing(row: dict[str, Any], scan: Landing, pending: Landing, last_landed: int) -> dict[str, Any]:
    """A status row with ``pending_batches`` and ``problem`` after ``changelog_records``, as status shows them."""
    landed = {
        "pending_batches": sum(1 for b in scan.batches if b > last_landed),
        "problem": str(pending.error()) if pending.problems else None,  # shown; the other tables go on
    }
    out: dict[str, Any] = {}
    for key, value in row.items():
        out[key] = value
        if key == "changelog_records":
            out.update(landed)
    out.update({k: v for k, v in landed.items() if k not in out})
    return out


def _mtime(path: LandedPath) -> float:
    if isinstance(path, ObjectPath):
        return time.time()  # objects never wait (listed means whole)
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return time.time()


def write_private(location: str, data: Iterable[bytes]) -> bool:
    """Write a new file only its owner can read (0600, in a directory made 0700) when ``location`` is a local
    path or ``file:`` URI, whatever the umask; False (nothing written) for any other file system, whose
    permissions are the store's (bucket policies, IAM), not a mode."""
    from urllib.parse import urlparse

    uri = urlparse(location)
    if uri.scheme not in ("", "file"):
        return False
    local = f"{uri.netloc}{uri.path}" if uri.scheme == "file" else location
    directory = os.path.dirname(local)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.lstat(directory)
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(directory, 0o700)  # made by an earlier version with the umask's mode
    create_private(local, data)  # whole or not at all: a killed writer leaves no half a file
    return True
