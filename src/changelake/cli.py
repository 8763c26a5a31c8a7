"""``changelake`` command line. Run ``changelake --help`` or ``changelake <command> --help``.

Machine-readable output, for orchestrators and scripts: the read commands take ``--format json`` (one JSON
array of row objects), ``create``, ``apply`` and ``datagen`` take ``--json`` (one JSON object, see
:func:`_created`, :func:`_applied` and :func:`_landed`). Either way stdout carries that one document and
nothing else: progress and anything else the command writes go to stderr. A failed command prints no
document, its error on stderr, and exits non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from changelake import privacy, terminal
from changelake.atomic import atomic_write_text
from changelake.errors import ChangelakeError, lost_race, short_repr, unknown_table

# Output of the read commands: aligned text, one JSON object per line, or one JSON array (one document).
_ROW_FORMATS = ["table", "jsonl", "json"]
_ROW_FORMATS_HELP = "table (default), jsonl (one JSON object a line) or json (one JSON array of the rows)"
_JSON_HELP = "print one JSON document on stdout (progress and the text report go to stderr)"
_LIMIT_HELP = (
    f"at most this many rows (default: the first {terminal.SHOWN_ROWS} as text, all as JSON; 0: all)"
)

# Read commands served by changelake.storage.fastread: no SparkSession, no JVM, not even a pyspark import.
_FAST_COMMANDS = ("scan", "changelog", "lookup", "status", "dead-letters")


class _Refuse:
    """An import hook that refuses some top-level packages (see :func:`_light_pyarrow`)."""

    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] in self.names:
            raise ImportError(f"{name} is not imported by changelake's read commands")


def _light_pyarrow() -> None:
    """Import pyarrow for the read commands without numpy and pandas.

    pyarrow imports numpy whenever it is installed, and pandas on its first conversion of Python values,
    only to recognise their objects; the read commands hand it neither, and the two imports would take
    0.2-0.3 s and 1-2 s of a lookup that otherwise needs about 0.4 s on two cores. pyarrow works without
    them: its numpy integration is off for this process, and its pandas shim records "no pandas" (it still
    imports pandas if something asks for it explicitly). Only in the CLI's own process, before anything
    imported pyarrow; the Python API never does this.
    """
    if "pyarrow" in sys.modules:
        return
    hook = _Refuse({"numpy", "pandas"})
    sys.meta_path.insert(0, hook)
    try:
        import pyarrow
        import pyarrow.compute  # noqa: F401  (each of these imports numpy if it can)
        import pyarrow.parquet  # noqa: F401

        shim = getattr(pyarrow.lib, "_pandas_api", None)
        if shim is not None:
            shim.have_pandas  # noqa: B018  (settles "no pandas" while the hook refuses it)
    finally:
        sys.meta_path.remove(hook)


_DESCRIPTION = """\
Primary-key tables with Apache Fluss semantics on Iceberg: create them from specs, apply
landed changelog batches exactly once, read rows, changelogs and keys without a JVM.

