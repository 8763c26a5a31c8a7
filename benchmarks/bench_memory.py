"""Peak memory of the benchmark's processes, read from /proc (Linux only; no extra dependency).

The kernel keeps each process's peak resident set (``VmHWM``); writing ``5`` to ``/proc/<pid>/clear_refs``
resets it to the current RSS, so one long-lived process (the Spark driver, its JVM) can report a peak per
scenario. Python workers are children of the JVM (``pyspark.daemon`` and its forks); a background thread
samples them, since they come and go with the tasks.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

MB = 1024 * 1024


def _status_kb(pid: int, field: str) -> int | None:
    """One ``Vm*`` field of ``/proc/<pid>/status`` in kB, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_rss_mb(pid: int) -> float | None:
    """Peak RSS (MB) of ``pid`` since it started or since its last :func:`reset_peak`."""
    kb = _status_kb(pid, "VmHWM")
    return None if kb is None else kb / 1024


def reset_peak(pid: int) -> bool:
    """Reset the kernel's peak-RSS counter of ``pid`` to its current RSS; False if not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (about a millisecond for a few hundred processes)."""
    out: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        # The command name may hold spaces or parentheses: the fields after its last ')' are fixed.
        out[int(entry.name)] = int(raw.rsplit(b")", 1)[1].split()[1])
    return out


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (not ``root`` itself)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _is_python(pid: int) -> bool:
    try:
        return "python" in Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return False


def python_workers(jvm: int) -> list[int]:
    """The JVM's Python descendants: ``pyspark.daemon`` and the workers it forks. Other children (a
    process the JVM is spawning shows the JVM's memory until it execs) are left out."""
    return [pid for pid in descendants(jvm) if _is_python(pid)]


def child_jvm(parent: int | None = None) -> int | None:
    """The java process started by ``parent`` (default: this process), i.e. PySpark's driver JVM."""
    parent = os.getpid() if parent is None else parent
    for pid, ppid in _parents().items():
        if ppid != parent:
            continue
        try:
            if "java" in Path(f"/proc/{pid}/comm").read_text():
                return pid
        except OSError:
            continue
    return None


class PhaseMemory:
    """Peak RSS of the driver (this process), the JVM and its Python workers during one phase.

    ``start()`` resets the peaks and starts sampling the JVM's descendants every ``interval`` seconds;
    ``stop()`` returns MB figures: ``driver_peak_mb``, ``jvm_peak_mb``, ``worker_peak_mb`` (the largest
    single worker) and ``workers_total_peak_mb`` (the largest sampled sum over the workers alive at once).
    """

    def __init__(self, jvm: int | None, interval: float = 0.25):
        self.jvm = jvm
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._worker_peak_kb = 0
        self._workers_total_kb = 0

    def _sample(self) -> None:
        if self.jvm is None:
            return
        total = 0
        for pid in python_workers(self.jvm):
            hwm, rss = _status_kb(pid, "VmHWM"), _status_kb(pid, "VmRSS")
            self._worker_peak_kb = max(self._worker_peak_kb, hwm or 0)
            total += rss or 0
        self._workers_total_kb = max(self._workers_total_kb, total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> PhaseMemory:
        reset_peak(os.getpid())
        if self.jvm is not None:
            for pid in [self.jvm, *python_workers(self.jvm)]:
                reset_peak(pid)
        self._worker_peak_kb = self._workers_total_kb = 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, float | None]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        jvm_peak = peak_rss_mb(self.jvm) if self.jvm is not None else None
        return {
            "driver_peak_mb": _round(peak_rss_mb(os.getpid())),
            "jvm_peak_mb": _round(jvm_peak),
            "worker_peak_mb": _round(self._worker_peak_kb / 1024) if self.jvm is not None else None,
            "workers_total_peak_mb": _round(self._workers_total_kb / 1024) if self.jvm is not None else None,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value)
