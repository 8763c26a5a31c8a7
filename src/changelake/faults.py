"""Fault injection for the crash and retry tests: ``CHANGELAKE_FAULT=<point>`` kills the process (SIGKILL) when it
reaches that point of an apply, a compaction (or one of its Spark tasks: :func:`fault_in_task`) or an expiry,
as a power cut or an OOM kill would; and ``CHANGELAKE_FAULT=commit-conflict`` makes every batch commit lose its
race, as if another writer always committed first (the Airflow test of the retry rule runs the real apply app
with it)."""

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


def task_fault() -> str | None:
    """The fault point ``CHANGELAKE_FAULT`` names in the driver now, for a Spark task function to carry: a
    Spark Python worker has the environment its JVM started with, not the driver's as a test sets it."""
    return os.environ.get("CHANGELAKE_FAULT") or None


def fault_in_task(point: str, carried: str | None) -> None:
    """Kill this Spark Python worker at once (as an executor's OOM kill would) if ``carried`` (the driver's
    :func:`task_fault`) names ``point``."""
    if carried == point:
        os.kill(os.getpid(), signal.SIGKILL)
