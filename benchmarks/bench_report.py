"""The end every benchmark shares: write its report, print it, keep or remove its scratch directory."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def finish(
    report: dict[str, Any],
    out: Path,
    printer: Callable[[dict[str, Any]], None],
    scratch: Path,
    keep: bool,
    what: str,
) -> int:
    """Write ``report`` to ``out`` as JSON and print it with ``printer``; remove ``scratch`` unless ``keep`` (then
    say where it is, as ``what``). The exit status: 1 if any of the report's checks failed, else 0."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    printer(report)
    print(f"\nwritten to {out}")
    if keep:
        print(f"{what} kept: {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if all(c["ok"] for c in report["checks"]) else 1


def print_checks(checks: list[dict[str, Any]], detail: bool = True) -> None:
    """The report's checks, one line each: ok or FAILED, the check, and what it saw."""
    print("\nchecks")
    for c in checks:
        print(f"  {'ok' if c['ok'] else 'FAILED':6} {c['check']}" + (f": {c['detail']}" if detail else ""))
