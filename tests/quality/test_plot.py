"""The quality plot's second panel: drift per batch of each aggregation table, "no drift" said in words."""

from __future__ import annotations

import matplotlib.pyplot as plt

from changelake.quality.runner import _figure, _plot, drift_per_batch


def batch(table: str, batch_id: int, messages: int, redelivered: int, deduplicated: int) -> dict:
    return {
        "table": table,
        "batch_id": batch_id,
        "messages": messages,
        "redelivered": redelivered,
        "deduplicated": deduplicated,
        "redelivered_share": redelivered / messages,
    }


DEDUPED = [
    batch("shop.stats", 1, 10, 0, 0),
    batch("shop.stats", 2, 10, 3, 3),
    batch("shop.orders", 1, 5, 1, 0),
]
NOT_DEDUPED = [
    batch("shop.stats", 2, 10, 3, 0),
    batch("shop.stats", 1, 10, 1, 0),
    batch("shop.stats", 3, 8, 0, 0),
]


def right_panel(redeliveries, totals):
    fig = _figure(redeliveries, totals)
    try:
        ax = fig.axes[1]
        lines = {
            line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()
        }
        return ax.get_title(), lines, [t.get_text() for t in ax.texts], len(ax.patches)
    finally:
        plt.close(fig)


def test_zero_drift_is_labelled_no_drift_not_a_lone_zero_bar():
    assert drift_per_batch(DEDUPED, {"shop.stats": 0.0}) == {
        "shop.stats": {"batch_ids": [1, 2], "counted_twice": [0, 0], "drift_total": 0.0, "label": "no drift"}
    }
    title, lines, texts, bars = right_panel(DEDUPED, {"shop.stats": 0.0})
    assert title == "Drift per batch (aggregation tables)"
    assert lines == {"shop.stats: no drift": ([1, 2], [0, 0])}
    assert texts == ["no drift"] and bars == 0


def test_drift_is_plotted_per_batch_with_the_mart_total():
    panel = drift_per_batch(NOT_DEDUPED, {"shop.stats": 7.5})
    assert panel["shop.stats"]["batch_ids"] == [1, 2, 3]
    assert panel["shop.stats"]["counted_twice"] == [1, 3, 0]
    _, lines, texts, _ = right_panel(NOT_DEDUPED, {"shop.stats": 7.5})
    assert lines == {"shop.stats: drift 7.5 (sum over keys), 4 records counted twice": ([1, 2, 3], [1, 3, 0])}
    assert texts == []  # no "no drift" over a drifting table


def test_drift_in_the_mart_without_redeliveries_is_not_called_no_drift():
    _, lines, texts, _ = right_panel(DEDUPED, {"shop.stats": 2.0})
    assert list(lines) == ["shop.stats: drift 2 (sum over keys), 0 records counted twice"] and texts == []


def test_no_aggregation_table_says_so(tmp_path):
    _, lines, texts, _ = right_panel(DEDUPED, {})
    assert lines == {} and texts == ["no aggregation table checked for drift"]
    path = _plot(DEDUPED, {}, tmp_path / "drift_redelivery.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and [p.name for p in tmp_path.iterdir()] == [
        path.name
    ]
