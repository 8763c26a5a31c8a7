"""How a batch is cut into decode tasks: one equal share of rows per core for Parquet (decode.share_rows),
of bytes for JSON lines (decode.share_lines)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelake.inputs import decode
from changelake.inputs.decode import SPLIT_ROWS, Range, group_ranges, plan_tasks, share_lines, share_rows

FMT = "changelog-parquet"


def row_ranges(sizes: list[int]) -> list[Range]:
    """Consecutive ranges of rows over files of at most three ranges each, as the format plans them."""
    out, start = [], 0
    for i, size in enumerate(sizes):
        file_index = i // 3
        if i % 3 == 0:
            start = 0
        out.append(Range(file_index, f"f{file_index}.parquet", FMT, start, start + size, start + 1))
        start += size
    return out


def rows(ranges: list[Range]) -> list[tuple[int, int, int]]:
    """The (file, first row, end row) spans the ranges cover, in order, adjacent spans joined."""
    spans: list[tuple[int, int, int]] = []
    for r in ranges:
        if spans and spans[-1][0] == r.file_index and spans[-1][2] == r.start:
            spans[-1] = (r.file_index, spans[-1][1], r.end)
        else:
            spans.append((r.file_index, r.start, r.end))
    return spans


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 400_000), min_size=1, max_size=8),
    st.integers(2, 6),
)
def test_shares_cover_the_rows_in_order_and_are_equal_within_a_cut(sizes, shares):
    ranges = row_ranges(sizes)
    pieces, groups = share_rows(ranges, shares)
    assert rows(pieces) == rows(ranges)
    assert all(p.first_line == p.start + 1 for p in pieces)
    assert [i for g in groups for i in g] == list(range(len(pieces)))  # consecutive, each piece once
    total = sum(sizes)
    sizes_of = [sum(pieces[i].end - pieces[i].start for i in g) for g in groups]
    # A boundary moves only to avoid a piece under SPLIT_ROWS: each share is off by less than that (twice).
    assert all(abs(size - total / shares) < 2 * SPLIT_ROWS + shares for size in sizes_of)
    originals = {(r.file_index, r.start, r.end) for r in ranges}
    for p in pieces:
        if (p.file_index, p.start, p.end) not in originals:
            assert p.end - p.start >= SPLIT_ROWS  # a cut never leaves a sliver


def test_five_row_groups_on_two_cores_cut_the_middle_one():
    ranges = row_ranges([1_000_000] * 3) + [
        Range(1, "f1.parquet", FMT, a, a + 1_000_000, a + 1) for a in (0, 1_000_000)
    ]
    pieces, groups = plan_tasks(ranges, 2)
    assert [(p.file_index, p.start, p.end) for p in pieces] == [
        (0, 0, 1_000_000),
        (0, 1_000_000, 2_000_000),
        (0, 2_000_000, 2_500_000),
        (0, 2_500_000, 3_000_000),
        (1, 0, 1_000_000),
        (1, 1_000_000, 2_000_000),
    ]
    assert groups == [[0, 1, 2], [3, 4, 5]]


def test_one_core_keeps_row_groups_whole():
    ranges = row_ranges([300_000, 300_000])
    assert plan_tasks(ranges, 1) == (ranges, group_ranges(ranges, 2))


def line_ranges(sizes: list[int]) -> list[Range]:
    """Consecutive byte ranges of lines over files of at most four ranges each, as plan_batch cuts them (the
    first line of each is counted as if every line were 10 bytes)."""
    out, start = [], 0
    for i, size in enumerate(sizes):
        file_index = i // 4
        if i % 4 == 0:
            start = 0
        out.append(
            Range(file_index, f"f{file_index}.jsonl", "changelog-json", start, start + size, start // 10 + 1)
        )
        start += size
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 5_000), min_size=1, max_size=12),
    st.integers(1, 4),
    st.integers(1, 20_000),
)
def test_line_shares_cover_the_bytes_in_order_and_join_only_neighbours(sizes, shares, cap):
    ranges = line_ranges(sizes)
    with pytest.MonkeyPatch.context() as patch:  # hypothesis: no function-scoped fixture
        patch.setenv("CHANGELAKE_DECODE_MAX_RANGE_BYTES", str(cap))
        pieces, groups = plan_tasks(ranges, shares)
    assert rows(pieces) == rows(ranges)  # the same bytes of the same files, in order
    assert [i for g in groups for i in g] == list(range(len(pieces)))
    # Each planned range lies in exactly one piece; a piece joins ranges only up to the cap, starts where
    # its first range starts and keeps that range's first line number.
    piece_of = []
    for r in ranges:
        (index,) = [
            i
            for i, p in enumerate(pieces)
            if p.file_index == r.file_index and p.start <= r.start and r.end <= p.end
        ]
        piece_of.append(index)
    for index, p in enumerate(pieces):
        inside = [r for r, i in zip(ranges, piece_of, strict=True) if i == index]
        assert (inside[0].start, inside[-1].end, inside[0].first_line) == (p.start, p.end, p.first_line)
        assert len(inside) == 1 or p.end - p.start <= cap
    # The shares are group_ranges' shares: the same planned ranges in the same task.
    group_of = {i: g for g, members in enumerate(groups) for i in members}
    expected = group_ranges(ranges, shares)
    assert [[group_of[piece_of[i]] for i in g] for g in expected] == [
        [g] * len(m) for g, m in enumerate(expected)
    ]


def test_88_mb_of_lines_on_two_cores_are_two_reads_of_44_mb():
    mib = 1 << 20
    ranges = [
        Range(0, "a.jsonl", "changelog-json", a, a + 4 * mib, a // 100 + 1)
        for a in range(0, 88 * mib, 4 * mib)
    ]
    pieces, groups = share_lines(ranges, 2)
    assert [(p.start, p.end, p.first_line) for p in pieces] == [
        (0, 44 * mib, 1),
        (44 * mib, 88 * mib, 44 * mib // 100 + 1),
    ]
    assert groups == [[0], [1]]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.sampled_from([b"\n", b"\r\n", b"\n\n", b""])),
        min_size=0,
        max_size=60,
    ),
    st.integers(1, 64),
    st.integers(1, 16),
    st.one_of(st.none(), st.integers(1, 5)),
)
def test_json_lines_are_cut_at_the_first_newline_after_every_range_of_bytes(
    tmp_path_factory, lines, size, chunk, short
):
    """plan_batch's cut of a JSON-lines file (decode._line_ranges, read ``chunk`` bytes at a time, or at most
    ``short`` when the file returns short reads): ranges that cover the file in order, each but the last ending
    at the first newline at or after ``size`` bytes, each numbered by the lines before it; the file's bytes and
    newlines."""
    text = b"".join(b"x" * n + end for n, end in lines)
    path = tmp_path_factory.mktemp("lines") / "batch.jsonl"
    path.write_bytes(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHANGELAKE_DECODE_RANGE_BYTES", str(size))
        patch.setattr(decode, "PLAN_CHUNK_BYTES", chunk)
        if short is not None:
            patch.setattr(decode, "_open_landed", lambda p: _ShortReads(open(p, "rb"), short))
        ranges, total, newlines = decode._line_ranges(path, 2, "changelog-json")
    assert (total, newlines) == (len(text), text.count(b"\n"))
    assert ranges[0].start == 0 and ranges[-1].end == len(text)
    assert all(r.end > r.start for r in ranges) or ranges == [Range(2, str(path), "changelog-json", 0, 0, 1)]
    for r, after in zip(ranges, ranges[1:], strict=False):
        assert after.start == r.end
        cut = text.find(b"\n", r.start + size - 1)
        assert cut >= 0 and r.end == cut + 1
    cut = text.find(b"\n", ranges[-1].start + size - 1)  # the last range: the rest, or a cut the file ends at
    assert cut < 0 or ranges[-1].end == cut + 1
    assert [r.first_line for r in ranges] == [text.count(b"\n", 0, r.start) + 1 for r in ranges]
    assert {(r.file_index, r.path, r.fmt) for r in ranges} == {(2, str(path), "changelog-json")}


class _ShortReads:
    """A file whose ``readinto`` returns at most ``most`` bytes, as a pipe or a network file system may."""

    def __init__(self, fh, most: int):
        self.fh, self.most = fh, most

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()

    def readinto(self, view) -> int:
        return self.fh.readinto(view[: self.most])
