"""``changelake.atomic.create_private``: the exclusive, private, all-or-nothing create that the endpoint's
secrets and the dead-letter files use."""

from __future__ import annotations

import os
import stat

import pytest

from changelake.atomic import create_private


def test_creates_the_whole_file_private_and_never_replaces_one(tmp_path):
    path = tmp_path / "secret"
    create_private(path, [b"a", b"b"])
    assert path.read_bytes() == b"ab"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(FileExistsError):
        create_private(path, [b"other"])
    assert path.read_bytes() == b"ab"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"], "a temporary file was left behind"


def test_a_writer_that_fails_midway_leaves_no_file(tmp_path):
    path = tmp_path / "dead-letters.jsonl"

    def chunks():
        yield b'{"record": 1}\n'
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        create_private(path, chunks())
    assert list(tmp_path.iterdir()) == [], "half a file (or its temporary) was left"


def test_a_link_at_the_target_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("keep")
    (tmp_path / "d").mkdir()
    link = tmp_path / "d" / "secret"
    link.symlink_to(outside)
    with pytest.raises(FileExistsError):
        create_private(link, [b"x"])
    assert outside.read_text() == "keep"
