"""Crash injection for the crash tests: ``CHANGELAKE_FAULT=<point>`` kills the process (SIGKILL) when it reaches
that point of an apply, a compaction or an expiry, as a power cut or an OOM kill would."""

from __future__ import annotations

import os
import signal


def fault(point: str) -> None:
    """Kill this process at once if ``CHANGELAKE_FAULT`` names ``point``."""
    if os.environ.get("CHANGELAKE_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)
