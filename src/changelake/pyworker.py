"""What changelake changes in the Python workers Spark starts for its ``mapInArrow`` tasks.

PySpark's worker calls :func:`importlib.invalidate_caches` at the start of every task. On Python 3.11 that
makes every ``zipimport.zipimporter`` in ``sys.path_importer_cache`` re-read its archive's whole directory in
pure Python, and a worker holds about sixteen of them: the JVM puts ``pyspark.zip`` (1,328 entries), the py4j
zip and the ``spark-core`` jar (5,362 entries) on the workers' ``PYTHONPATH``, and every package imported from
a zip gets an importer of its own. Measured on a reused worker of a 1-task ``mapInArrow`` job: ~120 ms of
worker CPU per task, the job 200 ms; with the re-read skipped for unchanged archives, 110 ms. An apply runs
two such jobs (decode, merge), so every apply paid it twice. Python 3.12 invalidates lazily (the directory is
read again on the next import from the archive); this does the same for an archive whose size and
modification time have not changed, and re-reads one that changed, as before.
"""

from __future__ import annotations

import os
import sys

_MARK = "_changelake_lazy"


def lazy_zip_invalidation() -> None:
    """Make ``zipimporter.invalidate_caches`` re-read an archive only if the file changed (idempotent; a no-op
    from Python 3.12, whose zipimport is lazy already)."""
    if sys.version_info >= (3, 12):
        return
    import zipimport

    current = zipimport.zipimporter.invalidate_caches
    if getattr(current, _MARK, False):
        return

    def invalidate_caches(self) -> None:
        try:
            stat = os.stat(self.archive)
            stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None
        # Per importer: several importers of one archive each keep their own copy of its directory.
        if stamp is not None and self.__dict__.get("_changelake_stamp") == stamp:
            return
        current(self)
        self._changelake_stamp = stamp

    setattr(invalidate_caches, _MARK, True)
    setattr(zipimport.zipimporter, "invalidate_caches", invalidate_caches)  # noqa: B010 (mypy: method-assign)