The home (data directory) is --home, else $CHANGELAKE_HOME, else the nearest .changelake/
or changelake.yaml from the current directory up, else ~/.changelake. changelake status
says which one it uses."""

_EPILOG = """\
exit status: 0 done; 1 a quality check failed; 2 refused input or a bad argument;
3 an invalid table spec; 4 no such table; 5 an invalid setting; 75 another writer
committed first (retry). Every command and option: docs/cli.md."""


def _whole(smallest: int | None) -> Callable[[str], int]:
    """An argument type: a whole number (of at least ``smallest``), refused in the user's words."""

    def whole(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if smallest is not None and value < smallest:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {smallest}, got {value}")
        return value

    return whole


def _number(accepts: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argument type: a number ``accepts`` takes (never nan: no comparison holds for it), else the error
    "expected <expected>, got '<text>'"."""

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return number


_share = _number(lambda v: 0 <= v <= 1, "a share between 0 and 1 (e.g. 0.05)")
_at_least_zero = _number(lambda v: 0 <= v < float("inf"), "a number of at least 0")


def _duration(off: bool) -> Callable[[str], float | None]:
    """An argument type: a duration in Fluss's notation (``1 d``, ``12 h``, ``30 s``) in seconds; with ``off``,
    also ``off`` (None) and ``0 s`` (an age: every file), else more than 0 (a period)."""
    from changelake.spec import parse_duration

    def duration(text: str) -> float | None:
        if off and text.strip().lower() == "off":
            return None
        try:
            seconds = parse_duration(text.strip(), "duration")
        except ChangelakeError:
            seconds = -1.0
        if not (seconds >= 0 if off else seconds > 0):
            raise argparse.ArgumentTypeError(
                f"expected a duration such as 1 d, 12 h, 30 min or 90 s{', or off' if off else ''}; got {text!r}"
            )
        return seconds

    return duration


_BATCH = _whole(1)  # batch ids start at 1
_COUNT = _whole(0)
_TABLE_HELP = "namespace.table, or a table name that is unique across namespaces"


def _reads(sub: Any, name: str, help: str) -> argparse.ArgumentParser:
    """A read command's parser: its table argument and its output format options."""
    r = sub.add_parser(name, help=help, description=help)
    if name != "status":
        r.add_argument("table", help=_TABLE_HELP)
    r.add_argument("--format", choices=_ROW_FORMATS, default="table", help=_ROW_FORMATS_HELP)
    r.add_argument("--json", action="store_true", help="the same as --format json")
    return r


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="changelake",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--home",
        help="data directory (default: $CHANGELAKE_HOME, else the nearest .changelake/ or changelake.yaml "
        "from here up, else ~/.changelake)",
    )
    p.add_argument("--tables", help="table spec directory (default: $CHANGELAKE_TABLES, else HOME/tables)")
    p.add_argument("--master", help="Spark master, e.g. local[2] or spark://host:7077")
    sub = p.add_subparsers(dest="command", required=True, metavar="command")

    c = sub.add_parser("create", help="create PK tables (and changelog tables) from specs")
    c.add_argument("table", nargs="*", help=f"{_TABLE_HELP} (default: every spec)")
    c.add_argument("--spec", type=Path, help="create from this YAML file instead")
    c.add_argument("--json", action="store_true", help=_JSON_HELP)

    a = sub.add_parser("apply", help="apply pending landed batches, or one explicit file, exactly once")
    a.add_argument("table", nargs="?", help=f"{_TABLE_HELP} (default: every table with a spec)")
    a.add_argument(
        "--file",
        type=_file_argument,
        help="apply this file (or s3://… object) as one batch (needs --batch-id)",
    )
    a.add_argument(
        "--batch-id",
        type=_BATCH,
        help="with --file: the batch's number in its writer's sequence (1, 2, 3, ...)",
    )
    a.add_argument(
        "--writer",
        default="api",
        help="with --file: the writer whose sequence the batch is in (default: api)",
    )
    a.add_argument("--format", dest="fmt", help="input format (default: by table source / file extension)")
    a.add_argument("--target-columns", help="partial update of these comma-separated columns (with --file)")
    a.add_argument(
        "--merge-mode",
        choices=("default", "overwrite"),
        type=str.lower,
        help="overwrite: bypass the merge engine, rows replaced as given (Fluss's MergeMode; with --file)",
    )
    a.add_argument("--up-to", type=_BATCH, help="apply pending landed batches up to this number only")
    a.add_argument(
        "--from-batch",
        type=_BATCH,
        help="also check landed batches applied from this number on (each is a no-op if unchanged)",
    )
    a.add_argument("--summary", type=Path, help="also write the batch results as JSON to this file")
    a.add_argument("--json", action="store_true", help=_JSON_HELP)

    s = _reads(sub, "scan", "current rows, or as of a batch, in key order")
    s.add_argument("--at-batch", type=_BATCH, help="the rows as they were after this batch")
    s.add_argument("--limit", type=_COUNT, help=_LIMIT_HELP)

    lg = _reads(sub, "changelog", "the table's changelog (+I/-U/+U/-D with offsets)")
    lg.add_argument("--from-batch", type=_BATCH, help="first batch (default: the first)")
    lg.add_argument("--to-batch", type=_BATCH, help="last batch (default: the last)")
    lg.add_argument("--limit", type=_COUNT, help=_LIMIT_HELP)

    lk = _reads(sub, "lookup", "primary-key lookup (col=value ...); --prefix for a bucket-key prefix")
    lk.add_argument("key", nargs="*", metavar="col=value", help="the key, a column=value per key column")
    lk.add_argument("--prefix", action="store_true", help="every row whose bucket key is this")
    lk.add_argument(
        "--insert-if-not-exists",
        action="store_true",
        help="insert keys that are not there (key columns, nulls, a new auto-increment id) and return the rows",
    )
    lk.add_argument(
        "--keys-file", type=Path, help="look up each key of this file (one JSON object per line) instead"
    )

    dl = _reads(sub, "dead-letters", "quarantined records (on-bad-record: quarantine) of a table")
    dl.add_argument("--batch-id", type=_BATCH, help="only this batch's records")

    g = sub.add_parser("datagen", help="write deterministic sample landing batches for tables with a profile")
    g.add_argument("table", nargs="*", help=f"{_TABLE_HELP} (default: every spec with a datagen profile)")
    g.add_argument(
        "--batches", type=_whole(1), default=1, help="batches per table (after the last landed one)"
    )
    g.add_argument("--seed", type=_whole(None), default=42, help="random seed (default 42)")
    g.add_argument("--format", dest="fmt", help="render in this format instead of the table's source format")
    g.add_argument("--records", type=_whole(1), help="records per batch (overrides the profile)")
    g.add_argument("--keys", type=_whole(1), help="key cardinality (overrides the profile)")
    g.add_argument("--redelivery", type=_share, help="share of records redelivered (overrides the profile)")
    g.add_argument("--out-of-order", type=_share, help="share of stale versions (overrides the profile)")
    g.add_argument("--start", type=_BATCH, help="first batch id (default: after the last landed batch)")
    g.add_argument("--json", action="store_true", help=_JSON_HELP)

    d = sub.add_parser("dbt", help="run dbt (default: build) on the tables' current snapshots and changelogs")
    d.add_argument("dbt_args", nargs=argparse.REMAINDER, help="dbt arguments, e.g. build --select marts")

    q = sub.add_parser(
        "quality", help="run the Great Expectations suites, rebuild Data Docs (exit 1 on failure)"
    )
    q.add_argument(
        "--drift-threshold", type=_at_least_zero, default=0.0, help="allowed drift per key and in total"
    )
    q.add_argument(
        "--max-redelivery-share", type=_share, default=0.5, help="warn above this redelivered share"
    )

    m = sub.add_parser(
        "maintain",
        help="compact, expire old snapshots (their batches kept in the history), remove orphan files",
    )
    m.add_argument("table", nargs="*", help=f"{_TABLE_HELP} (default: every table that exists)")
    m.add_argument("--full", action="store_true", help="rewrite every partition with delta or delete files")
    m.add_argument("--no-compact", action="store_true", help="skip compaction")
    m.add_argument("--no-expire", action="store_true", help="skip snapshot expiry")
    m.add_argument(
        "--orphans-older-than",
        type=_duration(off=True),
        default="1 d",
        metavar="DURATION",
        help="remove unreferenced files older than this (default: 1 d; 'off' skips the sweep)",
    )
    m.add_argument("--json", action="store_true", help=_JSON_HELP)

    st = sub.add_parser(
        "stream",
        help="apply a table's new batches (its Kafka topic's new records, or new landed files) every few "
        "seconds, until stopped",
    )
    st.add_argument("table", help=_TABLE_HELP)
    st.add_argument(
        "--every",
        type=_duration(off=False),
        default="10 s",
        metavar="DURATION",
        help="time between applies (default: 10 s)",
    )
    st.add_argument(
        "--for",
        dest="duration",
        type=_duration(off=False),
        metavar="DURATION",
        help="stop after this long (default: until SIGINT/SIGTERM)",
    )

    cp = sub.add_parser(
        "compact", help="compact delta and delete files (maintain without expiry or orphan sweep)"
    )
    cp.add_argument("table", nargs="*", help=f"{_TABLE_HELP} (default: every table that exists)")
    cp.add_argument("--full", action="store_true", help="rewrite every partition with delta or delete files")
    cp.add_argument("--json", action="store_true", help=_JSON_HELP)

    rp = sub.add_parser(
        "repair", help="bring stored rows to their columns' declared precision, keys included (one commit)"
    )
    rp.add_argument("table", nargs="*", help=f"{_TABLE_HELP} (default: every table that exists)")
    rp.add_argument(
        "--on-collision",
        choices=("refuse", "first", "last"),
        default="refuse",
        help="keys that become equal: refuse (default), or keep the first/last by the stored key",
    )
    rp.add_argument("--json", action="store_true", help=_JSON_HELP)

    sq = sub.add_parser(
        "sql",
        help="INSERT INTO / UPDATE / DELETE FROM statements on PK tables, each one exactly-once batch",
    )
    sq.add_argument("statement", nargs="?", help="the statement(s), ';'-separated (or -f FILE)")
    sq.add_argument("-f", "--file", dest="sql_file", type=Path, help="read the statements from this file")
    sq.add_argument(
        "--idempotency-key",
        help="a retried statement with this key is a no-op (statement i of several: KEY#i)",
    )
    sq.add_argument("--batch-id", type=_BATCH, help="apply the (single) statement as this batch id")
    sq.add_argument(
        "--merge-mode",
        choices=("default", "overwrite"),
        type=str.lower,
        help="overwrite: every statement bypasses the merge engine (as the statement option "
        "/*+ OPTIONS('merge-mode'='overwrite') */ after the table name)",
    )
    sq.add_argument("--json", action="store_true", help=_JSON_HELP)

    st = _reads(
        sub,
        "status",
        "per table: rows, batches (pending ones too), files, size, maintenance, what needs a look",
    )
    st.add_argument("--wide", action="store_true", help="every field of every table, one column each")
    return p


def without_empty_args(args: list[str], empty: tuple[str, ...] = ("",)) -> list[str]:
    """Drop empty arguments and options whose value is empty, as a templated orchestrator argument renders
    when its parameter is unset (``--up-to ''``), so the spark-submit entrypoints can take them positionally."""
    out, i = [], 0
    while i < len(args):
        if args[i] == "":
            i += 1
        elif args[i].startswith("--") and i + 1 < len(args) and args[i + 1] in empty:
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


def entry() -> None:
    """The ``changelake`` command (the project's console script)."""
    sys.exit(main(exit_fast=True))


def main(argv: list[str] | None = None, exit_fast: bool = False) -> int:
    """Run one command; its exit code. ``exit_fast`` (the console script): a read command (no JVM: ``scan``,
    ``lookup``, ``status``, ...) ends the process once its output is flushed, without the interpreter's
    shutdown. Arrow's threads may still free buffers of the objects they read then, and a thread that needs
    the GIL during the shutdown is ended in a way that aborts the process (exit 134, "terminate called without
    an active exception") after the command printed its result; the shutdown is also time the user waits."""
    args = _parser().parse_args(argv)
    code = _main(args)
    if exit_fast and _is_fast(args):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BrokenPipeError:  # the reader went away (_reader_gone): nothing more to say
                pass
        os._exit(code)
    return code


def _is_fast(args: argparse.Namespace) -> bool:
    """Whether the command is a read through :func:`_run_fast` (no JVM)."""
    return args.command in _FAST_COMMANDS and not getattr(args, "insert_if_not_exists", False)


def _main(args: argparse.Namespace) -> int:
    if args.command in _FAST_COMMANDS and args.json:
        args.format = "json"
    as_json = _json_output(args)
    # What a command writes (table files, dead letters, staged records, Spark's files) holds landed records:
    # only this user may read it (changelake.privacy). The mask is restored for callers that run main() in
    # their own process.
    umask = privacy.restrict()
    try:
        with _stdout_to_stderr() if as_json else contextlib.nullcontext():
            code, document = _run(args)
    except ChangelakeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code  # one per kind (changelake.errors; docs/cli.md "Exit codes")
    except BrokenPipeError:
        return _reader_gone()
    except Exception as e:
        conflict = lost_race(e)
        if conflict is None:
            raise
        print(f"error: {conflict}", file=sys.stderr)
        return conflict.exit_code
    finally:
        os.umask(umask)
    try:
        if as_json:
            sys.stdout.write(_json_document(document) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()
    return code


def _reader_gone() -> int:
    """Stdout's reader went away (``changelake scan t | head``): nothing more to say, no traceback. Exits
    141 as a shell reports a command that SIGPIPE stopped."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # Python's final flush of stdout must not fail again
    os.close(devnull)
    return 141


def _json_document(document: Any) -> str:
    """``document`` as JSON; rows with decimals, timestamps or bytes through fastread's encoder (whose
    import costs a warm apply's report 0.4 s, so only when needed)."""
    try:
        return json.dumps(document)
    except TypeError:
        from changelake.storage.fastread import json_default

        return json.dumps(document, default=json_default)


def _json_output(args: argparse.Namespace) -> bool:
    """Whether the command prints one JSON document: ``--json``, or ``--format json`` of a read command."""
    return bool(getattr(args, "json", False)) or getattr(args, "format", None) == "json"


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout meanwhile to stderr, so that stdout carries the JSON document alone.

    At the file-descriptor level too: a library writing to fd 1 or a child process (Spark's JVM, which
    inherits the descriptors) would otherwise break the document its reader parses."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout descriptor at all: only Python's own writes can be redirected
        saved = None
    if saved is not None:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _run_fast(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The read commands, through :class:`changelake.storage.fastread.FastReader` (progress on stderr):
    their rows, printed unless the format is ``json`` (then the caller prints them as one document)."""
    _light_pyarrow()
    from changelake.config import load_settings
    from changelake.spec import load_specs
    from changelake.storage import fastread

    settings = load_settings(home=args.home, tables_dir=args.tables, spark_master=args.master)
    reader = fastread.FastReader(settings, progress=fastread.stderr_progress)
    _qualify_tables(args, lambda: [*load_specs(settings.tables_dir), *reader.table_names()])
    # As text, the first rows unless --limit says otherwise (one more is read to tell whether there are more).
    shown = terminal.SHOWN_ROWS if args.format == "table" and getattr(args, "limit", 0) is None else None
    limit = shown + 1 if shown is not None else getattr(args, "limit", None) or None
    if args.command == "scan":
        arrow = reader.rows_arrow(args.table, at_batch=args.at_batch, limit=limit, by_key=True)
        rows = fastread.to_pylist(arrow)
    elif args.command == "changelog":
        log = reader.changelog_arrow(args.table, args.from_batch, args.to_batch, limit=limit)
        rows = fastread.to_pylist(log)
    elif args.command == "lookup":
        rows = [row for key in _lookup_keys(args) for row in reader.lookup(args.table, key, args.prefix)]
    elif args.command == "dead-letters":
        rows = reader.dead_letters(args.table, args.batch_id)
    else:
        from changelake.inputs.kafka import topic_status
        from changelake.inputs.landing import landing_status

        rows = landing_status(reader, reader.status())  # incomplete and changed landed files too
        rows = topic_status(reader, rows)  # how far behind their topics Kafka-sourced tables are
        # A spec file that did not load is a row with its problem; exit 0, as for a landing problem.
        broken = load_specs(settings.tables_dir).status_rows(rows[0] if rows else None)
        rows = sorted(rows + broken, key=lambda r: r["table"]) if broken else rows
        if args.format == "table" and not args.wide:
            view = terminal.status_view(
                rows, str(settings.home), settings.home_from, str(settings.tables_dir)
            )
            print("\n".join(view))
            return rows
        _to_stderr(f"home: {settings.home} ({settings.home_from})")
        if args.format not in ("json", "jsonl"):  # each writer's position as one cell: "landing 8, sql 2"
            rows = [{**r, "writers": terminal.writers_text(r.get("writers"))} for r in rows]
    more = shown is not None and len(rows) > shown
    if more:
        rows = rows[:shown]
    if args.format != "json":
        terminal.print_rows(rows, args.format, more=more)
    return rows


def _known_tables(args: argparse.Namespace) -> list[str]:
    """The tables a command may name: those with a spec and those in the catalog (read without pyiceberg
    from a SQLite catalog)."""
    from changelake.config import load_settings
    from changelake.spec import load_specs
    from changelake.storage.fastread import FastReader

    settings = load_settings(home=args.home, tables_dir=args.tables)
    return [*load_specs(settings.tables_dir), *FastReader(settings).table_names()]


def _qualify_tables(args: argparse.Namespace, known: Callable[[], list[str]]) -> None:
    """Each table the command names as ``namespace.table``: a name without a namespace is the one table of
    that name (:func:`changelake.identifiers.qualify_table_name`, the rule of ``changelake sql`` too)."""
    from changelake.identifiers import qualify_table_name

    names = getattr(args, "table", None)
    if names is None:
        return
    cached: list[str] = []

    def listed() -> list[str]:
        if not cached:
            cached.extend(sorted(set(known())))
        return cached

    if isinstance(names, list):
        args.table = [qualify_table_name(n, listed) for n in names]
    else:
        args.table = qualify_table_name(names, listed)


def _lookup_keys(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The keys of a lookup: ``col=value`` arguments (one key; values are text, parsed per column type), or
    one JSON object per line of ``--keys-file``."""
    if args.keys_file is not None:
        if args.key or args.prefix:
            raise ChangelakeError("lookup --keys-file takes no col=value arguments and no --prefix")
        try:
            lines = args.keys_file.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ChangelakeError(f"{args.keys_file}: cannot read the keys: {e.strerror}") from None
        except UnicodeDecodeError:
            raise ChangelakeError(f"{args.keys_file}: cannot read the keys: not UTF-8 text") from None
        keys = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                key = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                key = None
            if not isinstance(key, dict):
                raise ChangelakeError(
                    f"{args.keys_file}:{number}: expected a JSON object of the key columns, e.g. "
                    f'{{"{_first_key_column(args)}": ...}}; got {short_repr(line)}'
                )
            keys.append(key)
        return keys
    if not args.key:
        raise ChangelakeError(
            f"lookup {args.table} needs the key, e.g. lookup {args.table} "
            f"{_first_key_column(args)}=..., or --keys-file"
        )
    key = {}
    for item in args.key:
        col, equals, value = item.partition("=")
        if not equals or not col:
            raise ChangelakeError(
                f"lookup key {item!r} is not column=value (e.g. {_first_key_column(args)}=1)"
            )
        if col in key:
            raise ChangelakeError(f"lookup key column {col!r} is given twice")
        key[col] = value
    return [key]


def _first_key_column(args: argparse.Namespace) -> str:
    """The table's first key column, for an example in a message (``col`` if the spec cannot be read)."""
    from changelake.config import load_settings
    from changelake.spec import load_specs

    try:
        spec = load_specs(load_settings(home=args.home, tables_dir=args.tables).tables_dir).get(args.table)
    except ChangelakeError:
        spec = None
    return spec.primary_key[0] if spec is not None else "col"


def _run(args: argparse.Namespace) -> tuple[int, Any]:
    """Run the command: its exit code and its JSON document (None for ``dbt`` and ``quality``, whose
    results are their artifacts: dbt's run results, the quality summary). Text goes to stdout."""
    if _is_fast(args):
        return 0, _run_fast(args)
    _qualify_tables(args, functools.partial(_known_tables, args))
    if args.command == "sql":
        return 0, _sql(args)
    if args.command == "apply":
        warm = _apply_on_endpoint(args)
        if warm is not None:
            return 0, _report_applied(warm, args)
    from changelake.api import ChangeLake

    lake = ChangeLake(home=args.home, tables_dir=args.tables, spark_master=args.master)
    if args.command == "lookup":  # with --insert-if-not-exists: a missing key is applied as a batch (Spark)
        if args.prefix:
            raise ChangelakeError(
                "lookup --insert-if-not-exists inserts whole primary keys: it cannot be combined with --prefix"
            )
        rows = lake.lookup_keys(args.table, _lookup_keys(args), insert_if_not_exists=True)
        found = [r for r in rows if r is not None]
        if args.format != "json":
            terminal.print_rows(found, args.format)
        return 0, found
    if args.command == "create":
        return 0, _create(lake, args)
    if args.command == "apply":
        return 0, _apply(lake, args)
    if args.command == "dbt":
        from changelake.runtime.dbt_runner import run_dbt

        return run_dbt(args.dbt_args, lake.settings, progress=_to_stderr), None
    if args.command == "quality":
        from changelake.quality.runner import run_quality

        code = run_quality(
            lake.settings, args.drift_threshold, args.max_redelivery_share, progress=_to_stderr
        )
        return code, None
    if args.command == "datagen":
        return 0, _datagen(lake, args)
    if args.command in ("maintain", "compact"):
        return 0, _maintain(lake, args)
    if args.command == "stream":
        return _stream(lake, args), None
    if args.command == "repair":
        return 0, _repair(lake, args)
    raise AssertionError(args.command)


def _stream(lake, args: argparse.Namespace) -> int:
    """``stream``: apply the table's new batches every ``--every`` in this one process (its catalog, its kept
    rows and, for a large batch, its Spark stay warm), a line per applied batch. SIGINT/SIGTERM stop it after
    the apply under way, exit 0. A broker or catalog out of reach, or a lost commit race, is said and tried again
    at the next tick; an input the table refuses stops it (exit 2), as ``apply`` would."""
    import signal
    import time

    from changelake.errors import CommitConflict, ConfigError

    every = args.every  # seconds (argument types)
    until = None if args.duration is None else time.monotonic() + args.duration
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda number, _frame: stop.append(number))
    _to_stderr(f"[stream] {args.table}: applying every {every:g} s (stop with Ctrl-C or SIGTERM)")
    while not stop and (until is None or time.monotonic() < until):
        tick = time.monotonic()
        try:
            results = lake.apply_pending(args.table)
        except (ConfigError, CommitConflict) as e:
            _to_stderr(f"[stream] {args.table}: {e}; trying again in {every:g} s")
            results = []
        for r in results:
            c = r.counts
            print(
                f"{r.table} {r.writer} batch {r.writer_seq} (table batch {r.batch_id}): {r.status}; "
                f"{r.source.get('messages', 0)} message(s), inserted {c.get('inserted', 0)}, updated "
                f"{c.get('updated', 0)}, deleted {c.get('deleted', 0)} in {r.seconds:.2f}s",
                flush=True,
            )
        while not stop and time.monotonic() < tick + every and (until is None or time.monotonic() < until):
            time.sleep(min(0.2, max(0.0, tick + every - time.monotonic())))
    _to_stderr(f"[stream] {args.table}: stopped")
    return 0


def _repair(lake, args: argparse.Namespace) -> dict[str, Any]:
    """``repair``: what was done per table, as text and as ``{"tables": [...]}``."""
    reports = []
    for table in args.table or [None]:
        reports += lake.repair(table, on_collision=args.on_collision)
    documents = [r.to_dict() for r in reports]
    for d in documents:
        print(
            f"{d['table']}: {d['rows_changed']} of {d['rows']} row(s) cut to their declared precision "
            f"({d['keys_changed']} key(s), {d['rows_dropped']} dropped)"
            + "".join(f"\n  note: {n}" for n in d["notes"])
        )
    return {"tables": documents}


def _maintain(lake, args: argparse.Namespace) -> dict[str, Any]:
    """``maintain`` / ``compact``: what was done per table, as text and as ``{"tables": [...]}``."""
    compact_only = args.command == "compact"
    older_than = None if compact_only else args.orphans_older_than  # seconds, None for off
    reports = []
    for table in args.table or [None]:
        reports += lake.maintain(
            table,
            full=args.full,
            compaction=compact_only or not args.no_compact,
            expiry=not compact_only and not args.no_expire,
            orphans_older_than_s=older_than,
        )
    documents = [r.to_dict() for r in reports]
    for d in documents:
        print(
            _maintained(d, compact_only or not args.no_compact, older_than is not None)
            + "".join(f"\n  note: {n}" for n in d["notes"])
        )
    return {"tables": documents}


def _maintained(d: dict[str, Any], compacted: bool, swept: bool) -> str:
    """One table's maintenance as a line that names only what was done (nothing due is said so)."""
    done = []
    files = sum(c["files_removed"] for c in d["compacted"])
    if compacted and files:
        written = sum(c["files_added"] for c in d["compacted"])
        done.append(f"{files} file(s) compacted into {written}")
    if d["expired_snapshots"]:
        done.append(f"{d['expired_snapshots']} snapshot(s) expired")
    if swept and d["orphans_deleted"]:
        done.append(f"{d['orphans_deleted']} orphan file(s) removed")
    if d["files_deleted"]:
        done.append(f"{d['files_deleted']} file(s) deleted ({terminal.size(d['bytes_deleted'])})")
    what = "; ".join(done) or "nothing was due"
    return f"{d['table']}: {what} ({d['seconds']:.1f}s)"


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _create(lake, args: argparse.Namespace) -> dict[str, Any]:
    """``create``: each table and what happened to it (created, altered, or already there unchanged), as
    :func:`_created`."""
    from changelake.spec import TableSpec

    if args.spec:
        if not args.spec.is_file():
            raise ChangelakeError(f"create --spec {args.spec}: no such file")
        given = [TableSpec.from_yaml(args.spec)]
    else:
        specs = lake.specs()
        unknown = [t for t in args.table if t not in specs]
        if unknown:
            raise unknown_table(", ".join(unknown), f"no spec in {lake.settings.tables_dir}", list(specs))
        given = [specs[t] for t in (args.table or sorted(specs))]
    outcomes = []
    for spec in given:
        before = lake.storage.stored_spec(spec.namespace, spec.table)
        created = lake.create_table(spec)
        after = lake.storage.stored_spec(spec.namespace, spec.table)
        outcome = "created" if before is None else "exists" if before == after else "altered"
        outcomes.append((created, outcome))
        what = {"created": "created", "exists": "exists, unchanged:", "altered": "altered"}[outcome]
        print(
            f"{what} {created.full_name} (+ {created.full_name}__changelog), {created.bucket_num} bucket(s)"
        )
    if not args.spec and not args.table:
        specs.check()  # the other tables are created; a spec that did not load fails the command
    return _created(outcomes)


def _created(outcomes: list) -> dict[str, Any]:
    """The JSON document of ``create --json``: ``{"created": [{"table": "ns.t", "changelog":
    "ns.t__changelog", "buckets": 4, "outcome": "created"}, ...]}``; ``outcome`` is ``created``, ``altered``
    (an existing table took the spec's supported changes) or ``exists`` (already so: nothing done)."""
    return {
        "created": [
            {
                "table": s.full_name,
                "changelog": f"{s.full_name}__changelog",
                "buckets": s.bucket_num,
                "outcome": outcome,
            }
            for s, outcome in outcomes
        ]
    }


def _check_apply_args(args: argparse.Namespace) -> None:
    """The combinations ``apply`` takes: ``--file`` with a table and ``--batch-id``; the options of one file
    (``--batch-id``, ``--writer``, ``--format``, ``--target-columns``) only with ``--file``, those of the landed
    batches (``--up-to``, ``--from-batch``) only without."""
    if args.file:
        if not args.table or args.batch_id is None:
            raise ChangelakeError("apply --file needs a table and --batch-id")
        if args.up_to is not None or args.from_batch is not None:
            raise ChangelakeError(
                "apply --up-to and --from-batch choose landed batches; they do not go with --file"
            )
        return
    given = [
        option
        for option, value in (
            ("--batch-id", args.batch_id),
            ("--writer", None if args.writer == "api" else args.writer),
            ("--format", args.fmt),
            ("--target-columns", args.target_columns),
        )
        if value is not None
    ]
    if given:
        raise ChangelakeError(
            f"apply {' and '.join(given)} go(es) with --file (landed batches are numbered by their file names)"
        )


def _apply(lake, args: argparse.Namespace) -> dict[str, Any]:
    """``apply`` in this process: the batches' results, reported as text and returned as :func:`_applied`."""
    _check_apply_args(args)
    if args.file:
        results = [
            lake.apply(
                args.table,
                file=args.file,
                batch_id=args.batch_id,
                fmt=args.fmt,
                target_columns=_target_columns(args),
                writer=args.writer,
                merge_mode=args.merge_mode,
            )
        ]
    else:
        if args.merge_mode not in (None, "default"):
            raise ChangelakeError(
                "apply --merge-mode applies to one batch: give --file (a landed batch names its merge mode "
                "in <batch_id>.manifest.json)"
            )
        results = lake.apply_pending(args.table, up_to=args.up_to, from_batch=args.from_batch)
    return _report_applied([dataclasses.asdict(r) for r in results], args)


def _file_argument(text: str) -> str | Path:
    """``apply --file``: an object location (``s3://…``) as given, anything else a local path."""
    from changelake.objectstore import is_object_location

    return text if is_object_location(text) else Path(text)


def _target_columns(args: argparse.Namespace) -> list[str] | None:
    return [c.strip() for c in args.target_columns.split(",")] if args.target_columns else None


def _apply_on_endpoint(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """``apply`` handed to the warm endpoint's driver (:mod:`changelake.runtime.applyservice`) when the
    settings name a warm server (``CHANGELAKE_SPARK_REMOTE``) and the endpoint of this home listens for
    applies; the batch results, or None to apply in this process."""
    from changelake.config import load_settings

    settings = load_settings(home=args.home, tables_dir=args.tables)
    if not settings.spark_remote:
        return None
    _check_apply_args(args)
    request = {
        "table": args.table,
        "file": str(args.file.resolve() if isinstance(args.file, Path) else args.file) if args.file else None,
        "batch_id": args.batch_id,
        "writer": args.writer,
        "fmt": args.fmt,
        "target_columns": _target_columns(args),
        "merge_mode": args.merge_mode,
        "up_to": args.up_to,
        "from_batch": args.from_batch,
    }
    return _on_endpoint(settings, "apply", request)


def _on_endpoint(settings: Any, command: str, request: dict[str, Any]) -> list[dict[str, Any]] | None:
    """``request`` (with the settings the endpoint must share) run by the warm endpoint's driver through its
    apply socket, progress relayed to stderr: its results, or None when no endpoint of this home listens."""
    from changelake.runtime import applyservice

    sock = applyservice.connect(settings.home)
    if sock is None:
        return None
    _to_stderr(f"[{command}] on the warm endpoint of {settings.home} (its driver applies; progress follows)")
    shared = (*applyservice.SHARED_SETTINGS, *applyservice.PER_REQUEST_SETTINGS)
    request = {"settings": {key: str(getattr(settings, key)) for key in shared}, **request}
    return applyservice.request_apply(sock, request, _to_stderr, command=command)


def _sql(args: argparse.Namespace) -> dict[str, Any]:
    """``sql``: run the statements (on the warm endpoint's driver if one listens, else here; a statement of a
    few records needs no JVM either way), print a line per statement and return ``{"statements": [...]}``,
    one :class:`changelake.sqlwrite.SqlResult` object per statement."""
    from changelake.sqlwrite import describe

    if (args.statement is None) == (args.sql_file is None):
        raise ChangelakeError(
            'sql takes one statement argument or -f FILE (e.g. changelake sql "DELETE ...")'
        )
    if args.sql_file is not None:
        try:
            text = args.sql_file.read_text(encoding="utf-8")
        except OSError as e:
            raise ChangelakeError(f"{args.sql_file}: cannot read the statements: {e.strerror}") from None
        except UnicodeDecodeError:
            raise ChangelakeError(f"{args.sql_file}: cannot read the statements: not UTF-8 text") from None
    else:
        text = args.statement
    results = _sql_on_endpoint(args, text)
    if results is None:
        from changelake.api import ChangeLake

        lake = ChangeLake(home=args.home, tables_dir=args.tables, spark_master=args.master)
        results = [r.to_dict() for r in lake.sql(text, args.idempotency_key, args.batch_id, args.merge_mode)]
    for r in results:
        print(describe(r), flush=True)
    return {"statements": results}


def _sql_on_endpoint(args: argparse.Namespace, text: str) -> list[dict[str, Any]] | None:
    """The statements run by the warm endpoint's driver (as :func:`_apply_on_endpoint`), or None."""
    from changelake.config import load_settings
    from changelake.runtime import applyservice

    settings = load_settings(home=args.home, tables_dir=args.tables)
    if not settings.spark_remote or len(text.encode()) > applyservice.MAX_STATEMENT_BYTES:
        return None
    request = {
        "statement": text,
        "idempotency_key": args.idempotency_key,
        "batch_id": args.batch_id,
        "merge_mode": args.merge_mode,
    }
    return _on_endpoint(settings, "sql", request)


def _report_applied(batches: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Print the batches' results (dicts of :class:`changelake.engine.apply.BatchResult`) as text, write
    ``--summary``, and return the :func:`_applied` document."""
    document = _applied(batches)
    if not batches:
        print(f"nothing to apply: no landed batch is pending{' for ' + args.table if args.table else ''}")
    else:
        print(f"{document['applied']} batch(es) applied, {document['already_applied']} already applied")
    for r in batches:
        c = r["counts"]
        table_batch = f" (table batch {r['batch_id']})" if r["batch_id"] else ""
        print(
            f"  {r['table']} {r['writer']} batch {r['writer_seq']}{table_batch}: {r['status']}; inserted "
            f"{c.get('inserted', 0)}, updated "
            f"{c.get('updated', 0)}, deleted {c.get('deleted', 0)}, ignored {c.get('ignored', 0)}; "
            f"changelog {r['log_end_offset'] - r['log_start_offset']} record(s)"
            + "".join(f", {k} {v}" for k, v in r["source"].items() if v and k != "messages")
        )
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.summary, json.dumps(document["batches"], indent=2) + "\n")
    return document


def _applied(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON document of ``apply --json``: ``{"applied": n, "already_applied": m, "batches": [...]}``,
    one object per batch in apply order with every field of :class:`changelake.engine.apply.BatchResult`
    (``table``, ``batch_id`` (the table's), ``status`` = applied | already-applied, ``counts``, ``snapshot_id``,
    ``changelog_records``, ``log_start_offset``, ``log_end_offset``, ``seconds``, ``source``,
    ``dead_letter``, ``writer`` and ``writer_seq``: the batch's writer and its number there); ``--summary`` writes the same ``batches`` list to a file."""
    applied = sum(1 for r in batches if r["status"] == "applied")
    return {"applied": applied, "already_applied": len(batches) - applied, "batches": batches}


def _datagen(lake, args: argparse.Namespace) -> dict[str, Any]:
    """``datagen``: a progress line per landed batch, and the batches as :func:`_landed`."""
    from changelake.inputs.datagen import generate
    from changelake.storage.summary import LANDING

    specs = lake.specs()
    names = args.table or sorted(n for n, s in specs.items() if s.datagen)
    unknown = [t for t in names if t not in specs]
    if unknown:
        raise unknown_table(", ".join(unknown), f"no spec in {lake.settings.tables_dir}", list(specs))
    landed = []
    overrides = {
        "records": args.records,
        "keys": args.keys,
        "redelivery": args.redelivery,
        "out_of_order": args.out_of_order,
    }
    for name in names:
        spec = specs[name]
        if spec.source_options.kafka is not None:  # its source is a topic: produce into it
            from changelake.inputs import kafka
            from changelake.inputs.datagen import produce

            state = lake.settings.home / "kafka" / "datagen" / f"{name}.json"
            config = kafka.client_config(spec, lake.settings)
            batches = produce(spec, config, state, args.batches, seed=args.seed, **overrides)
        else:
            applied = lake.writer_positions(name).get(LANDING, 0)
            batches = generate(
                spec,
                lake.settings.landing_dir,
                args.batches,
                seed=args.seed,
                fmt=args.fmt,
                start=args.start,
                applied=applied,
                **overrides,
            )
        for g in batches:
            kinds = ", ".join(f"{k} {v}" for k, v in g.changes.items())
            print(f"[{name}] batch {g.batch_id}: {g.messages} messages ({kinds}) -> {g.path}", flush=True)
            landed.append(g)
    return _landed(landed)


def _landed(generated: list) -> dict[str, Any]:
    """The JSON document of ``datagen --json``: ``{"landed": [{"table": "ns.t", "batch_id": 3, "path":
    "/.../landing/ns.t/3.jsonl", "messages": 120, "changes": {"insert": 70, ...}}, ...]}`` in landing
    order."""
    return {
        "landed": [
            {
                "table": g.table,
                "batch_id": g.batch_id,
                "path": str(g.path),
                "messages": g.messages,
                "changes": dict(g.changes),
            }
            for g in generated
        ]
    }


if __name__ == "__main__":
    entry()
