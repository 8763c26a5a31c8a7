"""changelake.atomic: a write either replaces the whole file or leaves the old one; killed writers' leftovers
are cleared without touching a live writer's file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from changelake import atomic


def test_a_write_replaces_the_whole_file_with_open_s_permissions(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    atomic.atomic_write_text(target, '{"new": true}\n')
    assert target.read_text() == '{"new": true}\n'
    umask = os.umask(0)
    os.umask(umask)
    fresh = tmp_path / "fresh.bin"
    atomic.atomic_write_bytes(fresh, b"\x00\x01")
    assert fresh.read_bytes() == b"\x00\x01"
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.bin", "summary.json"]


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "great_expectations.yml"
    target.write_text("config_version: 4.0\n")
    with pytest.raises(RuntimeError, match="killed"), atomic.atomic_open(target) as f:
        f.write("config_vers")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "config_version: 4.0\n"
    assert [p.name for p in tmp_path.iterdir()] == ["great_expectations.yml"]


def test_a_killed_writer_leaves_the_target_whole(tmp_path):
    """A real process killed (SIGKILL) while writing: the target is the old file, the leftover is a temporary."""
    target = tmp_path / "state.json"
    target.write_text("old\n")
    code = (
        "import os, signal, sys\n"
        "from changelake.atomic import atomic_open\n"
        "with atomic_open(sys.argv[1]) as f:\n"
        "    f.write('half of the new'); f.flush()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(target)], check=False)
    assert done.returncode == -9
    assert target.read_text() == "old\n"
    (leftover,) = [p for p in tmp_path.iterdir() if p != target]
    assert leftover.name.startswith(".state.json.") and leftover.read_text() == "half of the new"

    assert atomic.remove_stale_temporaries(tmp_path, min_age=60) == []  # too recent: could be a live writer
    os.utime(leftover, (0, 0))
    assert atomic.remove_stale_temporaries(tmp_path, min_age=60) == [leftover]
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_live_writer_s_temporary_is_left_alone(tmp_path):
    live = tmp_path / f".report.html.{os.getpid()}-0a1b2c3d.tmp"
    live.write_text("being written")
    os.utime(live, (0, 0))
    other = tmp_path / ".not-ours.tmp"  # not a name atomic makes
    other.write_text("x")
    os.utime(other, (0, 0))
    assert atomic.remove_stale_temporaries(tmp_path, min_age=0) == []
    assert live.exists() and other.exists()


def test_copy_and_bad_mode(tmp_path):
    source = tmp_path / "a.js"
    source.write_bytes(b"x" * 100_000)
    atomic.atomic_copy(source, tmp_path / "b.js")
    assert (tmp_path / "b.js").read_bytes() == source.read_bytes()
    with pytest.raises(ValueError, match="mode must be"), atomic.atomic_open(tmp_path / "c", "a"):
        pass
