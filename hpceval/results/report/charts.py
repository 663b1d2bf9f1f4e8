"""Inline SVG charts (no matplotlib, no JavaScript, no network): one bar per model, lines
over time (the servers' load) and stacked bars (each job's phases: report.ledger).

Every text that came from a run (model and task names) is HTML-escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from hpceval.results.report.compare import Score

_BAR_H, _GAP, _LABEL_W, _PLOT_W, _VALUE_W = 22, 6, 220, 420, 280
COLOURS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")


def task_chart(task: str, scores: list[Score], metric: str) -> str:
    """Horizontal bars, one per model: the value, with its 95% interval as a whisker (and the
    interval's method in the label)."""
    highs = [s.interval.high if s.interval else s.value for s in scores]
    top = max([1.0, *highs]) if all(0.0 <= s.value <= 1.0 for s in scores) else max(highs)
    top = top if top > 0 else 1.0
    height = len(scores) * (_BAR_H + _GAP) + 30
    width = _LABEL_W + _PLOT_W + _VALUE_W
    title = html.escape(f"{task}: {metric}")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" class="chart" aria-label="{title}"><title>{title}</title>']
    for i, s in enumerate(scores):
        y = 10 + i * (_BAR_H + _GAP)
        w = max(0.0, s.value) / top * _PLOT_W
        colour = COLOURS[i % len(COLOURS)]
        name = html.escape(s.model)
        parts.append(f'<text x="{_LABEL_W - 8}" y="{y + 16}" text-anchor="end" '
                     f'font-size="13">{name}</text>')
        parts.append(f'<rect x="{_LABEL_W}" y="{y}" width="{w:.1f}" height="{_BAR_H}" '
                     f'fill="{colour}"><title>{name}: {s.value:.4g}</title></rect>')
        label = f"{s.value:.4g}"
        if s.interval:
            lo_v, hi_v = s.interval.low, s.interval.high
            lo = max(0.0, lo_v) / top * _PLOT_W + _LABEL_W
            hi = min(top, hi_v) / top * _PLOT_W + _LABEL_W
            mid = y + _BAR_H / 2
            parts.append(f'<line class="ci" x1="{lo:.1f}" y1="{mid}" x2="{hi:.1f}" y2="{mid}" '
                         'stroke="#222" stroke-width="1.5"/>')
            label += f" (95% CI {lo_v:.3g}–{hi_v:.3g}, {s.interval.method})"
        parts.append(f'<text x="{_LABEL_W + _PLOT_W + 6}" y="{y + 16}" '
                     f'font-size="12">{html.escape(label)}</text>')
    axis_y = height - 14
    parts.append(f'<line x1="{_LABEL_W}" y1="{axis_y}" x2="{_LABEL_W + _PLOT_W}" '
                 f'y2="{axis_y}" stroke="#888"/>')
    for frac in (0.0, 0.5, 1.0):
        x = _LABEL_W + frac * _PLOT_W
        parts.append(f'<text x="{x:.1f}" y="{height - 2}" font-size="11" text-anchor="middle" '
                     f'fill="#666">{top * frac:.3g}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


_T_LEFT, _T_PLOT_W, _T_PLOT_H, _T_LEGEND_W = 70, 560, 140, 200


def _nice(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def time_chart(title: str, times: list[float], series: list[tuple[str, list[float | None]]],
               unit: str) -> str:
    """Lines over time, one per series (minutes since the first point on the x axis, from 0
    on the y axis); a value that is unknown leaves a gap in its line."""
    t0 = times[0] if times else 0.0
    span = (times[-1] - t0) if len(times) > 1 else 0.0
    top = max([v for _, values in series for v in values if v is not None] or [0.0])
    top = top if top > 0 else 1.0
    width, height = _T_LEFT + _T_PLOT_W + _T_LEGEND_W, _T_PLOT_H + 40
    label = html.escape(f"{title} ({unit})")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" class="chart timeline" aria-label="{label}"><title>{label}</title>',
             f'<text x="{_T_LEFT}" y="12" font-size="12">{label}</text>']

    def x(t: float) -> float:
        return _T_LEFT + ((t - t0) / span * _T_PLOT_W if span > 0 else _T_PLOT_W / 2)

    def y(v: float) -> float:
        return 20 + _T_PLOT_H - min(v, top) / top * _T_PLOT_H

    base = 20 + _T_PLOT_H
    parts.append(f'<line x1="{_T_LEFT}" y1="{base}" x2="{_T_LEFT + _T_PLOT_W}" y2="{base}" '
                 'stroke="#888"/>')
    parts.append(f'<line x1="{_T_LEFT}" y1="20" x2="{_T_LEFT}" y2="{base}" stroke="#888"/>')
    for frac in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{_T_LEFT - 6}" y="{y(top * frac) + 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="#666">{_nice(top * frac)}</text>')
        parts.append(f'<text x="{_T_LEFT + frac * _T_PLOT_W:.1f}" y="{height - 4}" '
                     f'font-size="11" text-anchor="middle" fill="#666">'
                     f"{span * frac / 60:.3g} min</text>")
    for i, (name, values) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        runs: list[list[str]] = [[]]
        for t, v in zip(times, values, strict=True):
            if v is None:
                runs.append([])  # a gap: the line stops here and starts again after
            else:
                runs[-1].append(f"{x(t):.1f},{y(v):.1f}")
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="1.5" fill="{colour}"/>')
            elif run:
                parts.append(f'<polyline class="series" fill="none" stroke="{colour}" '
                             f'stroke-width="1.5" points="{" ".join(run)}"/>')
        known = [v for v in values if v is not None]
        peak = f" (peak {_nice(max(known))})" if known else " (unknown)"
        ly = 30 + i * 18
        parts.append(f'<rect x="{_T_LEFT + _T_PLOT_W + 12}" y="{ly - 9}" width="12" '
                     f'height="3" fill="{colour}"/>')
        parts.append(f'<text x="{_T_LEFT + _T_PLOT_W + 30}" y="{ly}" font-size="12">'
                     f"{html.escape(name + peak)}</text>")
    parts.append("</svg>")
    return "\n".join(parts)


_S_TOP = 26  # the key's row above the bars


def stacked_chart(title: str, bars: list[tuple[str, list[tuple[str, float, str]], str]],
                  key: Sequence[tuple[str, str]]) -> str:
    """Horizontal stacked bars on one scale (the longest fills the plot): each bar is its
    label, its segments in order (name, value, tooltip) and a text after it; a segment takes
    its name's colour in `key` ((name, colour) each, drawn above the bars)."""
    colour = dict(key)
    top = max([sum(max(0.0, v) for _, v, _ in parts) for _, parts, _ in bars] or [0.0])
    top = top if top > 0 else 1.0
    width = _LABEL_W + _PLOT_W + _VALUE_W
    height = _S_TOP + len(bars) * (_BAR_H + _GAP) + 4
    label = html.escape(title)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img" class="chart stacked" aria-label="{label}"><title>{label}</title>']
    x = float(_LABEL_W)
    for name, fill in key:
        out.append(f'<rect x="{x:.0f}" y="6" width="12" height="12" fill="{fill}"/>'
                   f'<text x="{x + 16:.0f}" y="16" font-size="12">{html.escape(name)}</text>')
        x += 28 + 7 * len(name)
    for i, (name, parts, note) in enumerate(bars):
        y = _S_TOP + i * (_BAR_H + _GAP)
        out.append(f'<text x="{_LABEL_W - 8}" y="{y + 16}" text-anchor="end" '
                   f'font-size="13">{html.escape(name)}</text>')
        x = float(_LABEL_W)
        for part, value, tip in parts:
            if value <= 0:
                continue
            w = value / top * _PLOT_W
            out.append(f'<rect class="segment" data-part="{html.escape(part)}" x="{x:.1f}" '
                       f'y="{y}" width="{w:.1f}" height="{_BAR_H}" '
                       f'fill="{colour.get(part, "#999999")}"><title>{html.escape(tip)}'
                       "</title></rect>")
            x += w
        out.append(f'<text x="{_LABEL_W + _PLOT_W + 6}" y="{y + 16}" font-size="12">'
                   f"{html.escape(note)}</text>")
    out.append("</svg>")
    return "\n".join(out)
