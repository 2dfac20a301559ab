"""The last hour as SVG drawn on the server: bars of jobs per minute, lines of wait and run
times. Plain elements with classes (the stylesheet colours them), no script and no style
attribute, so the strict CSP stays as it is."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

from pgfleet.status.fleet import age
from pgfleet.web.lists import Activity, Minute

WIDTH = 600
HEIGHT = 140
# Room for the axis labels: left for the scale, below for the minutes.
LEFT = 52
BOTTOM = 18
TOP = 8


def _nice(top: float) -> float:
    """A round scale top at or above `top` (1, 2 or 5 times a power of ten)."""
    if top <= 0:
        return 1.0
    scale = 1.0
    while scale * 10 <= top:
        scale *= 10
    while scale > top:
        scale /= 10
    for step in (1, 2, 5, 10):
        if step * scale >= top:
            return step * scale
    return 10 * scale


def _unread(activity: Activity) -> list[str]:
    """A shaded band over the minutes the bounded read did not reach: there, no bar means
    not read, not no jobs."""
    if not activity.cut_short or activity.reach is None or activity.reach >= 3600:
        return []
    inner_h = HEIGHT - TOP - BOTTOM
    width = (WIDTH - LEFT) * (1 - activity.reach / 3600)
    return [f'<rect class="unread" x="{LEFT}" y="{TOP}" width="{width:.1f}" '
            f'height="{inner_h}"><title>older rows not read</title></rect>',
            f'<text class="unread-label" x="{LEFT + width / 2:.1f}" y="{TOP + inner_h / 2 + 4:.1f}"'
            f' text-anchor="middle">not read</text>']


def _frame(title: str, label_top: str, body: list[str], legend: list[tuple[str, str]],
           chart_id: str, activity: Activity) -> Markup:
    inner_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" id="{chart_id}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        *_unread(activity),
        f'<text class="chart-title" x="{WIDTH - 6}" y="{TOP + 11}" text-anchor="end">'
        f"{escape(title)}</text>",
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + inner_h}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP + inner_h}" x2="{WIDTH}" '
        f'y2="{TOP + inner_h}"/>',
        f'<line class="grid" x1="{LEFT}" y1="{TOP}" x2="{WIDTH}" y2="{TOP}"/>',
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">'
        f"{escape(label_top)}</text>",
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + inner_h}" text-anchor="end">0</text>',
        f'<text class="tick" x="{LEFT}" y="{HEIGHT - 4}">-60 min</text>',
        f'<text class="tick" x="{(LEFT + WIDTH) // 2}" y="{HEIGHT - 4}" '
        f'text-anchor="middle">-30 min</text>',
        f'<text class="tick" x="{WIDTH}" y="{HEIGHT - 4}" text-anchor="end">now</text>',
    ]
    parts += body
    x = LEFT + 8
    for css, name in legend:
        parts.append(f'<rect class="{css}" x="{x}" y="{TOP + 2}" width="10" height="10"/>')
        parts.append(f'<text class="legend" x="{x + 14}" y="{TOP + 11}">{escape(name)}</text>')
        x += 14 + 7 * len(name) + 14
    parts.append("</svg>")
    return Markup("".join(parts))


def throughput(activity: Activity, chart_id: str = "chart-throughput") -> Markup:
    """Stacked bars: succeeded and dead jobs per minute."""
    minutes = activity.minutes
    top = _nice(max((m.succeeded + m.died for m in minutes), default=0))
    inner_h = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT) / len(minutes)
    body = []
    for i, m in enumerate(minutes):
        x = LEFT + i * slot + 1
        ok_h = inner_h * m.succeeded / top
        dead_h = inner_h * m.died / top
        base = TOP + inner_h
        tip = f"{m.minutes_ago} min ago: {m.succeeded} succeeded, {m.died} died"
        if m.succeeded:
            body.append(f'<rect class="bar ok" x="{x:.1f}" y="{base - ok_h:.1f}" '
                        f'width="{slot - 2:.1f}" height="{ok_h:.1f}"><title>{tip}</title>'
                        "</rect>")
        if m.died:
            body.append(f'<rect class="bar dead" x="{x:.1f}" y="{base - ok_h - dead_h:.1f}" '
                        f'width="{slot - 2:.1f}" height="{dead_h:.1f}"><title>{tip}</title>'
                        "</rect>")
    return _frame("Jobs per minute, last hour", f"{top:g}/min", body,
                  [("ok", "succeeded"), ("dead", "dead")], chart_id, activity)


def durations(activity: Activity, kind: str, chart_id: str) -> Markup:
    """Lines of the p50 and p95 per minute of `kind`: "wait" or "run"."""
    pick: dict[str, tuple[Callable[[Minute], float | None], Callable[[Minute], float | None]]]
    pick = {"wait": (lambda m: m.wait_p50, lambda m: m.wait_p95),
            "run": (lambda m: m.run_p50, lambda m: m.run_p95)}
    p50, p95 = pick[kind]
    minutes = activity.minutes
    values = [v for m in minutes for v in (p50(m), p95(m)) if v is not None]
    top = _nice(max(values, default=0.0))
    body = [_line(minutes, p95, top, "p95"), _line(minutes, p50, top, "p50")]
    title = "Wait before start" if kind == "wait" else "Run time"
    return _frame(f"{title} (p50, p95), last hour", age(top), body,
                  [("p50", "p50"), ("p95", "p95")], chart_id, activity)


def _line(minutes: Sequence[Minute], value: Callable[[Minute], float | None], top: float,
          css: str) -> str:
    """A polyline through the minutes that have a value, and a dot on each (a lone minute
    still shows); gaps are minutes without finished jobs."""
    inner_h = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT) / len(minutes)
    points = []
    dots = []
    for i, m in enumerate(minutes):
        v = value(m)
        if v is None:
            continue
        x = LEFT + (i + 0.5) * slot
        y = TOP + inner_h - inner_h * v / top
        points.append(f"{x:.1f},{y:.1f}")
        dots.append(f'<circle class="dot {css}" cx="{x:.1f}" cy="{y:.1f}" r="2">'
                    f"<title>{m.minutes_ago} min ago: {css} {age(v)}</title></circle>")
    line = (f'<polyline class="line {css}" points="{" ".join(points)}"/>'
            if len(points) > 1 else "")
    return line + "".join(dots)
