"""The Python worker's import-cache fix: an unchanged archive is not re-read at each task's
``importlib.invalidate_caches()``, a changed one is, and imports from it still work."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="zipimport invalidates lazily from 3.12")

SCRIPT = textwrap.dedent(
    """
    import importlib, sys, zipfile, zipimport

    archive = sys.argv[1]
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zmod_a.py", "VALUE = 'a'")
    sys.path.insert(0, archive)
    import zmod_a

    reads = []
    original = zipimport._read_directory
    zipimport._read_directory = lambda path: reads.append(path) or original(path)

    from changelake.pyworker import lazy_zip_invalidation

    importlib.invalidate_caches()
    before = reads.count(archive)  # unpatched: re-read
    lazy_zip_invalidation()
    lazy_zip_invalidation()  # idempotent: one wrapper, not two
    importlib.invalidate_caches()  # first patched call: no stamp yet, read once
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    unchanged = reads.count(archive) - before

    import os, time
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("zmod_b.py", "VALUE = 'b'")
    os.utime(archive, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    importlib.invalidate_caches()
    changed = reads.count(archive) - before - unchanged
    import zmod_b

    print(before, unchanged, changed, zmod_a.VALUE, zmod_b.VALUE)
    """
)


def test_unchanged_archive_is_read_once_and_a_changed_one_again(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "mods.zip")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    before, unchanged, changed = (int(x) for x in out[:3])
    assert before >= 1  # the cost the fix removes
    assert unchanged == 1  # three invalidations, one read (the importer had no stamp yet)
    assert changed >= 1  # the archive changed: read again, and its new module imports
    assert out[3:] == ["a", "b"]
