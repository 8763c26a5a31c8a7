"""How a Parquet batch is cut into decode tasks: one equal share of rows per core (decode.share_rows)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from changelake.inputs.decode import SPLIT_ROWS, Range, group_ranges, plan_tasks, share_rows

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


def test_one_core_and_json_lines_keep_the_old_plan():
    ranges = row_ranges([300_000, 300_000])
    assert plan_tasks(ranges, 1) == (ranges, group_ranges(ranges, 2))
    lines = [Range(0, "a.jsonl", "changelog-json", a, a + 100, 1) for a in (0, 100, 200)]
    pieces, groups = plan_tasks(lines, 2)
    assert pieces == lines and [i for g in groups for i in g] == [0, 1, 2]
