"""The report's charts read as a person reads a chart: ticks in steps of 1, 2 or 5 times a
power of ten (before: 0.0 0.3 0.6 0.8 1.1), time ticks at whole hours with the date once,
axis titles with units."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from slurmscale.report.compute import nodes_up_steps
from slurmscale.report.svg import bar_chart, nice_ticks, step_chart, time_ticks
from slurmscale.store.rows import InstanceRow


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
    svg = step_chart("gpu-spot", {"up": ([t0, t0 + 3600, t0 + 7200], [1, 7, 15.4])}, "nodes",
                     (t0, t0 + 7200))
    ys = re.findall(r'text-anchor="end">([^<]+)<', svg)
    assert ys == ["0", "5", "10", "15", "20"]
    assert ">nodes<" in svg and ">time (UTC)<" in svg and "UTC</text>" not in svg
    bars = bar_chart("waits", ["1 node"], {"p50": [0.5]}, "wait (minutes)", "job size")
    assert re.findall(r'text-anchor="end">([^<]+)<', bars) == ["0.0", "0.1", "0.2", "0.3",
                                                              "0.4", "0.5"]
    assert ">wait (minutes)<" in bars and ">job size<" in bars


def _inst(iid: str, up: float, down: float | None) -> InstanceRow:
    return InstanceRow(instance_id=iid, node=iid, pool="gpu-spot", gang_id="g",
                       instance_type="p5.48xlarge", lifecycle="spot",
                       launch_template_version="1", state="running",
                       launched_at=datetime.fromtimestamp(up, UTC),
                       terminated_at=None if down is None else datetime.fromtimestamp(down, UTC))


def test_a_44_second_burst_shows_as_steps_over_the_whole_window() -> None:
    """Issue 64: a 44-second burst between two minute samples was missing from the chart,
    lines ramped between samples as if a fraction of a node were up, the node axis ticked at
    0.2 0.4 0.6 0.8, and the x axis covered only the sampled span (a day's page showed 14
    minutes). Nodes up now come from the instances' own launches and ends, drawn as steps
    over the report's window, on whole-node ticks."""
    day = datetime(2026, 11, 29, tzinfo=UTC).timestamp()
    t0 = day + 3600
    ups = nodes_up_steps([_inst("a", t0 + 10, t0 + 54), _inst("b", day - 60, None)],
                         datetime.fromtimestamp(day, UTC),
                         datetime.fromtimestamp(day + 86400, UTC))
    assert ups == {"gpu-spot": ([day, t0 + 10, t0 + 54], [1.0, 2.0, 1.0])}
    svg = step_chart("gpu-spot", {"nodes up": ups["gpu-spot"]}, "nodes",
                     (day, day + 86400), whole=True)
    assert re.findall(r'text-anchor="end">([^<]+)<', svg) == ["0", "1", "2"]
    (points,) = re.findall(r'points="([^"]+)"', svg)
    ys = [float(p.split(",")[1]) for p in points.split()]
    xs = [float(p.split(",")[0]) for p in points.split()]
    assert len(set(ys)) == 2 and min(ys) < max(ys)  # up to 2 and back: the burst is there
    moves = zip(xs, xs[1:], ys, ys[1:], strict=False)
    assert all(a == b or y0 == y1 for a, b, y0, y1 in moves)  # steps: across or up, no ramp
    labels = [label for _, label in time_ticks(day, day + 86400)]
    assert all(f">{label}<" in svg for label in labels) and len(labels) >= 8
