"""The report's charts read as a person reads a chart: ticks in steps of 1, 2 or 5 times a
power of ten (before: 0.0 0.3 0.6 0.8 1.1), time ticks at whole hours with the date once,
axis titles with units."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from slurmscale.report.svg import bar_chart, line_chart, nice_ticks, time_ticks


def test_ticks_step_by_one_two_or_five() -> None:
    assert nice_ticks(1.0) == [0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
    assert nice_ticks(15.4) == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert nice_ticks(3.0) == [0.0, 1.0, 2.0, 3.0]
    assert nice_ticks(0.0) == [0.0, 1.0]


@given(st.floats(min_value=1e-6, max_value=1e9, allow_nan=False))
def test_ticks_cover_the_top_in_at_most_five_nice_steps(top: float) -> None:
    ticks = nice_ticks(top)
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** int(f"{step:e}".split("e")[1])
    assert ticks[0] == 0 and ticks[-1] >= top * (1 - 1e-9) and len(ticks) <= 6
    assert any(abs(mantissa - m) < 1e-6 for m in (1, 2, 5)), step


def test_a_day_is_ticked_every_three_hours_with_the_date_once() -> None:
    t0 = datetime(2026, 11, 29, tzinfo=UTC).timestamp()
    labels = [label for _, label in time_ticks(t0, t0 + 86400 - 60)]
    assert labels == ["00:00 Nov 29", "03:00", "06:00", "09:00", "12:00", "15:00", "18:00",
                      "21:00"]
    week = [label for _, label in time_ticks(t0, t0 + 7 * 86400)]
    assert week[0] == "Nov 29" and len(week) == len(set(week)) <= 8


def test_axes_have_titles_and_tick_labels_no_needless_decimals() -> None:
    t0 = datetime(2026, 11, 29, tzinfo=UTC).timestamp()
    svg = line_chart("gpu-spot", [t0, t0 + 3600, t0 + 7200], {"up": [1, 7, 15.4]}, "nodes")
    ys = re.findall(r'text-anchor="end">([^<]+)<', svg)
    assert ys == ["0", "5", "10", "15", "20"]
    assert ">nodes<" in svg and ">time (UTC)<" in svg and "UTC</text>" not in svg
    bars = bar_chart("waits", ["1 node"], {"p50": [0.5]}, "wait (minutes)", "job size")
    assert re.findall(r'text-anchor="end">([^<]+)<', bars) == ["0.0", "0.1", "0.2", "0.3",
                                                              "0.4", "0.5"]
    assert ">wait (minutes)<" in bars and ">job size<" in bars
