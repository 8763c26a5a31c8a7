"""Files changelake creates are 0600 in 0700 directories whatever the caller's umask: the Python API (here
without Spark), the CLI (tests/inputs/test_landing_safety.py), every spark_apps/ entrypoint and the task
functions Spark's Python workers run."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from changelake import privacy
from tests.helpers import sparkless_lake

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def loose_umask():
    previous = os.umask(0o022)  # group and others may read what the caller creates
    yield
    os.umask(previous)


def _modes(root: Path) -> dict[str, int]:
    out = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def test_the_python_api_writes_private_files_under_a_loose_umask(tmp_path, loose_umask):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    lake = sparkless_lake(home)
    lake.create_table(
        {
            "name": "p.t",
            "primary_key": ["k"],
            "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
        }
    )
    lake.apply("p.t", [{"op": "+I", "data": {"k": 1, "v": "secret"}}], batch_id=1)
    lake.maintain("p.t", full=True)
    modes = {p: m for p, m in _modes(home).items() if not p.startswith("tables")}  # the test's own folder
    assert any(p.endswith(".parquet") for p in modes) and "catalog.db" in modes
    loose = {p: oct(m) for p, m in modes.items() if m & 0o077}
    assert loose == {}
    assert os.umask(0o022) == 0o022  # the caller's umask is back


def test_restrict_only_narrows():
    previous = os.umask(0o027)
    try:
        assert privacy.restrict() == 0o027
        assert os.umask(0o077) == 0o077
        os.umask(0o177)
        privacy.restrict()
        assert os.umask(0o022) == 0o177  # a stricter mask stays
    finally:
        os.umask(previous)


@pytest.mark.parametrize("app", sorted(p.name for p in (REPO / "spark_apps").glob("*_app.py")))
def test_every_spark_app_restricts_the_umask_before_it_runs(app):
    """Each entrypoint's ``__main__`` block calls ``privacy.restrict()`` before anything else."""
    tree = ast.parse((REPO / "spark_apps" / app).read_text())
    (main,) = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    assert ast.unparse(main.body[0]) == "privacy.restrict()", app


def test_the_spark_task_functions_restrict_a_workers_umask_and_not_their_callers(monkeypatch):
    """The merge and decode jobs' task functions narrow the umask in a Python worker Spark started, and leave
    the umask of a process that runs them itself (a small batch in the applying process) to its caller."""
    import sys
    import types

    for module in ("engine/buckets.py", "inputs/decode.py"):
        source = (REPO / "src" / "changelake" / module).read_text()
        assert (
            "lazy_zip_invalidation()  # for this worker's next tasks\n        privacy.restrict_worker()"
            in source
        )
    previous = os.umask(0o022)
    try:
        privacy.restrict_worker()
        assert os.umask(0o022) == 0o022  # not a worker: unchanged
        monkeypatch.setitem(sys.modules, "pyspark.worker", types.ModuleType("pyspark.worker"))
        privacy.restrict_worker()
        assert os.umask(0o022) == 0o077
    finally:
        os.umask(previous)


def test_overlapping_private_blocks_in_threads_restore_the_callers_umask(loose_umask):
    """Two threads in private blocks at once, ending in the order they began: the umask is the caller's
    after both (each restoring what it found left it narrowed)."""
    import threading

    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with privacy.private_files():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second():
        first_in.wait(5)
        with privacy.private_files():
            second_in.set()
            first_out.wait(5)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert os.umask(0o022) == 0o022
