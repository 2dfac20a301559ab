"""The server-drawn charts: scale, bars, lines and the band a bounded read did not reach."""

from __future__ import annotations

import re

from pgfleet.web import charts
from pgfleet.web.lists import ACTIVITY_ROWS, Activity, Minute


def hour() -> list[Minute]:
    return [Minute(ago, 0, 0, None, None, None, None) for ago in range(59, -1, -1)]


def test_bars_scale_to_a_round_top_and_empty_minutes_draw_nothing() -> None:
    minutes = hour()
    minutes[-1] = Minute(0, 37, 3, 0.5, 2.0, 1.0, 4.0)
    svg = str(charts.throughput(Activity(minutes, 40, 30.0)))
    assert ">50/min<" in svg  # 40 jobs: the scale's top is the next round number
    assert svg.count('class="bar ok"') == 1 and svg.count('class="bar dead"') == 1
    assert "<title>0 min ago: 37 succeeded, 3 died</title>" in svg
    assert 'class="unread"' not in svg  # the read reached back over the whole hour
    assert "style=" not in svg and "<script" not in svg


def test_lines_join_minutes_with_values_and_a_lone_minute_is_a_dot() -> None:
    minutes = hour()
    minutes[10] = Minute(49, 1, 0, 1.0, 3.0, 0.2, 0.9)
    svg = str(charts.durations(Activity(minutes, 1, 2950.0), "wait", "w"))
    assert "<polyline" not in svg and svg.count("<circle") == 2
    minutes[11] = Minute(48, 1, 0, 2.0, 5.0, 0.2, 0.9)
    svg = str(charts.durations(Activity(minutes, 2, 2950.0), "wait", "w"))
    assert svg.count("<polyline") == 2 and ">5.0s<" in svg


def test_a_cut_short_read_shades_the_minutes_it_did_not_reach() -> None:
    svg = str(charts.throughput(Activity(hour(), ACTIVITY_ROWS, 900.0)))
    band = re.search(r'<rect class="unread" x="(\d+)" y="\d+" width="([\d.]+)"', svg)
    assert band is not None
    assert int(band.group(1)) == charts.LEFT
    assert abs(float(band.group(2)) - (charts.WIDTH - charts.LEFT) * 0.75) < 0.1
