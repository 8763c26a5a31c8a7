"""Text for a terminal: aligned tables of rows, and ``changelake status`` fitted to 100 columns.

The CLI's read commands print their rows through :func:`print_rows`; ``status`` prints the digest of
:func:`status_view` by default (every field with ``--wide``, every field as JSON with ``--json``), and the
demo's summary prints its tables through :func:`format_table`.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The width ``status`` fits by default (a terminal's 80 columns and a half-wide editor pane both hold more).
STATUS_WIDTH = 100
#: Rows the read commands print as a text table unless ``--limit`` says otherwise (0: all of them).
SHOWN_ROWS = 50
_GAP = "  "


def cell(value: Any) -> str:
    """A value as a table cell: NULL for None, decimals, dates and bytes as JSON writes them."""
    if value is None:
        return "NULL"
    if isinstance(value, str | int | float | bool):
        return str(value)
    from changelake.storage.fastread import json_default

    return str(json_default(value))


def format_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Sequence[str] = (),
    width: int | None = None,
    shrink: Sequence[tuple[str, int]] = (),
    middle: str | None = None,
) -> list[str]:
    """Lines of an aligned text table: a header, a rule, a line per row. Columns named in ``right`` are
    right-aligned (numbers). With ``width``, the columns of ``shrink`` (name, narrowest width), in that order
    (a column may come twice, with a narrower width), are cut until every line fits: the column ``middle`` (a
    name) in its middle, the others at their end, marked ``…``."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for name, narrowest in shrink:
        over = sum(widths) + len(_GAP) * (len(headers) - 1) - (width or 0)
        i = list(headers).index(name)
        if width is None or over <= 0:
            break
        widths[i] = max(narrowest, len(name), widths[i] - over)

    def fit(value: str, w: int, middle: bool) -> str:
        if len(value) <= w:
            return value
        if middle:
            head = (w - 1) // 2
            return value[:head] + "…" + value[len(value) - (w - 1 - head) :]
        return value[: w - 1] + "…"

    def line(values: Sequence[str]) -> str:
        cells = []
        for h, w, v in zip(headers, widths, values, strict=True):
            v = fit(v, w, h == middle)
            cells.append(v.rjust(w) if h in right else v.ljust(w))
        return _GAP.join(cells).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def print_rows(rows: list[dict[str, Any]], fmt: str, out: Any = None, more: bool = False) -> None:
    """Rows as text (``table``) or one JSON object a line (``jsonl``); ``more`` says that rows were left
    out by the default limit (a note on stderr says how to see them)."""
    from changelake.storage.fastread import json_default

    out = out or sys.stdout  # looked up per call: a redirected or captured stdout counts
    if fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(row, default=json_default) + "\n")
        return
    if not rows:
        out.write("(no rows)\n")
        return
    headers = list(rows[0])
    numeric = [h for h in headers if all(isinstance(r[h], int | float) for r in rows if r[h] is not None)]
    for text in format_table(headers, [[cell(r[h]) for h in headers] for r in rows], right=numeric):
        out.write(text + "\n")
    if more:
        print(
            f"(the first {len(rows)} shown; --limit N shows N, --limit 0 all, --format jsonl or json all)",
            file=sys.stderr,
        )


# --- status ----------------------------------------------------------------------------------------------
STATUS_HEADERS = ("table", "rows", "writers", "files", "size", "maintained", "notes")


def status_view(
    rows: list[dict[str, Any]], home: str, home_from: str, tables_dir: str, width: int = STATUS_WIDTH
) -> list[str]:
    """``changelake status`` as text lines no wider than ``width`` (but for long paths): where the home is
    and how it was found, a line per table, and then every problem and waiting batch in full."""
    lines = [f"home:   {home}  ({home_from})", f"specs:  {tables_dir}", ""]
    if not rows:
        missing = "" if Path(tables_dir).is_dir() else ": no such directory"
        return [*lines, f"(no table specs in {tables_dir}{missing})"]
    table = [
        [
            row["table"],
            f"{row.get('rows') or 0:,}",
            writers_cell(row),
            f"{row.get('files') or 0:,}",
            size(row.get("bytes") or 0),
            ago(row.get("last_maintenance")),
            notes_cell(row),
        ]
        for row in rows
    ]
    right = ("rows", "files", "size")
    # What gives way when the table is too wide: long notes (their text follows the table anyway), then long
    # names (cut in the middle), then a list of many writers (the pending count of the first stays), then
    # the notes again.
    shrink = (("notes", 18), ("table", 20), ("writers", 24), ("notes", 11))
    lines += format_table(STATUS_HEADERS, table, right=right, width=width, shrink=shrink, middle="table")
    details = [
        f"{row['table']}: {what}: {text}"
        for row in rows
        for what, text in (("problem", row.get("problem")), ("waiting for", row.get("incomplete")))
        if text
    ]
    if details:
        lines.append("")
        for text in details:
            lines += textwrap.wrap(text, width, subsequent_indent="    ", break_on_hyphens=False)
    return lines


def writers_text(writers: dict[str, int] | None) -> str:
    """A status row's writers and their last numbers, landed batches first: ``landing 8, sql 2, api 5``."""
    from changelake.storage.summary import LANDING

    items = sorted((writers or {}).items(), key=lambda item: (item[0] != LANDING, item[0]))
    return ", ".join(f"{name} {seq}" for name, seq in items)


def writers_cell(row: dict[str, Any]) -> str:
    """Where each writer of the table stands, and the landed batches waiting for the next apply:
    ``landing 5 (+3 pending), sql 2``."""
    if row.get("exists") is None:  # a spec file that does not load
        return "-"
    writers = dict(row.get("writers") or {})
    pending = row.get("pending_batches") or 0
    if pending:
        from changelake.storage.summary import LANDING

        writers.setdefault(LANDING, 0)  # landed batches, none applied yet
    text = writers_text(writers)
    if pending:
        first, _, rest = text.partition(", ")
        text = f"{first} (+{pending} pending)" + (f", {rest}" if rest else "")
    return text or "-"


def notes_cell(row: dict[str, Any]) -> str:
    """What needs a look, in a word or two; the whole problem and the batch waited for follow the table."""
    notes = []
    if row.get("exists") is None:
        notes.append("spec broken")
    elif not row.get("exists"):
        notes.append("not created")
    elif row.get("problem"):
        notes.append("blocked")
    if row.get("incomplete"):
        notes.append("waiting")
    if row.get("quarantined"):
        notes.append(f"{row['quarantined']:,} quarantined")
    if row.get("kafka_lag"):
        notes.append(f"Kafka lag {row['kafka_lag']:,}")
    return "; ".join(notes) or "ok"


def size(n: int) -> str:
    """Bytes in binary units, three digits: ``25.3 KiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError(n)


def ago(iso: str | None, now: dt.datetime | None = None) -> str:
    """When an ISO-8601 instant was, from now: ``3 min ago``, ``2 h ago``, ``5 d ago``; ``-`` for None."""
    if not iso:
        return "-"
    try:
        then = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    if then.tzinfo is None:
        then = then.replace(tzinfo=dt.UTC)
    seconds = ((now or dt.datetime.now(dt.UTC)) - then).total_seconds()
    for unit, length in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= length:
            return f"{int(seconds // length)} {unit} ago"
    return "just now"
