"""Fault injection for the crash and retry tests: ``CHANGELAKE_FAULT=<point>`` kills the process (SIGKILL) when it
reaches that point of an apply, a compaction or an expiry, as a power cut or an OOM kill would; and
``CHANGELAKE_FAULT=commit-conflict`` makes every batch commit lose its race, as if another writer always
committed first (the Airflow test of the retry rule runs the real apply app with it)."""

from __future__ import annotations

import os
import signal


def fault(point: str) -> None:
    """Kill this process at once if ``CHANGELAKE_FAULT`` names ``point``."""
    if os.environ.get("CHANGELAKE_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def losing_commits() -> bool:
    """True if ``CHANGELAKE_FAULT`` asks every batch commit to lose its race."""
    return os.environ.get("CHANGELAKE_FAULT") == "commit-conflict"
