"""Two small inline-SVG charts for the HTML report: lines over time and grouped bars. Hand
made so a cron job on a head node needs no plotting library and the page no script."""

from __future__ import annotations

import html
import math
from datetime import UTC, datetime

W, H, LEFT, RIGHT, TOP, BOTTOM = 900, 300, 64, 24, 48, 52
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


def nice_ticks(top: float, most: int = 5, whole: bool = False) -> list[float]:
    """Axis ticks from 0 in steps of 1, 2 or 5 times a power of ten, the last at or above
    `top`, at most `most` intervals: 0 2 4 6 8 10, never 0.0 0.3 0.6 0.8 1.1. `whole`: a
    count (nodes): steps of at least 1, never 0.2 0.4 0.6 0.8 nodes."""
    if top <= 0:
        return [0.0, 1.0]
    raw = max(top / most, 1.0) if whole else top / most
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw - 1e-12)
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


def _label(v: float, step: float) -> str:
    """A tick's number with the decimals its step needs, and no more."""
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{v:,.{decimals}f}"


def _frame(title: str, ticks: list[float], legend: list[str], y_title: str,
           x_title: str) -> list[str]:
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="{html.escape(title)}">',
           f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">'
           f'{html.escape(title)}</text>']
    top = ticks[-1]
    for v in ticks:
        y = H - BOTTOM - (H - TOP - BOTTOM) * v / top
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                   'stroke="#e5e5e5"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{_label(v, ticks[1] - ticks[0])}</text>')
    mid = TOP + (H - TOP - BOTTOM) / 2
    out.append(f'<text transform="translate(14 {mid:.1f}) rotate(-90)" font-size="12" '
               f'text-anchor="middle" fill="#444">{html.escape(y_title)}</text>')
    out.append(f'<text x="{LEFT + (W - LEFT - RIGHT) / 2:.1f}" y="{H - 6}" font-size="12" '
               f'text-anchor="middle" fill="#444">{html.escape(x_title)}</text>')
    x = LEFT
    for i, name in enumerate(legend):  # a row of its own under the title
        c = COLOURS[i % len(COLOURS)]
        out.append(f'<rect x="{x}" y="26" width="12" height="12" fill="{c}"/>'
                   f'<text x="{x + 16}" y="36" font-size="12">{html.escape(name)}</text>')
        x += 24 + 7 * len(name)
    return out


def _ticks(series: dict[str, list[float]], whole: bool = False) -> list[float]:
    return nice_ticks(max((v for vs in series.values() for v in vs), default=0.0),
                      whole=whole)


# time ticks: the first of these steps that gives at most 8 ticks over the window
TIME_STEPS_S = (600, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400,
                7 * 86400)


def time_ticks(x0: float, x1: float, most: int = 8) -> list[tuple[float, str]]:
    """(Unix s, label) at whole steps of UTC time: "HH:MM", with the date ("Nov 29") where
    it changes and at the first; days alone for steps of a day or more."""
    step = next((s for s in TIME_STEPS_S if (x1 - x0) / s <= most), TIME_STEPS_S[-1])
    t = math.ceil(x0 / step) * step
    out: list[tuple[float, str]] = []
    day = ""
    while t <= x1 + 1e-6:
        d = datetime.fromtimestamp(t, UTC)
        date = d.strftime("%b %d")
        if step >= 86400:
            out.append((t, date))
        else:
            out.append((t, d.strftime("%H:%M") + (f" {date}" if date != day else "")))
        day = date
        t += step
    return out


Steps = dict[str, tuple[list[float], list[float]]]  # name -> (times, value from each on)


def step_chart(title: str, series: Steps, y_title: str, window: tuple[float, float],
               whole: bool = False) -> str:
    """Each series a step function: its value from each time (Unix s) until the next, drawn
    as steps (a node up for 44 s shows for 44 s; nothing ramps between samples), over the
    whole `window` (the report's, not only where there are points). `whole`: counts, so
    whole-number ticks."""
    ticks = _ticks({k: v for k, (_, v) in series.items()}, whole)
    out = _frame(title, ticks, list(series), y_title, "time (UTC)")
    x0, x1 = window
    if not any(ts for ts, _ in series.values()):
        out.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" font-size="13">'
                   'nothing recorded in this window</text></svg>')
        return "".join(out)
    span = (x1 - x0) or 1.0
    ymax = ticks[-1]

    def px(x: float) -> float:
        return LEFT + (W - LEFT - RIGHT) * (x - x0) / span

    def py(v: float) -> float:
        return H - BOTTOM - (H - TOP - BOTTOM) * v / ymax

    for i, (ts, vs) in enumerate(series.values()):
        pts: list[str] = []
        for k, (x, v) in enumerate(zip(ts, vs, strict=True)):
            if not x0 <= x <= x1:
                continue
            if pts:  # (the level held until this time, then the new one)
                pts.append(f"{px(x):.1f},{py(vs[k - 1]):.1f}")
            pts.append(f"{px(x):.1f},{py(v):.1f}")
        if pts:  # held to the window's end
            pts.append(f"{px(x1):.1f},{pts[-1].split(',')[1]}")
            out.append(f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" '
                       f'stroke-width="1.6" points="{" ".join(pts)}"/>')
    for t, label in time_ticks(x0, x1):
        out.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{H - BOTTOM}" '
                   f'y2="{H - BOTTOM + 4}" stroke="#888"/>'
                   f'<text x="{px(t):.1f}" y="{H - BOTTOM + 17}" font-size="11" '
                   f'text-anchor="middle">{html.escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def bar_chart(title: str, labels: list[str], series: dict[str, list[float]], y_title: str,
              x_title: str) -> str:
    ticks = _ticks(series)
    ymax = ticks[-1]
    out = _frame(title, ticks, list(series), y_title, x_title)
    group = (W - LEFT - RIGHT) / max(1, len(labels))
    bar = group * 0.7 / max(1, len(series))
    for g, label in enumerate(labels):
        gx = LEFT + g * group + group * 0.15
        for i, vs in enumerate(series.values()):
            h = (H - TOP - BOTTOM) * vs[g] / ymax
            out.append(f'<rect x="{gx + i * bar:.1f}" y="{H - BOTTOM - h:.1f}" '
                       f'width="{bar - 2:.1f}" height="{h:.1f}" '
                       f'fill="{COLOURS[i % len(COLOURS)]}"/>')
        out.append(f'<text x="{LEFT + g * group + group / 2:.1f}" y="{H - BOTTOM + 18}" '
                   f'font-size="12" text-anchor="middle">{html.escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)
