"""changelake.lru.BoundedLRU, the one cache mechanism behind the metadata, manifest and kept-rows caches."""

from __future__ import annotations

import pytest

from changelake.lru import BoundedLRU

pytestmark = pytest.mark.unit


def test_a_count_bound_evicts_the_least_recently_used():
    lru: BoundedLRU[str] = BoundedLRU(2)
    lru.put("a", "A")
    lru.put("b", "B")
    assert lru.get("a") == "A"  # a is now the most recent
    lru.put("c", "C")
    assert lru.get("b") is None and lru.get("a") == "A" and lru.get("c") == "C"
    assert len(lru) == lru.total == 2


def test_a_size_bound_counts_sizes_replaces_and_pops():
    lru: BoundedLRU[list[int]] = BoundedLRU(5, size=len)
    lru.put("a", [1, 2])
    lru.put("b", [1, 2, 3])
    assert lru.total == 5
    lru.put("a", [1])  # a new value for a key: its old size is given back
    assert lru.total == 4 and lru.get("a") == [1]
    lru.put("big", list(range(6)))  # larger than the whole limit: not kept, nothing evicted
    assert lru.get("big") is None and lru.total == 4
    lru.put("c", [1, 2])  # over the limit: the least recently used (b) goes
    assert lru.get("b") is None and lru.total == 3
    lru.pop("a")
    lru.pop("missing")
    assert lru.values() == [[1, 2]] and lru.total == 2
    lru.clear()
    assert len(lru) == lru.total == 0
