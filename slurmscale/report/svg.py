"""Two small inline-SVG charts for the HTML report: lines over time and grouped bars. Hand
made so a cron job on a head node needs no plotting library and the page no script."""

from __future__ import annotations

import html
from datetime import UTC, datetime

W, H, LEFT, RIGHT, TOP, BOTTOM = 900, 290, 56, 16, 48, 44
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


def _frame(title: str, ymax: float, legend: list[str]) -> list[str]:
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="{html.escape(title)}">',
           f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">'
           f'{html.escape(title)}</text>']
    for i in range(5):
        v = ymax * i / 4
        y = H - BOTTOM - (H - TOP - BOTTOM) * i / 4
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                   'stroke="#e5e5e5"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{v:,.1f}</text>')
    x = LEFT
    for i, name in enumerate(legend):  # a row of its own under the title
        c = COLOURS[i % len(COLOURS)]
        out.append(f'<rect x="{x}" y="26" width="12" height="12" fill="{c}"/>'
                   f'<text x="{x + 16}" y="36" font-size="12">{html.escape(name)}</text>')
        x += 24 + 7 * len(name)
    return out


def _ymax(series: dict[str, list[float]]) -> float:
    top = max((v for vs in series.values() for v in vs), default=0.0)
    return top * 1.1 if top > 0 else 1.0


def line_chart(title: str, xs: list[float], series: dict[str, list[float]]) -> str:
    """`xs`: Unix seconds; each series one value per x."""
    ymax = _ymax(series)
    out = _frame(title, ymax, list(series))
    if len(xs) < 2:
        out.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" font-size="13">'
                   'not enough samples yet (one a minute)</text></svg>')
        return "".join(out)
    x0, x1 = xs[0], xs[-1]
    span = (x1 - x0) or 1.0

    def px(x: float) -> float:
        return LEFT + (W - LEFT - RIGHT) * (x - x0) / span

    def py(v: float) -> float:
        return H - BOTTOM - (H - TOP - BOTTOM) * v / ymax

    for i, (_name, vs) in enumerate(series.items()):
        pts = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in zip(xs, vs, strict=True))
        out.append(f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" '
                   f'stroke-width="2" points="{pts}"/>')
    for frac, anchor in ((0, "start"), (0.5, "middle"), (1, "end")):
        t = x0 + span * frac
        label = datetime.fromtimestamp(t, UTC).strftime("%m-%d %H:%M")
        out.append(f'<text x="{px(t):.1f}" y="{H - BOTTOM + 18}" font-size="11" '
                   f'text-anchor="{anchor}">{label} UTC</text>')
    out.append("</svg>")
    return "".join(out)


def bar_chart(title: str, labels: list[str], series: dict[str, list[float]]) -> str:
    ymax = _ymax(series)
    out = _frame(title, ymax, list(series))
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
