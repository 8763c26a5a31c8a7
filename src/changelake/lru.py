"""A thread-safe least-recently-used map bounded by the total size of what it holds: the caches of parsed
table metadata (``storage/iceberg.py``), of committed manifests' entries (``storage/pyiceberg_fixes.py``) and
of the rows an in-process merge wrote (``engine/buckets.py``) are each one of these."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


def _one(_value: object) -> int:
    return 1


class BoundedLRU(Generic[V]):
    """At most ``limit`` in total of ``size(value)`` (1 a value by default: a count). A value larger than the
    whole limit is not kept; putting a key again replaces its value. Reads and writes hold one lock, so
    threads (pyiceberg's pool, the applier's writers) can share it."""

    def __init__(self, limit: int, size: Callable[[V], int] = _one):
        self.limit = limit
        self._size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self.total = 0  # the sum of size() over the values kept
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> None:
        size = self._size(value)
        with self._lock:
            self._drop(key)
            if size > self.limit:
                return
            self._items[key] = value
            self.total += size
            while self.total > self.limit:
                _, old = self._items.popitem(last=False)
                self.total -= self._size(old)

    def pop(self, key: Hashable) -> V | None:
        """Remove ``key``; its value, if it was kept."""
        with self._lock:
            return self._drop(key)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.total = 0

    def values(self) -> list[V]:
        with self._lock:
            return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def _drop(self, key: Hashable) -> V | None:
        old = self._items.pop(key, None)
        if old is not None:
            self.total -= self._size(old)
        return old
